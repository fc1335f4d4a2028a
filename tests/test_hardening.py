"""What no role, signal or bad argument may do: run code as a superuser through the worker,
crash the cluster, lose a committed write, forge state that others depend on (consumer
positions, cache locks, intent locks), reach files through symbolic links, learn what it may
not read, or make a function panic. Each test is a reproduction of a hole that existed, run as
roles that are not superusers (and a database owner who is not one)."""

import json
import os
import random
import signal
import threading
import time

import psycopg
import pytest

from conftest import (give_to_postgres, kill_backend_and_wait, new_lake, refused, rollback_once_expired,
                      serve_databases, set_heartbeat_expiry, wait_for)

COLUMNS = "id bigint, name text, country text, ts timestamptz"
KEYS = "primary_key 'id,country', ordering_field 'ts', partition_by 'country', buckets '2'"


def connect(cluster, user, dbname="postgres"):
    return psycopg.connect(host="127.0.0.1", port=cluster.port, user=user, dbname=dbname, autocommit=True)


def allow_roots(conn, root):
    conn.execute(f"ALTER SYSTEM SET hudi.allowed_file_roots = '{root}'")
    conn.execute("SELECT pg_reload_conf()")
    wait_for("the allowed roots", lambda: conn.execute("SHOW hudi.allowed_file_roots").fetchone()[0] == str(root))


@pytest.fixture
def shared(cluster):
    """A lake with table `customers` (owned by the superuser, one row), its directory an allowed
    root, and roles `alice` (USAGE on the server) and `bob` (USAGE, SELECT on nothing)."""
    with new_lake(cluster) as (conn, root):
        conn.execute(f"CREATE FOREIGN TABLE customers ({COLUMNS}) SERVER lake OPTIONS (path 'customers', {KEYS})")
        conn.execute("SELECT hudi.create_table('customers')")
        conn.execute("INSERT INTO customers VALUES (1, 'kept', 'nl', '2026-01-01')")
        allow_roots(conn, root)
        for role in ("alice", "bob"):
            conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute(f"GRANT USAGE ON FOREIGN SERVER lake TO {role}")
        conn.execute("GRANT CREATE ON SCHEMA public TO alice, bob")
        yield conn, root


def no_panics(cluster):
    log = cluster.log()
    assert "panicked" not in log, log[log.index("panicked") - 500:][:2000]
    assert "terminated by signal" not in log, log[log.index("terminated by signal") - 2000:][:3000]


def test_a_database_owner_gets_no_code_run_as_a_superuser(cluster):
    """The owner of a database (not a superuser) puts a schema of its own first on the
    database's search path, with operators on oid, text and text[] that try to make it a
    superuser when a superuser calls them. The worker serves the database (rounds of services,
    intents and lookup caches) as the bootstrap superuser: none of them may call those."""
    conn = cluster.connect()
    root = cluster.directory / "lake"
    root.mkdir()
    give_to_postgres(root)
    allow_roots(conn, root)
    conn.execute("CREATE ROLE owner LOGIN")
    conn.execute("CREATE DATABASE owned OWNER owner")
    with cluster.connect("owned") as su:
        su.execute("CREATE EXTENSION pg_hudi")
        su.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{root}')")
        su.execute("GRANT USAGE ON FOREIGN SERVER lake TO owner")
    with connect(cluster, "owner", "owned") as o:
        o.execute("CREATE SCHEMA evil")
        o.execute("CREATE TABLE evil.calls (who text)")
        o.execute("GRANT USAGE ON SCHEMA evil TO PUBLIC")
        o.execute("GRANT INSERT ON evil.calls TO PUBLIC")
        for n, kind in enumerate(("oid", "text", "text[]", "regclass", "bigint", "name")):
            o.execute(f"""CREATE FUNCTION evil.eq{n}(a {kind}, b {kind}) RETURNS boolean LANGUAGE plpgsql AS $$
                          BEGIN
                            INSERT INTO evil.calls VALUES (current_user);
                            IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user) THEN
                              EXECUTE 'ALTER ROLE owner SUPERUSER';
                            END IF;
                            RETURN a OPERATOR(pg_catalog.=) b;
                          END $$""")
            o.execute(f"CREATE OPERATOR evil.= (LEFTARG = {kind}, RIGHTARG = {kind}, FUNCTION = evil.eq{n})")
        o.execute("ALTER DATABASE owned SET search_path = evil, pg_catalog, public")
    with connect(cluster, "owner", "owned") as o:
        o.execute(f"CREATE FOREIGN TABLE t ({COLUMNS}) SERVER lake OPTIONS (path 't', {KEYS}, compaction_delta_commits '1')")
        o.execute("SELECT hudi.create_table('t')")
        for i in range(3):
            o.execute("INSERT INTO t VALUES (%s, 'x', 'nl', now())", (i,))
        o.execute("SELECT hudi.create_lookup_cache('t', '{id}')")
        o.execute("SELECT hudi.create_lookup_cache('t', '{name}')")
    serve_databases(conn)
    with cluster.connect("owned") as su:
        # This test's own superuser session must not call the owner's operators either.
        su.execute("SET search_path = pg_catalog, pg_temp")
        services = "SELECT count(*) FROM hudi.service_state WHERE relation = 'evil.t'::regclass AND last_checked IS NOT NULL"
        wait_for("the worker's services", lambda: su.execute(services).fetchone()[0] == 4, timeout=60)
        ready = "SELECT state FROM hudi.lookup_cache_state"
        wait_for("the worker's lookup round", lambda: su.execute(ready).fetchall() == [("ready",)], timeout=60)
        # a compaction ran (the table's services did their work)
        wait_for("a compaction", lambda: su.execute(
            "SELECT count(*) FROM hudi.timeline('evil.t') WHERE action = 'commit'").fetchone()[0] >= 1, timeout=60)
        calls = su.execute("SELECT who, count(*) FROM evil.calls WHERE who <> 'owner' GROUP BY 1").fetchall()
        assert calls == [], calls
    assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = 'owner'").fetchone() == (False,)
    no_panics(cluster)


