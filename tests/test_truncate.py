"""TRUNCATE of Hudi foreign tables: one replacecommit that starts every file slice anew (an
empty base file per file group), transactional like other writes, checked against a heap table
given the same statements and against the reference reader; concurrent writers of another
server (their commit completing before or after the truncate); refusals."""

import random

import pytest

from conftest import commit_on_a_thread, our_rows, reference_rows, refused, second_server, wait_for


def _timeline(table, suffix):
    return sorted(p.name for p in (table / ".hoodie/timeline").glob(f"*{suffix}"))


def _data_files(table):
    return {p for p in table.rglob("*") if p.is_file() and ".hoodie" not in p.parts}


def _file_groups(table):
    return {(p.parent, p.name.lstrip(".").split("_")[0]) for p in _data_files(table) if p.name != ".hoodie_partition_metadata"}


def _heap_copy(conn):
    conn.execute("CREATE TABLE heap (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz, "
                 "PRIMARY KEY (id, country))")


def _both(conn, sql):
    """`sql` (naming `customers`) on the Hudi table and on its heap copy."""
    conn.execute(sql)
    conn.execute(sql.replace("customers", "heap"))


def _heap_rows(conn):
    return sorted(conn.execute("SELECT id, name, country, balance FROM heap").fetchall())


def test_truncate_is_one_replacecommit_that_readers_and_services_agree_on(lake):
    """TRUNCATE writes one replacecommit with an empty base file per file group (no file per
    row, no log block per key); pg_hudi, a heap table given the same statements and the
    reference reader agree after it, after later writes, after a compaction and a clean."""
    conn, table = lake
    _heap_copy(conn)
    rng = random.Random(38)
    print("seed 38")
    countries = ["nl", "de", "fr", "it"]
    for n in range(3):
        rows = ", ".join(f"({i}, 'r{n}', '{rng.choice(countries)}', {i}.5, '2026-01-0{n + 1}')" for i in range(n * 50, n * 50 + 300))
        _both(conn, f"INSERT INTO customers VALUES {rows} ON CONFLICT DO NOTHING")
    _both(conn, "UPDATE customers SET balance = balance + 1 WHERE id % 3 = 0")
    assert our_rows(conn) == _heap_rows(conn)
    groups = _file_groups(table)
    files_before = _data_files(table)

    _both(conn, "TRUNCATE customers")
    assert our_rows(conn) == [] == reference_rows(table)
    (replace,) = _timeline(table, ".replacecommit")
    new_files = _data_files(table) - files_before
    assert len(new_files) == len(groups), "one empty base file per file group"
    assert all(f.suffix == ".parquet" and replace.split("_")[0] in f.name for f in new_files)

    _both(conn, "INSERT INTO customers VALUES (1, 'after', 'nl', 1, '2026-02-01'), (2, 'after', 'pt', 2, '2026-02-01')")
    _both(conn, "UPDATE customers SET name = 'updated' WHERE id = 1")
    assert our_rows(conn) == _heap_rows(conn) == reference_rows(table)
    assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] >= 1
    assert our_rows(conn) == _heap_rows(conn) == reference_rows(table)
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '1', ADD clean_retain '1 microsecond')")
    _both(conn, "INSERT INTO customers VALUES (3, 'later', 'de', 3, '2026-02-02')")
    (_, _, deleted, _, _), = conn.execute("SELECT * FROM hudi.clean('customers')").fetchall()
    assert deleted >= len(files_before) // 2, "the clean removes the truncated slices"
    assert our_rows(conn) == _heap_rows(conn) == reference_rows(table)


def test_truncate_is_atomic_with_its_transaction(lake):
    """A transaction that truncates sees its own truncate and what it wrote after it, not what
    it wrote before; a rollback leaves the table (and its storage) as it was; a commit keeps
    exactly what a heap table keeps."""
    conn, table = lake
    _heap_copy(conn)
    _both(conn, "INSERT INTO customers SELECT g, 'old', 'nl', g, '2026-01-01' FROM generate_series(1, 40) g")
    files_before = _data_files(table)
    timeline_before = _timeline(table, "")
    for end in ["ROLLBACK", "COMMIT"]:
        conn.execute("BEGIN")
        _both(conn, "INSERT INTO customers VALUES (100, 'before', 'de', 1, '2026-01-02')")
        _both(conn, "TRUNCATE customers")
        _both(conn, "INSERT INTO customers VALUES (200, 'after', 'de', 2, '2026-01-03')")
        assert our_rows(conn) == _heap_rows(conn) == [(200, "after", "de", 2)]
        _both(conn, "UPDATE customers SET name = 'changed' WHERE id = 200")
        assert our_rows(conn) == _heap_rows(conn)
        conn.execute(end)
        assert our_rows(conn) == _heap_rows(conn)
        if end == "ROLLBACK":
            assert len(our_rows(conn)) == 40
            assert _data_files(table) == files_before and _timeline(table, "") == timeline_before, "nothing left"
    assert our_rows(conn) == [(200, "changed", "de", 2)] == reference_rows(table)


