"""Buffered writes (write_mode 'buffered'): rows go to the write buffer, a heap table, and the
worker flushes them into Hudi. Checked against a heap table given the same statements (every
session sees committed rows at once, a transaction its own), against the reference reader once
flushed, under reads that race the flushes, and for the buffer's limit and TRUNCATE."""

import random
import threading

import pytest

from conftest import our_rows, reference_rows, reference_rows_at, refused, serve_databases, wait_for, wait_for_value


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
    transactions, some rolled back, some in savepoints released or rolled back to: pg_hudi reads what the heap copy reads after every step
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
            for k in range(rng.randint(1, 3)):
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
                # Some in a savepoint, released or rolled back to.
                savepoint = rng.choice([None, None, "RELEASE SAVEPOINT s", "ROLLBACK TO SAVEPOINT s"])
                if savepoint:
                    conn.execute("SAVEPOINT s")
                conn.execute(sql)
                conn.execute(sql.replace("customers", "heap"))
                # Read your writes, in the transaction.
                assert our_rows(conn) == _heap_rows(conn), (step, sql)
                if savepoint:
                    conn.execute(savepoint)
                    assert our_rows(conn) == _heap_rows(conn), (step, sql, savepoint)
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
    # The flush round vacuums what its flushes deleted (autovacuum comes a minute later).
    wait_for("the flush round to vacuum the buffer", lambda: conn.execute(
        "SELECT vacuum_count FROM pg_stat_all_tables WHERE relid = 'hudi.write_buffer'::regclass").fetchone()[0] > 0)


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


def test_rows_buffered_in_each_schema_of_a_table_reach_the_lake_in_it(lake, cluster):
    """Chunks name their schema (hudi.buffer_schemas) rather than carry it: rows buffered before
    an ALTER, by a session that had the old columns, within the ALTER's transaction, and by a
    transaction whose registration of a schema was rolled back are all flushed, each row in
    the columns it was written in (a column added later is NULL), as the reference reader and
    pg_hudi read them."""
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD write_mode 'buffered', ADD flush_interval '100ms')")
    with cluster.connect() as other:
        # The first rows of a schema on this server: the registration rolls back with them,
        # and the same session's next transaction registers it again.
        other.execute("BEGIN")
        other.execute("SET LOCAL hudi.write_batch_rows = 1")  # the chunk written by the INSERT
        other.execute("INSERT INTO customers VALUES (1, 'rolled back', 'nl', 1, '2026-01-01')")
        assert other.execute("SELECT count(*) FROM hudi.buffer_schemas").fetchone()[0] == 1
        other.execute("ROLLBACK")
        assert conn.execute("SELECT count(*) FROM hudi.buffer_schemas").fetchone()[0] == 0
        other.execute("INSERT INTO customers VALUES (1, 'before', 'nl', 1, '2026-01-01')")
        assert conn.execute("SELECT count(*) FROM hudi.buffer_schemas").fetchone()[0] == 1
        conn.execute("BEGIN")
        conn.execute("INSERT INTO customers VALUES (2, 'in the alter', 'nl', 2, '2026-01-01')")
        conn.execute("ALTER FOREIGN TABLE customers ADD COLUMN email text")
        conn.execute("INSERT INTO customers VALUES (3, 'after, same', 'de', 3, '2026-01-01', 'c@example.com')")
        conn.execute("COMMIT")
        # This session still has the old columns' shape in memory: it writes in the new ones.
        other.execute("INSERT INTO customers VALUES (4, 'after', 'fr', 4, '2026-01-01', 'd@example.com')")
        other.execute("UPDATE customers SET email = 'a@example.com' WHERE id = 1")
    assert conn.execute("SELECT count(*) FROM hudi.buffer_schemas").fetchone()[0] == 2
    expected = [(1, "before", "a@example.com"), (2, "in the alter", None), (3, "after, same", "c@example.com"),
                (4, "after", "d@example.com")]
    read = "SELECT id, name, email FROM customers ORDER BY id"
    assert conn.execute(read).fetchall() == expected
    serve_databases(conn)
    wait_for("the buffer to be flushed", lambda: _buffered_rows(conn) == 0)
    assert conn.execute(read).fetchall() == expected
    assert reference_rows_at(str(table), columns=("id", "name", "email")) == [tuple(r) for r in expected]


