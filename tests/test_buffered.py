"""Buffered writes (write_mode 'buffered'): rows go to the write buffer, a heap table, and the
worker flushes them into Hudi. Checked against a heap table given the same statements (every
session sees committed rows at once, a transaction its own), against the reference reader once
flushed, under reads that race the flushes, and for the buffer's limit and TRUNCATE."""

import random
import threading

from conftest import our_rows, reference_rows, refused, serve_databases, wait_for


def _buffered(conn, interval="100ms"):
    conn.execute(f"ALTER FOREIGN TABLE customers OPTIONS (ADD write_mode 'buffered', ADD flush_interval '{interval}')")
    conn.execute("CREATE TABLE heap (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz, "
                 "PRIMARY KEY (id, country))")


def _heap_rows(conn):
    return sorted(conn.execute("SELECT id, name, country, balance FROM heap").fetchall())


def _deltacommits(table):
    return sorted(p.name for p in (table / ".hoodie/timeline").glob("*.deltacommit"))


def _buffered_rows(conn):
    return conn.execute("SELECT COALESCE(sum(rows), 0) FROM hudi.buffered_writes").fetchone()[0]


def test_buffered_writes_read_as_a_heap_table_and_reach_the_lake_once(lake, cluster):
    """Random INSERT (also ON CONFLICT DO NOTHING), UPDATE and DELETE, in single statements and
    transactions, some rolled back: pg_hudi reads what the heap copy reads after every step
    (from another session too), before any flush; once the worker flushed, the reference reader
    reads the same, from fewer deltacommits than transactions."""
    conn, table = lake
    _buffered(conn)
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    countries = ["nl", "de", "fr"]
    transactions = 0
    with cluster.connect() as other:
        for step in range(40):
            statements = []
            for _ in range(rng.randint(1, 3)):
                kind = rng.random()
                if kind < 0.5:
                    rows = ", ".join(f"({rng.randint(0, 60)}, 's{step}', '{rng.choice(countries)}', {rng.randint(0, 99)}, '2026-01-01')"
                                     for _ in range(rng.randint(1, 8)))
                    statements.append(f"INSERT INTO customers VALUES {rows} ON CONFLICT DO NOTHING")
                elif kind < 0.8:
                    statements.append(f"UPDATE customers SET balance = balance + 1, name = 'u{step}' WHERE id % 7 = {rng.randint(0, 6)}")
                else:
                    statements.append(f"DELETE FROM customers WHERE id % 9 = {rng.randint(0, 8)}")
            commit = rng.random() < 0.85
            conn.execute("BEGIN")
            for sql in statements:
                conn.execute(sql)
                conn.execute(sql.replace("customers", "heap"))
                # Read your writes, in the transaction.
                assert our_rows(conn) == _heap_rows(conn), (step, sql)
            conn.execute("COMMIT" if commit else "ROLLBACK")
            transactions += commit
            assert our_rows(conn) == _heap_rows(conn), step
            assert sorted(other.execute("SELECT id, name, country, balance FROM customers").fetchall()) == _heap_rows(conn), step
    assert _deltacommits(table) == [], "nothing was flushed before the worker runs"
    expected = _heap_rows(conn)
    serve_databases(conn)
    wait_for("the buffer to be flushed", lambda: _buffered_rows(conn) == 0)
    assert our_rows(conn) == expected
    # A flush's rows leave the buffer when it commits; its completed instant follows.
    wait_for("the flushed rows in the lake", lambda: reference_rows(table) == expected)
    assert 1 <= len(_deltacommits(table)) < transactions


def test_reads_racing_flushes_see_each_committed_row_once(lake, cluster):
    """A writer commits one new key per transaction while the worker flushes every 50 ms: every
    read sees exactly the keys committed before it began, never one twice (a flush that
    completed while the read listed the table) nor one missing (a flush that emptied the buffer
    meanwhile)."""
    conn, table = lake
    _buffered(conn, "50ms")
    serve_databases(conn)
    count = 600
    done = threading.Event()
    errors = []

    def write():
        try:
            with cluster.connect() as writer:
                for i in range(1, count + 1):
                    writer.execute(f"INSERT INTO customers VALUES ({i}, 'w', 'nl', {i}, '2026-01-01')")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    reads = 0
    while not done.is_set() or reads < 3:
        before = conn.execute("SELECT count(*) FROM hudi.buffered_writes").fetchone()  # a statement between reads
        assert before is not None
        seen, distinct, top = conn.execute("SELECT count(*), count(DISTINCT id), COALESCE(max(id), 0) FROM customers").fetchone()
        if not seen == distinct == top:
            ids = [r[0] for r in conn.execute("SELECT id FROM customers ORDER BY id")]
            missing = sorted(set(range(1, top + 1)) - set(ids))
            buffered = conn.execute("SELECT transactions, rows FROM hudi.buffered_writes").fetchall()
            timeline = sorted(p.name for p in (table / ".hoodie/timeline").iterdir())
            intents = conn.execute("SELECT instant FROM hudi.commit_intents").fetchall()
            raise AssertionError(f"read {reads}: {seen} rows, {distinct} keys, highest {top}; missing {missing[:5]}..{missing[-5:]} "
                                 f"({len(missing)}), buffered {buffered}, intents {intents}, timeline {timeline[-8:]}")
        reads += 1
    thread.join()
    assert not errors, errors
    wait_for("the buffer to be flushed", lambda: _buffered_rows(conn) == 0)
    wait_for("the flushed rows in the lake", lambda: len(reference_rows(table)) == count)
    assert sorted(r[0] for r in reference_rows(table)) == list(range(1, count + 1))
    assert len(_deltacommits(table)) < count


def test_a_full_buffer_refuses_writes_and_truncate_empties_it(lake):
    """Beyond hudi.write_buffer_max_rows a write fails with 53400 and changes nothing; TRUNCATE
    of a buffered table removes the rows of its buffer with the lake's."""
    conn, table = lake
    _buffered(conn)
    conn.execute("INSERT INTO customers SELECT g, 'a', 'nl', g, '2026-01-01' FROM generate_series(1, 5) g")
    conn.execute("SET hudi.write_buffer_max_rows = 8")
    assert refused(conn, "INSERT INTO customers SELECT g, 'b', 'de', g, '2026-01-01' FROM generate_series(1, 5) g") == "53400"
    assert [r[0] for r in our_rows(conn)] == [1, 2, 3, 4, 5]
    conn.execute("RESET hudi.write_buffer_max_rows")
    assert refused(conn, "ALTER FOREIGN TABLE customers OPTIONS (SET write_mode 'sometimes')") == "HV024"
    assert refused(conn, "ALTER FOREIGN TABLE customers OPTIONS (SET flush_interval 'soon')") == "HV024"
    conn.execute("TRUNCATE customers")
    assert our_rows(conn) == [] and _buffered_rows(conn) == 0
    conn.execute("INSERT INTO customers VALUES (9, 'after', 'nl', 1, '2026-01-01')")
    assert [r[0] for r in our_rows(conn)] == [9]
    assert reference_rows(table) == []
