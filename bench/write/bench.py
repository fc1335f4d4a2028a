"""bench/write: see run.sh. Prints a Markdown table of the measurements."""

import pathlib
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, ROW, arguments, connect, create_tables, peak_memory_kb  # noqa: E402


def timed(conn, sql):
    started = time.perf_counter()
    conn.execute(sql)
    return time.perf_counter() - started


def main():
    args = arguments(1_000_000)
    n = args.rows
    with connect(args.port) as conn:
        create_tables(conn, args.lake, "hudi")
        # Half of the upserted keys exist already.
        conn.execute(f"INSERT INTO heap SELECT {ROW} FROM generate_series(1, {n // 2}) g")
        conn.execute(f"INSERT INTO hudi SELECT {ROW} FROM generate_series(1, {n // 2}) g")
        # The upserted rows come from a staging table, so both sides pay the same small cost
        # for producing them and the timing is the write path's.
        conn.execute(f"CREATE UNLOGGED TABLE staging ({COLUMNS})")
        conn.execute(f"INSERT INTO staging SELECT {ROW} FROM generate_series({n // 4 + 1}, {n // 4 + n}) g")
        conn.execute("VACUUM ANALYZE heap, staging")
        upsert = "SELECT * FROM staging"
        heap_s = timed(conn, f"INSERT INTO heap {upsert} ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                             "city = excluded.city, amount = excluded.amount, qty = excluded.qty, score = excluded.score, "
                             "flag = excluded.flag, day = excluded.day, note = excluded.note, ts = excluded.ts")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    with connect(args.port) as conn:  # a fresh backend, so its peak memory is this statement's
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        hudi_s = timed(conn, f"INSERT INTO hudi {upsert}")
        hudi_peak = peak_memory_kb(pid)
        assert conn.execute("SELECT count(*) FROM hudi").fetchone()[0] == n // 4 + n

    results = {}
    per_writer = n // 4
    for writers in (1, 2, 4):
        def work(w):
            with connect(args.port) as c:
                offset = 10_000_000 * (writers + 1) + w * per_writer
                c.execute(f"INSERT INTO hudi SELECT id + {offset}, name, city, amount, qty, score, flag, day, note, ts "
                          f"FROM staging WHERE id < {n // 4 + 1 + per_writer}")
        threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results[writers] = writers * per_writer / (time.perf_counter() - started)

    print(f"| measurement ({n:,} upserted rows, half updates; 10 columns) | value |")
    print("|---|---|")
    print(f"| heap `INSERT ... ON CONFLICT DO UPDATE` | {heap_s:.2f} s ({n / heap_s:,.0f} rows/s) |")
    print(f"| pg_hudi `INSERT INTO foreign table SELECT` | {hudi_s:.2f} s ({n / hudi_s:,.0f} rows/s) |")
    print(f"| pg_hudi vs heap | **{heap_s / hudi_s:.2f}x** |")
    print(f"| pg_hudi backend peak memory (VmHWM) | {hudi_peak / 1024:,.0f} MiB |")
    for writers, rate in results.items():
        print(f"| {writers} concurrent writer(s), {per_writer:,} rows each | {rate:,.0f} rows/s aggregate "
              f"({rate / results[1]:.2f}x one writer) |")


if __name__ == "__main__":
    main()