def test_a_schema_id_that_names_another_schema_is_refused(lake, cluster):
    """A chunk names its schema by id. If another schema were registered under a table's id (a
    collision a role could aim at, had the id been a plain hash of names it chooses), the
    table's rows would be decoded in that schema's columns: a writer checks the registered
    schema is its own, and refuses (XX001, nothing written) when it is not."""
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD write_mode 'buffered', ADD flush_interval '1h')")
    conn.execute("CREATE FOREIGN TABLE other (x text) SERVER lake OPTIONS (path 'other', primary_key 'x', buckets '1', merge_mode 'commit_time', "
                 "write_mode 'buffered', flush_interval '1h')")
    conn.execute("SELECT hudi.create_table('other')")
    conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, '2026-01-01')")
    conn.execute("INSERT INTO other VALUES ('x')")
    ids = [r[0] for r in conn.execute("SELECT id FROM hudi.buffer_schemas ORDER BY octet_length(schema) DESC")]
    assert len(ids) == 2
    # The customers schema's row made to hold the other's bytes (as a colliding id would).
    conn.execute("UPDATE hudi.buffer_schemas SET schema = (SELECT schema FROM hudi.buffer_schemas WHERE id = %s) "
                 "WHERE id = %s", (ids[1], ids[0]))
    with cluster.connect() as fresh:  # a backend that has not registered it itself
        assert refused(fresh, "INSERT INTO customers VALUES (2, 'b', 'nl', 2, '2026-01-01')") == "XX001"
    assert _buffered_rows(conn) == 2


def test_a_flush_killed_before_its_commit_is_done_again_exactly_once(lake, cluster):
    """kill -9 of the worker while its flush is prepared (commit intent recorded, the write
    marked prepared in the lake) but not committed: the rows stay in the buffer, and after the
    crash restart they are flushed again; the lake then holds every committed row once (the
    killed flush's write is rolled back as failed), as the heap copy does."""
    from conftest import kill_backend_and_wait, set_heartbeat_expiry
    conn, table = lake
    _buffered(conn)
    for n in range(5):
        rows = ", ".join(f"({n * 10 + i}, 'k{n}', 'nl', {i}, '2026-01-01')" for i in range(10))
        for name in ("customers", "heap"):
            conn.execute(f"INSERT INTO {name} VALUES {rows}")
    conn.execute("UPDATE customers SET name = 'updated' WHERE id % 4 = 0")
    conn.execute("UPDATE heap SET name = 'updated' WHERE id % 4 = 0")
    expected = _heap_rows(conn)
    buffered = _buffered_rows(conn)
    assert buffered == 50 + 13, "50 inserted rows and 13 updated ones"
    # Long enough to kill it in, short enough for a flush that pauses again after the restart.
    conn.execute("ALTER SYSTEM SET hudi.debug_pause_before_commit = 5000")
    serve_databases(conn)
    prepared = table / ".hoodie/.aux/pg_hudi/prepared"
    wait_for("a flush to be prepared", lambda: prepared.exists() and any(prepared.iterdir()))
    assert _buffered_rows(conn) == buffered, "the paused flush has not committed"
    (pid,) = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_hudi worker' AND xact_start IS NOT NULL "
                          "ORDER BY xact_start LIMIT 1").fetchone()
    kill_backend_and_wait(cluster, pid)
    with cluster.connect() as conn:
        conn.execute("ALTER SYSTEM RESET hudi.debug_pause_before_commit")
        set_heartbeat_expiry(conn, 1)
        assert _buffered_rows(conn) == buffered, "the rows of the killed flush are still buffered"
        assert our_rows(conn) == expected
        wait_for("the buffer to be flushed", lambda: _buffered_rows(conn) == 0)
        wait_for("the flushed rows in the lake", lambda: reference_rows(table) == expected)
        assert our_rows(conn) == expected
        assert len(_deltacommits(table)) == 1, "one flush completed: the killed one did not"


