"""Tables on object stores, against real servers started for each test — an S3-compatible one
(moto) and Azure's emulator (Azurite): reads, writes, transactions, consume, compaction,
rollback and the table lock (create-if-absent is `If-None-Match: *` on both), read back by the
reference reader from the same server."""

import os

import pytest

from conftest import kill_backend_and_wait, reference_rows_at, rollback_once_expired, run_in_threads

# The writable table of most tests here: bucketed by id, partitioned by country.
CUSTOMERS = """CREATE FOREIGN TABLE customers (id bigint, name text, country text, balance numeric(12, 2),
                 ts timestamptz) SERVER lake
               OPTIONS (path 'customers', primary_key 'id,country', ordering_field 'ts', partition_by 'country', buckets '4')"""


def create_lake_on(conn, store, server_options=None, endpoint=None):
    """pg_hudi and a server `lake` on the store's bucket (with `server_options`), with a PUBLIC
    user mapping of the store's credentials (its endpoint replaced by `endpoint`)."""
    conn.execute("CREATE EXTENSION pg_hudi")
    options = {"base_uri": store.base_uri, **(server_options or {})}
    conn.execute("CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS ("
                 + ", ".join(f"{k} '{v}'" for k, v in options.items()) + ")")
    credentials = {**store.storage_options(), **({"aws_endpoint": endpoint} if endpoint else {})}
    conn.execute("CREATE USER MAPPING FOR PUBLIC SERVER lake OPTIONS ("
                 + ", ".join(f"{k} '{v}'" for k, v in credentials.items()) + ")")


@pytest.fixture
def s3_lake(cluster, object_store):
    """pg_hudi, a server on the store's bucket with a user mapping for it, and a writable table
    `customers` on it: (connection, store server, the table's URI)."""
    s3 = object_store
    with cluster.connect() as conn:
        create_lake_on(conn, s3)
        conn.execute("SET timezone = 'UTC'")
        conn.execute(CUSTOMERS)
        uri = conn.execute("SELECT hudi.create_table('customers')").fetchone()[0]
        assert uri == f"{s3.base_uri}/customers"
        yield conn, s3, uri


def rows(conn, table="customers"):
    return sorted(conn.execute(f"SELECT id, name, country, balance FROM {table}").fetchall())


def test_reads_writes_transactions_consume_and_compaction(s3_lake):
    conn, s3, uri = s3_lake
    assert "customers/.hoodie/hoodie.properties" in s3.keys("customers/.hoodie/")
    conn.execute("CREATE TABLE heap (id bigint PRIMARY KEY, name text, country text, balance numeric(12, 2))")
    conn.execute("CREATE FOREIGN TABLE customer_changes (id bigint, name text, _hoodie_operation text) "
                 "SERVER lake OPTIONS (path 'customers', query_type 'incremental')")
    consume = "SELECT id, name, _hoodie_operation FROM hudi.consume(NULL::customer_changes, 'etl') ORDER BY 1"
    insert = "SELECT g, 'c' || g, (ARRAY['nl','be','fr'])[g % 3 + 1], g FROM generate_series(1, 200) g"
    conn.execute(f"INSERT INTO customers (id, name, country, balance) {insert}")
    conn.execute(f"INSERT INTO heap {insert}")
    assert rows(conn) == rows(conn, "heap")
    assert len(conn.execute(consume).fetchall()) == 200
    # One transaction: its statements see each other's writes, and it commits as one instant.
    with conn.transaction():
        for sql in ("UPDATE {t} SET name = name || '+', balance = balance * 2 WHERE id % 7 = 0",
                    "DELETE FROM {t} WHERE id % 10 = 0",
                    "UPDATE {t} SET name = name || '!' WHERE id % 7 = 0 AND id % 2 = 0"):
            conn.execute(sql.format(t="customers"))
            conn.execute(sql.format(t="heap"))
            assert rows(conn) == rows(conn, "heap")
    changes = conn.execute(consume).fetchall()
    assert {op for _, _, op in changes} == {"U", "D"} and len(changes) == 28 + 20 - 2
    assert {i for i, _, op in changes if op == "D"} == set(range(10, 201, 10)), "a delete names its key"
    # ROLLBACK leaves nothing, in storage either.
    def table_files():  # what a write leaves (the lock's epochs move on with every writer)
        return sorted(k for k in s3.keys("customers/") if "/.locks/" not in k)
    before = table_files()
    with conn.transaction(force_rollback=True):
        conn.execute("INSERT INTO customers (id, name, country, balance) VALUES (999, 'ghost', 'nl', 1)")
    assert table_files() == before, "the rolled-back write's files are gone"
    assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] > 0
    assert rows(conn) == rows(conn, "heap")
    assert [k for k in s3.keys("customers/country=nl/") if k.endswith(".parquet")], "base files on S3"
    assert conn.execute(consume).fetchall() == [], "a compaction changes no row"
    assert reference_rows_at(uri, s3.storage_options()) == rows(conn)
    # IMPORT FOREIGN SCHEMA finds the table in the bucket and declares its columns.
    conn.execute("CREATE SCHEMA imported")
    conn.execute("IMPORT FOREIGN SCHEMA root FROM SERVER lake INTO imported")
    assert rows(conn, "imported.customers") == rows(conn)
    # Time travel to before the transaction.
    first = conn.execute("SELECT min(instant) FROM hudi.timeline('customers') WHERE action = 'deltacommit'").fetchone()[0]
    conn.execute(f"SET hudi.as_of_instant = '{first}'")
    assert len(rows(conn)) == 200
    conn.execute("RESET hudi.as_of_instant")


