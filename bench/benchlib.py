"""Shared by bench/*/bench.py: connections to the benchmark's cluster and backend memory."""

import argparse

import psycopg

# The benchmarks' table: ten columns of the common types, and the expression of row g.
COLUMNS = "id bigint, name text, city text, amount numeric(12, 2), qty integer, score double precision, " \
          "flag boolean, day date, note text, ts timestamptz"
ROW = ("g, 'name ' || g, (ARRAY['amsterdam','berlin','paris','rome'])[1 + g % 4], (g % 10000) / 100.0, g % 1000, "
       "g * 0.5, g % 2 = 0, date '2026-01-01' + (g % 365), repeat('x', 20), timestamptz '2026-01-01' + g * interval '1 second'")


def arguments(default_rows):
    """The options run_bench passes (--port, --lake) and --rows."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lake", required=True)
    parser.add_argument("--rows", type=int, default=None, help=f"rows (default {default_rows:,})")
    parser.add_argument("--store", choices=["file", "s3"], default="file",
                        help="s3: the same tables also in an S3-compatible server (moto) started for the run")
    args = parser.parse_args()
    args.rows_given = args.rows is not None
    if args.rows is None:
        args.rows = default_rows
    return args


def create_tables(conn, lake, name):
    """pg_hudi, a server on `lake`, the heap table `heap` and the Hudi table `name` (16
    buckets, keyed by id, ordered by ts), both with the benchmark's columns. Benchmarks run
    their tables' services themselves: the worker's are off."""
    conn.execute("CREATE EXTENSION pg_hudi")
    conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{lake}')")
    conn.execute(f"CREATE TABLE heap ({COLUMNS}, PRIMARY KEY (id))")
    conn.execute(f"CREATE FOREIGN TABLE {name} ({COLUMNS}) SERVER lake OPTIONS (path '{name}', primary_key 'id', "
                 f"ordering_field 'ts', buckets '16', services 'off')")
    conn.execute(f"SELECT hudi.create_table('{name}')")


def connect(port):
    return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)


def peak_memory_kb(pid):
    """The peak resident memory (VmHWM) of a backend, from /proc."""
    return _status_kb(pid, "VmHWM")


def _status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(field)).split()[1])


class PrivateMemorySampler:
    """The peak of a backend's private resident memory (RssAnon: what it allocated, without the
    shared buffers it touched, which VmHWM counts too), sampled every 20 ms on a thread while
    the `with` block runs; `samples_kb` keeps every sample, in order."""

    def __init__(self, pid):
        self.pid, self.peak_kb, self.samples_kb = pid, 0, []

    def __enter__(self):
        import threading
        self._done = threading.Event()

        def sample():
            while not self._done.wait(0.02):
                self.samples_kb.append(_status_kb(self.pid, "RssAnon"))
                self.peak_kb = max(self.peak_kb, self.samples_kb[-1])
        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.peak_kb = max(self.peak_kb, _status_kb(self.pid, "RssAnon"))

    def quarter_medians_kb(self):
        """The median sample of each quarter of the block's time: memory held per row processed
        shows as medians that rise from quarter to quarter; a flat plateau does not."""
        import statistics
        n = len(self.samples_kb)
        if n < 4:
            return [self.peak_kb] * 4
        return [statistics.median(self.samples_kb[i * n // 4:(i + 1) * n // 4]) for i in range(4)]
