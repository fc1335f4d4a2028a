"""Hudi writes with PostgreSQL's transaction semantics (DESIGN.md, "Commit protocol"): a
transaction reads its own writes; a Hudi commit is visible if and only if its PostgreSQL
transaction committed, under cancels, timeouts, kill -9, serialization failures and failures of
a second table; consumers get every row once. Each fault is checked against a model: the
heap rows written in the same transaction, and the reference reader."""

import json
import os
import random
import threading
import time

import pytest

from conftest import (commit_on_a_thread, kill_backend_and_wait, lock_holder, our_rows, reference_rows, refused,
                      rollback_once_expired, set_heartbeat_expiry, wait_for)


def _pending_instants(table):
    timeline = table / ".hoodie/timeline"
    pending = {p.name.split(".")[0] for p in timeline.glob("*.deltacommit.inflight")}
    return pending - {p.name.split("_")[0] for p in timeline.glob("*_*.deltacommit")}


def _audited(conn):
    return sorted(r[0] for r in conn.execute("SELECT id FROM audit").fetchall())


def _prepared(table, instant):
    mark = table / ".hoodie/.aux/pg_hudi/prepared" / instant
    return json.loads(mark.read_text()) if mark.exists() else None


WRITE = ["INSERT INTO customers VALUES (1, 'kept', 'nl', 1, '2026-01-01')",
         "INSERT INTO customers SELECT g, 'new', 'nl', g, '2026-01-02' FROM generate_series(2, 50) g",
         "INSERT INTO audit VALUES (2)"]


@pytest.mark.parametrize("fault", ["cancel", "kill"])
def test_a_fault_before_postgresql_commits_leaves_nothing(lake, cluster, fault):
    """The intents are recorded and the write is marked prepared, PostgreSQL has not committed:
    a cancel or kill -9 aborts the transaction, and the Hudi write with it."""
    conn, path = lake
    conn.execute("CREATE TABLE audit (id bigint)")
    conn.execute("INSERT INTO customers VALUES (1, 'kept', 'nl', 1, '2026-01-01')")
    conn.execute("INSERT INTO audit VALUES (1)")
    session, pid, thread, outcome = commit_on_a_thread(cluster, "hudi.debug_pause_before_commit = '60s'", WRITE[1:])
    (instant,) = _pending_instants(path)
    wait_for("the prepared mark", lambda: _prepared(path, instant) is not None)
    assert _prepared(path, instant)["transaction"] > 0
    if fault == "cancel":
        assert conn.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone() == (True,)
    if fault == "kill":
        kill_backend_and_wait(cluster, pid)
        conn = cluster.connect()
        conn.execute("SET timezone = 'UTC'")
    thread.join(30)
    if fault == "cancel":
        assert outcome == ["57014"], outcome
        assert not [p for p in path.rglob(f"*{instant}*")], "the abort removed the write"
    assert our_rows(conn) == [(1, "kept", "nl", 1)]
    assert _audited(conn) == [1]
    assert conn.execute("SELECT count(*) FROM hudi.pending_commits").fetchone() == (0,)
    if fault == "kill":
        # Killed before PostgreSQL committed: this server knows the transaction aborted, so
        # once its heartbeat expires the write is rolled back, mark and all.
        assert [r[0] for r in rollback_once_expired(conn)] == [instant]
        assert not [p for p in path.rglob(f"*{instant}*")], "no orphan files"
    conn.execute("INSERT INTO customers VALUES (3, 'after', 'be', 3, '2026-01-03')")
    assert our_rows(conn) == [(1, "kept", "nl", 1), (3, "after", "be", 3)]
    assert reference_rows(path) == our_rows(conn)
    session.close()


