"""bench/scan: see run.sh. Prints a Markdown table of the measurements."""

import glob
import os
import pathlib
import statistics
import sys
import time

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from hudi import HudiReadOptions, HudiTableBuilder

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, ROW, arguments, connect, create_tables, peak_memory_kb  # noqa: E402

QUERY = "SELECT sum(qty) FROM {}"
GROUP_QUERY = "SELECT city, count(*), avg(score) FROM {} GROUP BY city"
LIKE_QUERY = "SELECT count(*) FROM {} WHERE name LIKE '%7%'"
SERIAL = "SET max_parallel_workers_per_gather = 0"
# The scans of the first table are of the executor's path: aggregates are not pushed into the engine.
NOT_PUSHED = "SET hudi.aggregate_pushdown = off"
RUNS = 5
# Rounds of the interleaved pg_hudi and heap scans: each round times every scan once, so that
# the machine's drift (large on a shared 2-core VM) hits all of them alike.
ROUNDS = 9


def median_seconds(run):
    """The median of RUNS timed runs after one warm-up; returns (seconds, last result)."""
    result = run()
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


class Scan:
    """One scan measured in a backend of its own (after `settings`, SET statements)."""

    def __init__(self, port, table, settings="", query=QUERY):
        self.conn = connect(port)
        if settings:
            self.conn.execute(settings)
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.table = table
        self.query = query
        self.times = []
        self.result = self.run()  # warm-up

    def run(self):
        rows = self.conn.execute(self.query.format(self.table)).fetchall()
        # Averages of floats depend on the order of addition: rounded for comparing.
        return sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows)

    def timed(self):
        started = time.perf_counter()
        assert self.run() == self.result
        self.times.append(time.perf_counter() - started)

    def seconds(self):
        return statistics.median(self.times)

    def peak_mib(self):
        return peak_memory_kb(self.pid) / 1024


def interleaved(scans):
    """Times every scan once per round, for ROUNDS rounds."""
    for _ in range(ROUNDS):
        for scan in scans:
            scan.timed()


POINT_QUERY = "SELECT * FROM {} WHERE id = %s"
POINT_KEYS = 300


def point_queries(port, n):
    """`SELECT * ... WHERE id = k` for POINT_KEYS random keys (seeded), each timed on the heap
    table (primary key), the compacted and the updated Hudi table in turn, in one backend
    each; returns {table: (median, 90th percentile, plan)} in seconds."""
    import random
    rng = random.Random(20261203)
    keys = [rng.randrange(1, n + 1) for _ in range(POINT_KEYS)]
    tables = ("heap", "scan", "scan_updated")
    conns = {t: connect(port) for t in tables}
    times = {t: [] for t in tables}
    for t in tables:  # warm-up: the table state and the page cache
        conns[t].execute(POINT_QUERY.format(t), (keys[0],)).fetchall()
    for key in keys:
        results = {}
        for t in tables:
            started = time.perf_counter()
            results[t] = conns[t].execute(POINT_QUERY.format(t), (key,)).fetchall()
            times[t].append(time.perf_counter() - started)
        assert len(results["heap"]) == len(results["scan"]) == 1, (key, results)
        assert results["scan"][0][:3] == results["heap"][0][:3] and results["scan_updated"][0][0] == key, (key, results)
    out = {}
    for t in tables:
        plan = "\n".join(r[0] for r in conns[t].execute(
            "EXPLAIN (ANALYZE, VERBOSE) " + POINT_QUERY.format(t), (keys[-1],)).fetchall())
        ordered = sorted(times[t])
        out[t] = (statistics.median(ordered), ordered[int(len(ordered) * 0.9)], plan)
        conns[t].close()
    return out


def reference_sum(path):
    def run():
        batches = HudiTableBuilder.from_base_uri(path).build().read(HudiReadOptions())
        return pc.sum(pa.Table.from_batches(batches).column("qty")).as_py()
    return median_seconds(run)