def test_no_role_can_have_a_live_write_rolled_back(shared, cluster):
    """A role with USAGE on the server declares its own foreign table on the same path and
    rolls back "failed" writes. The expiry is a server setting (no session lowers it), and a
    write whose backend lives is never rolled back, even when its heartbeat stalled (the
    backend stopped, as a stalled process would): its COMMIT then keeps its row."""
    conn, root = shared
    with connect(cluster, "bob") as bob:
        assert refused(bob, "SET hudi.heartbeat_expiry = 0") == "55P02"
        assert refused(bob, "ALTER SYSTEM SET hudi.heartbeat_expiry = 1") == "42501"
        assert refused(conn, "ALTER SYSTEM SET hudi.heartbeat_expiry = 0") == "22023"
        bob.execute(f"CREATE FOREIGN TABLE mine ({COLUMNS}) SERVER lake OPTIONS (path 'customers', {KEYS})")
    set_heartbeat_expiry(conn, 1)
    writer = cluster.connect()
    pid = writer.execute("SELECT pg_backend_pid()").fetchone()[0]
    writer.execute("BEGIN")
    writer.execute("INSERT INTO customers VALUES (2, 'live', 'be', '2026-01-02')")
    heartbeats = root / "customers/.hoodie/.heartbeat"
    (beat,) = list(heartbeats.iterdir())
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for("the heartbeat to expire", lambda: time.time() - beat.stat().st_mtime > 2)
        with connect(cluster, "bob") as bob:
            assert bob.execute("SELECT * FROM hudi.rollback_failed_writes('mine')").fetchall() == []
        assert conn.execute("SELECT * FROM hudi.rollback_failed_writes('customers')").fetchall() == []
    finally:
        os.kill(pid, signal.SIGCONT)
    writer.execute("COMMIT")
    assert conn.execute("SELECT id, name FROM customers ORDER BY id").fetchall() == [(1, "kept"), (2, "live")]
    # Completed: its intent goes with the writer's next transaction.
    writer.execute("SELECT 1")
    assert conn.execute("SELECT count(*) FROM hudi.pending_commits").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE action = 'rollback'").fetchone() == (0,)
    # Once its backend is gone, a write that never committed is rolled back as before.
    victim = cluster.connect()
    victim_pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
    victim.execute("BEGIN")
    victim.execute("INSERT INTO customers VALUES (3, 'lost', 'be', '2026-01-03')")
    kill_backend_and_wait(cluster, victim_pid)
    with cluster.connect() as conn:
        assert len(rollback_once_expired(conn)) == 1
        assert conn.execute("SELECT id FROM customers ORDER BY id").fetchall() == [(1,), (2,)]