def _serve_with_a_short_lease(conn):
    """serve_databases, for tests that kill workers: a worker killed while it held a table
    lock holds it for the lease (60 s by default, as long as the tests' waits), so a short one
    is set before any worker runs (and again after each start, which writes the tests'
    settings anew)."""
    conn.execute("ALTER SYSTEM SET hudi.lock_lease = 3")
    serve_databases(conn)


def _kill_flushing_worker(cluster):
    """kill -9 of the flush round's worker (found again if it ended before the signal)."""
    from conftest import kill_backend_and_wait
    while True:
        try:
            return kill_backend_and_wait(cluster, wait_for_value("the flushing worker", lambda: cluster.worker_pid("(write buffer)")))
        except ProcessLookupError:
            pass


def test_buffered_writers_lose_nothing_committed_to_crashes_during_flushes(lake, cluster):
    """Two sessions commit one-row transactions into a buffered table while the worker flushes
    every 50 ms, and the server crashes under them (kill -9 of the flushing worker or of a
    writer, an immediate shutdown): every transaction whose COMMIT returned is in the lake
    afterwards, once, and nothing that was never sent to the server is."""
    import psycopg
    from conftest import kill_backend_and_wait
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD write_mode 'buffered', ADD flush_interval '50ms')")
    _serve_with_a_short_lease(conn)
    import itertools
    import time
    acknowledged, attempted = set(), set()
    next_id = itertools.count(1)

    def write(stop):
        while not stop.is_set():
            try:
                with cluster.connect() as session:
                    while not stop.is_set():
                        n = next(next_id)
                        attempted.add(n)
                        session.execute(f"INSERT INTO customers VALUES ({n}, 'w', 'nl', {n}, '2026-01-01')")
                        acknowledged.add(n)
            except (psycopg.Error, OSError):
                time.sleep(0.05)  # the crash: connect again once the server is back

    writer = "SELECT pid FROM pg_stat_activity WHERE query LIKE 'INSERT INTO customers%' AND state = 'active' LIMIT 1"
    for crash in ("kill", "immediate", "kill a writer", "kill", "immediate"):
        stop = threading.Event()
        writers = [threading.Thread(target=write, args=(stop,)) for _ in range(2)]
        for w in writers:
            w.start()
        target = len(acknowledged) + 300
        wait_for("rows committed", lambda: len(acknowledged) >= target, timeout=60)
        if crash == "kill":
            _kill_flushing_worker(cluster)
        elif crash == "kill a writer":
            row = wait_for_value("a writer in its INSERT", lambda: conn.execute(writer).fetchone())
            kill_backend_and_wait(cluster, row[0])
        else:
            cluster.stop("immediate")
            cluster.start()
        stop.set()
        for w in writers:
            w.join()
        conn = cluster.connect()
        _serve_with_a_short_lease(conn)
    wait_for("the buffer flushed", lambda: _buffered_rows(conn) == 0, timeout=60)
    # An empty buffer is not yet a complete lake: a flush whose transaction committed may still
    # be completing its instant (or, after a crash, wait for the full round to complete it).
    lake_ids = lambda: [r[0] for r in reference_rows(table)]  # noqa: E731
    wait_for("every acknowledged row in the lake", lambda: acknowledged <= set(lake_ids()), timeout=60)
    ids = lake_ids()
    assert len(ids) == len(set(ids))
    assert acknowledged <= set(ids), sorted(acknowledged - set(ids))[:10]
    assert set(ids) <= attempted
    assert [r[0] for r in our_rows(conn)] == sorted(ids)