def test_concurrent_writers_share_the_lock_in_the_store(s3_lake, cluster):
    """4 sessions x 8 transactions upsert overlapping keys at once: the table lock is a
    create-if-absent in the store, so every transaction commits, completion times are unique and
    increasing in commit order, and every key ends with its greatest ordering value."""
    conn, s3, uri = s3_lake
    import random
    written = []

    def writer(n):
        rng = random.Random(n)
        with cluster.connect() as c:
            for i in range(8):
                keys = rng.sample(range(20), 4)
                ts = rng.randrange(1000)
                with c.transaction():
                    for key in keys:
                        c.execute("INSERT INTO customers VALUES (%s, %s, 'nl', %s, "
                                  "'2026-01-01'::timestamptz + %s * interval '1 second')", (key, f"w{n}-{i}", ts, ts))
                written.append((keys, ts, f"w{n}-{i}"))

    errors = run_in_threads(writer, 4)
    assert not errors, errors[:3]
    completed = conn.execute("SELECT instant, completion_time FROM hudi.timeline('customers') "
                             "WHERE action = 'deltacommit' AND state = 'completed'").fetchall()
    assert len(completed) == 32
    times = [c for _, c in completed]
    assert len(set(times)) == 32
    # Every key holds a version with the greatest ordering value written for it.
    final = {r[0]: r[3] for r in rows(conn)}
    best = {}
    for keys, ts, _ in written:
        for key in keys:
            best[key] = max(best.get(key, -1), ts)
    assert final == best
    assert reference_rows_at(uri, s3.storage_options()) == rows(conn)


def test_a_killed_writer_is_rolled_back(s3_lake, cluster):
    conn, s3, uri = s3_lake
    conn.execute("INSERT INTO customers VALUES (1, 'kept', 'nl', 1, '2026-01-01')")
    victim = cluster.connect()
    pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
    victim.execute("BEGIN")
    victim.execute("INSERT INTO customers SELECT g, 'lost', 'nl', 1, '2026-01-02' FROM generate_series(2, 100002) g")
    assert [k for k in s3.keys("customers/country=nl/") if ".log." in k], "logs were written"
    kill_backend_and_wait(cluster, pid)
    with cluster.connect() as c:
        (rolled,) = [(r[0], r[2]) for r in rollback_once_expired(c)]
        assert rolled[1] > 0
        assert not [k for k in s3.keys("customers/") if rolled[0] in k and "rollback" not in k]
        assert rows(c) == [(1, "kept", "nl", 1)]
    assert reference_rows_at(uri, s3.storage_options()) == [(1, "kept", "nl", 1)]


