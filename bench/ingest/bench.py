"""bench/ingest: see run.sh. Prints a Markdown table of the measurements."""

import glob
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, arguments, connect, create_tables  # noqa: E402

PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
CLIENTS = 8
SECONDS = 20
LAG_SECONDS = 40
ROW = ("nextval('ids'), 'name', 'amsterdam', 1.5, 1, 0.5, true, date '2026-01-01', 'x', now()")


def pgbench(port, table, clients, seconds, rate=None):
    """tps, mean and p99 latency (ms) of `clients` sessions inserting one row per transaction
    (at most `rate` transactions a second in all)."""
    with tempfile.TemporaryDirectory() as work:
        os.chmod(work, 0o777)
        script = pathlib.Path(work) / "insert.sql"
        script.write_text(f"INSERT INTO {table} VALUES ({ROW});\n")
        out = subprocess.run([PGBENCH, "-n", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c", str(clients),
                              "-j", "2", "-T", str(seconds), "-f", str(script), "-l", "--log-prefix", f"{work}/log",
                              *([f"--rate={rate}"] if rate else []), "postgres"],
                             check=True, capture_output=True, text=True).stdout
        tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
        latencies = sorted(int(line.split()[2]) for path in glob.glob(f"{work}/log*") for line in open(path))
    mean = sum(latencies) / len(latencies) / 1000
    p99 = latencies[int(len(latencies) * 0.99)] / 1000
    return tps, mean, p99


def lake_ids(uri):
    """The ids the reference reader reads in the Hudi table at `uri`."""
    import pyarrow as pa
    from hudi import HudiReadOptions, HudiTableBuilder
    batches = HudiTableBuilder.from_base_uri(uri).build().read(HudiReadOptions())
    return set(pa.Table.from_batches(batches).column("id").to_pylist()) if batches else set()


def flush_lags(port, lake, stop, into="markers", lake_table="markers"):
    """While `stop` is unset: every 250 ms a one-row transaction into the small table `into`
    (buffered, or mirrored into `lake_table`), and the time until the reference reader reads
    its row in `lake_table` (the same worker flushes it and the loaded table)."""
    lags = []
    with connect(port) as conn:
        n = 0
        while not stop.is_set():
            n += 1
            conn.execute(f"INSERT INTO {into} VALUES ({n}, 'm', 'amsterdam', 1, 1, 1, true, date '2026-01-01', 'x', now())")
            committed = time.perf_counter()
            while n not in lake_ids(f"file://{lake}/{lake_table}"):
                time.sleep(0.02)
            lags.append(time.perf_counter() - committed)
            time.sleep(0.25)
    return lags


def buffered_table(conn, name, buckets, interval="1s"):
    """A Hudi table `name` with write_mode 'buffered', keyed by id (the worker flushes it)."""
    conn.execute(f"CREATE FOREIGN TABLE {name} ({COLUMNS}) SERVER lake OPTIONS (path '{name}', primary_key 'id', "
                 f"ordering_field 'ts', buckets '{buckets}', services 'off', write_mode 'buffered', flush_interval '{interval}')")
    conn.execute(f"SELECT hudi.create_table('{name}')")


def mirrored(conn, heap, target, buckets, capture, interval="1s"):
    """A heap table `heap` mirrored into a new buffered Hudi table `target` by `capture`."""
    conn.execute(f"CREATE TABLE {heap} ({COLUMNS}, PRIMARY KEY (id))")
    buffered_table(conn, target, buckets, interval)
    conn.execute(f"SELECT hudi.mirror('{heap}', '{target}', '{capture}')")


def percentiles(lags):
    lags = sorted(lags)
    return (f"median {lags[len(lags) // 2]:.2f} s, p90 {lags[int(len(lags) * 0.9)]:.2f} s, p99 {lags[int(len(lags) * 0.99)]:.2f} s, "
            f"max {lags[-1]:.2f} s")


def lags_during(port, lake, into, lake_table, load):
    """The lags of marker rows (flush_lags) while `load()` runs."""
    stop = threading.Event()
    lags = []
    marker = threading.Thread(target=lambda: lags.extend(flush_lags(port, lake, stop, into, lake_table)))
    marker.start()
    try:
        out = load()
    finally:
        stop.set()
        marker.join()
    return out, lags


MIRROR_RATE = 5000
SHORT_INTERVAL = "500ms"
FIXED_RATE = 2000
SOAK_RATE = 2000
SOAK_SAMPLE = 30