def test_two_servers_flush_into_one_table_at_once(lake, cluster):
    """Two servers with buffered foreign tables of one Hudi table, each written by its own
    sessions and flushed by its own worker at the same time: every row of both is in the lake
    once (the reference reader), and each server reads both servers' flushed rows."""
    from conftest import second_server
    conn, table = lake
    _buffered(conn, "50ms")
    serve_databases(conn)
    with second_server(cluster, table.parent, customers=True) as second:
        with second.connect() as other:
            other.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD write_mode 'buffered', ADD flush_interval '50ms')")
            serve_databases(other)
        errors = []

        def write(server, first):
            try:
                with server.connect() as session:
                    for n in range(40):
                        rows = ", ".join(f"({first + n * 5 + i}, 's', 'nl', 1, '2026-01-01')" for i in range(5))
                        session.execute(f"INSERT INTO customers VALUES {rows}")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=write, args=(server, first)) for server, first in ((cluster, 0), (second, 1000))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        expected = list(range(0, 200)) + list(range(1000, 1200))
        wait_for("both servers' rows in the lake", lambda: sorted(r[0] for r in reference_rows(table)) == expected)
        with second.connect() as other:
            assert _buffered_rows(other) == 0
            assert sorted(r[0] for r in other.execute("SELECT id FROM customers")) == expected
        assert sorted(r[0] for r in conn.execute("SELECT id FROM customers")) == expected


def _mirror_slots(conn):
    """pg_hudi's replication slots of `conn`'s database (a restored copy's are its own)."""
    query = "SELECT slot_name FROM pg_replication_slots WHERE plugin = 'pg_hudi' AND database = current_database()"
    return [r[0] for r in conn.execute(query)]


@pytest.mark.parametrize("capture", ["wal", "trigger"])
def test_a_mirrored_heap_table_reaches_the_lake_with_every_committed_change(lake, cluster, capture):
    """hudi.mirror copies a heap table's rows into a buffered Hudi table, then captures its
    committed INSERT, UPDATE (also of the key, and of a row with a TOASTed value it leaves
    unchanged), DELETE and TRUNCATE, in transactions, savepoints, rollbacks and a large
    transaction — from the WAL or by triggers: the Hudi table then reads what the heap table
    holds, here and by the reference reader; a role without ownership cannot mirror, and
    hudi.unmirror stops the capture (dropping the slot, setting the replica identity back)."""
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD write_mode 'buffered', ADD flush_interval '100ms')")
    conn.execute("CREATE TABLE heap (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz, "
                 "extra text, PRIMARY KEY (id, country))")
    conn.execute("INSERT INTO heap SELECT g, 'n' || g, 'nl', g, '2026-01-01', 'x' FROM generate_series(1, 20) g")
    serve_databases(conn)
    assert conn.execute(f"SELECT hudi.mirror('heap', 'customers', '{capture}')").fetchone()[0] == 20
    assert conn.execute("SELECT capture FROM hudi.mirrors").fetchone()[0] == capture
    assert refused(conn, "SELECT hudi.mirror('heap', 'customers')") == "42710"
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    for step in range(30):
        conn.execute("BEGIN")
        for k in range(rng.randint(1, 3)):
            savepoint = rng.random() < 0.3
            if savepoint:
                conn.execute("SAVEPOINT s")
            kind = rng.random()
            if kind < 0.4:
                conn.execute(f"INSERT INTO heap VALUES ({rng.randint(1, 60)}, 's{step}', '{rng.choice(['nl', 'de'])}', 1, "
                             "'2026-01-02', 'y') ON CONFLICT DO NOTHING")
            elif kind < 0.7:
                conn.execute(f"UPDATE heap SET balance = balance + 1, name = 'u{step}' WHERE id % 5 = {rng.randint(0, 4)}")
            elif kind < 0.8:
                # The key changes: the old key is deleted in the lake.
                conn.execute(f"UPDATE heap SET id = {1000 + step * 10 + k} WHERE id = {rng.randint(1, 60)}")
            else:
                conn.execute(f"DELETE FROM heap WHERE id % 7 = {rng.randint(0, 6)}")
            if savepoint:
                conn.execute(rng.choice(["RELEASE SAVEPOINT s", "ROLLBACK TO SAVEPOINT s"]))
        conn.execute("COMMIT" if rng.random() < 0.85 else "ROLLBACK")
    # A value stored out of line (TOASTed), then an UPDATE that leaves it as it is; and one
    # transaction of many rows.
    conn.execute("INSERT INTO heap VALUES (500, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g), "
                 "'nl', 1, '2026-01-01', 'x')")
    conn.execute("UPDATE heap SET balance = 2 WHERE id = 500")
    conn.execute("INSERT INTO heap SELECT g, 'bulk', 'de', g, '2026-01-01', 'x' FROM generate_series(2000, 6999) g")
    expected = _heap_rows(conn)
    if capture == "trigger":
        assert our_rows(conn) == expected, "in the buffer at commit"
    wait_for("the mirrored rows", lambda: our_rows(conn) == expected)
    wait_for("the mirrored rows in the lake", lambda: reference_rows(table) == expected)
    assert conn.execute("SELECT relation::text, hudi_table FROM hudi.mirrors").fetchall() == [("heap", "customers")]
    conn.execute("TRUNCATE heap")
    conn.execute("INSERT INTO heap VALUES (1, 'after', 'nl', 1, '2026-01-03', 'z')")
    wait_for("the truncate in the lake", lambda: reference_rows(table) == _heap_rows(conn))
    identity = "SELECT relreplident FROM pg_class WHERE oid = 'heap'::regclass"
    assert conn.execute(identity).fetchone()[0] == ("f" if capture == "wal" else "d")
    assert _mirror_slots(conn) if capture == "wal" else not _mirror_slots(conn)
    # The capture decodes every 100 ms: PostgreSQL's LOG lines of each decoding (two at its
    # start, two more for each advance of the slot) are not the server log's.
    decodings = [line for line in cluster.log().splitlines() if "pg_hudi worker" in line and "logical decoding" in line]
    assert decodings == [], decodings[:4]
    conn.execute("SELECT hudi.unmirror('heap')")
    assert conn.execute(identity).fetchone()[0] == "d"
    wait_for("the slot dropped", lambda: not _mirror_slots(conn))
    conn.execute("INSERT INTO heap VALUES (2, 'not mirrored', 'nl', 1, '2026-01-03', 'z')")
    assert [r[0] for r in our_rows(conn)] == [1]
    conn.execute("CREATE ROLE stranger LOGIN")
    conn.execute("GRANT SELECT ON heap, customers TO stranger")
    with cluster.connect(user="stranger") as other:
        assert refused(other, "SELECT hudi.mirror('heap', 'customers')") == "42501"