def test_statement_timeout_does_not_apply_to_commit(lake, cluster):
    """PostgreSQL disarms statement_timeout before it commits (finish_xact_command), so a slow
    PRE_COMMIT is not cut short by it: COMMIT succeeds, and PostgreSQL and the table agree."""
    conn, path = lake
    conn.execute("CREATE TABLE audit (id bigint)")
    session, _, thread, outcome = commit_on_a_thread(
        cluster, "hudi.debug_pause_before_commit = '1500ms'", WRITE[1:] + ["SET LOCAL statement_timeout = '300ms'"])
    thread.join(30)
    assert outcome == [None], outcome
    assert _audited(conn) == [2]
    assert len(our_rows(conn)) == 49
    assert reference_rows(path) == our_rows(conn)
    session.close()


def test_a_backend_killed_after_postgresql_committed_loses_nothing(lake, cluster):
    """The worst moment: PostgreSQL committed (the heap row is durable), the table lock is held,
    the completed instant not yet written, and the backend is killed. The write is visible at
    once after the restart, and completed by the worker or the next finisher once the lock's
    lease runs out; other servers' rollbacks leave the prepared write alone."""
    conn, path = lake
    conn.execute("CREATE TABLE audit (id bigint)")
    # Long enough that nobody breaks the paused holder's lease before the kill.
    conn.execute("ALTER SYSTEM SET hudi.lock_lease = 5")
    conn.execute("SELECT pg_reload_conf()")
    conn.execute("INSERT INTO customers VALUES (1, 'kept', 'nl', 1, '2026-01-01')")
    conn.execute("INSERT INTO audit VALUES (1)")
    session, pid, thread, _ = commit_on_a_thread(cluster, "hudi.debug_pause_before_complete = '60s'", WRITE[1:])
    (instant,) = _pending_instants(path)
    # Committed in PostgreSQL: another session sees the heap row while the Hudi one waits.
    wait_for("PostgreSQL's commit", lambda: _audited(conn) == [1, 2])
    assert [r[0] for r in conn.execute("SELECT instant FROM hudi.pending_commits")] == [instant]
    # A reader on this server sees the committed write already.
    assert len(our_rows(conn)) == 50
    # Another server would not roll it back, heartbeat or not: only the deciding one may.
    mark_file = path / ".hoodie/.aux/pg_hudi/prepared" / instant
    mark = _prepared(path, instant)
    mark_file.write_text(json.dumps(dict(mark, node=mark["node"] + 1)))
    set_heartbeat_expiry(conn, 1)
    wait_for("the heartbeat to expire", lambda: time.time() - os.path.getmtime(path / ".hoodie/.heartbeat" / instant) > 2)
    with cluster.connect() as other:
        notices = []
        other.add_notice_handler(lambda n: notices.append(n.message_primary))
        assert other.execute("SELECT * FROM hudi.rollback_failed_writes('customers')").fetchall() == []
        assert any("only that server decides it" in n for n in notices), notices
    mark_file.write_text(json.dumps(mark))
    kill_backend_and_wait(cluster, pid)
    thread.join(10)
    conn = cluster.connect()
    conn.execute("SET timezone = 'UTC'")
    assert _audited(conn) == [1, 2]
    assert len(our_rows(conn)) == 50, "visible right after the restart"
    # The worker finishes it (at start and every round), or this call does.
    conn.execute("SELECT * FROM hudi.finish_pending_commits()")
    wait_for("the completion", lambda: not _pending_instants(path), timeout=60)
    wait_for("the intent to go", lambda: conn.execute("SELECT count(*) FROM hudi.pending_commits").fetchone() == (0,))
    assert not mark_file.exists()
    assert len(our_rows(conn)) == 50
    assert reference_rows(path) == our_rows(conn)
    # Completing it is the normal end of such a write (DEBUG1), not news for the log.
    assert "Completed {" not in cluster.log() and "completed the committed write" not in cluster.log()
    conn.execute("INSERT INTO customers VALUES (60, 'after', 'be', 3, '2026-01-03')")
    assert len(our_rows(conn)) == 51
    session.close()