def test_consumer_positions_cannot_be_forged(shared, cluster):
    """A role with SELECT on one table used to write its own consumer rows: a position or an
    updated_at of 'infinity' made every clean fail, a far-future one held cleaning back for
    good, and thousands of rows published megabytes into the lake. Positions now move only
    through hudi.consume (forward, to a commit of the table) and hudi.reset_consumer."""
    conn, root = shared
    conn.execute("CREATE FOREIGN TABLE changes (id bigint, name text) SERVER lake "
                 "OPTIONS (path 'customers', query_type 'incremental')")
    conn.execute("GRANT SELECT ON changes TO bob")
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
    with connect(cluster, "bob") as bob:
        for sql in ("INSERT INTO hudi.consumer_positions VALUES ('changes', 'bob', 'x', '', 'infinity')",
                    "UPDATE hudi.consumer_positions SET updated_at = 'infinity'",
                    "DELETE FROM hudi.consumer_positions"):
            assert refused(bob, sql) == "42501", sql
        assert bob.execute("SELECT count(*) FROM hudi.consume(NULL::changes, 'etl')").fetchone() == (1,)
        assert refused(bob, "SELECT hudi_internal.advance_consumer_position('changes', 'etl', '99991231235959999')") == "22023"
        assert refused(bob, "SELECT hudi_internal.advance_consumer_position('changes', 'etl', '')") == "22023"  # backwards
        assert refused(bob, "SELECT hudi.reset_consumer('changes', 'etl', '99991231235959999')") == "22023"
        assert refused(bob, "SELECT hudi.reset_consumer('changes', 'etl', 'infinity')") == "22023"
        assert refused(bob, "SELECT hudi_internal.claim_consumer_position('customers', 'etl')") == "42501"
        assert refused(bob, "SELECT hudi_internal.claim_consumer_position('changes', E'a\\nb')") == "22023"
        assert refused(bob, "SELECT hudi_internal.claim_consumer_position('changes', repeat('x', 300))") == "42622"
        # The reset replays from where it is told, and only ever its own consumer.
        bob.execute("SELECT hudi.reset_consumer('changes', 'etl', '')")
        assert bob.execute("SELECT count(*) FROM hudi.consume(NULL::changes, 'etl')").fetchone() == (1,)
        # Many consumers at one position are one entry for the cleaners.
        bob.execute("SELECT hudi_internal.claim_consumer_position('changes', 'c' || g) FROM generate_series(1, 2000) g")
        positions = bob.execute("SELECT position, updated_at <= now() FROM hudi.consumer_positions").fetchall()
        assert len(positions) == 2001 and {p for p, _ in positions} <= {"", latest} and all(ok for _, ok in positions)
    # Cleaning works (and publishes one entry per position, not per consumer).
    conn.execute("SELECT * FROM hudi.clean('customers')")
    (published,) = list((root / "customers/.hoodie/.aux/consumers").iterdir())
    entries = json.loads(published.read_text())["positions"]
    assert len(entries) == 2 and published.stat().st_size < 2000, entries


def test_no_role_can_freeze_a_lookup_cache(shared, cluster):
    """Advisory locks need no privilege: a role that took the key the cache writers used froze
    the table's cache (the worker skipped it, the owner's refresh hung). The writers' lock is
    now one no SQL can take."""
    conn, _ = shared
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    oid = conn.execute("SELECT 'customers'::regclass::oid::int").fetchone()[0]
    with connect(cluster, "bob") as bob:
        for high in (1885893988, 0x70687564, 0x70687563):
            bob.execute("SELECT pg_advisory_lock(%s, %s)", (high, oid))
            bob.execute("SELECT pg_advisory_lock((%s::bigint << 32) | %s)", (high, oid))
        conn.execute("SET statement_timeout = '20s'")
        conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
        conn.execute("INSERT INTO customers VALUES (2, 'new', 'be', '2026-01-02')")
        serve_databases(conn)
        latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
        wait_for("the worker's refresh", lambda: conn.execute(
            "SELECT cached_instant FROM hudi.lookup_caches").fetchone() == (latest,), timeout=60)


def test_finishing_commits_locks_only_the_callers_intents(shared, cluster):
    """hudi.finish_pending_commits() locked every intent row before keeping the caller's: an
    open transaction of any role held every table's pending commits back."""
    conn, _ = shared
    conn.execute("CREATE EXTENSION pgrowlocks")
    relid = conn.execute("SELECT 'customers'::regclass::oid").fetchone()[0]
    # An intent of the superuser's table that a finisher would lock (completed or not, it
    # stays: this transaction is the only one that looks).
    conn.execute("INSERT INTO hudi.commit_intents (location, instant, relation, writer, transaction, timeline_dir, metadata) "
                 "VALUES ('file:///nowhere', '20260101000000000', %s, 10, 1, '.hoodie/timeline', '')", (relid,))
    with connect(cluster, "bob") as bob:
        bob.execute("BEGIN")
        assert bob.execute("SELECT * FROM hudi.finish_pending_commits()").fetchall() == []
        bob_pid = bob.execute("SELECT pg_backend_pid()").fetchone()[0]
        locks = conn.execute("SELECT pids FROM pgrowlocks('hudi.commit_intents')").fetchall()
        assert all(bob_pid not in pids for (pids,) in locks), locks
        bob.execute("ROLLBACK")