def test_wal_mirror_slots_are_pg_hudis(lake, cluster):
    """A mirror's replication slot is made before the transaction writes (25001 after a
    write, nothing made), one left by a rolled-back hudi.mirror is dropped by the worker, and
    pg_hudi's output plugin decodes for nobody else (55000, no crash)."""
    conn, table = lake
    _buffered(conn)
    conn.execute("BEGIN")
    conn.execute("INSERT INTO heap VALUES (1, 'a', 'nl', 1, '2026-01-01')")
    assert refused(conn, "SELECT hudi.mirror('heap', 'customers', 'wal')") == "25001"
    conn.execute("ROLLBACK")
    assert not _mirror_slots(conn)
    conn.execute("BEGIN")
    conn.execute("SELECT hudi.mirror('heap', 'customers')")
    assert len(_mirror_slots(conn)) == 1
    conn.execute("ROLLBACK")
    serve_databases(conn)
    wait_for("the slot of the rolled-back mirror dropped", lambda: not _mirror_slots(conn))
    conn.execute("SELECT pg_create_logical_replication_slot('mine', 'pg_hudi')")
    conn.execute("INSERT INTO heap VALUES (1, 'a', 'nl', 1, '2026-01-01')")
    assert refused(conn, "SELECT * FROM pg_logical_slot_peek_changes('mine', NULL, NULL)") == "55000"
    conn.execute("SELECT pg_drop_replication_slot('mine')")
    assert refused(conn, "SELECT hudi.mirror('heap', 'customers', 'logical')") == "22023"


