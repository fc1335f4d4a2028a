"""bench/compact: see run.sh. Prints a Markdown table of the measurements.

The table has ROWS_PER_SLICE rows per file group; after compaction into base files, an UPDATE
of every tenth key writes a log to every file group, and hudi.compact then merges each base
file with its log and writes it anew. The baseline reads the same base files with arrow-rs and
writes them back (Snappy), without merging: what reading and writing the bytes costs alone."""

import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, ROW, PrivateMemorySampler, arguments, connect, peak_memory_kb  # noqa: E402

ROWS_PER_SLICE = 62_500


def main():
    args = arguments(5_000_000)
    n = args.rows
    buckets = max(1, n // ROWS_PER_SLICE)
    with connect(args.port) as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{args.lake}')")
        conn.execute(f"CREATE FOREIGN TABLE t ({COLUMNS}) SERVER lake OPTIONS (path 't', primary_key 'id', "
                     f"ordering_field 'ts', buckets '{buckets}')")
        conn.execute("SELECT hudi.create_table('t')")
        conn.execute(f"INSERT INTO t SELECT {ROW} FROM generate_series(1, {n}) g")
        conn.execute("SELECT * FROM hudi.compact('t')")
        base_dir = tempfile.mkdtemp(prefix="bench-compact-base-", dir=pathlib.Path(args.lake).parent)
        # The base files as they are before the compaction measured (the baseline's input).
        for path in pathlib.Path(args.lake, "t").rglob("*.parquet"):
            if ".hoodie" not in path.parts:
                os.link(path, pathlib.Path(base_dir, path.name))
        conn.execute("UPDATE t SET qty = qty + 1, ts = ts + interval '1 day' WHERE id % 10 = 0")
        log_bytes = conn.execute("SELECT sum(log_files_size) FROM hudi.file_slices('t')").fetchone()[0]
    with connect(args.port) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        started = time.perf_counter()
        with PrivateMemorySampler(pid) as private:
            (groups, rows), = conn.execute("SELECT file_groups, rows_written FROM hudi.compact('t')").fetchall()
        compaction = time.perf_counter() - started
        peak, private_peak = peak_memory_kb(pid) / 1024, private.peak_kb / 1024
    target = os.environ.get("CARGO_TARGET_DIR", str(pathlib.Path(__file__).resolve().parents[2] / "target"))
    out_dir = tempfile.mkdtemp(prefix="bench-compact-out-", dir=pathlib.Path(args.lake).parent)
    started = time.perf_counter()
    printed = subprocess.run([f"{target}/release/examples/rewrite_parquet", base_dir, out_dir],
                             check=True, capture_output=True, text=True).stdout.strip()
    baseline = time.perf_counter() - started
    subprocess.run(["rm", "-rf", base_dir, out_dir], check=True)
    print("| rows | file groups | logs | hudi.compact | peak (private) | arrow-rs read + rewrite | ratio |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {rows:,} | {groups} | {log_bytes / 2**20:.1f} MiB | {compaction:.2f} s | {peak:.0f} MiB ({private_peak:.0f} MiB) "
          f"| {baseline:.2f} s ({printed}) | {compaction / baseline:.2f}x |")


if __name__ == "__main__":
    main()