def test_reports_leak_nothing_to_roles_without_privileges(shared, cluster):
    """Functions that report on a table need SELECT on it (or its ownership); table_properties
    needs USAGE on a server whose base_uri holds the location; planning checks privileges
    before it reads storage, so errors name no location or file."""
    conn, root = shared
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.refresh_lookup_cache('customers')")
    oid = conn.execute("SELECT 'customers'::regclass::oid").fetchone()[0]
    conn.execute("CREATE ROLE carol LOGIN")  # no USAGE on any server
    with connect(cluster, "bob") as bob, connect(cluster, "carol") as carol:
        for sql in (f"SELECT hudi_internal.lookup_cache_lag({oid}, '20260101000000000')",
                    f"SELECT hudi_internal.lookup_cache_bytes({oid})",
                    f"SELECT hudi_internal.lookup_cache_progress({oid})",
                    f"SELECT * FROM hudi_internal.lookup_cache_position({oid})",
                    "SELECT * FROM hudi.timeline('customers')",
                    "SELECT completion_time FROM hudi.latest_commit('customers')",
                    "SELECT * FROM customers",
                    "EXPLAIN SELECT * FROM customers",
                    "SELECT count(*) FROM customers WHERE id = 1"):
            try:
                bob.execute(sql)
                raise AssertionError(f"{sql} succeeded")
            except psycopg.Error as e:
                assert e.sqlstate == "42501", (sql, e.sqlstate, str(e))
                assert str(root) not in str(e) and "file:" not in str(e), str(e)
        assert bob.execute("SELECT count(*) FROM hudi.lookup_caches").fetchone() == (0,)
        assert bob.execute("SELECT count(*) FROM hudi.pending_commits").fetchone() == (0,)
        assert refused(carol, f"SELECT * FROM hudi.table_properties('file://{root}/customers')") == "42501"
        # bob has USAGE on the server whose base_uri holds it: he may read its properties.
        names = [k for (k,) in bob.execute(f"SELECT key FROM hudi.table_properties('file://{root}/customers')")]
        assert "hoodie.table.name" in names
    # A relation that no longer exists reports nothing, as pg_relation_size does.
    assert conn.execute("SELECT hudi_internal.lookup_cache_bytes(4294967295)").fetchone() == (None,)


# The functions of schema hudi with their argument types, and values to try for each type.
FUNCTIONS = {
    "hudi.timeline": ["regclass"],
    "hudi.file_slices": ["regclass"],
    "hudi.latest_commit": ["regclass"],
    "hudi.rollback_failed_writes": ["regclass"],
    "hudi.clean": ["regclass"],
    "hudi.archive": ["regclass"],
    "hudi.compact": ["regclass"],
    "hudi.schedule_compaction": ["regclass"],
    "hudi.run_compaction": ["regclass", "text"],
    "hudi.create_table": ["regclass"],
    "hudi.create_lookup_cache": ["regclass", "text[]", "text[]"],
    "hudi.drop_lookup_cache": ["regclass", "text[]"],
    "hudi.refresh_lookup_cache": ["regclass"],
    "hudi_internal.lookup_cache_lag": ["oid", "text"],
    "hudi_internal.lookup_cache_bytes": ["oid"],
    "hudi_internal.lookup_cache_progress": ["oid"],
    "hudi_internal.lookup_cache_position": ["oid"],
    "hudi.table_properties": ["text"],
    "hudi_internal.claim_consumer_position": ["regclass", "text", "text"],
    "hudi_internal.advance_consumer_position": ["regclass", "text", "text"],
    "hudi.reset_consumer": ["regclass", "text", "text"],
}
VALUES = {
    "regclass": ["NULL", "0", "4294967295", "'plain'", "'a_view'", "'customers'", "'pg_class'"],
    "oid": ["NULL", "0", "4294967295", "'customers'::regclass::oid", "'plain'::regclass::oid"],
    "text": ["NULL", "''", "' '", "E'\\n'", "repeat('x', 100000)", "'20260101000000000'", "'file:///etc'",
             "'s3://b/x'", "'id'", "E'\\U0001F600'"],
    "text[]": ["NULL", "'{}'", "'{NULL}'", "'{id,id}'", "'{\"\"}'", "'{nope}'", "'{id}'", "'{name}'",
               "ARRAY[repeat('x', 1000)]"],
}
# SQLSTATE classes a bad argument may end in: data exception, privileges or objects, not
# supported, object state, FDW errors; never XX (internal) or a crash.
ALLOWED = ("22", "42", "0A", "55", "HV", "25", "40", "57")


