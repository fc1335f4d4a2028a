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
    parser.add_argument("--rows", type=int, default=default_rows)
    return parser.parse_args()


def create_tables(conn, lake, name):
    """pg_hudi, a server on `lake`, the heap table `heap` and the Hudi table `name` (16
    buckets, keyed by id, ordered by ts), both with the benchmark's columns."""
    conn.execute("CREATE EXTENSION pg_hudi")
    conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{lake}')")
    conn.execute(f"CREATE TABLE heap ({COLUMNS}, PRIMARY KEY (id))")
    conn.execute(f"CREATE FOREIGN TABLE {name} ({COLUMNS}) SERVER lake OPTIONS (path '{name}', primary_key 'id', "
                 f"ordering_field 'ts', buckets '16')")
    conn.execute(f"SELECT hudi.create_table('{name}')")


def connect(port):
    return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)


def peak_memory_kb(pid):
    """The peak resident memory (VmHWM) of a backend, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1])