def timeline_state(table):
    """What the active timeline and the file groups of the table at `table` (a path) hold:
    completed instants by action, and log files after each file group's latest base file."""
    timeline = pathlib.Path(table) / ".hoodie" / "timeline"
    actions = {}
    for f in timeline.iterdir():
        if f.is_file() and re.fullmatch(r"\d+_\d+\.\w+", f.name):
            action = f.name.split(".")[1]
            actions[action] = actions.get(action, 0) + 1
    bases, logs = {}, {}
    for f in pathlib.Path(table).iterdir():
        if m := re.fullmatch(r"([0-9a-f-]+-\d+)_[^_]+_(\d+)\.parquet", f.name):
            bases[m[1]] = max(bases.get(m[1], ""), m[2])
        elif m := re.fullmatch(r"\.([0-9a-f-]+-\d+)_(\d+)\.log\.\d+_.*", f.name):
            logs.setdefault(m[1], []).append(m[2])
    latest = [sum(1 for instant in instants if instant > bases.get(group, "")) for group, instants in logs.items()]
    return {"instants": sum(actions.values()), **actions, "log files": sum(len(v) for v in logs.values()),
            "latest-slice logs (max)": max(latest, default=0)}


def soak(args, seconds, retain):
    """`seconds` of one-row INSERT transactions at SOAK_RATE into a buffered table whose
    services the worker runs (`services 'auto'`, and `clean_retain` `retain` when given): the
    active timeline and the log files of the latest slices, every SOAK_SAMPLE seconds."""
    with connect(args.port) as conn:
        create_tables(conn, args.lake, "direct")
        conn.execute("CREATE SEQUENCE ids")
        retention = f", clean_retain '{retain}'" if retain else ""
        conn.execute(f"CREATE FOREIGN TABLE soak ({COLUMNS}) SERVER lake OPTIONS (path 'soak', primary_key 'id', "
                     f"ordering_field 'ts', buckets '16', services 'auto', write_mode 'buffered'{retention})")
        conn.execute("SELECT hudi.create_table('soak')")
        samples = []
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            tps, _, p99 = pgbench(args.port, "soak", CLIENTS, SOAK_SAMPLE, rate=SOAK_RATE)
            waiting = conn.execute("SELECT COALESCE(sum(rows), 0) FROM hudi.buffered_writes").fetchone()[0]
            samples.append((time.perf_counter() - started, tps, p99, waiting, timeline_state(f"{args.lake}/soak")))
        rows = conn.execute("SELECT count(*) FROM soak").fetchone()[0]
    keys = sorted({k for *_, state in samples for k in state})
    print(f"{seconds} s of one-row INSERTs at {SOAK_RATE} tps ({CLIENTS} clients) into a buffered table with services 'auto'"
          f" (clean_retain {retain or 'the default'})\n")
    print("| s | tps | p99 (ms) | buffered rows | " + " | ".join(keys) + " |")
    print("|---" * (4 + len(keys)) + "|")
    for at, tps, p99, waiting, state in samples:
        print(f"| {at:.0f} | {tps:,.0f} | {p99:.2f} | {waiting:,} | " + " | ".join(str(state.get(k, 0)) for k in keys) + " |")
    print(f"\n{rows:,} rows at the end")