def test_every_function_refuses_bad_arguments_with_a_sqlstate(shared, cluster):
    """A seeded fuzz of every hudi.* function with NULL, empty, huge, wrong oid and wrong relkind
    arguments, as a role without privileges and as the table's owner: each call succeeds or
    fails with a SQLSTATE of an expected class, and the server log has no panic."""
    conn, _ = shared
    conn.execute("CREATE TABLE plain (id int)")
    conn.execute("CREATE VIEW a_view AS SELECT 1 AS id")
    conn.execute("GRANT SELECT ON plain, a_view TO bob")
    seed = int(os.environ.get("PG_HUDI_SEED", random.randrange(1 << 30)))
    print("seed", seed)
    rng = random.Random(seed)
    with connect(cluster, "bob") as bob:
        calls = []
        for name, types in FUNCTIONS.items():
            # every value of each argument once, the others drawn at random
            for i, kind in enumerate(types):
                for value in VALUES[kind]:
                    args = [rng.choice(VALUES[t]) for t in types]
                    args[i] = value
                    calls.append(f"SELECT * FROM {name}({', '.join(args)})")
        rng.shuffle(calls)
        for n, sql in enumerate(calls):
            who = bob if n % 2 else conn
            state = refused(who, sql)
            assert state is None or state.startswith(ALLOWED), (seed, sql, state)
    # The prefix is reserved: a misspelt setting is an error, not a silent placeholder.
    assert refused(conn, "SET hudi.no_such_setting = 1") == "42602"
    # The reproductions by name.
    assert refused(conn, "SELECT * FROM hudi.timeline(0)") == "42P01"
    assert refused(conn, "SELECT hudi.create_lookup_cache(NULL, NULL)") == "22004"
    assert refused(conn, "SELECT hudi.create_lookup_cache('customers', NULL)") == "22004"
    assert refused(conn, "SELECT hudi.drop_lookup_cache('customers', '{NULL}')") == "22004"
    assert refused(conn, "SELECT * FROM hudi_internal.lookup_cache_lag(NULL, NULL)") == "22004"
    assert refused(conn, "SELECT hudi.create_lookup_cache('customers', '{id,id}')") == "22023"
    assert refused(conn, "SELECT hudi.create_lookup_cache('plain', '{id}')") == "42809"
    assert conn.execute("SELECT id FROM customers").fetchall() == [(1,)]
    no_panics(cluster)


def test_an_idle_cache_creates_no_files(shared, cluster):
    """Every lookup round reopened RocksDB and left an info log and a write-ahead log behind:
    an idle 21-row cache grew to 992 files in 15 minutes. Rounds of an idle cache now leave its
    files alone."""
    conn, _ = shared
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("ALTER SYSTEM SET hudi.lookup_refresh_interval = 100")
    serve_databases(conn)
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('customers')").fetchone()[0]
    wait_for("the load", lambda: conn.execute("SELECT cached_instant FROM hudi.lookup_caches").fetchone() == (latest,),
             timeout=60)
    data = conn.execute("SHOW data_directory").fetchone()[0]
    cache = os.path.join(data, "pg_hudi/lookup")

    def files():
        return sorted(os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs if "/readers/" not in d + "/")
    before = files()
    refreshed = "SELECT refreshed_at FROM hudi.lookup_cache_state"
    seen = {conn.execute(refreshed).fetchone()[0]}
    # Sixty rounds of the worker (each stamps the cache's state): a minute of rounds at the
    # default hudi.lookup_refresh_interval (an idle cache grew by about 60 files a minute).
    wait_for("sixty lookup rounds", lambda: seen.add(conn.execute(refreshed).fetchone()[0]) or len(seen) > 60, timeout=60)
    assert files() == before


def test_a_storm_of_signals_crashes_nothing_and_loses_nothing(shared, cluster):
    """Reloads, SIGHUP and SIGUSR1 to every pg_hudi process, SIGTERM and pg_terminate_backend to
    the workers, and DROP DATABASE ... WITH (FORCE) of a served database, while two writers
    commit and the lookup rounds refresh two caches. Reloads used to run pgrx's handler on a
    RocksDB thread, which aborted the worker and made the postmaster restart every backend."""
    conn, root = shared
    conn.execute(f"CREATE FOREIGN TABLE other ({COLUMNS}) SERVER lake OPTIONS (path 'other', {KEYS})")
    conn.execute("SELECT hudi.create_table('other')")
    conn.execute("SELECT hudi.create_lookup_cache('customers', '{id}')")
    conn.execute("SELECT hudi.create_lookup_cache('other', '{name}')")
    conn.execute("ALTER SYSTEM SET hudi.lookup_refresh_interval = 100")
    serve_databases(conn)
    conn.execute("CREATE DATABASE doomed")
    with cluster.connect("doomed") as d:
        d.execute("CREATE EXTENSION pg_hudi")
        d.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{root}')")
        d.execute(f"CREATE FOREIGN TABLE t ({COLUMNS}) SERVER lake OPTIONS (path 'doomed', {KEYS})")
        d.execute("SELECT hudi.create_table('t')")
        d.execute("INSERT INTO t VALUES (1, 'x', 'nl', now())")
        d.execute("SELECT hudi.create_lookup_cache('t', '{id}')")
    committed = {"customers": [], "other": []}
    stop = threading.Event()

    def write(table):
        with cluster.connect() as w:
            key = 100
            while not stop.is_set():
                key += 1
                try:
                    w.execute(f"INSERT INTO {table} VALUES (%s, 'w', 'be', now())", (key,))
                    committed[table].append(key)
                except psycopg.OperationalError:
                    return  # a crash ends the session; the assertions below say so

    writers = [threading.Thread(target=write, args=(t,)) for t in committed]
    for w in writers:
        w.start()
    ours = ("SELECT pid, backend_type FROM pg_stat_activity "
            "WHERE backend_type IN ('pg_hudi launcher', 'pg_hudi worker')")
    rng = random.Random(1)
    try:
        wait_for("a cache to load", lambda: conn.execute(
            "SELECT count(*) FROM hudi.lookup_cache_state WHERE state = 'ready'").fetchone()[0] == 2, timeout=60)
        for n in range(200):
            conn.execute("SELECT pg_reload_conf()")
            for pid, kind in conn.execute(ours).fetchall():
                try:
                    os.kill(pid, rng.choice((signal.SIGHUP, signal.SIGUSR1)))
                    if kind == "pg_hudi worker" and n % 20 == 7:
                        os.kill(pid, signal.SIGTERM)
                    if kind == "pg_hudi worker" and n % 20 == 13:
                        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                except ProcessLookupError:
                    pass
            if n == 100:
                conn.execute("DROP DATABASE doomed WITH (FORCE)")
            time.sleep(0.02)
    finally:
        stop.set()
        for w in writers:
            w.join(60)
    no_panics(cluster)
    for table, keys in committed.items():
        assert keys, table
        have = {r[0] for r in conn.execute(f"SELECT id FROM {table}")}
        assert set(keys) <= have, (table, sorted(set(keys) - have)[:10])
    assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'doomed'").fetchone() == (0,)


