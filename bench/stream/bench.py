"""bench/stream: see run.sh. Prints the measurements as Markdown."""

import pathlib
import subprocess
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, ROW, arguments, connect, create_tables  # noqa: E402

CLUSTER_SH = pathlib.Path(__file__).resolve().parent.parent.parent / "scripts" / "cluster.sh"
COMMITS = 100
REMOTE_COMMITS = 20
COMMIT_EVERY = 0.1
WAITERS = 100
WAIT_SECONDS = 10


def percentiles(values):
    values = sorted(values)
    return (f"median {values[len(values) // 2] * 1000:.0f} ms, p90 {values[int(len(values) * 0.9)] * 1000:.0f} ms, "
            f"p99 {values[int(len(values) * 0.99)] * 1000:.0f} ms, max {values[-1] * 1000:.0f} ms")


def wakeups(port, writer_port, consumer, commits, every, first_id):
    """A consumer waiting in a loop on the server at `port` while a session of the server at
    `writer_port` commits one row every `every` seconds: the time from each COMMIT's return
    to the waiter's return with that row, and how many never came."""
    returned = {}
    stop = threading.Event()

    def consume():
        with connect(port) as conn:
            conn.execute(f"SELECT count(*) FROM hudi.consume(NULL::changes, '{consumer}', start_from => 'latest')")
            while not stop.is_set():
                rows = conn.execute(f"SELECT id FROM hudi.consume(NULL::changes, '{consumer}', wait => '2 s')").fetchall()
                at = time.perf_counter()
                for (i,) in rows:
                    returned[i] = at

    waiter = threading.Thread(target=consume)
    waiter.start()
    committed = {}
    with connect(port) as conn, connect(writer_port) as writer:
        while conn.execute("SELECT COALESCE(sum(waiting), 0) FROM hudi.stream_watches()").fetchone()[0] == 0:
            time.sleep(0.01)
        for n in range(commits):
            i = first_id + n
            writer.execute(f"INSERT INTO events SELECT {ROW} FROM (SELECT {i} AS g) s")
            committed[i] = time.perf_counter()
            time.sleep(every)
    deadline = time.perf_counter() + 10
    while len(returned) < len(committed) and time.perf_counter() < deadline:
        time.sleep(0.05)
    stop.set()
    waiter.join()
    return [returned[i] - committed[i] for i in committed if i in returned], len(committed) - len(returned)


def second_server(lake):
    """Starts a second cluster with pg_hudi and the table `events` of the same lake: its
    directory and port."""
    directory = pathlib.Path(lake).parent / "second"
    out = subprocess.run([CLUSTER_SH, "start", str(directory)], capture_output=True, text=True, check=True)
    port = int(out.stdout.strip().splitlines()[-1])
    with connect(port) as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{lake}')")
        conn.execute(f"CREATE FOREIGN TABLE events ({COLUMNS}) SERVER lake OPTIONS (path 'events', services 'off')")
    return directory, port


def listings_of_waiters(port):
    """WAITERS sessions waiting on one table for WAIT_SECONDS without commits: the timeline
    listings the server made meanwhile (hudi.stream_watches), and the check interval."""
    conns = [connect(port) for _ in range(WAITERS)]
    threads = [threading.Thread(target=lambda c=c, n=n: c.execute(
        f"SELECT count(*) FROM hudi.consume(NULL::changes, 'idle{n}', start_from => 'latest', wait => '{WAIT_SECONDS} s')"))
        for n, c in enumerate(conns)]
    with connect(port) as conn:
        before = conn.execute("SELECT COALESCE(sum(listings), 0) FROM hudi.stream_watches()").fetchone()[0]
        started = time.perf_counter()
        for t in threads:
            t.start()
        waiting = 0
        while waiting < WAITERS and time.perf_counter() - started < WAIT_SECONDS:
            waiting = conn.execute("SELECT COALESCE(sum(waiting), 0) FROM hudi.stream_watches()").fetchone()[0]
            time.sleep(0.05)
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        after = conn.execute("SELECT COALESCE(sum(listings), 0) FROM hudi.stream_watches()").fetchone()[0]
        interval = conn.execute("SHOW hudi.stream_check_interval").fetchone()[0]
    for c in conns:
        c.close()
    return waiting, after - before, elapsed, interval


def subscription_lags(port):
    """A heap table subscribed to `events` while one row is committed every 100 ms: the time
    from each COMMIT's return until the heap table holds the row."""
    lags = []
    with connect(port) as conn, connect(port) as watcher:
        for n in range(COMMITS):
            i = 20_000_000 + n
            conn.execute(f"INSERT INTO events SELECT {ROW} FROM (SELECT {i} AS g) s")
            committed = time.perf_counter()
            while not watcher.execute("SELECT EXISTS (SELECT FROM subscribed WHERE id = %s)", (i,)).fetchone()[0]:
                time.sleep(0.005)
            lags.append(time.perf_counter() - committed)
            time.sleep(max(0.0, COMMIT_EVERY - lags[-1]))
    return lags


def main():
    args = arguments(5_000_000)
    with connect(args.port) as conn:
        create_tables(conn, args.lake, "events")
        conn.execute(f"CREATE FOREIGN TABLE changes ({COLUMNS}) SERVER lake OPTIONS (path 'events', query_type 'incremental')")
        conn.execute(f"INSERT INTO events SELECT {ROW} FROM generate_series(1, {args.rows}) g")
        conn.execute("SELECT hudi.compact('events')")
        # The initial copy against the same rows copied by INSERT ... SELECT.
        started = time.perf_counter()
        conn.execute("INSERT INTO heap SELECT * FROM events")
        insert_select = time.perf_counter() - started
        conn.execute(f"CREATE TABLE subscribed ({COLUMNS}, PRIMARY KEY (id))")
        started = time.perf_counter()
        copied = conn.execute("SELECT hudi.subscribe('events', 'subscribed')").fetchone()[0]
        subscribe = time.perf_counter() - started
    local, missed = wakeups(args.port, args.port, "local", COMMITS, COMMIT_EVERY, 10_000_000)
    directory, second = second_server(args.lake)
    try:
        remote, remote_missed = wakeups(args.port, second, "remote", REMOTE_COMMITS, 1.3, 30_000_000)
    finally:
        subprocess.run([CLUSTER_SH, "stop", str(directory)], check=True, capture_output=True)
    waiting, listings, elapsed, interval = listings_of_waiters(args.port)
    lags = subscription_lags(args.port)
    print(f"{args.rows:,} rows in a compacted Hudi table of 16 buckets\n")
    print("| measurement | result |")
    print("|---|---|")
    print(f"| waiting consumer, commit of this server to return ({len(local)} commits, one each {COMMIT_EVERY * 1000:.0f} ms"
          f"{f'; {missed} not returned' if missed else ''}) | {percentiles(local)} |")
    print(f"| waiting consumer, commit of another server to return ({len(remote)} commits, one each 1.3 s"
          f"{f'; {remote_missed} not returned' if remote_missed else ''}; check interval {interval}) | {percentiles(remote)} |")
    print(f"| {waiting} sessions waiting {elapsed:.1f} s (check interval {interval}) | {listings} timeline listings |")
    print(f"| subscription lag, commit of this server to the heap table ({len(lags)} commits, 10 a second) | {percentiles(lags)} |")
    print(f"| initial copy of {copied:,} rows: hudi.subscribe vs INSERT INTO heap SELECT | {subscribe:.2f} s vs {insert_select:.2f} s: "
          f"{subscribe / insert_select:.2f}x |")


if __name__ == "__main__":
    main()
