"""Parallel scans of Hudi tables.

A scan too large for one process gets a partial path: the leader and PostgreSQL's parallel
workers take units (file slices, or parts of the base file of a slice without logs) one at a
time from a counter in shared memory, each reading the leader's snapshot (its timeline listing,
files and decided writes travel with the slices). The tests
compare parallel plans with serial plans of the same query and with a heap copy, over a table
whose slices have base files only, base files and logs, and logs only, as a role that is not
a superuser, under a non-UTC TimeZone; they check from EXPLAIN ANALYZE that workers were
launched and read rows, that slices without logs were handed out in parts, that aggregates which are not pushed run as Partial Aggregate →
Gather → Finalize Aggregate, that incremental reads go parallel too, and that a transaction
that wrote the table reads it alone (its own rows are in its backend).
"""

import re

import psycopg

from conftest import new_lake

ROWS = 160_000
LATE = 3
PARALLEL = ("SET parallel_setup_cost = 0", "SET parallel_tuple_cost = 0", "SET min_parallel_table_scan_size = 0",
            "SET max_parallel_workers_per_gather = 2", "SET hudi.aggregate_pushdown = off")


def plan(conn, sql):
    return "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) " + sql))


def serial(conn, sql):
    conn.execute("SET max_parallel_workers_per_gather = 0")
    try:
        return sorted(conn.execute(sql).fetchall())
    finally:
        conn.execute("SET max_parallel_workers_per_gather = 2")


def test_parallel_scans_read_what_serial_scans_read(cluster):
    with new_lake(cluster) as (conn, root):
        conn.execute("""CREATE FOREIGN TABLE t (id bigint, name text, city text, qty integer, ts timestamptz)
                        SERVER lake OPTIONS (path 't', primary_key 'id', ordering_field 'ts', buckets '8',
                                             services 'off')""")
        conn.execute("SELECT hudi.create_table('t')")
        conn.execute(f"""INSERT INTO t SELECT g, 'name ' || g, (ARRAY['a', 'b', 'c'])[1 + g % 3], g % 100,
                                            timestamptz '2026-01-01' + g * interval '1 second'
                         FROM generate_series(1, {ROWS}) g""")
        conn.execute("SELECT * FROM hudi.compact('t')")
        conn.execute("UPDATE t SET qty = qty + 1000, ts = ts + interval '1 day' WHERE id % 10 = 0")
        conn.execute("DELETE FROM t WHERE id % 97 = 0")
        conn.execute("SELECT * FROM hudi.compact('t')")
        conn.execute("UPDATE t SET qty = -qty WHERE id % 40000 = 1")
        start = conn.execute("SELECT max(instant) FROM hudi.timeline('t') WHERE action = 'deltacommit'").fetchone()[0]
        # A few late keys: logs on a few slices, the others keep base files alone.
        conn.execute(f"""INSERT INTO t SELECT g, 'late ' || g, 'd', g % 7, timestamptz '2026-02-01'
                         FROM generate_series({ROWS + 1}, {ROWS + LATE}) g""")
        conn.execute("""CREATE FOREIGN TABLE t_changes (id bigint, name text, qty integer, _hoodie_operation text)
                        SERVER lake OPTIONS (path 't', query_type 'incremental')""")
        kinds = dict(conn.execute("SELECT cardinality(log_files) > 0, count(*) FROM hudi.file_slices('t') GROUP BY 1"))
        assert kinds.get(True) and kinds.get(False), kinds
        conn.execute("CREATE TABLE heap AS SELECT * FROM t")
        conn.execute("CREATE ROLE reader LOGIN")
        conn.execute("GRANT USAGE ON FOREIGN SERVER lake TO reader")
        conn.execute("GRANT SELECT ON t, t_changes, heap TO reader")
        conn.execute(f"SET hudi.allowed_file_roots = '{root}'")
        conn.execute("SET ROLE reader")
        conn.execute("SET TimeZone = 'America/Sao_Paulo'")
        for setting in PARALLEL:
            conn.execute(setting)

        like = "SELECT count(*), sum(hashtext(x::text)::bigint) FROM {} x WHERE name LIKE '%7%'"
        explained = plan(conn, like.format("t"))
        assert "Parallel Foreign Scan on public.t" in explained and "Gather" in explained, explained
        launched = int(re.search(r"Workers Launched: (\d+)", explained).group(1))
        assert launched >= 1, explained
        # The slices without logs are handed out in parts, the others whole.
        units = re.search(r"Hudi Parallel Units: (\d+) \((\d+) slices in parts\)", explained)
        assert units and int(units.group(2)) >= 1 and int(units.group(1)) > sum(kinds.values()), explained
        # Each process's rows: the leader's and each worker's add up to the table's.
        worker_rows = [int(n) for n in re.findall(r"Worker \d+:\s+actual rows=(\d+)", explained)]
        assert any(n > 0 for n in worker_rows), explained
        assert sorted(conn.execute(like.format("t")).fetchall()) == serial(conn, like.format("t")) \
            == sorted(conn.execute(like.format("heap")).fetchall())

        # Aggregates that are not pushed: partial aggregation in every process.
        grouped = "SELECT city, count(*), sum(qty), min(ts) FROM {} GROUP BY city"
        explained = plan(conn, grouped.format("t"))
        assert "Partial" in explained and "Finalize" in explained and "Parallel Foreign Scan" in explained, explained
        assert sorted(conn.execute(grouped.format("t")).fetchall()) == serial(conn, grouped.format("t")) \
            == sorted(conn.execute(grouped.format("heap")).fetchall())

        # Incremental reads.
        conn.execute(f"SET hudi.start_instant = '{start}'")
        changes = "SELECT _hoodie_operation, count(*), sum(qty) FROM t_changes GROUP BY 1"
        explained = plan(conn, changes)
        assert "Parallel Foreign Scan" in explained, explained
        assert sorted(conn.execute(changes).fetchall()) == serial(conn, changes)
        assert conn.execute(changes.replace(" GROUP BY 1", " WHERE _hoodie_operation = 'I' GROUP BY 1")).fetchone()[1] == LATE
        conn.execute("RESET hudi.start_instant")

        # A transaction that wrote the table reads it alone, and sees its rows.
        conn.execute("RESET ROLE")
        with conn.transaction():
            conn.execute("INSERT INTO t VALUES (-1, 'own 7', 'a', 1, now())")
            explained = plan(conn, like.format("t"))
            assert "Parallel" not in explained, explained
            mine = conn.execute(like.format("t")).fetchone()[0]
            assert mine == conn.execute(like.format("heap")).fetchone()[0] + 1
            conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            assert conn.execute(like.format("t")).fetchone()[0] == mine
            raise psycopg.Rollback()  # the row is not committed