def test_a_google_key_names_no_endpoint_that_is_not_allowed(cluster):
    """object_store sends a gs:// store's requests to the `gcs_base_url` of the service account
    key's JSON (an emulator's address, with `disable_oauth`): a role other than a superuser put
    an internal address there and bypassed hudi.allowed_endpoints. That endpoint is checked as
    aws_endpoint is."""
    conn = cluster.connect()
    conn.execute("CREATE EXTENSION pg_hudi")
    conn.execute("CREATE SERVER gcs FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'gs://bucket/lake')")
    conn.execute("CREATE ROLE gina LOGIN")
    conn.execute("GRANT USAGE ON FOREIGN SERVER gcs TO gina")
    internal = {"gcs_base_url": "http://169.254.169.254", "disable_oauth": True, "client_email": "", "private_key": ""}
    with connect(cluster, "gina") as gina:
        mapping = "CREATE USER MAPPING FOR gina SERVER gcs OPTIONS (google_service_account_key '{}')"
        assert refused(gina, mapping.format(json.dumps(internal))) == "42501"
        assert refused(gina, mapping.format(json.dumps(internal)[:-1])) == "42501"  # not JSON, yet naming one
        conn.execute("ALTER SYSTEM SET hudi.allowed_endpoints = 'http://127.0.0.1:4443'")
        conn.execute("SELECT pg_reload_conf()")
        wait_for("the allowed endpoints", lambda: gina.execute("SHOW hudi.allowed_endpoints").fetchone()[0] != "")
        gina.execute(mapping.format(json.dumps({**internal, "gcs_base_url": "http://127.0.0.1:4443"})))
        assert refused(gina, "ALTER USER MAPPING FOR gina SERVER gcs OPTIONS (SET google_service_account_key '{}')".format(
            json.dumps(internal))) == "42501"
    conn.execute("ALTER SYSTEM RESET hudi.allowed_endpoints")
    conn.execute("SELECT pg_reload_conf()")


def test_endpoints_are_for_a_superuser_to_allow(cluster):
    """A role with USAGE on an s3:// server pointed its own user mapping's aws_endpoint at an
    internal address, and the address's answer came back in the error. Roles other than
    superusers may name only endpoints of hudi.allowed_endpoints, and no error quotes what a
    store answered."""
    import http.server
    secret = "internal-page-of-the-metadata-service"

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"<html>{secret}</html>".encode()
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_PUT = do_POST = do_GET

        def log_message(self, *args):
            pass

    internal = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=internal.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{internal.server_address[1]}"
    try:
        conn = cluster.connect()
        conn.execute("CREATE EXTENSION pg_hudi")
        conn.execute("CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://bucket/lake')")
        conn.execute("CREATE ROLE alice LOGIN")
        conn.execute("GRANT USAGE ON FOREIGN SERVER lake TO alice")
        conn.execute("GRANT CREATE ON SCHEMA public TO alice")
        credentials = "aws_access_key_id 'k', aws_secret_access_key 's', aws_region 'us-east-1', aws_allow_http 'true'"
        with connect(cluster, "alice") as alice:
            for option in (f"aws_endpoint '{endpoint}'", "aws_endpoint_url 'http://169.254.169.254'",
                           "proxy_url 'http://10.0.0.1:3128'", "azure_storage_use_emulator 'true'",
                           f"endpoint '{endpoint}'"):
                state = refused(alice, f"CREATE USER MAPPING FOR alice SERVER lake OPTIONS ({credentials}, {option})")
                assert state == "42501", option
            conn.execute(f"ALTER SYSTEM SET hudi.allowed_endpoints = '{endpoint}'")
            conn.execute("SELECT pg_reload_conf()")
            wait_for("the allowed endpoints", lambda: alice.execute("SHOW hudi.allowed_endpoints").fetchone()[0] == endpoint)
            assert refused(alice, f"SET hudi.allowed_endpoints = 'http://169.254.169.254'") == "42501"
            alice.execute(f"CREATE USER MAPPING FOR alice SERVER lake OPTIONS ({credentials}, aws_endpoint '{endpoint}')")
            assert refused(alice, "ALTER USER MAPPING FOR alice SERVER lake OPTIONS "
                                  "(SET aws_endpoint 'http://169.254.169.254')") == "42501"
            alice.execute("CREATE FOREIGN TABLE t (id bigint) SERVER lake OPTIONS (path 't')")
            with pytest.raises(psycopg.Error) as e:
                alice.execute("SELECT * FROM t")
            assert "403" in str(e.value) and secret not in str(e.value), str(e.value)
            with pytest.raises(psycopg.Error) as e:
                alice.execute("SELECT * FROM hudi.table_properties('s3://bucket/lake/t')")
            assert secret not in str(e.value), str(e.value)
        assert secret not in cluster.log()
    finally:
        internal.shutdown()


