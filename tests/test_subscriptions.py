"""Subscriptions: hudi.subscribe(hudi_table, heap_table) keeps an ordinary heap table equal to
a Hudi table's snapshot — a copy, then every commit applied by the worker with its position,
exactly once — checked against the Hudi table's own snapshot after every commit, over random
writes from two sessions with compactions, cleans and archives, a kill -9 of the applying
worker and a restart; a truncate or cleaned-away changes make a fresh copy."""

import random

from conftest import our_rows, refused, serve_databases, wait_for, wait_for_value

HEAP = ("CREATE TABLE subscribed (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz, "
        "PRIMARY KEY (id, country))")


def _heap_rows(conn, table="subscribed"):
    return sorted(conn.execute(f"SELECT id, name, country, balance FROM {table}").fetchall())


def _serve(conn):
    # A worker killed while it held a table lock holds it for the lease: a short one.
    conn.execute("ALTER SYSTEM SET hudi.lock_lease = 3")
    serve_databases(conn)


def _in_step(conn, table="subscribed"):
    expected = our_rows(conn)
    wait_for("the heap table equal to the Hudi table", lambda: _heap_rows(conn, table) == expected)


def test_a_subscribed_heap_table_stays_equal_to_the_hudi_table(lake, cluster):
    """Random INSERT, UPDATE and DELETE commits from two sessions, with compactions, cleans and
    archives between them, a kill -9 of the applying worker and a restart of the server: after
    each, the heap table holds the Hudi table's snapshot; its own trigger saw every applied
    change (the table stays the user's), and hudi.subscriptions shows no lag at the end."""
    from conftest import kill_backend_and_wait
    conn, _ = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '2', ADD archive_min_instants '3', "
                 "ADD archive_max_instants '5')")
    conn.execute("INSERT INTO customers SELECT g, 'n' || g, 'nl', g, '2026-01-01' FROM generate_series(1, 20) g")
    conn.execute(HEAP)
    conn.execute("CREATE TABLE audit (n bigint)")
    conn.execute("INSERT INTO audit VALUES (0)")
    # The worker writes with search_path = pg_catalog, pg_temp: a trigger function names its
    # tables qualified (or sets its own search_path).
    conn.execute("CREATE FUNCTION count_change() RETURNS trigger LANGUAGE plpgsql AS "
                 "$$ BEGIN UPDATE public.audit SET n = n + 1; RETURN NULL; END $$")
    conn.execute("CREATE TRIGGER counted AFTER INSERT OR UPDATE OR DELETE ON subscribed FOR EACH ROW EXECUTE FUNCTION count_change()")
    conn.execute("INSERT INTO subscribed VALUES (999, 'stale', 'nl', 0, now())")
    assert conn.execute("SELECT hudi.subscribe('customers', 'subscribed')").fetchone()[0] == 20
    assert _heap_rows(conn) == our_rows(conn), "a copy: what the table held before is gone"
    _serve(conn)
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    other = cluster.connect()
    for step in range(24):
        session = rng.choice([conn, other])
        kind = rng.random()
        if kind < 0.35:
            session.execute(f"INSERT INTO customers SELECT g, 's{step}', '{rng.choice(['nl', 'de'])}', g, now() "
                            f"FROM generate_series({rng.randint(1, 40)}, {rng.randint(40, 60)}) g")
        elif kind < 0.65:
            session.execute(f"UPDATE customers SET balance = balance + 1, name = 'u{step}' WHERE id % 4 = {rng.randint(0, 3)}")
        elif kind < 0.85:
            session.execute(f"DELETE FROM customers WHERE id % 6 = {rng.randint(0, 5)}")
        else:
            conn.execute("SELECT hudi.compact('customers')")
            conn.execute("SELECT * FROM hudi.clean('customers')")
            conn.execute("SELECT * FROM hudi.archive('customers')")
        if step == 8:
            pid = wait_for_value("the applying worker", lambda: cluster.worker_pid("(write buffer)"))
            kill_backend_and_wait(cluster, pid)
            conn, other = cluster.connect(), cluster.connect()
            _serve(conn)
        elif step == 16:
            other.close()
            cluster.stop()
            cluster.start()
            conn, other = cluster.connect(), cluster.connect()
            _serve(conn)
        _in_step(conn)
    (lag_commits, state, error) = conn.execute("SELECT lag_commits, state, last_error FROM hudi.subscriptions").fetchone()
    assert (state, error) == ("streaming", None)
    wait_for("no lag", lambda: conn.execute("SELECT lag_commits FROM hudi.subscriptions").fetchone()[0] == 0)
    assert conn.execute("SELECT n FROM audit").fetchone()[0] > 20, "the heap table's own trigger fired"
    assert conn.execute("SELECT copies FROM hudi.subscriptions").fetchone()[0] == 1