def test_secrets_appear_in_no_error_plan_view_or_log(s3_lake, cluster):
    """The user mapping's secret never shows: not in errors (a table that is not there, bad
    rows), EXPLAIN VERBOSE, the hudi.* functions and views, or the server log."""
    conn, store, _ = s3_lake
    secret = store.SECRET
    conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, '2026-01-01')")
    conn.execute("CREATE FOREIGN TABLE missing (id bigint) SERVER lake OPTIONS (path 'not-there')")
    seen = []
    for sql in ("SELECT * FROM missing", "SELECT hudi.create_table('customers')",
                "INSERT INTO customers VALUES (NULL, 'no key', 'nl', 1, '2026-01-01')"):
        try:
            conn.execute(sql)
            raise AssertionError(f"{sql} should fail")
        except Exception as e:  # noqa: BLE001 - the whole report is what is checked
            diag = getattr(e, "diag", None)
            seen.append(" ".join(str(x) for x in (e, getattr(diag, "message_detail", ""), getattr(diag, "message_hint", ""),
                                                    getattr(diag, "context", ""))))
    seen.append(str(conn.execute("EXPLAIN (VERBOSE) SELECT * FROM customers WHERE id = 1").fetchall()))
    for sql in ("SELECT * FROM hudi.timeline('customers')", "SELECT * FROM hudi.file_slices('customers')",
                "SELECT * FROM hudi.pending_commits", "SELECT completion_time FROM hudi.latest_commit('customers')"):
        seen.append(str(conn.execute(sql).fetchall()))
    seen.append(cluster.log())
    assert all(secret not in text for text in seen)
    assert "not-there" in seen[0], seen[0]


def test_gcs_options_are_checked_without_a_server(cluster):
    """gs:// options before any request: the location and the credential options are taken
    where they belong, refused where they do not, and a key that cannot be used is a clear
    error that does not show it (the emulator's tests are those of the `object_store` fixture)."""
    import psycopg
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION pg_hudi")
        conn.execute("CREATE SERVER gcs FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'gs://bucket/lake')")
        with pytest.raises(psycopg.Error) as e:
            conn.execute("ALTER SERVER gcs OPTIONS (ADD google_service_account_key 'x')")
        assert e.value.diag.message_hint == "Credentials belong in USER MAPPING options."
        with pytest.raises(psycopg.Error) as e:
            conn.execute("CREATE USER MAPPING FOR PUBLIC SERVER gcs OPTIONS (google_no_such_option 'x')")
        assert e.value.sqlstate.startswith("HV")
        key = '{"type": "service_account", "private_key": "not-a-pem-key-secret-42", "client_email": "a@b"}'
        conn.execute(f"CREATE USER MAPPING FOR PUBLIC SERVER gcs OPTIONS (google_service_account_key '{key}')")
        conn.execute("CREATE FOREIGN TABLE t (id bigint) SERVER gcs OPTIONS (path 't')")
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT * FROM t")
        report = f"{e.value} {e.value.diag.message_detail}"
        assert e.value.sqlstate == "22023" and "gs://bucket/lake/t" in report, report
        assert "not-a-pem-key-secret-42" not in report and "not-a-pem-key-secret-42" not in cluster.log()


def test_two_servers_write_one_table_at_once(cluster, object_store):
    """Two PostgreSQL servers (own data directories, ports and system identifiers) write the
    same table in the store at once — overlapping keys, ordering values in random order —
    while one of them compacts: no transaction fails, completion times are unique, both
    servers and the reference reader read the rows of the model (the greatest ordering value
    of each key)."""
    import random
    from conftest import Cluster
    store = object_store
    second = Cluster(cluster.directory / "second").start()
    try:
        servers = [cluster, second]
        for i, server in enumerate(servers):
            with server.connect() as conn:
                create_lake_on(conn, store)
                conn.execute(CUSTOMERS)
                if i == 0:
                    conn.execute("SELECT hudi.create_table('customers')")
        systems = {s.connect().execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0] for s in servers}
        assert len(systems) == 2
        seed = random.randrange(1 << 30)
        print(f"seed {seed}")
        orderings = list(range(200))
        random.Random(seed).shuffle(orderings)
        jobs = [orderings[i::4] for i in range(4)]  # each writer's ordering values, distinct overall
        written = []

        def writer(n):
            rng = random.Random(seed + n)
            with servers[n % 2].connect() as c:
                for i, ts in enumerate(jobs[n][:10]):
                    keys = rng.sample(range(30), 3)
                    with c.transaction():
                        for key in keys:
                            c.execute("INSERT INTO customers VALUES (%s, %s, (ARRAY['nl','be'])[%s %% 2 + 1], %s, "
                                      "'2026-01-01'::timestamptz + %s * interval '1 second')",
                                      (key, f"s{n % 2}w{n}-{i}", key, ts, ts))
                    written.append((keys, ts))
                    if n == 1 and i % 4 == 3:
                        c.execute("SELECT * FROM hudi.compact('customers')")

        errors = run_in_threads(writer, 4)
        assert not errors, errors[:3]
        model = {}
        for keys, ts in written:
            for key in keys:
                model[key] = max(model.get(key, -1), ts)
        for server in servers:
            with server.connect() as c:
                assert {r[0]: r[3] for r in rows(c)} == model
                completed = c.execute("SELECT completion_time FROM hudi.timeline('customers') "
                                      "WHERE state = 'completed' AND action IN ('deltacommit', 'commit')").fetchall()
                assert len(completed) == len(set(completed)) >= 40
        with cluster.connect() as c:
            assert c.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE action = 'commit'").fetchone()[0] >= 1
            assert reference_rows_at(f"{store.base_uri}/customers", store.storage_options()) == rows(c)
    finally:
        second.stop()