def test_a_terminated_backend_does_not_wait_for_the_table_lock_after_committing(lake, cluster):
    """After PostgreSQL committed, interrupts are held while the Hudi completion waits for the
    table lock; pg_terminate_backend still ends the backend at once (not after the lock's
    timeout), the write stays committed, and a finisher completes it once the lock is free."""
    conn, path = lake
    conn.execute("CREATE TABLE audit (id bigint)")
    # The waiter's write begins first (its instant is taken under the lock), and commits while
    # the holder pauses in its completion, holding the lock.
    waiter = cluster.connect()
    waiter_pid = waiter.execute("SELECT pg_backend_pid()").fetchone()[0]
    waiter.execute("BEGIN")
    for sql in WRITE[1:]:
        waiter.execute(sql)
    holder, holder_pid, holder_thread, holder_outcome = commit_on_a_thread(
        cluster, "hudi.debug_pause_before_complete = '10s'",
        ["INSERT INTO customers VALUES (1, 'holder', 'nl', 1, '2026-01-01')", "INSERT INTO audit VALUES (1)"])
    wait_for("the holder to pause with the table lock", lambda: (lock_holder(path) or "").endswith(f":{holder_pid}"))
    waiter_thread = threading.Thread(target=lambda: refused(waiter, "COMMIT"), daemon=True)
    waiter_thread.start()
    wait_for("the waiter's PostgreSQL commit", lambda: _audited(conn) == [1, 2])
    conn.execute("SELECT pg_terminate_backend(%s)", (waiter_pid,))
    gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
    wait_for("the waiter to end", lambda: conn.execute(gone, (waiter_pid,)).fetchone() == (0,), timeout=5)
    # It ended while the holder still holds the lock: it did not wait for it.
    assert (lock_holder(path) or "").endswith(f":{holder_pid}")
    assert len(_pending_instants(path)) == 2
    holder_thread.join(30)
    assert holder_outcome == [None]
    assert len(our_rows(conn)) == 50, "the committed write is read before it is completed"
    conn.execute("SELECT * FROM hudi.finish_pending_commits()")
    wait_for("the completion", lambda: not _pending_instants(path), timeout=60)
    assert _audited(conn) == [1, 2]
    assert len(our_rows(conn)) == 50
    assert reference_rows(path) == our_rows(conn)
    waiter_thread.join(5)
    holder.close()
    waiter.close()


def test_storage_failing_after_postgresql_committed_is_retried(lake, cluster):
    """Completion fails after PostgreSQL committed (the timeline cannot be written): COMMIT
    succeeds with a warning, the write stays readable on this server, hudi.pending_commits says
    why, and it completes once storage works again."""
    conn, path = lake
    conn.execute("CREATE TABLE audit (id bigint)")
    conn.execute("INSERT INTO customers VALUES (1, 'kept', 'nl', 1, '2026-01-01')")
    session = cluster.connect()
    warnings = []
    session.add_notice_handler(lambda n: warnings.append((n.severity_nonlocalized, n.message_primary)))
    session.execute("SET hudi.debug_pause_before_complete = '2s'")
    session.execute("BEGIN")
    for sql in WRITE[1:]:
        session.execute(sql)
    done = []
    import threading
    thread = threading.Thread(target=lambda: done.append(refused(session, "COMMIT")))
    thread.start()
    wait_for("PostgreSQL's commit", lambda: _audited(conn) == [2])
    timeline = path / ".hoodie/timeline"
    timeline.chmod(0o555)
    try:
        thread.join(30)
        assert done == [None], "COMMIT succeeded"
        assert [w for w in warnings if w[0] == "WARNING" and "not completed yet" in w[1]], warnings
        assert len(our_rows(conn)) == 50, "readable, with the committed write"
        conn.execute("SELECT * FROM hudi.finish_pending_commits()")
        wait_for("a failed attempt", lambda: conn.execute("SELECT attempts FROM hudi.pending_commits").fetchone()[0] >= 1)
        (error,) = conn.execute("SELECT last_error FROM hudi.pending_commits").fetchone()
        assert "timeline" in error and "Permission denied" in error, error
        assert len(our_rows(conn)) == 50
    finally:
        timeline.chmod(0o755)
    conn.execute("SELECT * FROM hudi.finish_pending_commits()")
    wait_for("the completion", lambda: conn.execute("SELECT count(*) FROM hudi.pending_commits").fetchone() == (0,))
    assert not _pending_instants(path)
    assert reference_rows(path) == our_rows(conn)
    session.close()


