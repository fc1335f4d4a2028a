"""Waiting consumers: hudi.consume(..., wait => interval) returns as soon as the table has
changes after the consumer's position — woken at once by commits on this server, and by a
listing of the timeline every hudi.stream_check_interval (one per table for all waiting
sessions) for commits of other servers — or returns nothing when the wait ends; cancels and
statement timeouts end it."""

import threading
import time

from conftest import refused, second_server, wait_for, wait_for_value

CHANGES = ("CREATE FOREIGN TABLE customer_changes (id bigint, name text) "
           "SERVER lake OPTIONS (path 'customers', query_type 'incremental')")


def _check_interval(conn, setting):
    conn.execute(f"ALTER SYSTEM SET hudi.stream_check_interval = '{setting}'")
    conn.execute("SELECT pg_reload_conf()")
    wait_for("the new check interval", lambda: conn.execute("SHOW hudi.stream_check_interval").fetchone()[0] == setting)


def _waiters(conn):
    """How many sessions wait on a table, as pg_stat_activity and hudi.stream_watches say."""
    sleeping = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%hudi.consume%' "
                            "AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()").fetchone()[0]
    watched = conn.execute("SELECT COALESCE(sum(waiting), 0) FROM hudi.stream_watches()").fetchone()[0]
    return sleeping, watched


class Waiter(threading.Thread):
    """A session calling hudi.consume with a wait: its rows, and when it returned."""

    def __init__(self, cluster, wait="60 s", consumer="etl", start_from="earliest", setup=()):
        super().__init__(daemon=True)
        self.conn = cluster.connect()
        for statement in setup:
            self.conn.execute(statement)
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.sql = (f"SELECT id, name FROM hudi.consume(NULL::customer_changes, '{consumer}', "
                    f"start_from => '{start_from}', wait => '{wait}') ORDER BY 1")
        self.rows = self.error = self.returned = None

    def run(self):
        try:
            self.rows = self.conn.execute(self.sql).fetchall()
        except Exception as e:  # noqa: BLE001 - the test asserts on it
            self.error = getattr(e, "sqlstate", None) or repr(e)
        self.returned = time.monotonic()
        self.conn.close()


def _start_waiting(conn, waiters):
    for w in waiters:
        w.start()
    wait_for("the sessions waiting", lambda: _waiters(conn) == (len(waiters), len(waiters)))


def test_a_commit_on_this_server_wakes_its_waiting_consumers_at_once(lake, cluster):
    """With a check interval of an hour only the commit's own wake-up can end the waits: two
    consumers (one new, from 'latest') get the new rows as soon as the INSERT commits, and
    exactly those."""
    conn, _ = lake
    conn.execute(CHANGES)
    conn.execute("INSERT INTO customers VALUES (1, 'old', 'nl', 1, '2026-01-01')")
    assert conn.execute("SELECT id FROM hudi.consume(NULL::customer_changes, 'etl')").fetchall() == [(1,)]
    _check_interval(conn, "1h")
    waiters = [Waiter(cluster), Waiter(cluster, consumer="alerts", start_from="latest")]
    _start_waiting(conn, waiters)
    conn.execute("INSERT INTO customers VALUES (2, 'new', 'nl', 1, '2026-01-01'), (3, 'new', 'de', 1, '2026-01-01')")
    committed = time.monotonic()
    for w in waiters:
        w.join(30)
        assert w.error is None and w.rows == [(2, "new"), (3, "new")], (w.error, w.rows)
        assert w.returned - committed < 5, "woken by the commit, not by a listing an hour later"
    assert conn.execute("SELECT id FROM hudi.consume(NULL::customer_changes, 'etl')").fetchall() == []


