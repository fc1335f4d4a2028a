"""Schema evolution from ALTER FOREIGN TABLE: added columns and widened types become commits
that record the Hudi table's new schema (operation ALTER_SCHEMA), atomic with the DDL's
transaction; old files read NULL / the wider type, for pg_hudi (on two servers) and the
reference reader, checked against a heap table given the same statements, with writes,
compaction and cleaning between the changes. What Hudi cannot express is refused first."""

import decimal

from conftest import reference_rows_at, refused, second_server


def _heap_copy(conn):
    conn.execute("CREATE TABLE heap (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz, "
                 "PRIMARY KEY (id, country))")


def _both(conn, sql):
    """`sql` on the Hudi table and on its heap copy (an ALTER FOREIGN TABLE as ALTER TABLE)."""
    conn.execute(sql)
    conn.execute(sql.replace("customers", "heap").replace("FOREIGN TABLE heap", "TABLE heap"))


def _declared(conn, table):
    return [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
        "AND attname <> 'ts' ORDER BY attnum", (table,)).fetchall()]


def _rows(conn, table):
    columns = _declared(conn, table)
    return columns, sorted(conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall())


def _reference(table, columns):
    def same(value):
        # The reference reader gives real columns as float32 widened to Python floats.
        return float(value) if isinstance(value, float) else value
    return sorted(tuple(same(v) for v in row) for row in reference_rows_at(str(table), columns=columns))


def _check(conn, table):
    columns, ours = _rows(conn, "customers")
    heap_columns, heap = _rows(conn, "heap")
    assert columns == heap_columns
    assert ours == heap
    assert ours == _reference(table, columns)
    return ours


def test_successive_alters_with_writes_compaction_and_clean(lake, cluster):
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '1', ADD clean_retain '1 microsecond')")
    _heap_copy(conn)
    _both(conn, "INSERT INTO customers SELECT g, 'n' || g, (ARRAY['nl','be'])[g % 2 + 1], g, '2026-01-01' FROM generate_series(1, 30) g")
    _check(conn, table)

    # 1: a column; old rows read NULL in it.
    timeline = sorted(p.name for p in (table / ".hoodie/timeline").iterdir())
    _both(conn, "ALTER FOREIGN TABLE customers ADD COLUMN email text")
    new = sorted(set(p.name for p in (table / ".hoodie/timeline").iterdir()) - set(timeline))
    assert len([n for n in new if n.endswith(".deltacommit")]) == 1, new
    assert conn.execute("SELECT count(*) FROM customers WHERE email IS NULL").fetchone() == (30,)
    _both(conn, "INSERT INTO customers SELECT g, 'm' || g, 'nl', g, '2026-01-02', g || '@x' FROM generate_series(31, 45) g")
    _both(conn, "UPDATE customers SET email = 'u@x' WHERE id % 7 = 0")
    _check(conn, table)
    assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] >= 1
    _check(conn, table)

    # 2: a wider numeric, in a transaction that writes after it (its own reads see it).
    conn.execute("BEGIN")
    _both(conn, "ALTER FOREIGN TABLE customers ALTER COLUMN balance TYPE numeric(20, 2)")
    _both(conn, "INSERT INTO customers VALUES (100, 'big', 'be', 123456789012345.67, '2026-01-03', NULL)")
    assert conn.execute("SELECT balance FROM customers WHERE id = 100").fetchone() == (decimal.Decimal("123456789012345.67"),)
    conn.execute("COMMIT")
    _check(conn, table)
    for n in range(3):
        _both(conn, f"UPDATE customers SET balance = balance + 1 WHERE id % 3 = {n}")
    (_, _, deleted, _, _), = conn.execute("SELECT * FROM hudi.clean('customers')").fetchall()
    assert deleted > 0
    _check(conn, table)

    # 3 and 4: a real column, then widened to double precision.
    _both(conn, "ALTER FOREIGN TABLE customers ADD COLUMN score real")
    _both(conn, "UPDATE customers SET score = 1.5 WHERE id < 5")
    _both(conn, "ALTER FOREIGN TABLE customers ALTER COLUMN score TYPE double precision")
    _both(conn, "UPDATE customers SET score = 2.25 WHERE id > 35")
    rows = _check(conn, table)
    assert sum(1 for r in rows if r[-1] == 1.5) == 4 and any(r[-1] == 2.25 for r in rows)

    # Another server: an old declaration reads its columns; declaring a column the table has
    # commits nothing; its writes fill what it does not declare with NULL.
    with second_server(cluster, table.parent, customers=True) as second:
        with second.connect() as other:
            assert other.execute("SELECT count(*) FROM customers").fetchone() == conn.execute("SELECT count(*) FROM customers").fetchone()
            before = sorted(p.name for p in (table / ".hoodie/timeline").iterdir())
            other.execute("ALTER FOREIGN TABLE customers ADD COLUMN email text")
            assert sorted(p.name for p in (table / ".hoodie/timeline").iterdir()) == before
            assert sorted(other.execute("SELECT id, email FROM customers").fetchall()) == \
                sorted(conn.execute("SELECT id, email FROM customers").fetchall())
            other.execute("INSERT INTO customers VALUES (200, 'other', 'nl', 1, '2026-01-04', 'o@x')")
        conn.execute("INSERT INTO heap VALUES (200, 'other', 'nl', 1, '2026-01-04', 'o@x', NULL)")
        _check(conn, table)


