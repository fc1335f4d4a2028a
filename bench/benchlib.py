"""Shared by bench/*/bench.py: connections to the benchmark's cluster and backend memory."""

import psycopg

# The benchmarks' table: ten columns of the common types, and the expression of row g.
COLUMNS = "id bigint, name text, city text, amount numeric(12, 2), qty integer, score double precision, " \
          "flag boolean, day date, note text, ts timestamptz"
ROW = ("g, 'name ' || g, (ARRAY['amsterdam','berlin','paris','rome'])[1 + g % 4], (g % 10000) / 100.0, g % 1000, "
       "g * 0.5, g % 2 = 0, date '2026-01-01' + (g % 365), repeat('x', 20), timestamptz '2026-01-01' + g * interval '1 second'")


def connect(port):
    return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)


def peak_memory_kb(pid):
    """The peak resident memory (VmHWM) of a backend, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1])