def test_a_wal_mirror_loses_nothing_to_kill_9_and_immediate_shutdown(lake, cluster):
    """Writers keep changing a heap table captured from the WAL while the capturing worker is
    killed (-9) and the server shut down immediately: once it runs again, the lake holds what
    the heap table holds."""
    conn, table = lake
    _buffered(conn)

    _serve_with_a_short_lease(conn)
    conn.execute("SELECT hudi.mirror('heap', 'customers')")
    rng = random.Random(7)
    for round_ in range(4):
        for step in range(10):
            conn.execute(f"INSERT INTO heap SELECT g, 'r{round_}', 'nl', g, now() FROM generate_series({step * 50}, {step * 50 + 49}) g "
                         "ON CONFLICT (id, country) DO UPDATE SET name = excluded.name, balance = heap.balance + 1")
            conn.execute(f"DELETE FROM heap WHERE id % 11 = {rng.randint(0, 10)}")
        if round_ % 2 == 0:
            _kill_flushing_worker(cluster)
        else:
            cluster.stop("immediate")
            cluster.start()
        conn = cluster.connect()
        _serve_with_a_short_lease(conn)
    expected = _heap_rows(conn)
    wait_for("the mirrored rows in the lake", lambda: reference_rows(table) == expected, timeout=60)
    assert our_rows(conn) == expected


def test_a_trigger_made_by_hand_cannot_write_or_truncate_another_roles_table(lake, cluster):
    """The mirror trigger functions are usable by anyone (a trigger needs EXECUTE), but they
    write only for a pair hudi.mirror made: a role naming another role's buffered Hudi table in
    a trigger on its own table changes nothing there (42501), neither rows nor by TRUNCATE."""
    conn, table = lake
    _buffered(conn)
    conn.execute("INSERT INTO customers VALUES (1, 'kept', 'nl', 1, '2026-01-01')")
    target = conn.execute("SELECT 'customers'::regclass::oid").fetchone()[0]
    conn.execute("CREATE ROLE intruder LOGIN")
    conn.execute("GRANT CREATE ON SCHEMA public TO intruder")
    with cluster.connect(user="intruder") as other:
        other.execute("CREATE TABLE mine (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz)")
        other.execute(f"CREATE TRIGGER t AFTER INSERT ON mine FOR EACH ROW EXECUTE FUNCTION hudi_internal.mirror_row('{target}')")
        other.execute(f"CREATE TRIGGER u AFTER TRUNCATE ON mine FOR EACH STATEMENT EXECUTE FUNCTION hudi_internal.mirror_truncate('{target}')")
        assert refused(other, "INSERT INTO mine VALUES (2, 'forged', 'nl', 1, '2026-01-01')") == "42501"
        assert refused(other, "TRUNCATE mine") == "42501"
    assert [(r[0], r[1]) for r in our_rows(conn)] == [(1, "kept")]


def test_rows_are_flushed_only_where_they_were_written(lake, cluster):
    """A buffered foreign table whose path changes before its rows are flushed: the flush
    refuses to write them to the new location (they wait, as the log says), and flushes them
    where they were written once the path points back."""
    conn, table = lake
    _buffered(conn)
    conn.execute("INSERT INTO customers VALUES (1, 'here', 'nl', 1, '2026-01-01')")
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (SET path 'elsewhere')")
    serve_databases(conn)
    wait_for("the refused flush in the log", lambda: "no longer points at" in cluster.log())
    assert not (table.parent / "elsewhere").exists()
    assert _buffered_rows(conn) == 1
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (SET path 'customers')")
    wait_for("the rows flushed where they were written", lambda: reference_rows(table) == [(1, "here", "nl", 1)])


def _wal_mirror_of_ten_rows(conn, table):
    """The heap table `heap` with ten rows, mirrored (from the WAL) into the buffered Hudi
    table `customers` at `table` by the worker, and the rows in the lake."""
    _buffered(conn)
    conn.execute("INSERT INTO heap SELECT g, 'n', 'nl', g, '2026-01-01' FROM generate_series(1, 10) g")
    serve_databases(conn)
    conn.execute("SELECT hudi.mirror('heap', 'customers')")
    wait_for("the mirrored rows in the lake", lambda: reference_rows(table) == _heap_rows(conn))


