"""Point queries on bucket-indexed tables.

`WHERE key = k` (and `key IN (...)`) reads one file slice per key's bucket; in it, the base
file's data pages whose record-key statistics (the page index) rule the keys out are not read,
and of the log blocks only the versions of those keys are merged, in slices with logs as well
as without. An UPDATE or DELETE of one key reads its row's position in the base file the same
way and writes it into its log block, which later reads merge by.

Seeded differential test against a heap copy that took the same statements, as a role that is
not a superuser, under a non-UTC TimeZone: random single keys and IN lists (present, updated,
deleted, only in logs, absent) on a table with base files only, then with logs; point UPDATEs
and DELETEs on a freshly compacted table (so that every log block carries positions and the
whole-table read merges by them), compared whole afterwards. EXPLAIN ANALYZE VERBOSE shows
that one slice and a fraction of its base file's rows were read. PG_HUDI_SEED=<n> replays.
"""

import os
import random
import re

from conftest import new_lake

ROWS = 120_000
TIME_ZONE = "America/Sao_Paulo"
COLUMNS = "id bigint, name text, qty integer, ts timestamptz"


def same(conn, sql_on_table, params=()):
    """The rows of `sql_on_table` ({} is the table) on the Hudi table and on the heap copy."""
    ours = sorted(conn.execute(sql_on_table.format("t"), params or None).fetchall())
    theirs = sorted(conn.execute(sql_on_table.format("heap"), params or None).fetchall())
    assert ours == theirs, (sql_on_table, params, ours, theirs)
    return ours


def both(conn, statement, params=()):
    """Runs `statement` ({} is the table) on the Hudi table and on the heap copy."""
    counts = [conn.execute(statement.format(table), params or None).rowcount for table in ("t", "heap")]
    assert counts[0] == counts[1], (statement, params, counts)


def whole_table(conn):
    return same(conn, "SELECT count(*), sum(hashtext(id || name || qty || ts)) FROM {}")


def explained(conn, sql):
    return "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) " + sql))


def read_amounts(conn, sql):
    plan = explained(conn, sql)
    slices = re.search(r"Hudi File Slices: (\d+) of (\d+)", plan)
    rows = re.search(r"Hudi Base File Rows: (\d+) of (\d+) read", plan)
    assert slices and rows, plan
    return tuple(int(x) for x in slices.groups()), tuple(int(x) for x in rows.groups())


def random_keys(conn, rng):
    """Keys of every kind: of base rows, of rows the logs changed or deleted, only in the logs,
    absent."""
    return [rng.choice([rng.randrange(1, ROWS + 1), rng.randrange(ROWS, ROWS + 200), rng.randrange(1, 200) * 10,
                        -rng.randrange(1, 1000)]) for _ in range(rng.randint(1, 4))]


def check_point_reads(conn, rng, queries):
    for _ in range(queries):
        keys = random_keys(conn, rng)
        if len(keys) == 1 and rng.random() < 0.7:
            same(conn, "SELECT * FROM {} WHERE id = %s", (keys[0],))
        else:
            same(conn, "SELECT id, name, qty FROM {} WHERE id IN (" + ", ".join(map(str, keys)) + ")")


def test_point_queries_read_a_key_and_equal_a_heap_copy(cluster):
    seed = int(os.environ.get("PG_HUDI_SEED", random.randrange(1 << 30)))
    print("PG_HUDI_SEED", seed)
    rng = random.Random(seed)
    with new_lake(cluster) as (conn, root):
        conn.execute(f"""CREATE FOREIGN TABLE t ({COLUMNS}) SERVER lake OPTIONS (path 't', primary_key 'id',
                         ordering_field 'ts', buckets '2', services 'off')""")
        conn.execute("SELECT hudi.create_table('t')")
        conn.execute(f"CREATE TABLE heap ({COLUMNS}, PRIMARY KEY (id))")
        conn.execute("CREATE ROLE app LOGIN")
        conn.execute("GRANT USAGE ON FOREIGN SERVER lake TO app")
        conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON t, heap TO app")
        conn.execute(f"SET hudi.allowed_file_roots = '{root}'")
        conn.execute(f"SET timezone = '{TIME_ZONE}'")
        both(conn, f"""INSERT INTO {{}} SELECT g, 'name ' || g, g % 100, timestamptz '2026-01-01' + g * interval '1 second'
                       FROM generate_series(1, {ROWS}) g""")
        conn.execute("SELECT * FROM hudi.compact('t')")
        conn.execute("SET ROLE app")

        # Base files only.
        check_point_reads(conn, rng, 60)
        (kept, total), (read, rows) = read_amounts(conn, "SELECT * FROM t WHERE id = 4242")
        assert (kept, total) == (1, 2) and read * 2 <= rows, (read, rows)

        # Logs on every slice: updates that win, a stale one that loses, deletes, new keys.
        both(conn, "UPDATE {} SET qty = qty + 1000, ts = ts + interval '1 day' WHERE id % 10 = 0")
        conn.execute("INSERT INTO t VALUES (20, 'stale', 0, timestamptz '2000-01-01')")
        both(conn, "DELETE FROM {} WHERE id % 70 = 0")
        both(conn, f"""INSERT INTO {{}} SELECT g, 'late ' || g, 7, timestamptz '2026-06-01'
                       FROM generate_series({ROWS + 1}, {ROWS + 100}) g""")
        check_point_reads(conn, rng, 60)
        (kept, total), (read, rows) = read_amounts(conn, "SELECT * FROM t WHERE id = 4240")
        assert (kept, total) == (1, 2) and read * 2 <= rows, (read, rows)
        # Of the slice's log blocks, only those with versions of the key are read: the UPDATE's
        # for 4240, none for 4241 (the blocks' keys are known after the first read).
        for key, blocks in ((4240, 1), (4241, 0)):
            plan = explained(conn, f"SELECT * FROM t WHERE id = {key}")
            assert re.search(rf"Hudi Log Blocks: {blocks} of [2-9] read", plan), plan
        # A prepared point query's generic plan costs what a custom plan does (a data page of
        # one slice): PostgreSQL keeps it instead of planning each execution, and the scan
        # prunes by the parameter's value at execution.
        conn.execute("PREPARE point(bigint) AS SELECT * FROM t WHERE id = $1")
        for key in rng.sample(range(1, ROWS), 7):
            same(conn, "SELECT * FROM {} WHERE id = %s", (key,))
            conn.execute(f"EXECUTE point({key})").fetchall()
        plan = explained(conn, "EXECUTE point(4241)")
        assert "Hudi Row Filter: id = $1" in plan and "Hudi File Slices: 1 of 2" in plan, plan
        assert re.search(r"Hudi Log Blocks: 0 of [2-9] read", plan), plan
        whole_table(conn)

        # Point writes on a compacted table: each names its row's base position.
        conn.execute("RESET ROLE")
        conn.execute("SELECT * FROM hudi.compact('t')")
        conn.execute("SET ROLE app")
        for _ in range(25):
            keys = random_keys(conn, rng)
            if rng.random() < 0.75:
                both(conn, "UPDATE {} SET qty = qty + 1, name = name || '+' WHERE id = %s", (keys[0],))
            else:
                both(conn, "DELETE FROM {} WHERE id IN (" + ", ".join(map(str, keys)) + ")")
        whole_table(conn)
        check_point_reads(conn, rng, 40)
        conn.execute("RESET ROLE")
        logs = conn.execute("SELECT count(*) FROM hudi.file_slices('t') WHERE cardinality(log_files) > 0").fetchone()[0]
        assert logs > 0
        conn.execute("SELECT * FROM hudi.compact('t')")
        whole_table(conn)