def test_a_commit_of_another_server_is_seen_within_the_check_interval(lake, cluster):
    """Commits by another server are found by the listings of the timeline, shared by all
    waiting sessions: 20 waiters on one table make one listing per check interval between
    them, and all of them return the other server's row."""
    conn, root = lake
    conn.execute(CHANGES)
    _check_interval(conn, "200ms")
    waiters = [Waiter(cluster, consumer=f"c{i}") for i in range(20)]
    _start_waiting(conn, waiters)
    (before,) = conn.execute("SELECT listings FROM hudi.stream_watches()").fetchone()
    started = time.monotonic()
    time.sleep(2)  # listings are counted over a stretch of time: there is no event to wait for
    (after,) = conn.execute("SELECT listings FROM hudi.stream_watches()").fetchone()
    elapsed = time.monotonic() - started
    assert after - before <= elapsed / 0.2 + 2, (before, after, elapsed)
    with second_server(cluster, root.parent, customers=True) as second:
        with second.connect() as other:
            other.execute("INSERT INTO customers VALUES (7, 'there', 'nl', 1, '2026-01-01')")
    for w in waiters:
        w.join(30)
        assert w.error is None and w.rows == [(7, "there")], (w.error, w.rows)
    assert _waiters(conn) == (0, 0)


def test_a_wait_ends_empty_at_its_end_and_is_cancellable(lake, cluster):
    """Without changes a wait returns no rows when it ends (and the position stays); a
    statement timeout and pg_cancel_backend end it with 57014, and free its slot, as
    pg_terminate_backend does; a negative wait is refused."""
    conn, _ = lake
    conn.execute(CHANGES)
    conn.execute("INSERT INTO customers VALUES (1, 'old', 'nl', 1, '2026-01-01')")
    conn.execute("SELECT * FROM hudi.consume(NULL::customer_changes, 'etl')")
    (position,) = conn.execute("SELECT position FROM hudi.consumer_positions").fetchone()
    started = time.monotonic()
    assert conn.execute("SELECT * FROM hudi.consume(NULL::customer_changes, 'etl', wait => '300 ms')").fetchall() == []
    assert time.monotonic() - started >= 0.3
    assert conn.execute("SELECT position FROM hudi.consumer_positions").fetchone() == (position,)
    timed_out = Waiter(cluster, setup=["SET statement_timeout = '500ms'"])
    timed_out.start()
    timed_out.join(30)
    assert timed_out.error == "57014", timed_out.error
    cancelled = Waiter(cluster)
    _start_waiting(conn, [cancelled])
    conn.execute(f"SELECT pg_cancel_backend({cancelled.pid})")
    cancelled.join(30)
    assert cancelled.error == "57014", cancelled.error
    assert _waiters(conn) == (0, 0)
    # Terminated: a FATAL exits without unwinding the wait; the slot is freed at exit.
    terminated = Waiter(cluster)
    _start_waiting(conn, [terminated])
    conn.execute(f"SELECT pg_terminate_backend({terminated.pid})")
    terminated.join(30)
    assert terminated.error is not None
    wait_for("the terminated session's slot freed", lambda: _waiters(conn) == (0, 0))
    assert refused(conn, "SELECT * FROM hudi.consume(NULL::customer_changes, 'etl', wait => '-1 s')") == "22023"
    # Server-wide (tables of every database): for monitoring roles.
    conn.execute("CREATE ROLE nobody LOGIN")
    with cluster.connect(user="nobody") as nobody:
        assert refused(nobody, "SELECT * FROM hudi.stream_watches()") == "42501"
    conn.execute("GRANT pg_monitor TO nobody")
    with cluster.connect(user="nobody") as nobody:
        assert nobody.execute("SELECT count(*) FROM hudi.stream_watches()").fetchone()[0] == 1


def test_a_compaction_does_not_end_a_wait(lake, cluster):
    """A compaction is a commit without changes: a waiting consumer that finds it (claiming its
    position, so it now holds a transaction id) waits on, and returns the rows of the next
    write."""
    conn, _ = lake
    conn.execute(CHANGES)
    conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, '2026-01-01')")
    conn.execute("UPDATE customers SET name = 'b' WHERE id = 1")
    conn.execute("SELECT * FROM hudi.consume(NULL::customer_changes, 'etl')")
    # A compaction wakes nobody; a listing finds it.
    _check_interval(conn, "200ms")
    waiter = Waiter(cluster)
    _start_waiting(conn, [waiter])
    assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] > 0
    wait_for("the waiter woken by the compaction and waiting again",
             lambda: conn.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'transactionid'",
                                  (waiter.pid,)).fetchone()[0] > 0 and _waiters(conn) == (1, 1))
    assert waiter.returned is None
    conn.execute("INSERT INTO customers VALUES (2, 'c', 'nl', 1, '2026-01-01')")
    waiter.join(30)
    assert waiter.error is None and waiter.rows == [(2, "c")], (waiter.error, waiter.rows)