def test_what_hudi_cannot_express_is_refused_and_changes_nothing(lake, cluster):
    conn, table = lake
    conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, '2026-01-01')")
    conn.execute("CREATE FOREIGN TABLE changes (id bigint, oops text) SERVER lake OPTIONS (path 'customers', query_type 'incremental')")
    timeline = sorted(p.name for p in (table / ".hoodie/timeline").iterdir())
    for sql, state in [
        ("ALTER FOREIGN TABLE customers ADD COLUMN email text NOT NULL", "0A000"),
        ("ALTER FOREIGN TABLE customers ADD COLUMN email text DEFAULT 'x'", "0A000"),
        ("ALTER FOREIGN TABLE customers ALTER COLUMN id TYPE integer", "0A000"),
        ("ALTER FOREIGN TABLE customers ALTER COLUMN name TYPE integer", "0A000"),
        ("ALTER FOREIGN TABLE customers ALTER COLUMN balance TYPE numeric(12, 3)", "0A000"),
        ("ALTER FOREIGN TABLE customers RENAME COLUMN name TO full_name", "0A000"),
        ("ALTER FOREIGN TABLE changes ADD COLUMN email text", "55000"),
        ("ALTER FOREIGN TABLE customers ADD COLUMN tags text[]", "HV004"),
    ]:
        assert refused(conn, sql) == state, sql
    # A role that does not own the table gets PostgreSQL's refusal, whatever the change: the
    # hook reads nothing and says nothing of the Hudi table for it.
    conn.execute("CREATE ROLE clerk LOGIN")
    conn.execute("GRANT SELECT, INSERT ON customers TO clerk")
    with cluster.connect(user="clerk") as clerk:
        for sql in ["ALTER FOREIGN TABLE customers ADD COLUMN email text NOT NULL",
                    "ALTER FOREIGN TABLE customers ADD COLUMN email text",
                    "ALTER FOREIGN TABLE customers RENAME COLUMN name TO full_name"]:
            assert refused(clerk, sql) == "42501", sql
    # A write, then an ALTER in one transaction.
    conn.execute("BEGIN")
    conn.execute("INSERT INTO customers VALUES (2, 'b', 'nl', 1, '2026-01-01')")
    assert refused(conn, "ALTER FOREIGN TABLE customers ADD COLUMN email text") == "0A000"
    conn.execute("ROLLBACK")
    # In a savepoint: refused (a rollback to it could not take the Hudi change back).
    conn.execute("BEGIN")
    conn.execute("SAVEPOINT s")
    assert refused(conn, "ALTER FOREIGN TABLE customers ADD COLUMN email text") == "0A000"
    conn.execute("ROLLBACK")
    # A rolled-back ALTER leaves nothing.
    conn.execute("BEGIN")
    conn.execute("ALTER FOREIGN TABLE customers ADD COLUMN email text")
    conn.execute("ROLLBACK")
    assert sorted(p.name for p in (table / ".hoodie/timeline").iterdir()) == timeline
    assert refused(conn, "SELECT email FROM customers") == "42703"
    # Declaration-only changes are allowed and commit nothing: dropping a column from the
    # declaration, renaming one the Hudi table does not have.
    conn.execute("ALTER FOREIGN TABLE customers DROP COLUMN ts")
    conn.execute("ALTER FOREIGN TABLE changes ADD COLUMN name text")
    conn.execute("ALTER FOREIGN TABLE changes RENAME COLUMN oops TO country")
    assert sorted(p.name for p in (table / ".hoodie/timeline").iterdir()) == timeline
    assert conn.execute("SELECT id, name, country FROM customers").fetchall() == [(1, "a", "nl")]