def test_a_serialization_failure_at_commit_removes_the_hudi_write(lake, cluster):
    """Write skew between two SERIALIZABLE transactions: the one that also wrote the Hudi table
    commits second and fails with 40001 at COMMIT, after pg_hudi's PRE_COMMIT ran."""
    conn, path = lake
    conn.execute("CREATE TABLE x (v int); CREATE TABLE y (v int); INSERT INTO x VALUES (1); INSERT INTO y VALUES (1)")
    with cluster.connect() as a, cluster.connect() as b:
        for s in (a, b):
            s.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        a.execute("SELECT sum(v) FROM x")
        b.execute("SELECT sum(v) FROM y")
        a.execute("INSERT INTO y VALUES (2)")
        a.execute("INSERT INTO customers VALUES (7, 'skewed', 'nl', 1, '2026-01-01')")
        b.execute("INSERT INTO x VALUES (2)")
        b.execute("COMMIT")
        (instant,) = _pending_instants(path)
        assert refused(a, "COMMIT") == "40001"
    assert our_rows(conn) == []
    assert not [p for p in path.rglob(f"*{instant}*")]
    assert conn.execute("SELECT count(*) FROM hudi.pending_commits").fetchone() == (0,)
    assert reference_rows(path) == []


def test_serializable_readers_of_hudi_tables_do_not_conflict_with_their_writers(lake, cluster):
    """Reads look up committed intents without predicate locks: a SERIALIZABLE transaction that
    reads one Hudi table and writes a heap table commits, although a concurrent SERIALIZABLE
    transaction read that heap table and wrote another Hudi table (recording its intent) first.
    With predicate locks on the intents, the two would form a cycle and the reader fail with
    40001."""
    conn, path = lake
    conn.execute("""CREATE FOREIGN TABLE orders (id bigint, customer bigint, ts timestamptz) SERVER lake
                    OPTIONS (path 'orders', primary_key 'id', ordering_field 'ts', buckets '2')""")
    conn.execute("SELECT hudi.create_table('orders')")
    conn.execute("CREATE TABLE x (v int); INSERT INTO x VALUES (1)")
    conn.execute("INSERT INTO customers VALUES (1, 'ann', 'nl', 1, '2026-01-01')")
    sireads = """SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                 WHERE l.pid = pg_backend_pid() AND l.mode = 'SIReadLock' ORDER BY 1"""
    with cluster.connect() as a, cluster.connect() as b:
        for s in (a, b):
            s.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        assert a.execute("SELECT name FROM customers").fetchall() == [("ann",)]
        b.execute("SELECT sum(v) FROM x")
        assert b.execute(sireads).fetchall() == [("x",)]  # predicate locks are taken, on x only
        assert a.execute(sireads).fetchall() == []
        a.execute("INSERT INTO x VALUES (2)")
        b.execute("INSERT INTO orders VALUES (10, 1, '2026-01-01')")
        b.execute("COMMIT")
        a.execute("COMMIT")
    assert conn.execute("SELECT id FROM orders").fetchall() == [(10,)]
    assert conn.execute("SELECT sum(v) FROM x").fetchone() == (3,)


