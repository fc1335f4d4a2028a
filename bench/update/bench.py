"""bench/update: see run.sh. Prints a Markdown table of the measurements.

A statement that modifies millions of rows must not hold memory per row: the peak memory of
the backend that runs `UPDATE t SET ...` over every row should stay flat as the table grows.
The tables grow with the same number of rows per file slice (the buckets grow with the rows),
because a scan holds the file slices it decodes, whose size is not the UPDATE's doing."""

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, ROW, PrivateMemorySampler, connect, peak_memory_kb  # noqa: E402

SIZES = (1_000_000, 2_500_000, 5_000_000)
ROWS_PER_SLICE = 62_500
UPDATE = "UPDATE {} SET name = name || 'x', qty = qty + 1, ts = ts + interval '1 day'"


def measure(port, sql):
    """(seconds, peak MiB, peak private MiB of the statement, peak private MiB of its commit,
    the statement's private MiB in each quarter of its time) of `sql` in a transaction of a
    fresh backend."""
    with connect(port) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        started = time.perf_counter()
        conn.execute("BEGIN")
        with PrivateMemorySampler(pid) as statement:
            conn.execute(sql)
        with PrivateMemorySampler(pid) as commit:
            conn.execute("COMMIT")
        quarters = [kb / 1024 for kb in statement.quarter_medians_kb()]
        return time.perf_counter() - started, peak_memory_kb(pid) / 1024, statement.peak_kb / 1024, commit.peak_kb / 1024, quarters


def main():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lake", required=True)
    args = parser.parse_args()
    print("| rows | buckets | heap UPDATE | heap peak (private: statement / commit) "
          "| pg_hudi UPDATE | pg_hudi peak (private: statement / commit) | pg_hudi private, median of each quarter of the statement |")
    print("|---|---|---|---|---|---|---|")
    with connect(args.port) as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{args.lake}')")
    for n in SIZES:
        buckets = n // ROWS_PER_SLICE
        name = f"t{n}"
        with connect(args.port) as conn:
            conn.execute(f"CREATE TABLE heap_{name} ({COLUMNS}, PRIMARY KEY (id))")
            conn.execute(f"INSERT INTO heap_{name} SELECT {ROW} FROM generate_series(1, {n}) g")
            conn.execute(f"VACUUM ANALYZE heap_{name}")
            conn.execute(f"CREATE FOREIGN TABLE {name} ({COLUMNS}) SERVER lake OPTIONS (path '{name}', primary_key 'id', "
                         f"ordering_field 'ts', buckets '{buckets}')")
            conn.execute(f"SELECT hudi.create_table('{name}')")
            conn.execute(f"INSERT INTO {name} SELECT {ROW} FROM generate_series(1, {n}) g")
            conn.execute(f"SELECT * FROM hudi.compact('{name}')")
        heap = measure(args.port, UPDATE.format(f"heap_{name}"))
        hudi = measure(args.port, UPDATE.format(name))
        print(f"| {n:,} | {buckets} | " + " | ".join(
            f"{seconds:.2f} s | {peak:.0f} MiB ({statement:.0f} / {commit:.0f} MiB)" for seconds, peak, statement, commit, _ in (heap, hudi)
        ) + " | " + " / ".join(f"{q:.0f}" for q in hudi[4]) + " MiB |", flush=True)
        with connect(args.port) as conn:
            conn.execute(f"DROP TABLE heap_{name}")


if __name__ == "__main__":
    main()