def test_a_consumer_waits_without_a_snapshot_through_the_procedure(lake, cluster):
    """hudi.consume(..., wait => ...) keeps its statement's snapshot while it waits, as every
    function does (pg_stat_activity shows its backend_xmin, which holds back vacuum);
    CALL hudi.wait_for_changes waits holding none, returns as soon as the table has changes after
    the consumer's position (claiming nothing: hudi.consume then reads them), or when its wait
    ends, and is cancellable. It refuses where it could not drop its snapshot (a transaction
    block: 25000) and what hudi.consume refuses."""
    conn, _ = lake
    conn.execute(CHANGES)
    conn.execute("INSERT INTO customers VALUES (1, 'old', 'nl', 1, '2026-01-01')")
    assert conn.execute("SELECT id FROM hudi.consume(NULL::customer_changes, 'etl')").fetchall() == [(1,)]
    _check_interval(conn, "1h")
    call = "CALL hudi.wait_for_changes(NULL::customer_changes, 'etl', '{}')"

    def waiting(query):
        rows = conn.execute("SELECT pid, backend_xmin IS NOT NULL FROM pg_stat_activity WHERE query LIKE %s "
                            "AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()", (query + "%",)).fetchall()
        return rows or None

    calling = cluster.connect()
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(refused(calling, call.format("60 s"))), daemon=True)
    thread.start()
    ((pid, holds_xmin),) = wait_for_value("the procedure waiting", lambda: waiting("CALL hudi.wait_for_changes"))
    assert not holds_xmin, "the procedure waits without a snapshot"
    consuming = Waiter(cluster, consumer="other", start_from="latest")
    consuming.start()
    ((_, consume_holds_xmin),) = wait_for_value("the function waiting", lambda: waiting("SELECT id, name FROM hudi.consume"))
    assert consume_holds_xmin, "a function's wait keeps its statement's snapshot"
    assert conn.execute("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == (None,)
    conn.execute("INSERT INTO customers VALUES (2, 'new', 'nl', 1, '2026-01-01')")
    committed = time.monotonic()
    thread.join(30)
    consuming.join(30)
    assert outcome == [None] and time.monotonic() - committed < 5, outcome
    assert consuming.rows == [(2, "new")]
    assert conn.execute("SELECT id FROM hudi.consume(NULL::customer_changes, 'etl')").fetchall() == [(2,)]
    # Nothing new: the wait ends empty, and a cancel ends it.
    started = time.monotonic()
    assert refused(calling, call.format("300 ms")) is None and time.monotonic() - started >= 0.3
    thread = threading.Thread(target=lambda: outcome.append(refused(calling, call.format("60 s"))), daemon=True)
    thread.start()
    wait_for_value("the procedure waiting", lambda: waiting("CALL hudi.wait_for_changes"))
    conn.execute("SELECT pg_cancel_backend(%s)", (pid,))
    thread.join(30)
    assert outcome[-1] == "57014"
    calling.execute("BEGIN")
    assert refused(calling, call.format("1 s")) == "25000"
    calling.execute("ROLLBACK")
    assert refused(calling, "CALL hudi.wait_for_changes(NULL::customers, 'etl', '1 s')") == "42809"
    assert refused(calling, "CALL hudi.wait_for_changes(1, 'etl', '1 s')") == "42809"
    assert refused(calling, call.format("-1 s")) == "22023"
    assert refused(calling, "CALL hudi.wait_for_changes(NULL::customer_changes, 'etl', NULL)") == "22004"
    assert refused(calling, "CALL hudi.wait_for_changes(NULL::customer_changes, 'etl', '1 s', NULL)") == "22004"
    assert refused(calling, "CALL hudi.wait_for_changes(NULL::customer_changes, NULL, '1 s')") == "22004"
    conn.execute("CREATE ROLE stranger LOGIN")
    with cluster.connect(user="stranger") as stranger:
        assert refused(stranger, call.format("1 s")) == "42501"
    calling.close()