def test_subscribe_checks_its_tables_and_unsubscribe_stops(lake, cluster):
    """The heap table's primary key must be the record key (42P16), its columns columns of the
    foreign table (42703); only its owner subscribes (42501), once (42710), to a snapshot
    declaration (55000), a table that is not mirrored (55000; nor is a subscribed one mirrored:
    applied changes could go round). hudi.unsubscribe stops the applying: a later commit reaches another
    subscribed table and not the unsubscribed one."""
    conn, _ = lake
    conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, now())")
    conn.execute("CREATE TABLE wrong_key (id bigint PRIMARY KEY, name text, country text)")
    assert refused(conn, "SELECT hudi.subscribe('customers', 'wrong_key')") == "42P16"
    conn.execute("CREATE TABLE extra (id bigint, country text, nickname text, PRIMARY KEY (id, country))")
    assert refused(conn, "SELECT hudi.subscribe('customers', 'extra')") == "42703"
    conn.execute(HEAP)
    conn.execute("CREATE FOREIGN TABLE customer_changes (id bigint, name text) SERVER lake "
                 "OPTIONS (path 'customers', query_type 'incremental')")
    assert refused(conn, "SELECT hudi.subscribe('customer_changes', 'subscribed')") == "55000"
    conn.execute("CREATE ROLE stranger LOGIN")
    conn.execute("GRANT SELECT ON customers, subscribed TO stranger")
    with cluster.connect(user="stranger") as stranger:
        assert refused(stranger, "SELECT hudi.subscribe('customers', 'subscribed')") == "42501"
        assert stranger.execute("SELECT count(*) FROM hudi.subscriptions").fetchone() == (0,)
    assert conn.execute("SELECT hudi.subscribe('customers', 'subscribed')").fetchone()[0] == 1
    assert refused(conn, "SELECT hudi.subscribe('customers', 'subscribed')") == "42710"
    # A table feeds a Hudi table or follows one, not both (its changes could go round).
    conn.execute("CREATE FOREIGN TABLE buffered (id bigint, name text, country text, balance numeric(12, 2), ts timestamptz) "
                 "SERVER lake OPTIONS (path 'buffered', primary_key 'id,country', ordering_field 'ts', write_mode 'buffered')")
    conn.execute("SELECT hudi.create_table('buffered')")
    assert refused(conn, "SELECT hudi.mirror('subscribed', 'buffered')") == "55000"
    conn.execute("CREATE TABLE fed (LIKE subscribed INCLUDING ALL)")
    conn.execute("SELECT hudi.mirror('fed', 'buffered')")
    assert refused(conn, "SELECT hudi.subscribe('customers', 'fed')") == "55000"
    conn.execute("SELECT hudi.unmirror('fed')")
    with cluster.connect(user="stranger") as stranger:
        assert stranger.execute("SELECT relation::text, hudi_table FROM hudi.subscriptions").fetchall() == [("subscribed", "customers")]
    serve_databases(conn)
    conn.execute("INSERT INTO customers VALUES (2, 'b', 'nl', 1, now())")
    _in_step(conn)
    conn.execute("SELECT hudi.unsubscribe('subscribed')")
    assert refused(conn, "SELECT hudi.unsubscribe('subscribed')") == "42704"
    conn.execute("INSERT INTO customers VALUES (3, 'c', 'nl', 1, now())")
    conn.execute("CREATE TABLE second (LIKE subscribed INCLUDING ALL)")
    conn.execute("SELECT hudi.subscribe('customers', 'second')")
    conn.execute("INSERT INTO customers VALUES (4, 'd', 'nl', 1, now())")
    _in_step(conn, "second")
    assert [r[0] for r in _heap_rows(conn)] == [1, 2], "no longer applied"


