"""Queries answered from lookup caches: joins (parameterized foreign scans under a nested
loop), correlated references, `key = const`, `IN` and `= ANY($1)` through the unique and the
secondary indexes, against the same queries over a heap copy of the dimension and over the
lake (lookups off). The dimension changes between rounds (updates that move secondary keys,
deletes, late writes with older ordering values); outer rows bring NULL keys, duplicates, keys
the dimension lacks and int4 values against the bigint key. Run as a role that may only read,
under a TimeZone that is not UTC."""

import os
import random

from conftest import plan_text, refused

QUERIES = [
    # by record key (the unique index on id and country), int4 outer values against the bigint key
    "SELECT o.k, c.id, c.name, c.balance FROM orders o JOIN customers c ON c.id = o.customer_id AND c.country = o.country",
    # by part of the record key (a secondary index)
    "SELECT o.k, c.id, c.name, c.country, c.balance, c.ts FROM orders o JOIN customers c ON c.id = o.customer_id",
    "SELECT o.k, c.id, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id AND c.balance > 50",
    # by a secondary index
    "SELECT o.k, c.id, c.country FROM orders o JOIN customers c ON c.name = o.name",
    # by a composite secondary index, with another qual rechecked
    "SELECT o.k, c.id, c.balance FROM orders o JOIN customers c ON c.country = o.country AND c.name = o.name "
    "WHERE c.balance < 80",
    # a correlated reference
    "SELECT o.k, (SELECT max(c.balance) FROM customers c WHERE c.id = o.customer_id) FROM orders o",
    # constants and lists
    "SELECT id, name, country FROM customers WHERE id = 7",
    "SELECT id, name FROM customers WHERE id IN (1, 2, 3, 3, 999)",
    "SELECT id, country FROM customers WHERE name = ANY (ARRAY['n1', 'n2', NULL, 'nobody'])",
]


def _rows(conn, sql, params=None):
    return sorted(conn.execute(sql, params).fetchall(), key=repr)


def _write_round(conn, rng, ts):
    """Upserts (some moving names), late writes with older ordering values, deletes."""
    rows = []
    for _ in range(rng.randrange(5, 25)):
        key = rng.randrange(1, 60)
        name = None if rng.random() < 0.1 else f"n{rng.randrange(8)}"
        rows.append((key, name, rng.choice(["nl", "be"]), rng.randrange(0, 100), ts + rng.randrange(-200, 20)))
    # One commit; a key given twice keeps its row with the higher ordering value.
    conn.execute("INSERT INTO customers SELECT k, n, c, b, to_timestamp(t) "
                 "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::numeric[], %s::bigint[]) AS r(k, n, c, b, t)",
                 [list(column) for column in zip(*rows)])
    doomed = rng.sample(range(1, 60), 4)
    conn.execute("DELETE FROM customers WHERE id = ANY(%s)", (doomed,))


def test_lookups_answer_as_the_heap_copy_and_the_lake_do(lake, cluster):
    conn, table = lake
    seed = int(os.environ.get("PG_HUDI_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    conn.execute("INSERT INTO customers SELECT g, 'n' || (g % 8), (ARRAY['nl','be'])[g % 2 + 1], g % 100, "
                 "to_timestamp(1000000) FROM generate_series(1, 50) g")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id, country}')")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{name}')")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{country, name}')")
    conn.execute("CREATE TABLE orders (k serial, customer_id int, name text, country text)")
    conn.execute("INSERT INTO orders (customer_id, name, country) SELECT (g * 7) % 70, 'n' || (g % 9), "
                 "(ARRAY['nl','be'])[g % 2 + 1] FROM generate_series(1, 120) g")
    conn.execute("INSERT INTO orders (customer_id, name, country) VALUES (NULL, NULL, NULL), (3, 'n3', 'nl'), (3, 'n3', 'nl')")
    conn.execute("CREATE TABLE heap_customers (LIKE customers)")
    conn.execute("CREATE ROLE lookup_reader")
    conn.execute("GRANT SELECT ON customers, orders, heap_customers TO lookup_reader")
    reader = cluster.connect()
    reader.execute(f"SET hudi.allowed_file_roots = '{table.parent}'")
    reader.execute("SET ROLE lookup_reader")
    reader.execute("SET TimeZone = 'America/Sao_Paulo'")
    # Nested loops over the lookups, as a large dimension would make them.
    reader.execute("SET enable_hashjoin = off")
    reader.execute("SET enable_mergejoin = off")
    ts = 2000000
    for round in range(6):
        if round:
            _write_round(conn, rng, ts)
            ts += 100
        conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
        conn.execute("TRUNCATE heap_customers")
        conn.execute("SET hudi.enable_lookup_cache = off")
        conn.execute("INSERT INTO heap_customers SELECT * FROM customers")
        conn.execute("RESET hudi.enable_lookup_cache")
        found = 0
        for sql in QUERIES:
            context = f"seed {seed}, round {round}: {sql}"
            plan = plan_text(reader, sql)
            assert "Lookup: customers" in plan, f"{context}\n{plan}"
            cached = _rows(reader, sql)
            heap = _rows(reader, sql.replace("customers c", "heap_customers c").replace("FROM customers", "FROM heap_customers"))
            assert cached == heap, context
            found += len(heap)
            if "(SELECT" not in sql:  # a subquery without lookups scans the lake per outer row
                # The lake without lookups, by a hash join (a nested loop would scan it per row).
                reader.execute("SET hudi.enable_lookup_cache = off; SET enable_hashjoin = on")
                assert _rows(reader, sql) == heap, context
                reader.execute("RESET hudi.enable_lookup_cache; SET enable_hashjoin = off")
        assert found > 100, f"seed {seed}, round {round}: the queries found rows"
        # A parameter's array, and a prepared statement run again after the next refresh.
        ids = rng.sample(range(0, 70), 6) + [None]
        sql = "SELECT id, name, country FROM customers WHERE id = ANY(%s::bigint[])"
        heap = _rows(reader, sql.replace("customers", "heap_customers"), (ids,))
        assert _rows(reader, sql, (ids,)) == heap, f"seed {seed}, round {round}, ids {ids}"