def test_truncate_refusals_change_nothing(lake, cluster):
    """TRUNCATE in a savepoint, of an incremental or time-travel declaration, or without the
    TRUNCATE privilege is refused with its SQLSTATE and changes nothing."""
    conn, table = lake
    conn.execute("INSERT INTO customers SELECT g, 'old', 'nl', g, '2026-01-01' FROM generate_series(1, 10) g")
    instant = conn.execute("SELECT instant FROM hudi.latest_commit('customers')").fetchone()[0]
    conn.execute("CREATE FOREIGN TABLE changes (id bigint) SERVER lake OPTIONS (path 'customers', query_type 'incremental')")
    conn.execute(f"CREATE FOREIGN TABLE back_then (id bigint) SERVER lake OPTIONS (path 'customers', as_of_instant '{instant}')")
    conn.execute("CREATE ROLE clerk LOGIN")
    conn.execute("GRANT SELECT, INSERT ON customers TO clerk")
    timeline_before = _timeline(table, "")
    assert refused(conn, "TRUNCATE changes") == "55000"
    assert refused(conn, "TRUNCATE back_then") == "55000"
    conn.execute("BEGIN")
    conn.execute("SAVEPOINT s")
    assert refused(conn, "TRUNCATE customers") == "0A000"
    conn.execute("ROLLBACK")
    with cluster.connect(user="clerk") as clerk:
        assert refused(clerk, "TRUNCATE customers") == "42501"
    assert _timeline(table, "") == timeline_before
    assert len(our_rows(conn)) == 10


def test_writers_of_another_server_around_a_truncate(lake, cluster):
    """Writers on another server under NBCC: a write completing before the truncate is gone, an
    insert completing after it stays; an UPDATE that read rows the truncate removed fails with
    40001 rather than bring them back; a write that is committing when the truncate starts
    makes it wait, and is removed. The reference reader agrees each time."""
    conn, table = lake
    conn.execute("INSERT INTO customers SELECT g, 'old', 'nl', g, '2026-01-01' FROM generate_series(1, 20) g")
    with second_server(cluster, table.parent, customers=True) as second:
        other = second.connect()
        # An insert that began before the truncate and completes after it: kept.
        other.execute("BEGIN")
        other.execute("INSERT INTO customers VALUES (100, 'late', 'de', 1, '2026-01-02')")
        conn.execute("TRUNCATE customers")
        other.execute("COMMIT")
        assert our_rows(conn) == [(100, "late", "de", 1)] == reference_rows(table)

        # An UPDATE that read rows before a truncate completed: refused, nothing comes back.
        conn.execute("INSERT INTO customers SELECT g, 'old', 'nl', g, '2026-01-01' FROM generate_series(1, 20) g")
        other.execute("BEGIN")
        other.execute("UPDATE customers SET name = 'stale' WHERE country = 'nl'")
        conn.execute("TRUNCATE customers")
        assert refused(other, "COMMIT") == "40001"
        assert our_rows(conn) == [] == reference_rows(table)

        # A write committing (marked prepared, paused) when the truncate starts.
        conn.execute("INSERT INTO customers VALUES (1, 'old', 'nl', 1, '2026-01-01')")
        session, _, thread, outcome = commit_on_a_thread(
            second, "hudi.debug_pause_before_commit = '1s'", ["INSERT INTO customers VALUES (300, 'committing', 'de', 3, '2026-01-03')"])
        prepared = table / ".hoodie/.aux/pg_hudi/prepared"
        wait_for("the other server's prepared mark", lambda: prepared.is_dir() and any(prepared.iterdir()))
        conn.execute("TRUNCATE customers")
        thread.join(30)
        assert outcome == [None]
        assert our_rows(conn) == [] == reference_rows(table), "the committing write completed before the truncate began"
        session.close()
        other.close()


def test_a_lookup_cache_is_loaded_anew_after_a_truncate(lake):
    """A truncate removes rows that no change lists: the cache's refresh loads a new generation
    from the snapshot, instead of keeping the truncated rows."""
    conn, _ = lake
    conn.execute("INSERT INTO customers SELECT g, 'old', 'nl', g, '2026-01-01' FROM generate_series(1, 50) g")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{country, id}')")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    state = "SELECT rows, generation FROM hudi.lookup_caches"
    assert conn.execute(state).fetchall() == [(50, 1)]
    conn.execute("TRUNCATE customers")
    conn.execute("INSERT INTO customers VALUES (7, 'new', 'nl', 7, '2026-01-02')")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    assert conn.execute(state).fetchall() == [(1, 2)]
    conn.execute("CREATE TABLE orders (customer bigint)")
    conn.execute("INSERT INTO orders VALUES (7), (8)")
    joined = "SELECT o.customer, c.name FROM orders o JOIN customers c ON c.country = 'nl' AND c.id = o.customer ORDER BY 1"
    assert conn.execute(joined).fetchall() == [(7, "new")]