def test_a_truncate_or_cleaned_changes_make_a_fresh_copy(lake, cluster):
    """A truncate of the Hudi table (a replacecommit, whose removed rows no change lists) and
    changes cleaned away while the subscription could not apply them (its database not served,
    its hold on cleaning past clean_max_retain) both make the worker copy the table anew,
    which hudi.subscriptions reports."""
    conn, table = lake
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '1', ADD clean_retain '1 microsecond', "
                 "ADD clean_max_retain '1 microsecond')")
    conn.execute("INSERT INTO customers SELECT g, 'a', 'nl', g, now() FROM generate_series(1, 10) g")
    conn.execute(HEAP)
    conn.execute("SELECT hudi.subscribe('customers', 'subscribed')")
    serve_databases(conn)
    conn.execute("TRUNCATE customers")
    conn.execute("INSERT INTO customers VALUES (100, 'after', 'de', 1, now())")
    _in_step(conn)
    assert conn.execute("SELECT copies, last_copy_reason FROM hudi.subscriptions").fetchone() == (2, "the Hudi table was truncated")
    # Not served: the position stays while the table changes and is compacted and cleaned.
    conn.execute("ALTER SYSTEM SET hudi.worker_databases = 'another'")
    conn.execute("SELECT pg_reload_conf()")
    wait_for("the applying worker gone", lambda: cluster.worker_pid("(write buffer)") is None)
    for n in range(3):
        conn.execute(f"UPDATE customers SET balance = balance + 1, name = 'u{n}'")
        conn.execute(f"INSERT INTO customers VALUES ({200 + n}, 'n', 'nl', 1, now())")
        conn.execute("SELECT hudi.compact('customers')")
    wait_for("a clean past the subscription's position",
             lambda: len(conn.execute("SELECT * FROM hudi.clean('customers')").fetchall()) > 0)
    serve_databases(conn)
    _in_step(conn)
    copies, reason = conn.execute("SELECT copies, last_copy_reason FROM hudi.subscriptions").fetchone()
    assert copies == 3 and "were cleaned" in reason, (copies, reason)


def test_a_subscription_restored_from_a_dump_goes_on_from_its_position(lake, cluster):
    """hudi.subscription_targets is dumped with the heap table it names, in one snapshot: the
    restored database's subscription applies the commits after its position, from the lake
    (and holds cleaning back there too)."""
    from conftest import dump_and_restore
    conn, _ = lake
    conn.execute("INSERT INTO customers SELECT g, 'n', 'nl', g, now() FROM generate_series(1, 10) g")
    conn.execute(HEAP)
    conn.execute("SELECT hudi.subscribe('customers', 'subscribed')")
    serve_databases(conn)
    conn.execute("UPDATE customers SET name = 'u' WHERE id <= 5")
    _in_step(conn)
    dump_and_restore(cluster, "restored")
    conn.execute("SELECT hudi.unsubscribe('subscribed')")
    conn.execute("DELETE FROM customers WHERE id = 1")
    conn.execute("INSERT INTO customers VALUES (20, 'new', 'de', 1, now())")
    with cluster.connect("restored") as restored:
        assert restored.execute("SELECT relation::text, hudi_table FROM hudi.subscriptions").fetchall() == [("subscribed", "customers")]
        _in_step(restored)
        assert restored.execute("SELECT copies FROM hudi.subscriptions").fetchone() == (1,)