def test_symbolic_links_below_a_table_are_not_followed(shared, cluster):
    """On file://, a symbolic link inside a table made a write land outside the allowed roots,
    and a linked hoodie.properties let a role without privileges read an outside file through
    hudi.table_properties. No path below a table's root is followed through a link."""
    conn, root = shared
    outside = cluster.directory / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("hoodie.table.name=stolen\nsecret-content=1\n")
    give_to_postgres(outside)
    os.symlink(outside, root / "customers" / "country=be")
    assert refused(conn, "INSERT INTO customers VALUES (2, 'linked', 'be', '2026-01-02')") == "42501"
    assert os.listdir(outside) == ["secret.txt"]
    assert conn.execute("SELECT id, country FROM customers").fetchall() == [(1, "nl")]
    (root / "stolen/.hoodie").mkdir(parents=True)
    os.symlink(outside / "secret.txt", root / "stolen/.hoodie/hoodie.properties")
    with connect(cluster, "bob") as bob:
        with pytest.raises(psycopg.Error) as e:
            bob.execute(f"SELECT * FROM hudi.table_properties('file://{root}/stolen')")
        assert e.value.sqlstate == "42501" and "secret-content" not in str(e.value), str(e.value)
    no_panics(cluster)


def test_a_damaged_cached_table_is_reported_and_backs_off(shared, cluster):
    """One cached table whose files are damaged made SELECT * FROM hudi.lookup_caches fail for
    everyone, and its cache was loaded again every second forever (a process and a log line
    each time). The view shows its row with NULL lag and the error; the worker waits longer
    after each failure; lookups read the lake meanwhile."""
    conn, root = shared
    conn.execute(f"CREATE FOREIGN TABLE good ({COLUMNS}) SERVER lake OPTIONS (path 'good', {KEYS})")
    conn.execute("SELECT hudi.create_table('good')")
    conn.execute("INSERT INTO good VALUES (1, 'g', 'nl', now())")
    for table in ("customers", "good"):
        conn.execute(f"SELECT hudi.create_lookup_cache('{table}', '{{id}}')")
        conn.execute(f"SELECT hudi.refresh_lookup_cache('{table}')")
    properties = root / "customers/.hoodie/hoodie.properties"
    properties.write_text(properties.read_text().replace("hoodie.table.name=", "hoodie.table.name=x"))
    conn.execute("INSERT INTO good VALUES (2, 'g', 'nl', now())")
    conn.execute("ALTER SYSTEM SET hudi.lookup_refresh_interval = 100")
    serve_databases(conn)
    state = "SELECT state, failures, next_attempt > clock_timestamp() FROM hudi.lookup_cache_state " \
            "WHERE relation = 'customers'::regclass"
    wait_for("failures in a row", lambda: (lambda r: r[0] == "failed" and r[1] >= 3)(conn.execute(state).fetchone()),
             timeout=60)
    # A session that has not read the table before (and so loads it now) sees the view too.
    with cluster.connect() as fresh:
        rows = fresh.execute('SELECT relation::text, lag_commits, state, error IS NOT NULL FROM hudi.lookup_caches ORDER BY 1').fetchall()
    assert rows[0][:2] == ("customers", None) and rows[0][2] == "failed" and rows[0][3], rows
    # The other cache goes on being refreshed.
    latest = conn.execute("SELECT completion_time FROM hudi.latest_commit('good')").fetchone()[0]
    wait_for("the good cache", lambda: conn.execute(
        "SELECT cached_instant FROM hudi.lookup_caches WHERE relation = 'good'::regclass").fetchone() == (latest,))
    # Waits double: after n failures in a row, 0.1 s * 2^n apart, so few attempts in a while
    # (every 0.1 s, the seconds this test takes would make dozens). Whether a wait is pending at
    # this very moment is not asserted: under load the worker's next round may just be due.
    failures = conn.execute(state).fetchone()[1]
    assert failures < 12, failures
    no_panics(cluster)


