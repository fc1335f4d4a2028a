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
from benchlib import ROW, arguments, connect, create_tables, peak_memory_kb  # noqa: E402

QUERY = "SELECT sum(qty) FROM {}"
RUNS = 5


def median_seconds(run):
    """The median of RUNS timed runs after one warm-up; returns (seconds, last result)."""
    result = run()
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def scan_in_fresh_backend(port, table, settings=""):
    """Median time of the query in a new backend (after `settings`, SET statements), its
    result, and that backend's peak memory."""
    with connect(port) as conn:
        if settings:
            conn.execute(settings)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        seconds, result = median_seconds(lambda: conn.execute(QUERY.format(table)).fetchone()[0])
        return seconds, int(result), peak_memory_kb(pid)


def reference_sum(path):
    def run():
        batches = HudiTableBuilder.from_base_uri(path).build().read(HudiReadOptions())
        return pc.sum(pa.Table.from_batches(batches).column("qty")).as_py()
    return median_seconds(run)


def main():
    args = arguments(5_000_000)
    n = args.rows
    path = os.path.join(args.lake, "scan")
    with connect(args.port) as conn:
        create_tables(conn, args.lake, "scan")
        conn.execute(f"INSERT INTO heap SELECT {ROW} FROM generate_series(1, {n}) g")
        conn.execute("VACUUM ANALYZE heap")
        conn.execute("INSERT INTO scan SELECT * FROM heap")
        started = time.perf_counter()
        compaction = conn.execute("SELECT file_groups, rows_written FROM hudi.compact('scan')").fetchone()
        compact_s = time.perf_counter() - started
        assert compaction[1] == n, compaction
        conn.execute("ANALYZE scan")

    heap_s, heap_sum, heap_peak = scan_in_fresh_backend(args.port, "heap")
    compacted_s, compacted_sum, compacted_peak = scan_in_fresh_backend(args.port, "scan")
    assert compacted_sum == heap_sum, (compacted_sum, heap_sum)
    base_files = glob.glob(os.path.join(path, "*.parquet"))
    duck = duckdb.connect()
    duck_s, duck_sum = median_seconds(
        lambda: duck.execute("SELECT sum(qty) FROM read_parquet(?)", [base_files]).fetchone()[0])
    assert duck_sum == heap_sum
    reference_s, reference_result = reference_sum(path)
    assert reference_result == heap_sum

    # 10% of the keys updated (a newer ordering value) by the same UPDATE on both: into log
    # files on top of the bases, whose blocks name the base rows they replace.
    with connect(args.port) as conn:
        update = "SET qty = qty + 1, ts = ts + interval '1 day' WHERE id % 10 = 0"
        conn.execute(f"UPDATE heap {update}")
        conn.execute("VACUUM ANALYZE heap")
        started = time.perf_counter()
        conn.execute(f"UPDATE scan {update}")
        update_s = time.perf_counter() - started
    updated_s, updated_sum, updated_peak = scan_in_fresh_backend(args.port, "scan")
    serial_s, serial_sum, serial_peak = scan_in_fresh_backend(args.port, "scan", "SET hudi.read_ahead_slices = 0")
    assert serial_sum == updated_sum
    by_key_s, by_key_sum, _ = scan_in_fresh_backend(args.port, "scan", "SET hudi.use_record_positions = off")
    assert by_key_sum == updated_sum
    updated_heap_s, updated_heap_sum, _ = scan_in_fresh_backend(args.port, "heap")
    assert updated_sum == updated_heap_sum == heap_sum + n // 10, (updated_sum, updated_heap_sum)
    updated_reference_s, updated_reference = reference_sum(path)
    assert updated_reference == updated_sum

    print(f"| `SELECT sum(qty)`, {n:,} rows x 10 columns, 16 file groups (median of {RUNS}) | time | vs heap |")
    print("|---|---|---|")
    print(f"| heap table | {heap_s:.3f} s | 1.00x |")
    print(f"| pg_hudi, compacted (base files only) | {compacted_s:.3f} s | **{compacted_s / heap_s:.2f}x** |")
    print(f"| DuckDB `read_parquet` on the base files | {duck_s:.3f} s | {duck_s / heap_s:.2f}x |")
    print(f"| reference reader `hudi` 0.5.0, compacted | {reference_s:.3f} s | {reference_s / heap_s:.2f}x |")
    print(f"| pg_hudi, 10% of keys updated in logs | {updated_s:.3f} s | {updated_s / heap_s:.2f}x "
          f"(**{updated_s / compacted_s:.2f}x compacted**) |")
    print(f"| the same, without read-ahead (`hudi.read_ahead_slices = 0`) | {serial_s:.3f} s | "
          f"{serial_s / heap_s:.2f}x ({serial_s / compacted_s:.2f}x compacted) |")
    print(f"| the same, merged by key (`hudi.use_record_positions = off`) | {by_key_s:.3f} s | "
          f"{by_key_s / heap_s:.2f}x ({by_key_s / compacted_s:.2f}x compacted) |")
    print(f"| heap table after the same update | {updated_heap_s:.3f} s | {updated_heap_s / heap_s:.2f}x |")
    print(f"| reference reader, 10% updated | {updated_reference_s:.3f} s | {updated_reference_s / heap_s:.2f}x |")
    print()
    print(f"Peak backend memory (VmHWM): heap scan {heap_peak / 1024:,.0f} MiB, compacted scan "
          f"{compacted_peak / 1024:,.0f} MiB, updated scan {updated_peak / 1024:,.0f} MiB "
          f"({serial_peak / 1024:,.0f} MiB without read-ahead). "
          f"Compaction of {compaction[0]} file groups took {compact_s:.1f} s; the UPDATE of {n // 10:,} rows "
          f"{update_s:.1f} s.")


if __name__ == "__main__":
    main()