@pytest.fixture
def s3_server(cluster):
    from conftest import S3Server
    server = S3Server(cluster.directory / "s3").start()
    yield server
    server.stop()


def test_transient_faults_are_retried_and_nothing_partial_becomes_visible(cluster, s3_server):
    """A proxy between pg_hudi and the S3 server answers 10% of requests 503 (half of them after
    the server acted) and holds back 2% of the answers past the request timeout; the first
    conditional creates (the table lock, instants) are faulted on purpose. Seeded transactions
    against a heap copy all commit, every read sees the heap's rows, a rolled-back transaction
    leaves nothing, and the reference reader reads the heap's rows from the server itself."""
    import random
    from fault_proxy import FaultProxy
    seed = int(os.environ.get("PG_HUDI_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    proxy = FaultProxy(s3_server.port, seed, delayed=0.02, delay=0.8,
                       first_creates=["unavailable", "delayed", "unavailable", "delayed"]).start()
    try:
        with cluster.connect() as conn:
            create_lake_on(conn, s3_server, {"request_timeout": "500ms", "max_retries": "10", "retry_timeout": "60s"},
                           endpoint=proxy.endpoint)
            conn.execute(CUSTOMERS)
            conn.execute("SELECT hudi.create_table('customers')")
            conn.execute("CREATE TABLE heap (id bigint PRIMARY KEY, name text, country text, balance numeric(12, 2), ts timestamptz)")
            statements = [
                "INSERT INTO {t} SELECT g, 'n' || g, (ARRAY['nl','be'])[g % 2 + 1], g, '2026-01-01' FROM generate_series({a}, {a} + 20) g "
                "WHERE NOT EXISTS (SELECT FROM {t} x WHERE x.id = g)",
                "UPDATE {t} SET balance = balance + 1, name = name || '+' WHERE id % 5 = {b}",
                "DELETE FROM {t} WHERE id % 11 = {b}",
            ]
            for i in range(4):
                chosen = [(rng.choice(statements), rng.randrange(100), rng.randrange(5)) for _ in range(rng.randrange(1, 3))]
                if i == 0:  # rows for the others to change, and for the compaction
                    chosen.insert(0, (statements[0], 0, 0))
                with conn.transaction():
                    for sql, a, b in chosen:
                        conn.execute(sql.format(t="customers", a=a, b=b))
                        conn.execute(sql.format(t="heap", a=a, b=b))
                assert rows(conn) == rows(conn, "heap"), f"after transaction {i}"
                if i == 1:
                    assert conn.execute("SELECT * FROM hudi.compact('customers')").fetchall()
            before = conn.execute("SELECT count(*) FROM hudi.timeline('customers')").fetchone()[0]
            with conn.transaction(force_rollback=True):
                conn.execute("INSERT INTO customers VALUES (1000, 'ghost', 'nl', 1, '2026-01-01')")
            assert conn.execute("SELECT * FROM hudi.compact('customers')").fetchall()
            assert rows(conn) == rows(conn, "heap")
            timeline = conn.execute("SELECT action, state FROM hudi.timeline('customers')").fetchall()
            assert all(state == "completed" for _, state in timeline), timeline
            assert len(timeline) == before + 1, "the rolled-back write left no instant, the compaction one"
            # A completed write is one the client saw commit: 4 transactions, 2 compactions.
            assert sorted(a for a, _ in timeline) == ["commit"] * 2 + ["deltacommit"] * 4
        counts = dict(proxy.counts)
        print(counts)
        assert counts["creates_faulted"] == 4 and counts["unavailable"] > 4 and counts["delayed"] > 4, counts
        # Read past the proxy, from the server itself.
        assert reference_rows_at(f"{s3_server.base_uri}/customers", s3_server.storage_options()) == \
            sorted(r for r in rows(cluster.connect(), "heap"))
    finally:
        proxy.stop()


def test_a_store_without_conditional_writes_is_refused_before_anything_changes(cluster, s3_server):
    import psycopg
    with cluster.connect() as conn:
        create_lake_on(conn, s3_server)
        conn.execute("""CREATE FOREIGN TABLE customers (id bigint, name text) SERVER lake
                        OPTIONS (path 'customers', primary_key 'id', merge_mode 'commit_time')""")
        conn.execute("SELECT hudi.create_table('customers')")
        # A session that wrote before keeps the user mapping it read until it changes (in
        # another session here): the change is what its next statement uses.
        session = cluster.connect()
        session.execute("INSERT INTO customers VALUES (1, 'a')")
        keys = s3_server.keys("customers/")
        conn.execute("ALTER USER MAPPING FOR PUBLIC SERVER lake OPTIONS (ADD aws_conditional_put 'disabled')")
        for writer in (conn, session):
            with pytest.raises(psycopg.Error) as e:
                writer.execute("INSERT INTO customers VALUES (2, 'b')")
            assert e.value.sqlstate == "0A000", e.value
            assert "cannot create objects conditionally" in str(e.value) and "aws_conditional_put" in e.value.diag.message_hint
        assert sorted(s3_server.keys("customers/")) == sorted(keys), "nothing was written"
        assert conn.execute("SELECT id, name FROM customers").fetchall() == [(1, "a")]
        conn.execute("ALTER USER MAPPING FOR PUBLIC SERVER lake OPTIONS (DROP aws_conditional_put)")
        session.execute("INSERT INTO customers VALUES (2, 'b')")
        session.close()
        assert conn.execute("SELECT id, name FROM customers ORDER BY id").fetchall() == [(1, "a"), (2, "b")]


def test_the_servers_own_credentials_only_when_a_superuser_allows_them(cluster, s3_server):
    """The standard credential chain (here: AWS_* variables in the database server's
    environment) signs requests only for a server whose credential_chain a superuser set; a
    role of its own gets a clear error without credentials, and may not set the options that
    borrow the server's identity."""
    import psycopg
    from conftest import Cluster
    environment = {"AWS_ACCESS_KEY_ID": s3_server.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": s3_server.SECRET_KEY,
                   "AWS_REGION": s3_server.REGION, "AWS_ENDPOINT": s3_server.endpoint, "AWS_ALLOW_HTTP": "true"}
    server = Cluster(cluster.directory / "chain").start(environment)
    try:
        with server.connect() as su:
            su.execute("CREATE EXTENSION pg_hudi")
            su.execute("CREATE ROLE alice LOGIN")
            su.execute("CREATE SCHEMA alice AUTHORIZATION alice")
            su.execute("GRANT USAGE ON FOREIGN DATA WRAPPER hudi_fdw TO alice")
            su.execute(f"CREATE SERVER chain FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri '{s3_server.base_uri}', "
                       "credential_chain 'true')")
            su.execute("GRANT USAGE ON FOREIGN SERVER chain TO alice")
            su.execute("CREATE FOREIGN TABLE customers (id bigint, name text) SERVER chain "
                       "OPTIONS (path 'customers', primary_key 'id', merge_mode 'commit_time')")
            su.execute("GRANT SELECT, INSERT ON customers TO alice")
            su.execute("SELECT hudi.create_table('customers')")
        with server.connect(user="alice") as alice:
            alice.execute("INSERT INTO customers VALUES (1, 'through the chain')")
            assert alice.execute("SELECT id, name FROM customers").fetchall() == [(1, "through the chain")]
            with pytest.raises(psycopg.Error) as e:
                alice.execute(f"CREATE SERVER mine FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri '{s3_server.base_uri}', "
                              "credential_chain 'true')")
            assert e.value.sqlstate == "42501"
            alice.execute(f"CREATE SERVER mine FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri '{s3_server.base_uri}')")
            for option in ("aws_web_identity_token_file '/etc/passwd'", "aws_container_credentials_relative_uri '/v2'",
                           "aws_metadata_endpoint 'http://127.0.0.1:1'"):
                with pytest.raises(psycopg.Error) as e:
                    alice.execute(f"CREATE USER MAPPING FOR alice SERVER mine OPTIONS ({option})")
                assert e.value.sqlstate == "42501", option
            alice.execute("CREATE FOREIGN TABLE theirs (id bigint, name text) SERVER mine OPTIONS (path 'customers')")
            with pytest.raises(psycopg.Error) as e:
                alice.execute("SELECT * FROM theirs")
            assert e.value.sqlstate == "42501" and "no credentials for s3://lake/customers" in str(e.value)
            assert "credential_chain" in e.value.diag.message_hint
            # hudi.table_properties reads through a server she may use whose base holds it:
            # the one a superuser let use the chain.
            keys = [k for (k,) in alice.execute("SELECT key FROM hudi.table_properties('s3://lake/customers')")]
            assert "hoodie.table.name" in keys
        assert reference_rows_at(f"{s3_server.base_uri}/customers", s3_server.storage_options(), ("id", "name")) == \
            [(1, "through the chain")]
    finally:
        server.stop()

def test_requests_a_query_and_its_repetition_make(cluster, s3_server):
    """Counted from the S3 server's own record of what it handled, on a table of 16 file groups
    (base files and logs): planning and executing one query list the table's files once; a
    point query lists only the timeline and reads only its bucket's file slice; repeated on the
    unchanged table, it costs one timeline LIST plus that slice's GETs."""
    s3 = s3_server
    with cluster.connect() as conn:
        create_lake_on(conn, s3)
        conn.execute("""CREATE FOREIGN TABLE t (_hoodie_file_name text, id bigint, v text) SERVER lake
                        OPTIONS (path 't', primary_key 'id', merge_mode 'commit_time', buckets '16')""")
        conn.execute("SELECT hudi.create_table('t')")
        conn.execute("INSERT INTO t (id, v) SELECT g, 'v' || g FROM generate_series(1, 2000) g")
        conn.execute("SELECT * FROM hudi.compact('t')")
        conn.execute("UPDATE t SET v = v || '+' WHERE id % 3 = 0")
        slices = conn.execute("SELECT file_id FROM hudi.file_slices('t')").fetchall()
        assert len(slices) == 16

    def measured(sql):
        # A new session: nothing cached in it yet but what `sql` itself loads.
        s3.record_requests()
        result = session.execute(sql).fetchall()
        return result, s3.recorded_requests()

    def lists(requests, recursive):
        return [r for r in requests if r[0] == "GET" and "list-type=2" in r[2] and ("delimiter=/" in r[2]) != recursive]

    def data_reads(requests):
        return [r[1] for r in requests if r[0] in ("GET", "HEAD") and "list-type" not in r[2] and "/.hoodie/" not in r[1]]

    with cluster.connect() as session:
        (count,), requests = measured("SELECT count(*) FROM t")
        assert count == (2000,)
        assert len(lists(requests, recursive=True)) == 1, "planning and executing list the files once"
        assert len(lists(requests, recursive=False)) == 1
        print("count(*):", len(requests), "requests")
        point, first = measured("SELECT v FROM t WHERE id = 42")
        assert point == [("v42+",)]
        (file_name,) = session.execute("SELECT _hoodie_file_name FROM t WHERE id = 42").fetchone()
        file_id = file_name.split("_")[0]
        for requests in (first, measured("SELECT v FROM t WHERE id = 42")[1]):
            assert lists(requests, recursive=True) == [] and len(lists(requests, recursive=False)) == 1, requests
            reads = data_reads(requests)
            assert reads and all(file_id in path for path in reads), reads
            assert len(requests) == 1 + len(reads), "nothing but the timeline LIST and the slice's GETs"
            print("WHERE id = 42:", len(requests), "requests:", requests)
        # A change to the table is seen by the next statement.
        with cluster.connect() as writer:
            writer.execute("UPDATE t SET v = 'changed' WHERE id = 42")
        changed, requests = measured("SELECT v FROM t WHERE id = 42")
        assert changed == [("changed",)] and len(lists(requests, recursive=True)) == 1
        # A transaction reads its own writes without listing the table's files again: after
        # the first statement that sees its new instants, its own files are added to the state.
        with session.transaction(force_rollback=True):
            session.execute("UPDATE t SET v = 'mine' WHERE id = 42")
            assert measured("SELECT v FROM t WHERE id = 42")[0] == [("mine",)]
            for sql in ("UPDATE t SET v = 'mine again' WHERE id IN (42, 43)", "SELECT v FROM t WHERE id IN (42, 43)"):
                s3.record_requests()
                result = session.execute(sql)
                requests = s3.recorded_requests()
                assert lists(requests, recursive=True) == [] and len(lists(requests, recursive=False)) == 1, requests
            assert result.fetchall() == [("mine again",), ("mine again",)]
        assert measured("SELECT v FROM t WHERE id IN (42, 43) ORDER BY id")[0] == [("changed",), ("v43",)]


def test_a_table_listed_through_its_metadata_table_costs_no_listing_of_its_partitions(cluster, s3_server):
    """A table of 100 partitions with a metadata table (`metadata_table 'on'`): a new backend's
    first query lists only the two timelines and the metadata table's files partition (a
    storage listing would list the table's every directory), and reads the same rows as the
    reference reader, which lists through the metadata table too."""
    s3 = s3_server
    with cluster.connect() as conn:
        create_lake_on(conn, s3)
        conn.execute("""CREATE FOREIGN TABLE t (id bigint, p int, v text) SERVER lake
                        OPTIONS (path 't', primary_key 'id,p', partition_by 'p', buckets '1', merge_mode 'commit_time',
                                 metadata_table 'on')""")
        conn.execute("SELECT hudi.create_table('t')")
        conn.execute("INSERT INTO t SELECT g, g % 100, 'v' || g FROM generate_series(1, 1000) g")
        conn.execute("SELECT * FROM hudi.compact('t')")
        conn.execute("UPDATE t SET v = v || '+' WHERE id % 7 = 0")
    with cluster.connect() as session:
        s3.record_requests()
        rows = session.execute("SELECT count(*), count(*) FILTER (WHERE v LIKE '%+'), count(DISTINCT p) FROM t").fetchone()
        requests = s3.recorded_requests()
    assert rows == (1000, 142, 100)
    listings = [r for r in requests if r[0] == "GET" and "list-type=2" in r[2]]
    assert len(listings) <= 3, listings
    assert all("delimiter=/" in r[2] for r in listings), "no recursive listing of the table"
    prefixes = sorted(r[2].split("prefix=")[1].split("&")[0] for r in listings)
    assert all("hoodie" in prefix for prefix in prefixes), prefixes
    print(len(requests), "requests:", len(listings), "listings:", prefixes)
    reference = reference_rows_at(f"{s3.base_uri}/t", s3.storage_options(), ("id", "p", "v"))
    assert len(reference) == 1000 and sum(1 for _, _, v in reference if v.endswith("+")) == 142


def test_the_s3_servers_conditional_writes_have_one_winner():
    """The tests' S3 server (tests/moto_server.py) lets one of many PUTs conditional on one ETag
    succeed, as S3 does: moto alone checks the condition and writes in two steps, and with
    threads switched often (here every 10 microseconds) about one round in 25 had two winners —
    the two holders of Hudi's storage lock a long lock run once saw."""
    import sys
    import threading
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError
    from moto.server import ThreadedMotoServer
    import moto_server  # noqa: F401 (makes the server's writes atomic)
    from servers import free_port
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    interval = sys.getswitchinterval()
    try:
        def client():
            return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="k", aws_secret_access_key="s",
                                region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
        setup, clients = client(), [client() for _ in range(8)]
        setup.create_bucket(Bucket="lake")
        setup.put_object(Bucket="lake", Key="lock", Body=b"start")
        sys.setswitchinterval(1e-5)
        rounds_without_one_winner = 0
        for round_ in range(150):
            etag = setup.head_object(Bucket="lake", Key="lock")["ETag"]
            winners, barrier = [], threading.Barrier(len(clients))

            def put(n):
                barrier.wait()
                try:
                    clients[n].put_object(Bucket="lake", Key="lock", Body=f"{round_}-{n}".encode(), IfMatch=etag)
                    winners.append(n)
                except ClientError as e:
                    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 412, e
            threads = [threading.Thread(target=put, args=(n,)) for n in range(len(clients))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rounds_without_one_winner += len(winners) != 1
        assert rounds_without_one_winner == 0
    finally:
        sys.setswitchinterval(interval)
        server.stop()


def test_the_gcs_servers_conditional_writes_have_one_winner(tmp_path):
    """The tests' GCS server (tests/gcs_server.py) creates an object for one of eight XML-API
    PUTs with `x-goog-if-generation-match: 0`, and replaces it for one of eight naming its
    generation, answering the others 412 — as GCS does, and as object_store's creates and
    updates need (fake-gcs-server's media uploads, which the proxy first used, ignore the
    precondition: every PUT won)."""
    import threading
    import urllib.error
    import urllib.request
    from servers import GcsServer
    server = GcsServer(tmp_path / "gcs").start()
    try:
        def put(key, generation, body):
            request = urllib.request.Request(f"{server.endpoint}/{server.bucket}/{key}", data=body, method="PUT",
                                             headers={"x-goog-if-generation-match": generation})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, response.headers["x-goog-generation"]
            except urllib.error.HTTPError as e:
                return e.code, None

        def race(key, generation):
            outcomes, barrier = [], threading.Barrier(8)

            def one(n):
                barrier.wait()
                outcomes.append(put(key, generation, f"{n}".encode()))
            threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sorted(outcomes, key=lambda o: o[0])

        for round_ in range(10):
            key = f"lock%2F{round_}"
            created = race(key, "0")
            assert [status for status, _ in created] == [200] + [412] * 7, created
            replaced = race(key, created[0][1])
            assert [status for status, _ in replaced] == [200] + [412] * 7, replaced
            assert race(key, created[0][1]) == [(412, None)] * 8, "the old generation is gone"
    finally:
        server.stop()


def test_hudis_storage_lock_excludes_a_contender_following_javas_rules(cluster, s3_server):
    """Where a writer took Hudi's storage-based lock before (its lock object exists), pg_hudi's
    writers take it too (hudi.storage_lock 'auto'): contenders following the Java provider's
    rules (tests/hudi_storage_lock.py, written from the Java source, not from pg_hudi) take and
    release it in a loop while two sessions insert. While a contender holds it no instant of
    the table completes (pg_hudi completes instants only under it), no two contenders hold it at
    once, and every insert commits; the last holder, pg_hudi, left it released.
    PG_HUDI_LOCK_CONTENDERS and PG_HUDI_LOCK_ROUNDS make the run longer; PG_HUDI_LOCK_WRITER_PAUSE
    (seconds between a session's inserts) keeps a long run's timeline, which every round lists,
    from growing with thousands of instants."""
    import re
    import threading
    import time
    from hudi_storage_lock import JavaRulesLock
    contenders, rounds = int(os.environ.get("PG_HUDI_LOCK_CONTENDERS", "3")), int(os.environ.get("PG_HUDI_LOCK_ROUNDS", "40"))
    pause = float(os.environ.get("PG_HUDI_LOCK_WRITER_PAUSE", "0"))
    s3 = s3_server
    with cluster.connect() as conn:
        create_lake_on(conn, s3)
        conn.execute(CUSTOMERS)
        conn.execute("SELECT hudi.create_table('customers')")
    # A Java writer took it once: from now on the table's writers use it.
    first = JavaRulesLock(s3.client(), s3.bucket, "customers")
    assert first.try_lock()
    first.unlock()

    def completed():
        return {k for k in s3.keys("customers/.hoodie/timeline/") if re.search(r"/\d+_\d+\.\w+$", k)}

    violations, owners, holding, written = [], set(), [], []
    stop = threading.Event()

    def contender(n):
        lock = JavaRulesLock(s3.client(), s3.bucket, "customers")
        for _ in range(rounds):
            while not lock.try_lock():
                time.sleep(0.02)
            holding.append(n)
            if len(holding) > 1:
                violations.append(f"contenders {holding} hold it at once")
            owners.add(lock.owner)
            before = completed()
            time.sleep(0.01)
            new = completed() - before
            if new:
                violations.append(f"{sorted(new)} completed while contender {n} held the lock")
            holding.remove(n)
            lock.unlock()
            time.sleep(0.05)

    def writer(n):
        with cluster.connect() as c:
            i = 0
            while not stop.is_set() or i < 3:
                c.execute("INSERT INTO customers VALUES (%s, 'w', 'nl', 1, now())", (n * 100_000 + i,))
                i += 1
                if pause:
                    stop.wait(pause)
            written.append(i)

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in writers:
        t.start()
    errors = run_in_threads(contender, contenders)
    stop.set()
    for t in writers:
        t.join()
    assert not errors, errors[:3]
    assert not violations, violations[:5]
    assert len(written) == 2
    with cluster.connect() as c:
        assert c.execute("SELECT count(*) FROM customers").fetchone()[0] == sum(written)
        c.execute("INSERT INTO customers VALUES (-1, 'last', 'nl', 1, now())")
    import json
    final = json.loads(s3.client().get_object(Bucket=s3.bucket, Key="customers/.hoodie/.locks/table_lock.json")["Body"].read())
    assert final["expired"] is True and final["owner"] not in owners, final