def test_a_locked_table_does_not_stall_the_others(shared, cluster):
    """The worker waited without timeout for a table's lock, so one owner's open ALTER FOREIGN
    TABLE stalled the services of every table of the database. A locked table is skipped, as
    autovacuum does, and served in a later round."""
    conn, root = shared
    conn.execute(f"CREATE FOREIGN TABLE second ({COLUMNS}) SERVER lake OPTIONS (path 'second', {KEYS})")
    conn.execute("SELECT hudi.create_table('second')")
    locker = cluster.connect()
    locker.execute("BEGIN")
    # Takes the lock first in the worker's order (the lower oid): customers.
    locker.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '3', ADD clean_retain '1 microsecond')")
    serve_databases(conn)
    checked = "SELECT count(*) FROM hudi.service_state WHERE relation = %s::regclass AND last_checked IS NOT NULL"
    wait_for("the unlocked table's services", lambda: conn.execute(checked, ("second",)).fetchone() == (4,), timeout=60)
    assert conn.execute(checked, ("customers",)).fetchone() == (0,)
    locker.execute("COMMIT")
    wait_for("the table once unlocked", lambda: conn.execute(checked, ("customers",)).fetchone() == (4,), timeout=60)


def test_names_in_any_script_round_trip_and_control_characters_are_refused(shared, cluster):
    """A table name outside the Basic Multilingual Plane was stored as Java stores it (a UTF-16
    surrogate pair) but read back as two U+FFFD, so the table's checksum no longer matched; a
    newline in a name was accepted and broke the Avro namespace and the log lines."""
    conn, root = shared
    for name in ("t😀", "表格", "naïve̊", "שלום"):
        conn.execute(f'CREATE FOREIGN TABLE "{name}" ({COLUMNS}) SERVER lake OPTIONS (path %s, {KEYS})'.replace("%s", f"'{name}'"))
        conn.execute(f"SELECT hudi.create_table('\"{name}\"')")
        conn.execute(f'INSERT INTO "{name}" VALUES (1, %s, \'nl\', now())', (name,))
        assert conn.execute(f'SELECT name FROM "{name}"').fetchall() == [(name,)]
        properties = dict(conn.execute("SELECT key, value FROM hudi.table_properties(%s)", (f"file://{root}/{name}",)).fetchall())
        assert properties["hoodie.table.name"] == name
    conn.execute(f'CREATE FOREIGN TABLE "bad\nname" ({COLUMNS}) SERVER lake OPTIONS (path \'bad\', {KEYS})')
    assert refused(conn, "SELECT hudi.create_table(E'\"bad\\nname\"')") == "22023"
    assert not (root / "bad").exists()
    no_panics(cluster)


def test_an_unreachable_store_does_not_hold_up_the_other_tables(shared, cluster):
    """The worker serves a database's tables in turn. A table whose store accepts connections
    and never answers held the others up for its server's whole retry time, once per service.
    The worker retries a request for at most 30 s, and a table whose lease it cannot take
    waits for the next round with all its services."""
    import socket
    conn, root = shared
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(64)
    held = []

    def hold_connections():
        try:
            while True:
                held.append(hanging.accept())  # and never answer
        except OSError:
            pass  # closed at the end of the test
    threading.Thread(target=hold_connections, daemon=True).start()
    port = hanging.getsockname()[1]
    try:
        conn.execute("CREATE SERVER dead FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://bucket/lake', "
                     "request_timeout '2s', retry_timeout '10min', max_retries '100')")
        conn.execute("CREATE USER MAPPING FOR PUBLIC SERVER dead OPTIONS (aws_access_key_id 'k', aws_secret_access_key 's', "
                     f"aws_region 'us-east-1', aws_allow_http 'true', aws_endpoint 'http://127.0.0.1:{port}')")
        # First in the worker's order (its oid is lower than the next table's).
        conn.execute(f"CREATE FOREIGN TABLE stuck ({COLUMNS}) SERVER dead OPTIONS (path 't', {KEYS}, services 'auto')")
        conn.execute(f"CREATE FOREIGN TABLE fine ({COLUMNS}) SERVER lake OPTIONS (path 'fine', {KEYS})")
        conn.execute("SELECT hudi.create_table('fine')")
        started = time.monotonic()
        serve_databases(conn)
        checked = "SELECT count(*) FROM hudi.service_state WHERE relation = 'fine'::regclass AND last_checked IS NOT NULL"
        wait_for("the other table's services", lambda: conn.execute(checked).fetchone() == (4,), timeout=120)
        assert time.monotonic() - started < 90
        # Its first service failed to take the lease; the others were not tried.
        failed = conn.execute("SELECT service, failures > 0 FROM hudi.service_state WHERE relation = 'stuck'::regclass").fetchall()
        assert failed == [("rollback", True)], failed
    finally:
        hanging.close()