def test_two_tables_in_one_transaction_commit_all_or_nothing(lake):
    conn, path = lake
    conn.execute("""CREATE FOREIGN TABLE orders (id bigint, customer bigint, ts timestamptz) SERVER lake
                    OPTIONS (path 'orders', primary_key 'id', ordering_field 'ts', buckets '2')""")
    conn.execute("SELECT hudi.create_table('orders')")
    orders = path.parent / "orders"
    with conn.transaction():
        conn.execute("INSERT INTO customers VALUES (1, 'ann', 'nl', 1, '2026-01-01')")
        conn.execute("INSERT INTO orders VALUES (10, 1, '2026-01-01')")
    assert our_rows(conn) == [(1, "ann", "nl", 1)]
    assert conn.execute("SELECT id, customer FROM orders").fetchall() == [(10, 1)]
    # The second table cannot be prepared (its prepared-mark folder is a file): the whole
    # transaction fails, and the first table's write, prepared already, is removed too.
    (orders / ".hoodie/.aux/pg_hudi/prepared").rmdir()  # empty: every mark went with its commit
    (orders / ".hoodie/.aux/pg_hudi/prepared").write_text("in the way")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO customers VALUES (2, 'bob', 'be', 2, '2026-01-02')")
    conn.execute("INSERT INTO orders VALUES (11, 2, '2026-01-02')")
    pending = _pending_instants(path)
    assert refused(conn, "COMMIT") is not None
    assert our_rows(conn) == [(1, "ann", "nl", 1)]
    assert conn.execute("SELECT id, customer FROM orders").fetchall() == [(10, 1)]
    assert not _pending_instants(path) and not _pending_instants(orders)
    assert not [p for i in pending for p in path.rglob(f"*{i}*")]
    assert reference_rows(path) == our_rows(conn)


# -- a transaction reads its own writes ---------------------------------------------------------