def test_a_failing_truncate_of_a_wal_mirror_is_recorded_and_tried_again(lake, cluster):
    """A TRUNCATE of a heap table mirrored from the WAL whose Hudi table cannot take it (its
    timeline is read-only): hudi.mirrors shows the error, the capturing worker keeps running
    (its round used to end by the ERROR, recording nothing), and once the timeline is writable
    again the truncate and the rows after it reach the lake."""
    conn, table = lake
    _wal_mirror_of_ten_rows(conn, table)
    pid = wait_for_value("the capturing worker", lambda: cluster.worker_pid("(write buffer)"))
    timeline = table / ".hoodie/timeline"
    timeline.chmod(0o555)
    try:
        conn.execute("TRUNCATE heap")
        conn.execute("INSERT INTO heap VALUES (1, 'after', 'nl', 1, '2026-01-02')")
        error = wait_for_value("the error in hudi.mirrors", lambda: conn.execute("SELECT last_error FROM hudi.mirrors").fetchone()[0])
        assert "Permission denied" in error, error
        assert cluster.worker_pid("(write buffer)") == pid, "the capturing worker kept running"
        assert len(reference_rows(table)) == 10, "nothing truncated yet"
    finally:
        timeline.chmod(0o755)
    wait_for("the truncate in the lake", lambda: reference_rows(table) == _heap_rows(conn) == [(1, "after", "nl", 1)])
    wait_for("the error cleared", lambda: conn.execute("SELECT last_error FROM hudi.mirrors").fetchone()[0] is None)
    assert cluster.worker_pid("(write buffer)") == pid


def test_a_capturing_flush_round_ends_when_its_database_is_no_longer_served(lake, cluster):
    """The flush round of a database with a WAL mirror runs for as long as the server does —
    but no longer than hudi.worker_databases names its database (it used to ignore the
    change and keep decoding); served again, the mirror catches up."""
    conn, table = lake
    _buffered(conn)
    serve_databases(conn)
    conn.execute("SELECT hudi.mirror('heap', 'customers')")
    wait_for_value("the capturing worker", lambda: cluster.worker_pid("(write buffer)"))
    conn.execute("ALTER SYSTEM SET hudi.worker_databases = 'another'")
    conn.execute("SELECT pg_reload_conf()")
    wait_for("the round ended", lambda: cluster.worker_pid("(write buffer)") is None)
    assert "no longer serving database" in cluster.log()
    conn.execute("INSERT INTO heap VALUES (1, 'while not served', 'nl', 1, '2026-01-02')")
    serve_databases(conn)
    wait_for("the mirrored row in the lake", lambda: reference_rows(table) == _heap_rows(conn) == [(1, "while not served", "nl", 1)])


def test_a_wal_mirror_restored_from_a_dump_starts_over_from_a_new_slot(lake, cluster):
    """A dump restored into another database keeps the mirror (hudi.mirror_targets is dumped)
    but not its replication slot: the worker sees the slot is not there, truncates the Hudi
    table and copies the heap table into it anew, and captures from a new slot of its own —
    the lake then holds the restored heap table's rows, with its later changes."""
    from conftest import dump_and_restore
    conn, table = lake
    _wal_mirror_of_ten_rows(conn, table)
    dump_and_restore(cluster, "restored")
    # The original stops mirroring (its slot goes); its later rows stay out of the lake.
    conn.execute("SELECT hudi.unmirror('heap')")
    wait_for("the original's slot dropped", lambda: not _mirror_slots(conn))
    conn.execute("INSERT INTO heap VALUES (50, 'not mirrored', 'nl', 1, '2026-01-02')")
    with cluster.connect("restored") as restored:
        restored.execute("DELETE FROM heap WHERE id <= 3")
        restored.execute("INSERT INTO heap VALUES (11, 'after the restore', 'de', 1, '2026-01-02')")
        wait_for("the restored mirror in the lake", lambda: reference_rows(table) == _heap_rows(restored))
        assert "is gone (a restore?): copied its" in cluster.log()
        slots = "SELECT count(*) FROM pg_replication_slots WHERE plugin = 'pg_hudi' AND database = 'restored'"
        assert restored.execute(slots).fetchone() == (1,)
        assert restored.execute("SELECT last_error FROM hudi.mirrors").fetchone() == (None,)
        restored.execute("UPDATE heap SET name = 'changed' WHERE id = 11")
        wait_for("a later change in the lake", lambda: reference_rows(table) == _heap_rows(restored))
