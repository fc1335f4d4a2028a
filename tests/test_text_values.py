"""Text values read from Hudi tables, against a heap copy of the same rows.

A scan hands PostgreSQL each `text` value in a buffer of its own that the next row reuses
(no palloc per value), valid as long as a value in the per-tuple memory the executor resets
before each row. These tests run queries whose plans keep text values past the row they came
from — aggregates that keep the largest value, ordered aggregates, DISTINCT, window functions,
joins each way, sorts, materialized CTEs, GROUP BY in the engine (pushed) and in PostgreSQL, and
an UPDATE that rewrites text from the scanned value — over values of every length class
(empty, short, over 126 bytes, kilobytes, 100 kB), multibyte, and NULL; every result must equal
the heap's. As a role that is not a superuser, under a non-UTC TimeZone, over a table whose
slices have base files and logs.
"""

import random

from conftest import new_lake

ROWS = 3000


def text_of(rng, i):
    """A seeded value of a random length class."""
    kind = rng.randrange(8)
    if kind == 0:
        return None
    if kind == 1:
        return ""
    if kind == 2:
        return f"n{i}"
    if kind == 3:
        return "äöü€" * rng.randrange(30, 60) + str(i)  # over 126 bytes, multibyte
    if kind == 4:
        return ("long " + str(i)) * rng.randrange(200, 400)  # kilobytes
    if kind == 5 and rng.random() < 0.02:
        return "x" * 100_000 + str(i)
    return f"name {rng.randrange(50)}"  # repeated: groups and joins find equal values


QUERIES = [
    "SELECT max(name), min(name), count(name) FROM {t}",
    "SELECT md5(string_agg(name, ',' ORDER BY id)) FROM {t}",
    "SELECT DISTINCT name FROM {t} ORDER BY name NULLS FIRST",
    "SELECT id, md5(lag(name) OVER (ORDER BY id)), md5(lead(name, 2) OVER (ORDER BY id)) FROM {t} ORDER BY id",
    "SELECT name, count(*), max(id) FROM {t} GROUP BY name ORDER BY name NULLS FIRST",
    "SELECT md5(a.name), b.id FROM {t} a JOIN heap b ON a.name = b.name AND a.id < b.id ORDER BY 1, 2 LIMIT 500",
    "SELECT md5(a.name), a.id FROM heap b JOIN {t} a ON a.name = b.name WHERE b.id % 7 = 0 ORDER BY 2, 1 LIMIT 500",
    "SELECT md5(name), id FROM {t} ORDER BY name DESC NULLS LAST, id LIMIT 200",
    "WITH m AS MATERIALIZED (SELECT id, name FROM {t} WHERE length(name) > 100) "
    "SELECT count(*), md5(string_agg(name, '' ORDER BY id)) FROM m",
    "SELECT id, length(name), left(name, 10), right(name, 10) FROM {t} ORDER BY id",
    "SELECT a.id, md5(a.name || coalesce(b.name, '-')) FROM {t} a LEFT JOIN LATERAL "
    "(SELECT name FROM {t} c WHERE c.id = a.id + 1) b ON true WHERE a.id % 50 = 0 ORDER BY a.id",
]


def test_text_values_equal_the_heap_copy(cluster):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    rows = [(i, text_of(rng, i)) for i in range(1, ROWS + 1)]
    with new_lake(cluster) as (conn, root):
        conn.execute("""CREATE FOREIGN TABLE t (id bigint, name text, ts timestamptz)
                        SERVER lake OPTIONS (path 't', primary_key 'id', ordering_field 'ts', buckets '4',
                                             services 'off')""")
        conn.execute("SELECT hudi.create_table('t')")
        conn.execute("CREATE TABLE heap (id bigint PRIMARY KEY, name text, ts timestamptz)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO heap VALUES (%s, %s, timestamptz '2026-01-01')", rows)
        conn.execute("INSERT INTO t SELECT * FROM heap")
        conn.execute("SELECT * FROM hudi.compact('t')")
        # Logs on top of the base files: text rewritten from the scanned value, on both.
        for table in ("t", "heap"):
            conn.execute(f"UPDATE {table} SET name = name || '+' || id, ts = ts + interval '1 day' WHERE id % 5 = 0")
        kinds = dict(conn.execute("SELECT cardinality(log_files) > 0, count(*) FROM hudi.file_slices('t') GROUP BY 1"))
        assert kinds.get(True), kinds
        conn.execute("CREATE ROLE text_reader LOGIN")
        conn.execute("GRANT USAGE ON FOREIGN SERVER lake TO text_reader")
        conn.execute("GRANT SELECT ON t, heap TO text_reader")
        conn.execute(f"SET hudi.allowed_file_roots = '{root}'")
        conn.execute("SET ROLE text_reader")
        conn.execute("SET TimeZone = 'Asia/Kolkata'")
        for pushdown in ("on", "off"):
            conn.execute(f"SET hudi.aggregate_pushdown = {pushdown}")
            for query in QUERIES:
                ours = conn.execute(query.format(t="t")).fetchall()
                theirs = conn.execute(query.format(t="heap")).fetchall()
                assert ours == theirs, (seed, pushdown, query)
        # The largest values came through whole.
        assert conn.execute("SELECT count(*) FROM t WHERE length(name) > 100000").fetchone()[0] == \
            conn.execute("SELECT count(*) FROM heap WHERE length(name) > 100000").fetchone()[0]
        conn.execute("RESET ROLE")