def main():
    args = arguments(5_000_000)
    if args.store == "s3":
        return main_s3(args)
    n = args.rows
    compacted_path, updated_path = (os.path.join(args.lake, name) for name in ("scan", "scan_updated"))
    # Two copies of the rows in each store: one as loaded (compacted, for pg_hudi) and one with
    # 10% of the keys updated (a newer ordering value) by the same UPDATE on both, which pg_hudi
    # writes into log files on top of the base files, naming the base rows they replace.
    update = "SET qty = qty + 1, ts = ts + interval '1 day' WHERE id % 10 = 0"
    with connect(args.port) as conn:
        create_tables(conn, args.lake, "scan")
        conn.execute("CREATE TABLE heap_updated (LIKE heap INCLUDING ALL)")
        conn.execute(f"CREATE FOREIGN TABLE scan_updated ({COLUMNS}) SERVER lake OPTIONS (path 'scan_updated', "
                     "primary_key 'id', ordering_field 'ts', buckets '16', services 'off')")
        conn.execute("SELECT hudi.create_table('scan_updated')")
        conn.execute(f"INSERT INTO heap SELECT {ROW} FROM generate_series(1, {n}) g")
        conn.execute("INSERT INTO heap_updated SELECT * FROM heap")
        conn.execute(f"UPDATE heap_updated {update}")
        conn.execute("VACUUM ANALYZE heap")
        conn.execute("VACUUM ANALYZE heap_updated")
        for table in ("scan", "scan_updated"):
            conn.execute(f"INSERT INTO {table} SELECT * FROM heap")
            started = time.perf_counter()
            compaction = conn.execute(f"SELECT file_groups, rows_written FROM hudi.compact('{table}')").fetchone()
            compact_s = time.perf_counter() - started
            assert compaction[1] == n, compaction
        started = time.perf_counter()
        conn.execute(f"UPDATE scan_updated {update}")
        update_s = time.perf_counter() - started
        conn.execute("ANALYZE scan")
        conn.execute("ANALYZE scan_updated")

    heap, compacted, updated, serial, by_key, updated_heap = scans = [
        Scan(args.port, "heap"),
        Scan(args.port, "scan", NOT_PUSHED),
        Scan(args.port, "scan_updated", NOT_PUSHED),
        Scan(args.port, "scan_updated", f"{NOT_PUSHED}; SET hudi.read_ahead_slices = 0"),
        Scan(args.port, "scan_updated", f"{NOT_PUSHED}; SET hudi.use_record_positions = off"),
        Scan(args.port, "heap_updated"),
    ]
    total = heap.result[0][0]
    assert compacted.result == heap.result, (compacted.result, heap.result)
    assert updated.result == serial.result == by_key.result == updated_heap.result == [(total + n // 10,)]
    interleaved(scans)

    # Aggregates pushed into the engine, against DuckDB on one thread and on two.
    pushed_sum, pushed_updated, pushed_group, group_not_pushed, heap_group = aggregates = [
        Scan(args.port, "scan"),
        Scan(args.port, "scan_updated"),
        Scan(args.port, "scan", query=GROUP_QUERY),
        Scan(args.port, "scan", NOT_PUSHED, query=GROUP_QUERY),
        Scan(args.port, "heap", query=GROUP_QUERY),
    ]
    assert pushed_sum.result == heap.result and pushed_updated.result == updated.result
    assert pushed_group.result == group_not_pushed.result == heap_group.result, (pushed_group.result, heap_group.result)
    for scan in aggregates[:3]:
        plan = "\n".join(r[0] for r in scan.conn.execute("EXPLAIN " + scan.query.format(scan.table)))
        assert "Aggregate pushed" in plan, plan
    interleaved(aggregates)

    # A scan under PostgreSQL's aggregate (the count with its LIKE is pushed otherwise), on one
    # process and on the leader with two workers.
    like_serial, like_parallel, like_heap = parallel = [
        Scan(args.port, "scan", f"{NOT_PUSHED}; {SERIAL}", query=LIKE_QUERY),
        Scan(args.port, "scan", f"{NOT_PUSHED}; SET max_parallel_workers_per_gather = 2", query=LIKE_QUERY),
        Scan(args.port, "heap", "SET max_parallel_workers_per_gather = 2", query=LIKE_QUERY),
    ]
    assert like_serial.result == like_parallel.result == like_heap.result
    plan = "\n".join(r[0] for r in like_parallel.conn.execute("EXPLAIN ANALYZE " + LIKE_QUERY.format("scan")))
    assert "Parallel Foreign Scan" in plan and "Workers Launched: 2" in plan, plan
    interleaved(parallel)

    points = point_queries(args.port, n)

    base_files = glob.glob(os.path.join(compacted_path, "*.parquet"))
    duck = duckdb.connect()
    duck_times = {}
    for threads in (1, 2):
        duck.execute(f"SET threads = {threads}")
        duck_s, duck_sum = median_seconds(
            lambda: duck.execute("SELECT sum(qty) FROM read_parquet(?)", [base_files]).fetchone()[0])
        assert duck_sum == total
        group_s, groups = median_seconds(lambda: duck.execute(GROUP_QUERY.format("read_parquet(?)"), [base_files]).fetchall())
        assert sorted((c, k, round(a, 6)) for c, k, a in groups) == heap_group.result
        duck_times[threads] = (duck_s, group_s)
    duck_s = duck_times[2][0]
    reference_s, reference_result = reference_sum(compacted_path)
    assert reference_result == total
    updated_reference_s, updated_reference = reference_sum(updated_path)
    assert updated_reference == updated.result[0][0]

    heap_s, compacted_s = heap.seconds(), compacted.seconds()
    print(f"| `SELECT sum(qty)`, {n:,} rows x 10 columns, 16 file groups (median of {ROUNDS} "
          f"interleaved rounds; DuckDB and the reference reader: of {RUNS}) | time | vs heap |")
    print("|---|---|---|")
    print(f"| heap table | {heap_s:.3f} s | 1.00x |")
    print(f"| pg_hudi, compacted (base files only) | {compacted_s:.3f} s | **{compacted_s / heap_s:.2f}x** |")
    print(f"| DuckDB `read_parquet` on the base files | {duck_s:.3f} s | {duck_s / heap_s:.2f}x |")
    print(f"| reference reader `hudi` 0.5.0, compacted | {reference_s:.3f} s | {reference_s / heap_s:.2f}x |")
    print(f"| pg_hudi, 10% of keys updated in logs | {updated.seconds():.3f} s | {updated.seconds() / heap_s:.2f}x "
          f"(**{updated.seconds() / compacted_s:.2f}x compacted**) |")
    print(f"| the same, without read-ahead (`hudi.read_ahead_slices = 0`) | {serial.seconds():.3f} s | "
          f"{serial.seconds() / heap_s:.2f}x ({serial.seconds() / compacted_s:.2f}x compacted) |")
    print(f"| the same, merged by key (`hudi.use_record_positions = off`) | {by_key.seconds():.3f} s | "
          f"{by_key.seconds() / heap_s:.2f}x ({by_key.seconds() / compacted_s:.2f}x compacted) |")
    print(f"| heap table after the same update | {updated_heap.seconds():.3f} s | {updated_heap.seconds() / heap_s:.2f}x |")
    print(f"| reference reader, 10% updated | {updated_reference_s:.3f} s | {updated_reference_s / heap_s:.2f}x |")
    print()
    print(f"Peak backend memory (VmHWM): heap scan {heap.peak_mib():,.0f} MiB, compacted scan "
          f"{compacted.peak_mib():,.0f} MiB, updated scan {updated.peak_mib():,.0f} MiB "
          f"({serial.peak_mib():,.0f} MiB without read-ahead). "
          f"Compaction of {compaction[0]} file groups took {compact_s:.1f} s; the UPDATE of {n // 10:,} rows "
          f"{update_s:.1f} s.")
    print()
    (duck1_sum, duck1_group), (duck2_sum, duck2_group) = duck_times[1], duck_times[2]
    print(f"| aggregates pushed into the engine, {n:,} rows (median of {ROUNDS} interleaved rounds; DuckDB: of {RUNS}) "
          "| time | vs DuckDB, 1 thread | vs DuckDB, 2 threads |")
    print("|---|---|---|---|")
    for label, scan, one, two in (
            ("`SELECT sum(qty)`, compacted", pushed_sum, duck1_sum, duck2_sum),
            ("`SELECT sum(qty)`, 10% updated in logs", pushed_updated, duck1_sum, duck2_sum),
            ("`SELECT city, count(*), avg(score) ... GROUP BY city`, compacted", pushed_group, duck1_group, duck2_group),
            ("the same, not pushed (`hudi.aggregate_pushdown = off`)", group_not_pushed, duck1_group, duck2_group),
            ("the same on the heap table", heap_group, duck1_group, duck2_group)):
        print(f"| {label} | {scan.seconds():.3f} s | **{scan.seconds() / one:.2f}x** | {scan.seconds() / two:.2f}x |")
    print(f"| DuckDB `read_parquet`: sum / group by, 1 thread | {duck1_sum:.3f} s / {duck1_group:.3f} s | | |")
    print(f"| DuckDB `read_parquet`: sum / group by, 2 threads | {duck2_sum:.3f} s / {duck2_group:.3f} s | | |")
    print()
    print(f"The pushed sum on the updated table is {pushed_updated.seconds() / pushed_sum.seconds():.2f}x the compacted one. "
          f"Peak backend memory (VmHWM): pushed sum {pushed_sum.peak_mib():,.0f} MiB (compacted), "
          f"{pushed_updated.peak_mib():,.0f} MiB (updated); pushed group by {pushed_group.peak_mib():,.0f} MiB.")
    print()
    print(f"| `SELECT count(*) ... WHERE name LIKE '%7%'` (not pushed), {n:,} rows | time | vs serial |")
    print("|---|---|---|")
    print(f"| pg_hudi, one process (`max_parallel_workers_per_gather = 0`) | {like_serial.seconds():.3f} s | 1.00x |")
    print(f"| pg_hudi, leader and 2 workers | {like_parallel.seconds():.3f} s | **{like_parallel.seconds() / like_serial.seconds():.2f}x** |")
    print(f"| heap table, leader and 2 workers | {like_heap.seconds():.3f} s | {like_heap.seconds() / like_serial.seconds():.2f}x |")
    print()
    print(f"Peak memory of the parallel scan's leader (VmHWM): {like_parallel.peak_mib():,.0f} MiB; serial {like_serial.peak_mib():,.0f} MiB.")
    print()
    print(f"| `SELECT * ... WHERE id = k`, {POINT_KEYS} random keys, each on every table in turn | median | 90th percentile |")
    print("|---|---|---|")
    for label, table in (("heap table, primary key", "heap"), ("pg_hudi, compacted", "scan"),
                         ("pg_hudi, 10% of keys updated in logs", "scan_updated")):
        median, p90, _ = points[table]
        print(f"| {label} | {median * 1000:.2f} ms | {p90 * 1000:.2f} ms |")
    for table in ("scan", "scan_updated"):
        print()
        print(f"Plan of the point query on `{table}`:")
        print()
        print("\n".join("    " + line for line in points[table][2].splitlines()))
    for scan in scans + aggregates + parallel:
        scan.conn.close()


def main_s3(args):
    """The compacted and the updated table in an S3-compatible server (moto, on a free local
    port) against the same rows on file://, with the requests each scan makes, counted from
    the server's own record: in a new backend (nothing cached), and repeated."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests"))
    from servers import S3Server
    n = args.rows if args.rows_given else 1_000_000  # moto keeps every object in memory
    update = "SET qty = qty + 1, ts = ts + interval '1 day' WHERE id % 10 = 0"
    s3 = S3Server(pathlib.Path(args.lake).parent / "s3").start()
    try:
        with connect(args.port) as conn:
            create_tables(conn, args.lake, "scan")
            options = ", ".join(f"{k} '{v}'" for k, v in s3.storage_options().items())
            conn.execute(f"CREATE SERVER s3lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri '{s3.base_uri}')")
            conn.execute(f"CREATE USER MAPPING FOR PUBLIC SERVER s3lake OPTIONS ({options})")
            for name, server in (("scan_updated", "lake"), ("s3_scan", "s3lake"), ("s3_scan_updated", "s3lake")):
                conn.execute(f"CREATE FOREIGN TABLE {name} ({COLUMNS}) SERVER {server} OPTIONS (path '{name}', "
                             "primary_key 'id', ordering_field 'ts', buckets '16', services 'off')")
                conn.execute(f"SELECT hudi.create_table('{name}')")
            conn.execute(f"INSERT INTO heap SELECT {ROW} FROM generate_series(1, {n}) g")
            for table in ("scan", "scan_updated", "s3_scan", "s3_scan_updated"):
                conn.execute(f"INSERT INTO {table} SELECT * FROM heap")
                conn.execute(f"SELECT * FROM hudi.compact('{table}')")
            for table in ("scan_updated", "s3_scan_updated"):
                conn.execute(f"UPDATE {table} {update}")
            expected = int(conn.execute("SELECT sum(qty) FROM heap").fetchone()[0])

        def requests_of(table):
            """(requests of the first scan in a new backend, of the same scan repeated)."""
            with connect(args.port) as conn:
                conn.execute(NOT_PUSHED)
                counts = []
                for _ in range(2):
                    s3.record_requests()
                    conn.execute(QUERY.format(table)).fetchone()
                    made = s3.recorded_requests()
                    lists = sum(1 for m, _, q in made if m == "GET" and "list-type=2" in q)
                    counts.append((len(made), lists))
                return counts

        counts = {table: requests_of(table) for table in ("s3_scan", "s3_scan_updated")}
        scans = [Scan(args.port, t, NOT_PUSHED) for t in ("scan", "s3_scan", "scan_updated", "s3_scan_updated")]
        file_c, s3_c, file_u, s3_u = scans
        assert file_c.result == s3_c.result == [(expected,)] and file_u.result == s3_u.result == [(expected + n // 10,)]
        interleaved(scans)
        print(f"| `SELECT sum(qty)`, {n:,} rows x 10 columns, 16 file groups (median of {ROUNDS} interleaved rounds) "
              "| file:// | S3 (moto) | S3 vs file | requests: new backend (LISTs) | requests: repeated (LISTs) |")
        print("|---|---|---|---|---|---|")
        for label, on_file, on_s3, table in (("compacted", file_c, s3_c, "s3_scan"), ("10% updated", file_u, s3_u, "s3_scan_updated")):
            (cold, cold_lists), (warm, warm_lists) = counts[table]
            print(f"| {label} | {on_file.seconds():.3f} s | {on_s3.seconds():.3f} s | {on_s3.seconds() / on_file.seconds():.2f}x "
                  f"| {cold} ({cold_lists}) | {warm} ({warm_lists}) |")
        print()
        print(f"Peak backend memory (VmHWM): file:// compacted {file_c.peak_mib():,.0f} MiB, S3 compacted "
              f"{s3_c.peak_mib():,.0f} MiB, file:// updated {file_u.peak_mib():,.0f} MiB, S3 updated {s3_u.peak_mib():,.0f} MiB.")
        for scan in scans:
            scan.conn.close()
    finally:
        s3.stop()


if __name__ == "__main__":
    main()