def main():
    extra = {}
    for option in ("--soak", "--retain"):
        if option in sys.argv:
            at = sys.argv.index(option)
            extra[option] = sys.argv[at + 1]
            del sys.argv[at:at + 2]
    args = arguments(0)
    if "--soak" in extra:
        return soak(args, int(extra["--soak"]), extra.get("--retain"))
    with connect(args.port) as conn:
        create_tables(conn, args.lake, "direct")
        conn.execute("CREATE SEQUENCE ids")
        buffered_table(conn, "buffered", 16)
        buffered_table(conn, "markers", 1)
        results = {"heap": pgbench(args.port, "heap", CLIENTS, SECONDS)}
        results["buffered"] = pgbench(args.port, "buffered", CLIENTS, SECONDS)
        # The flush lag at 90% of that rate, in a run of its own: the marker thread's reads of
        # the lake (the reference reader, every 20 ms) take CPU from the clients.
        lag_rate = int(results["buffered"][0] * 0.9)
        lag_run, lags = lags_during(args.port, args.lake, "markers", "markers",
                                    lambda: pgbench(args.port, "buffered", CLIENTS, LAG_SECONDS, rate=lag_rate))
        # flush_interval is the lag the worker aims at (a table's oldest buffered commit is in
        # the lake that long after it committed): the same run with a shorter one.
        for table in ("buffered", "markers"):
            conn.execute(f"ALTER FOREIGN TABLE {table} OPTIONS (SET flush_interval '{SHORT_INTERVAL}')")
        short_run, short_lags = lags_during(args.port, args.lake, "markers", "markers",
                                            lambda: pgbench(args.port, "buffered", CLIENTS, LAG_SECONDS, rate=lag_rate))
        # And at half the buffered rate, where the cores are not saturated.
        half_rate = int(results["buffered"][0] * 0.5)
        half_run, half_lags = lags_during(args.port, args.lake, "markers", "markers",
                                          lambda: pgbench(args.port, "buffered", CLIENTS, LAG_SECONDS, rate=half_rate))
        for table in ("buffered", "markers"):
            conn.execute(f"ALTER FOREIGN TABLE {table} OPTIONS (SET flush_interval '1s')")
        # Latency at one rate that both sustain (closed-loop latency follows throughput).
        fixed = {name: pgbench(args.port, name, CLIENTS, SECONDS, rate=FIXED_RATE) for name in ("heap", "buffered")}
        results["direct"] = pgbench(args.port, "direct", CLIENTS, 5)
        # Heap tables mirrored into buffered Hudi tables, captured by triggers and from the WAL.
        mirrored(conn, "by_triggers", "by_triggers_lake", 16, "trigger")
        results["heap mirrored by triggers"] = pgbench(args.port, "by_triggers", CLIENTS, SECONDS)
        conn.execute("SELECT hudi.unmirror('by_triggers')")
        mirrored(conn, "from_wal", "from_wal_lake", 16, "wal")
        results["heap mirrored from the WAL"] = pgbench(args.port, "from_wal", CLIENTS, SECONDS)
        conn.execute("SELECT hudi.unmirror('from_wal')")
        committed = conn.execute("SELECT count(*) FROM buffered").fetchone()[0]
        started = time.perf_counter()
        while conn.execute("SELECT COALESCE(sum(rows), 0) FROM hudi.buffered_writes").fetchone()[0] > 0:
            time.sleep(0.05)
        drained = time.perf_counter() - started
        flushes = len(glob.glob(f"{args.lake}/buffered/.hoodie/timeline/*.deltacommit"))
        # Mirror lag at a steady rate: marker rows into a second, small mirrored table.
        mirrored(conn, "steady", "steady_lake", 16, "wal", SHORT_INTERVAL)
        mirrored(conn, "steady_markers", "steady_markers_lake", 1, "wal", SHORT_INTERVAL)
        steady, mirror_lags = lags_during(args.port, args.lake, "steady_markers", "steady_markers_lake",
                                          lambda: pgbench(args.port, "steady", CLIENTS, SECONDS, rate=MIRROR_RATE))
        lake_rows = conn.execute("SELECT count(*) FROM steady_lake").fetchone()[0]
        heap_rows = conn.execute("SELECT count(*) FROM steady").fetchone()[0]
    heap_tps, heap_mean, heap_p99 = results["heap"]
    print(f"{CLIENTS} pgbench clients, one-row INSERT transactions, {SECONDS} s each (direct: 5 s)\n")
    print("| table | tps | vs heap | mean latency (ms) | p99 latency (ms) | p99 vs heap |")
    print("|---|---|---|---|---|---|")
    for name, (tps, mean, p99) in results.items():
        print(f"| {name} | {tps:,.0f} | {tps / heap_tps:.3f}x | {mean:.2f} | {p99:.2f} | {p99 / heap_p99:.2f}x |")
    print(f"\nbuffered: {committed:,} rows in {flushes} deltacommits; the buffer was empty {drained:.2f} s after the run")
    print(f"\nat {FIXED_RATE:,} tps (pgbench --rate, {CLIENTS} clients):\n")
    print("| table | tps | mean latency (ms) | p99 latency (ms) | p99 vs heap |")
    print("|---|---|---|---|---|")
    for name, (tps, mean, p99) in fixed.items():
        print(f"| {name} | {tps:,.0f} | {mean:.2f} | {p99:.2f} | {p99 / fixed['heap'][2]:.2f}x |")
    print(f"\nflush lag (commit to the reference reader, {len(lags)} marker rows while buffered inserts ran at "
          f"{lag_run[0]:,.0f} tps, pgbench --rate {lag_rate}; flush_interval 1s): {percentiles(lags)}")
    print(f"the same with flush_interval {SHORT_INTERVAL} ({len(short_lags)} marker rows, {short_run[0]:,.0f} tps): "
          f"{percentiles(short_lags)}")
    print(f"flush_interval {SHORT_INTERVAL} at half the buffered rate ({len(half_lags)} marker rows, {half_run[0]:,.0f} tps): "
          f"{percentiles(half_lags)}")
    print(f"mirror lag from the WAL at {steady[0]:,.0f} rows/s (pgbench --rate {MIRROR_RATE}; flush_interval {SHORT_INTERVAL}; "
          f"{len(mirror_lags)} marker rows into a second mirrored table): {percentiles(mirror_lags)}; "
          f"{lake_rows:,} of {heap_rows:,} rows in the lake at the end")


if __name__ == "__main__":
    main()