def _statement(rng, step):
    """One random statement of a script: (SQL for the Hudi table, SQL for the heap table) or a
    COPY of rows. Ordering values grow with the step, so a later write always wins, as in a
    heap table; the partition column follows the key (it cannot be updated)."""
    ts = f"'2026-01-01'::timestamptz + {step} * interval '1 minute'"
    kind = rng.choice(["insert", "insert", "update", "update", "delete", "copy"])
    lo = rng.randrange(1, 300)
    hi = lo + rng.randrange(1, 120)
    m, r = rng.randrange(2, 7), rng.randrange(0, 2)
    country = "(ARRAY['nl','be','fr'])[g % 3 + 1]"
    if kind == "insert":
        select = f"SELECT g, 's{step}-' || g, {country}, g * {step}, {ts} FROM generate_series({lo}, {hi}) g"
        return (f"INSERT INTO customers {select}",
                f"INSERT INTO heap {select} ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                "balance = excluded.balance, ts = excluded.ts")
    if kind == "update":
        where = f"WHERE id % {m} = {r} AND id BETWEEN {lo} AND {hi}"
        sets = f"SET name = name || '+{step}', balance = balance + {step}, ts = {ts}"
        return f"UPDATE customers {sets} {where}", f"UPDATE heap {sets} {where}"
    if kind == "delete":
        where = f"WHERE id % {m} = {r} AND id BETWEEN {lo} AND {hi}"
        return f"DELETE FROM customers {where}", f"DELETE FROM heap {where}"
    rows = [(i, f"c{step}-{i}", ["nl", "be", "fr"][i % 3], i + step) for i in range(lo, hi, 3)]
    return ("copy", rows, step)


def _run(conn, statement, table):
    if statement[0] != "copy":
        conn.execute(statement[0] if table == "customers" else statement[1])
        return
    _, rows, step = statement
    ts = f"2026-01-01 00:{step:02d}:00+00"
    if table == "customers":
        with conn.cursor().copy("COPY customers (id, name, country, balance, ts) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((*row, ts))
    else:
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS staged (LIKE heap)")
        conn.execute("TRUNCATE staged")
        with conn.cursor().copy("COPY staged (id, name, country, balance, ts) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((*row, ts))
        conn.execute("INSERT INTO heap SELECT * FROM staged ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                     "balance = excluded.balance, ts = excluded.ts")


CHECKS = ["SELECT id, name, country, balance FROM {t} ORDER BY id",
          "SELECT count(*), sum(balance), count(DISTINCT name) FROM {t}",
          "SELECT country, count(*), max(id) FROM {t} WHERE id % 5 = 1 GROUP BY country ORDER BY country"]


def test_a_transaction_reads_its_own_writes_as_a_heap_table_does(lake):
    """Seeded random scripts of INSERT / UPDATE / DELETE / COPY / SELECT in one transaction (some
    committed, some rolled back), run against the Hudi table and a heap table: every check after
    every statement, and the committed state, agree."""
    conn, path = lake
    conn.execute("CREATE TABLE heap (id bigint PRIMARY KEY, name text, country text, balance numeric(12, 2), ts timestamptz)")
    seed = int(os.environ.get("PG_HUDI_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    step = 0
    for script in range(5):
        commit = script != 2
        statements = []
        for _ in range(rng.randrange(4, 8)):
            step += 1
            statements.append(_statement(rng, step))
        # Small batches: a statement writes several of them, each encoded while the next is
        # buffered, with deletes and upserts switching in between.
        batch = rng.choice([7, 40, 100_000])
        conn.execute("BEGIN")
        conn.execute(f"SET LOCAL hudi.write_batch_rows = {batch}")
        for i, statement in enumerate(statements):
            _run(conn, statement, "customers")
            _run(conn, statement, "heap")
            for check in CHECKS:
                ours, theirs = (conn.execute(check.format(t=t)).fetchall() for t in ("customers", "heap"))
                assert ours == theirs, f"seed {seed}, script {script} (batches of {batch}), statement {i}: {statement[0][:80]}; {check}"
        conn.execute("COMMIT" if commit else "ROLLBACK")
        ours, theirs = (conn.execute(CHECKS[0].format(t=t)).fetchall() for t in ("customers", "heap"))
        assert ours == theirs, f"seed {seed}, after script {script}"
    assert reference_rows(path) == sorted(r for r in conn.execute(CHECKS[0].format(t="heap")).fetchall())


def test_a_plpgsql_function_reads_its_own_writes(lake):
    conn, _ = lake
    conn.execute("""CREATE FUNCTION etl() RETURNS TABLE (stage text, n bigint, total numeric) LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO customers SELECT g, 'n' || g, (ARRAY['nl','be','fr'])[g % 3 + 1], g, '2026-01-01'
              FROM generate_series(1, 1000) g;
            RETURN QUERY SELECT 'inserted', count(*), sum(balance) FROM customers;
            UPDATE customers SET balance = balance * 2, ts = '2026-01-02' WHERE id % 10 = 3;
            RETURN QUERY SELECT 'updated', count(*), sum(balance) FROM customers;
            DELETE FROM customers WHERE id % 10 = 7;
            RETURN QUERY SELECT 'deleted', count(*), sum(balance) FROM customers;
        END $$""")
    got = conn.execute("SELECT * FROM etl()").fetchall()
    total = sum(range(1, 1001))
    threes = sum(i for i in range(1, 1001) if i % 10 == 3)
    sevens = sum(i for i in range(1, 1001) if i % 10 == 7)
    assert got == [("inserted", 1000, total), ("updated", 1000, total + threes), ("deleted", 900, total + threes - sevens)]
    assert conn.execute("SELECT count(*), sum(balance) FROM customers").fetchone() == (900, total + threes - sevens)


def test_consume_delivers_every_row_once_when_writers_commit_out_of_order(lake, cluster):
    """A starts, B commits, consume, A commits, consume: every row exactly once."""
    conn, _ = lake
    conn.execute("CREATE FOREIGN TABLE customer_changes (id bigint, name text) "
                 "SERVER lake OPTIONS (path 'customers', query_type 'incremental')")
    consume = "SELECT id, name FROM hudi.consume(NULL::customer_changes, 'etl') ORDER BY 1"
    with cluster.connect() as a, cluster.connect() as b:
        a.execute("BEGIN")
        a.execute("INSERT INTO customers SELECT g, 'a', 'nl', g, '2026-01-01' FROM generate_series(1, 20) g")
        b.execute("INSERT INTO customers SELECT g, 'b', 'be', g, '2026-01-01' FROM generate_series(21, 30) g")
        first = conn.execute(consume).fetchall()
        a.execute("COMMIT")
        second = conn.execute(consume).fetchall()
    assert first == [(i, "b") for i in range(21, 31)]
    assert second == [(i, "a") for i in range(1, 21)]
    assert conn.execute(consume).fetchall() == []


def test_a_failed_flush_in_a_savepoint_cannot_be_committed(lake):
    """A read inside a savepoint writes out the rows buffered before it; when that fails
    (here: the partition folder is read-only) and the savepoint is rolled back, the write has
    lost rows, so COMMIT fails instead of committing the rest."""
    conn, path = lake
    conn.execute("INSERT INTO customers VALUES (1, 'kept', 'nl', 1, '2026-01-01')")
    partition = path / "country=nl"
    conn.execute("BEGIN")
    conn.execute("INSERT INTO customers VALUES (2, 'buffered', 'nl', 2, '2026-01-02')")
    conn.execute("SAVEPOINT s")
    partition.chmod(0o555)
    try:
        assert refused(conn, "SELECT count(*) FROM customers") is not None
    finally:
        partition.chmod(0o755)
    conn.execute("ROLLBACK TO SAVEPOINT s")
    assert refused(conn, "COMMIT") == "25000"
    assert our_rows(conn) == [(1, "kept", "nl", 1)]
    assert reference_rows(path) == our_rows(conn)


def test_a_role_cannot_hijack_the_commit_bookkeeping(lake):
    """The intents are written and read as a superuser: a role's own unnest() and = on its
    search_path must never run there."""
    conn, path = lake
    conn.execute("CREATE ROLE mallory")
    conn.execute("GRANT INSERT, SELECT, UPDATE, DELETE ON customers TO mallory")
    conn.execute("CREATE SCHEMA evil AUTHORIZATION mallory")
    conn.execute("CREATE TABLE public.hijacked (who text)")
    conn.execute("GRANT INSERT ON public.hijacked TO mallory")
    conn.execute(f"SET hudi.allowed_file_roots = '{path.parent}'")
    conn.execute("SET ROLE mallory")
    conn.execute("""CREATE FUNCTION evil.unnest(text[], text[]) RETURNS TABLE (location text, instant text)
                    LANGUAGE sql AS $$ INSERT INTO public.hijacked VALUES (current_user) RETURNING 'x', 'y' $$""")
    conn.execute("""CREATE FUNCTION evil.text_eq(text, text) RETURNS boolean
                    LANGUAGE sql AS $$ INSERT INTO public.hijacked VALUES (current_user) RETURNING true $$""")
    conn.execute("CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq)")
    conn.execute("SET search_path = evil, pg_catalog, public")
    for i in range(3):  # the second and third commit also forget the first's intents
        conn.execute("INSERT INTO customers VALUES (%s, 'm', 'nl', 1, '2026-01-01')", (i,))
        assert len(conn.execute("SELECT * FROM customers").fetchall()) == i + 1
    conn.execute("RESET search_path")
    conn.execute("RESET ROLE")
    assert conn.execute("SELECT count(*) FROM public.hijacked").fetchone() == (0,)
    assert refused(conn, "SET ROLE mallory; SELECT * FROM hudi.commit_intents") == "42501"
