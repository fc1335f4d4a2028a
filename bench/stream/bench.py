"""bench/stream: see run.sh. Prints the measurements as Markdown."""

import pathlib
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, ROW, arguments, connect, create_tables  # noqa: E402

COMMITS = 100
COMMIT_EVERY = 0.1
WAITERS = 100
WAIT_SECONDS = 10


def percentiles(values):
    values = sorted(values)
    return (f"median {values[len(values) // 2] * 1000:.0f} ms, p90 {values[int(len(values) * 0.9)] * 1000:.0f} ms, "
            f"p99 {values[int(len(values) * 0.99)] * 1000:.0f} ms, max {values[-1] * 1000:.0f} ms")


def local_wakeups(port):
    """A consumer waiting in a loop while another session commits one row every 100 ms: the
    time from each COMMIT's return to the waiter's return with that row."""
    returned = {}
    stop = threading.Event()

    def consume():
        with connect(port) as conn:
            conn.execute("SELECT count(*) FROM hudi.consume(NULL::changes, 'bench', start_from => 'latest')")
            while not stop.is_set():
                rows = conn.execute("SELECT id FROM hudi.consume(NULL::changes, 'bench', wait => '2 s')").fetchall()
                at = time.perf_counter()
                for (i,) in rows:
                    returned[i] = at

    waiter = threading.Thread(target=consume)
    waiter.start()
    committed = {}
    with connect(port) as conn:
        while conn.execute("SELECT COALESCE(sum(waiting), 0) FROM hudi.stream_watches()").fetchone()[0] == 0:
            time.sleep(0.01)
        for n in range(COMMITS):
            i = 10_000_000 + n
            conn.execute(f"INSERT INTO events SELECT {ROW} FROM (SELECT {i} AS g) s")
            committed[i] = time.perf_counter()
            time.sleep(COMMIT_EVERY)
    deadline = time.perf_counter() + 10
    while len(returned) < len(committed) and time.perf_counter() < deadline:
        time.sleep(0.05)
    stop.set()
    waiter.join()
    return [returned[i] - committed[i] for i in committed if i in returned], len(committed) - len(returned)


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
    wakeups, missed = local_wakeups(args.port)
    waiting, listings, elapsed, interval = listings_of_waiters(args.port)
    lags = subscription_lags(args.port)
    print(f"{args.rows:,} rows in a compacted Hudi table of 16 buckets\n")
    print("| measurement | result |")
    print("|---|---|")
    print(f"| waiting consumer, commit of this server to return ({len(wakeups)} commits, one each {COMMIT_EVERY * 1000:.0f} ms"
          f"{f'; {missed} not returned' if missed else ''}) | {percentiles(wakeups)} |")
    print(f"| {waiting} sessions waiting {elapsed:.1f} s (check interval {interval}) | {listings} timeline listings |")
    print(f"| subscription lag, commit of this server to the heap table ({len(lags)} commits, 10 a second) | {percentiles(lags)} |")
    print(f"| initial copy of {copied:,} rows: hudi.subscribe vs INSERT INTO heap SELECT | {subscribe:.2f} s vs {insert_select:.2f} s: "
          f"{subscribe / insert_select:.2f}x |")


if __name__ == "__main__":
    main()