def test_explain_shows_the_lookup_and_how_far_the_cache_is_behind(lake, cluster):
    conn, _ = lake
    conn.execute("INSERT INTO customers SELECT g, 'n' || g, 'nl', g, now() FROM generate_series(1, 20) g")
    conn.execute("CREATE TABLE orders (customer_id bigint)")
    conn.execute("INSERT INTO orders SELECT g FROM generate_series(1, 5) g")
    join = "SELECT c.name FROM orders o JOIN customers c ON c.id = o.customer_id"
    conn.execute("SET enable_hashjoin = off")
    conn.execute("SET enable_mergejoin = off")

    # No cache yet, or not loaded yet: the lake.
    assert "Lookup" not in plan_text(conn, join)
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    assert "Lookup" not in plan_text(conn, join)
    reached = conn.execute("SELECT hudi.refresh_lookup_cache('customers')").fetchone()[0]
    shown = plan_text(conn, "(VERBOSE) " + join)
    assert "Lookup: customers (id) = o.customer_id [secondary]" in shown, shown
    assert f"Lookup Cache: at {reached}, 0 commits" in shown, shown
    analyzed = plan_text(conn, "(ANALYZE, COSTS OFF, TIMING OFF) " + join)
    assert "Lookup Probes: 5 keys, 5 rows" in analyzed, analyzed
    # Another session's commit the cache has not taken in yet shows as lag; the lookups serve
    # what is cached (this session's own commits it would wait for).
    cluster.connect().execute("INSERT INTO customers VALUES (1, 'renamed', 'nl', 1, now())")
    assert ", 1 commits" in plan_text(conn, "(VERBOSE) " + join)
    assert conn.execute("SELECT name FROM customers WHERE id = 1").fetchall() == [("n1",)]
    # A transaction that wrote the table reads its own writes: from the lake.
    conn.execute("BEGIN")
    conn.execute("INSERT INTO customers VALUES (2, 'mine', 'nl', 2, now())")
    assert "Lookup" not in plan_text(conn, join)
    assert ("mine",) in conn.execute(join).fetchall()
    conn.execute("ROLLBACK")
    # Off, or no index on the columns: the lake.
    conn.execute("SET hudi.enable_lookup_cache = off")
    assert "Lookup" not in plan_text(conn, join)
    conn.execute("RESET hudi.enable_lookup_cache")
    assert "Lookup" not in plan_text(conn, "SELECT * FROM customers c WHERE c.name = 'n3'"), "no index on name"
    # Time travel reads the lake.
    conn.execute(f"SET hudi.as_of_instant = '{reached}'")
    assert "Lookup" not in plan_text(conn, "SELECT * FROM customers WHERE id = 3")
    conn.execute("RESET hudi.as_of_instant")
    assert refused(conn, "SELECT * FROM customers WHERE id = 'x'") == "22P02"


def test_an_unpartitioned_table_is_probed_by_point_reads(lake, cluster):
    """A table without partitions keeps one row per record key: probes read it directly."""
    conn, _ = lake
    conn.execute("CREATE FOREIGN TABLE accounts (id bigint, name text, ts timestamptz) SERVER lake "
                 "OPTIONS (path 'accounts', primary_key 'id', ordering_field 'ts')")
    conn.execute("SELECT hudi.create_table('accounts')")
    conn.execute("INSERT INTO accounts SELECT g, 'a' || g, now() FROM generate_series(1, 40) g")
    conn.execute("SELECT hudi.create_lookup_cache('accounts', '{id}')")
    conn.execute("CREATE TABLE wanted AS SELECT g::int AS id FROM generate_series(-3, 50) g UNION ALL SELECT NULL")
    conn.execute("SET enable_hashjoin = off; SET enable_mergejoin = off")
    join = "SELECT w.id, a.name FROM wanted w JOIN {} a ON a.id = w.id"
    for round in range(2):
        if round:
            conn.execute("UPDATE accounts SET name = 'b' || id WHERE id % 3 = 0")
            conn.execute("DELETE FROM accounts WHERE id % 5 = 0")
        conn.execute("SELECT hudi.refresh_lookup_cache('accounts')")
        conn.execute("DROP TABLE IF EXISTS heap_accounts")
        conn.execute("SET hudi.enable_lookup_cache = off")
        conn.execute("CREATE TABLE heap_accounts AS SELECT * FROM accounts")
        conn.execute("RESET hudi.enable_lookup_cache")
        assert "Lookup: accounts (id) = w.id" in plan_text(conn, join.format("accounts"))
        heap = _rows(conn, join.format("heap_accounts"))
        assert _rows(conn, join.format("accounts")) == heap and len(heap) > 20, round
