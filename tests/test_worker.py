"""The pg_hudi background processes: a launcher that starts a worker per database and round;
both run under their backend_type, exit cleanly on SIGTERM and when the postmaster dies, and
never take the cluster down. The workers run the table services of tables with services
'auto', record them in hudi.table_services and hudi.service_history, and serve every database
that has the extension, without keeping DROP DATABASE from dropping it."""

import os
import signal
import time

import psycopg
import pytest

from conftest import serve_databases


def wait_for(predicate, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def launcher_pid(conn):
    row = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_hudi launcher'").fetchone()
    return row[0] if row else None


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; it only waits for its parent to reap it. The process may also be
    # reaped between kill() and the read, which fails with ENOENT or ESRCH.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_launcher_starts_and_logs_once(cluster):
    with cluster.connect() as conn:
        pid = wait_for(lambda: launcher_pid(conn))
        assert pid, "no backend with backend_type 'pg_hudi launcher'"
        name = conn.execute(
            "SELECT backend_type, datname FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        assert name == ("pg_hudi launcher", "postgres")
    assert wait_for(lambda: "pg_hudi launcher started" in cluster.log())
    assert cluster.log().count("pg_hudi launcher started") == 1


def test_launcher_exits_cleanly_on_sigterm_and_cluster_stays_up(cluster):
    with cluster.connect() as conn:
        pid = wait_for(lambda: launcher_pid(conn))
        assert pid
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        assert wait_for(lambda: not alive(pid)), "launcher did not exit on SIGTERM"
        assert wait_for(lambda: "pg_hudi launcher exiting" in cluster.log())
        # Exit status 0: the postmaster neither restarts the cluster nor reports a crash.
        log = cluster.log()
        assert "terminated by signal" not in log and "exited with exit code" not in log, log
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_launcher_exits_when_the_postmaster_dies(cluster):
    with cluster.connect() as conn:
        pid = wait_for(lambda: launcher_pid(conn))
        assert pid
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    os.kill(postmaster, signal.SIGKILL)
    assert wait_for(lambda: not alive(pid), timeout=30), "launcher outlived the postmaster"
    # Leave nothing behind for the fixture's stop: remove the stale pid file.
    (cluster.data_dir / "postmaster.pid").unlink(missing_ok=True)


def test_the_worker_compacts_and_cleans_tables_with_services_auto(lake, cluster):
    """With `services 'auto'` (what hudi.create_table sets) and small thresholds, and no call
    of any service, the worker compacts the file groups that gathered enough logs, cleans the
    slices no read needs and archives the oldest instants; the rows stay those of a heap copy
    (and of the reference reader); a table with `services 'off'` is left alone, and one whose services fail is logged without stopping the rest."""
    from conftest import archived_instants, our_rows, reference_rows
    conn, table = lake
    lake_root = table.parent
    conn.execute("CREATE TABLE heap (id bigint PRIMARY KEY, name text, country text, balance numeric(12, 2), ts timestamptz)")
    conn.execute("""CREATE FOREIGN TABLE untouched (id bigint, name text) SERVER lake
                    OPTIONS (path 'untouched', primary_key 'id', merge_mode 'commit_time', services 'off')""")
    conn.execute("SELECT hudi.create_table('untouched')")
    options = dict(conn.execute("SELECT c.relname, t.ftoptions FROM pg_foreign_table t JOIN pg_class c ON c.oid = t.ftrelid").fetchall())
    assert "services=auto" in options["customers"], "hudi.create_table makes its tables services 'auto'"
    assert "services=off" in options["untouched"] and "services=auto" not in options["untouched"], "unless they say otherwise"
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD compaction_delta_commits '2', "
                 "ADD clean_retain_commits '2', ADD clean_retain '1 microsecond', ADD archive_min_instants '3', ADD archive_max_instants '4')")
    serve_databases(conn)
    # A table whose services fail every round: logged, and nothing else is disturbed.
    conn.execute("CREATE FOREIGN TABLE broken (id bigint) SERVER lake OPTIONS (path 'nowhere', services 'auto')")
    launcher = launcher_pid(conn)

    def count(action, name="customers"):
        """Completed instants of `action`, active or archived."""
        archived = [r for r in archived_instants(lake_root / name).values() if r["action"] == action]
        return len(archived) + conn.execute(f"SELECT count(*) FROM hudi.timeline('{name}') WHERE action = %s AND state = 'completed'",
                                            (action,)).fetchone()[0]

    for round_ in range(3):
        for n in range(3):
            for t in ("customers", "heap"):
                conn.execute(f"INSERT INTO {t} SELECT g, 'r{round_}n{n}-' || g, (ARRAY['nl','be'])[g % 2 + 1], g, "
                             f"'2026-01-01'::timestamptz + interval '{round_ * 3 + n} hour' FROM generate_series(1, 20) g "
                             + ("ON CONFLICT (id) DO UPDATE SET name = excluded.name, ts = excluded.ts" if t == "heap" else ""))
            conn.execute("INSERT INTO untouched VALUES (%s, 'x')", (round_ * 3 + n,))
        assert wait_for(lambda: count("commit") >= round_ + 1, timeout=60), f"compaction {round_ + 1}"
        assert our_rows(conn) == sorted(conn.execute("SELECT id, name, country, balance FROM heap").fetchall())
    assert wait_for(lambda: count("clean") >= 1, timeout=60), "a clean"
    assert wait_for(lambda: archived_instants(table), timeout=60), "an archival"

    def active_commits():
        return conn.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE action IN ('commit', 'deltacommit') "
                            "AND state = 'completed'").fetchone()[0]
    assert wait_for(lambda: 3 <= active_commits() <= 4, timeout=60), f"{active_commits()} commits active"
    assert our_rows(conn) == sorted(conn.execute("SELECT id, name, country, balance FROM heap").fetchall()) == reference_rows(table)
    assert count("commit", "untouched") == 0 and count("clean", "untouched") == 0
    assert wait_for(lambda: cluster.log().count("rollback of table broken failed") >= 2, timeout=60)
    log = cluster.log()
    assert "of table customers failed" not in log
    waits = [int(line.rsplit("next attempt in ", 1)[1].split()[0]) for line in log.splitlines()
             if "rollback of table broken failed" in line]
    assert waits[:2] == [2, 4] and waits == sorted(waits) and len(set(waits)) == len(waits), f"a doubling back-off: {waits}"
    assert launcher_pid(conn) == launcher, "the launcher never restarted"

    # What the worker did, as the views show it.
    services = {(t, s): (state, success, detail, error, failures, next_attempt) for t, s, state, success, detail, error, failures, next_attempt in
                conn.execute("SELECT relation::text, service, state, last_success, last_detail, last_error, failures, next_attempt "
                             "FROM hudi.table_services").fetchall()}
    assert {t for t, _ in services} == {"customers", "broken"}, "tables without services 'auto' are not listed"
    state, success, detail, error, failures, _ = services[("customers", "compaction")]
    assert state == "idle" and success is not None and detail.startswith("compaction ") and error is None and failures == 0
    assert services[("customers", "archive")][2].startswith("archived ")
    state, success, _, error, failures, next_attempt = services[("broken", "rollback")]
    # (Its next attempt may be running right now.)
    assert state in ("failed", "running") and success is None and failures >= 2 and next_attempt is not None and "nowhere" in error
    # Every service was run, and is due again a nap (a second here) after that; a failing one
    # when its back-off ends.
    import datetime
    for table, service, next_due, next_attempt, now in conn.execute(
            "SELECT relation::text, service, next_due, next_attempt, now() FROM hudi.table_services").fetchall():
        if table == "broken":
            assert next_due == next_attempt, (service, next_due, next_attempt)
        else:
            assert next_due is not None and next_due <= now + datetime.timedelta(seconds=1), (service, next_due, now)
    history = conn.execute("SELECT service, outcome, detail FROM hudi.service_history WHERE relation = 'customers'::regclass "
                           "ORDER BY started").fetchall()
    compactions = [d for s, o, d in history if s == "compaction" and o == "succeeded"]
    assert len(compactions) == count("commit"), "every compaction is in the history"
    assert not [h for h in history if h[1] == "failed"]
    # Another role sees only the tables it may read.
    conn.execute("CREATE ROLE onlooker LOGIN")
    conn.execute("GRANT SELECT ON customers TO onlooker")
    with cluster.connect(user="onlooker") as other:
        seen = {t for (t,) in other.execute("SELECT DISTINCT relation::text FROM hudi.table_services").fetchall()}
        assert seen == {"customers"}
        assert other.execute("SELECT count(*) FROM hudi.service_history WHERE relation = 'broken'::regclass").fetchone()[0] == 0


def test_a_worker_waiting_on_storage_stops_at_once_on_sigterm(cluster):
    """The worker's services wait on a store that accepts connections and never answers (a
    request timeout of a minute): hudi.table_services shows the service running, and SIGTERM
    still ends the worker within seconds, cleanly."""
    import socket
    import threading
    listener = socket.create_server(("127.0.0.1", 0))
    held, accepted = [], threading.Event()

    def hold():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)
            accepted.set()
    threading.Thread(target=hold, daemon=True).start()
    port = listener.getsockname()[1]
    try:
        with cluster.connect() as conn:
            conn.execute("CREATE EXTENSION pg_hudi")
            serve_databases(conn)
            conn.execute("CREATE SERVER silent FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://lake', "
                         "request_timeout '60s')")
            conn.execute("CREATE USER MAPPING FOR PUBLIC SERVER silent OPTIONS (aws_access_key_id 'k', "
                         f"aws_secret_access_key 's', aws_endpoint 'http://127.0.0.1:{port}', aws_allow_http 'true')")
            conn.execute("CREATE FOREIGN TABLE waiting (id bigint) SERVER silent OPTIONS (path 't', services 'auto')")
            assert accepted.wait(30), "the worker reached the store"
            (pid, state, progress), = conn.execute(
                "SELECT pid, state, progress FROM hudi.table_services WHERE relation = 'waiting'::regclass "
                "AND state = 'running'").fetchall()
            assert pid and state == "running", "the view shows the service running"
            backend, = conn.execute("SELECT backend_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            assert backend == "pg_hudi worker"
            started = time.monotonic()
            assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
            assert wait_for(lambda: not alive(pid), timeout=20), "the worker went on waiting"
            assert time.monotonic() - started < 10
            assert wait_for(lambda: "pg_hudi worker stopped before the end of its round" in cluster.log())
            assert "exited with exit code" not in cluster.log()
    finally:
        listener.close()
        for connection in held:
            connection.close()


def test_every_database_with_the_extension_gets_a_worker_and_can_still_be_dropped(cluster):
    """A database gains a worker within a nap of CREATE EXTENSION (its committed writes are
    finished and its tables served), hudi.worker_databases restricts the set, and DROP
    DATABASE succeeds while the workers run their rounds every second."""
    from conftest import give_to_postgres
    root = cluster.directory / "lake"
    root.mkdir(exist_ok=True)
    give_to_postgres(root)
    with cluster.connect() as conn:
        serve_databases(conn)
        for db in ("sales", "ignored"):
            conn.execute(f"CREATE DATABASE {db}")
    for db in ("sales", "ignored"):
        with cluster.connect(dbname=db) as conn:
            conn.execute("CREATE EXTENSION pg_hudi")
            conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{root}')")
            conn.execute(f"""CREATE FOREIGN TABLE t (id bigint, v text) SERVER lake
                             OPTIONS (path '{db}', primary_key 'id', merge_mode 'commit_time', buckets '2',
                                      services 'auto', compaction_delta_commits '2')""")
            conn.execute("SELECT hudi.create_table('t')")
            for n in range(2):
                conn.execute("INSERT INTO t SELECT g, %s FROM generate_series(1, 10) g", (f"v{n}",))

    def compactions(db):
        with cluster.connect(dbname=db) as conn:
            return conn.execute("SELECT count(*) FROM hudi.service_history WHERE service = 'compaction'").fetchone()[0]
    assert wait_for(lambda: compactions("sales") >= 1 and compactions("ignored") >= 1, timeout=60)
    with cluster.connect() as conn:
        conn.execute("ALTER SYSTEM SET hudi.worker_databases = 'postgres, sales'")
        conn.execute("SELECT pg_reload_conf()")
    # Once the launcher took the new set, a round of the ignored database that began before
    # ends, and none starts.
    assert wait_for(lambda: "pg_hudi launcher: serving databases postgres, sales\n" in cluster.log(), timeout=30)
    assert wait_for(lambda: "ignored" not in worker_databases(cluster), timeout=30)
    before = compactions("ignored")
    for db in ("sales", "ignored"):
        with cluster.connect(dbname=db) as conn:
            for n in range(2, 4):
                conn.execute("INSERT INTO t SELECT g, %s FROM generate_series(1, 10) g", (f"v{n}",))
    assert wait_for(lambda: compactions("sales") >= 2, timeout=60)
    assert compactions("ignored") == before, "a database outside hudi.worker_databases is not served"
    # DROP DATABASE while rounds run every second: it waits out a round, never fails on one.
    with cluster.connect() as conn:
        for _ in range(3):
            conn.execute("CREATE DATABASE doomed")
            with cluster.connect(dbname="doomed") as doomed:
                doomed.execute("CREATE EXTENSION pg_hudi")
            conn.execute("DROP DATABASE doomed")
        conn.execute("DROP DATABASE sales")
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname IN ('sales', 'doomed')").fetchone()[0] == 0


def worker_databases(cluster):
    """The databases whose worker runs now."""
    with cluster.connect() as conn:
        return [d for (d,) in conn.execute("SELECT datname FROM pg_stat_activity WHERE backend_type = 'pg_hudi worker'").fetchall()]


@pytest.mark.parametrize("store", ["file", "s3"])
def test_two_servers_never_run_a_tables_services_at_once(cluster, store):
    """Two servers with workers every second serve one table (in a shared file:// directory,
    or in a bucket of a real S3-compatible server) that both write: the service lease in the
    table's storage lets one at a time run its services — no run of one server overlaps a run
    of the other — and the final rows are those of a heap model, also for the reference
    reader, and the history holds the archived commits."""
    import random
    from conftest import Cluster, archived_instants, served_lake, reference_rows_at
    from servers import S3Server
    s3 = S3Server(cluster.directory / "s3").start() if store == "s3" else None
    second = Cluster(cluster.directory / "second").start()
    try:
        servers = [cluster, second]
        for i, server in enumerate(servers):
            if s3:
                conn = server.connect()
                serve_databases(conn)
                conn.execute("CREATE EXTENSION pg_hudi")
                conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri '{s3.base_uri}')")
                conn.execute("CREATE USER MAPPING FOR PUBLIC SERVER lake OPTIONS ("
                             + ", ".join(f"{k} '{v}'" for k, v in s3.storage_options().items()) + ")")
            else:
                # Both servers' lake is the first one's directory.
                conn, root = served_lake(server, cluster.directory / "lake")
            with conn:
                conn.execute("""CREATE FOREIGN TABLE t (id bigint, v text) SERVER lake
                                OPTIONS (path 't', primary_key 'id', merge_mode 'commit_time', buckets '2',
                                         services 'auto', compaction_delta_commits '2', clean_retain_commits '2', clean_retain '1 microsecond',
                                         archive_min_instants '3', archive_max_instants '5')""")
                if i == 0:
                    conn.execute("SELECT hudi.create_table('t')")
        seed = random.randrange(1 << 30)
        print(f"seed {seed}")
        rng = random.Random(seed)
        model = {}
        connections = [s.connect() for s in servers]
        try:
            for step in range(40):
                ids = rng.sample(range(1, 31), 5)
                conn = connections[step % 2]
                conn.execute("INSERT INTO t SELECT g, %s FROM unnest(%s::bigint[]) g", (f"s{step}", ids))
                model.update({i: f"s{step}" for i in ids})
                if step % 8 == 7:
                    time.sleep(1.5)  # a nap, so that both servers' workers get rounds in between

            def runs(server):
                with server.connect() as c:
                    return c.execute("SELECT service, started, finished FROM hudi.service_history ORDER BY started").fetchall()
            assert wait_for(lambda: any(s == "archive" for server in servers for s, _, _ in runs(server)), timeout=60)
            first, other = runs(cluster), runs(second)
            assert first or other
            for s1, a1, b1 in first:
                for s2, a2, b2 in other:
                    assert b1 < a2 or b2 < a1, f"{s1} on the first server {a1}..{b1} overlaps {s2} on the second {a2}..{b2}"
            expected = sorted(model.items())
            for c in connections:
                assert sorted(c.execute("SELECT id, v FROM t").fetchall()) == expected
            if s3:
                assert reference_rows_at(f"{s3.base_uri}/t", s3.storage_options(), columns=("id", "v")) == expected
                assert s3.keys("t/.hoodie/timeline/history/"), "the workers archived"
            else:
                assert reference_rows_of(root / "t") == expected
                assert archived_instants(root / "t"), "the workers archived"
        finally:
            for c in connections:
                c.close()
    finally:
        # Both servers stop before their store does: a worker stopped while it holds a table
        # lock lets that section finish, retrying a store that would be gone.
        second.stop()
        cluster.stop()
        if s3:
            s3.stop()


def reference_rows_of(path):
    from conftest import reference_rows_at
    return reference_rows_at(str(path), columns=("id", "v"))


def test_compaction_is_due_by_log_count_size_or_age(lake, cluster):
    """compaction_log_bytes and compaction_max_delay make a file slice due before it has
    compaction_delta_commits logs; a table with neither waits for the count."""
    conn, _ = lake
    serve_databases(conn)
    for name, trigger in (("sized", "compaction_log_bytes '1kB'"), ("aged", "compaction_max_delay '3 seconds'"), ("counted", None)):
        options = f", {trigger}" if trigger else ""
        conn.execute(f"""CREATE FOREIGN TABLE {name} (id bigint, v text) SERVER lake
                         OPTIONS (path '{name}', primary_key 'id', merge_mode 'commit_time', buckets '1',
                                  services 'off', compaction_delta_commits '100'{options})""")
        conn.execute(f"SELECT hudi.create_table('{name}')")
    for name in ("sized", "aged", "counted"):
        conn.execute(f"INSERT INTO {name} SELECT g, repeat('x', 100) FROM generate_series(1, 50) g")
    for name in ("sized", "aged", "counted"):
        conn.execute(f"ALTER FOREIGN TABLE {name} OPTIONS (SET services 'auto')")

    def compacted(name):
        return conn.execute("SELECT min(started) FROM hudi.service_history WHERE relation = %s::regclass "
                            "AND service = 'compaction' AND outcome = 'succeeded'", (name,)).fetchone()[0]
    assert wait_for(lambda: compacted("sized") and compacted("aged"), timeout=60)
    # The compaction's plan was made (its instant taken) once the log was 3 seconds old.
    import datetime
    instants = dict(conn.execute("SELECT action, instant FROM hudi.timeline('aged')").fetchall())
    at = {a: datetime.datetime.strptime(i, "%Y%m%d%H%M%S%f") for a, i in instants.items()}
    assert (at["commit"] - at["deltacommit"]).total_seconds() >= 3, f"not before its log was 3 seconds old: {instants}"
    assert compacted("counted") is None, "one log of 100 is not due"
    for bad, value in (("compaction_log_bytes", "lots"), ("compaction_max_delay", "soon")):
        with pytest.raises(psycopg.Error) as e:
            conn.execute(f"ALTER FOREIGN TABLE counted OPTIONS (ADD {bad} '{value}')")
        assert e.value.sqlstate == "HV024"



def test_a_commit_wakes_the_worker(lake, cluster):
    """With rounds an hour apart, a commit to a table with services 'auto' still starts its
    database's round at once, and the file group it made due is compacted within seconds;
    commits to a table with services 'off' wake nothing."""
    conn, _ = lake
    conn.execute("""CREATE FOREIGN TABLE quiet (id bigint, v text) SERVER lake
                    OPTIONS (path 'quiet', primary_key 'id', merge_mode 'commit_time', buckets '1',
                             services 'off', compaction_delta_commits '1')""")
    conn.execute("SELECT hudi.create_table('quiet')")
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD compaction_delta_commits '2')")
    # The round that serving the database starts: it ends with this table (the last by oid),
    # whose lease cannot be taken (no table there): its first service fails, and it waits two
    # naps with all its services.
    conn.execute("CREATE FOREIGN TABLE broken (id bigint) SERVER lake OPTIONS (path 'nowhere', services 'auto')")
    serve_databases(conn, naptime=3600)
    assert wait_for(lambda: conn.execute("SELECT count(*) FROM hudi.service_history WHERE relation = 'broken'::regclass "
                                         "AND service = 'rollback'").fetchone()[0] == 1), "the first round ended"
    for n in range(3):
        conn.execute("INSERT INTO quiet SELECT g, 'v' FROM generate_series(1, 10) g")
    for n in range(2):
        conn.execute(f"INSERT INTO customers SELECT g, 'n{n}', 'nl', g, now() FROM generate_series(1, 10) g")
    started = time.monotonic()
    compacted = wait_for(lambda: conn.execute(
        "SELECT detail FROM hudi.service_history WHERE relation = 'customers'::regclass AND service = 'compaction' "
        "AND outcome = 'succeeded'").fetchone(), timeout=30)
    assert compacted and compacted[0].startswith("compaction "), compacted
    assert time.monotonic() - started < 30
    assert conn.execute("SELECT count(*) FROM hudi.timeline('quiet') WHERE action = 'commit'").fetchone()[0] == 0, \
        "services 'off': left alone"


def test_a_worker_stopped_by_sigterm_gives_up_the_service_lease(lake, cluster):
    """SIGTERM while the worker cleans (paused after deleting the clean's files): the worker
    stops at once, gives up the table's service lease (another server need not wait it out),
    and the clean is finished by a later run; the rows stay."""
    conn, table = lake
    for n in range(4):
        conn.execute(f"INSERT INTO customers SELECT g, 'n{n}', 'nl', g, now() FROM generate_series(1, 10) g")
        conn.execute("SELECT * FROM hudi.compact('customers')")
    expected = sorted(conn.execute("SELECT id, name FROM customers").fetchall())
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD clean_retain_commits '1', ADD clean_retain '1 microsecond', ADD compaction_delta_commits '1000', "
                 "ADD archive_max_instants '1000', ADD archive_min_instants '999')")
    conn.execute("ALTER SYSTEM SET hudi.debug_pause_before_complete = 60000")
    serve_databases(conn)
    timeline = table / ".hoodie/timeline"
    found = wait_for(lambda: list(timeline.glob("*.clean.inflight")) and conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_hudi worker' "
        "AND starts_with(query, 'pg_hudi: clean of ') AND query LIKE '% files deleted%'").fetchone())
    assert found, "the worker paused in its clean"
    pid = found[0]
    progress, shown_pid = conn.execute("SELECT progress, pid FROM hudi.table_services WHERE relation = 'customers'::regclass "
                                       "AND service = 'clean' AND state = 'running'").fetchone()
    assert shown_pid == pid and progress.startswith("cleaning ") and progress.endswith(" files deleted"), progress
    done, total = progress.split(": ")[1].split(" ")[0].split("/")
    assert done == total and int(total) > 0, progress
    # No more rounds once this one stops: the launcher logs when it serves no database.
    log_before = len(cluster.log())
    conn.execute("ALTER SYSTEM SET hudi.worker_databases = 'none_of_them'")
    conn.execute("SELECT pg_reload_conf()")
    assert wait_for(lambda: "pg_hudi launcher: serving no database" in cluster.log()[log_before:])
    assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    assert wait_for(lambda: not alive(pid), timeout=20), "the worker went on waiting"
    assert wait_for(lambda: "pg_hudi worker stopped before the end of its round" in cluster.log())
    leases = sorted(p.name for p in (table / ".hoodie/.locks/services").iterdir())
    taken = [n for n in leases if not n.endswith(".released")]
    assert taken and all(f"{n}.released" in leases for n in taken), leases
    assert list(timeline.glob("*.clean.inflight")), "the clean stopped before its completion"
    conn.execute("SET hudi.debug_pause_before_complete = 0")
    assert sorted(conn.execute("SELECT id, name FROM customers").fetchall()) == expected
    conn.execute("SELECT * FROM hudi.clean('customers')")
    unfinished = [p.name for p in timeline.glob("*.clean.inflight") if not list(timeline.glob(p.name.split(".")[0] + "_*.clean"))]
    assert unfinished == [], "the next call finished the clean"
    assert sorted(conn.execute("SELECT id, name FROM customers").fetchall()) == expected


def test_a_compaction_called_from_sql_shows_its_progress(lake, cluster):
    """While hudi.compact runs (paused before its completion), pg_stat_activity shows the
    calling backend's service and progress, and hudi.table_services shows it running with
    that backend's pid; afterwards the backend shows its statement again."""
    import threading
    conn, _ = lake
    for n in range(2):
        conn.execute(f"INSERT INTO customers SELECT g, 'n{n}', (ARRAY['nl','be'])[g % 2 + 1], g, now() "
                     "FROM generate_series(1, 40) g")
    caller = cluster.connect()
    caller_pid = caller.execute("SELECT pg_backend_pid()").fetchone()[0]
    caller.execute("SET hudi.debug_pause_before_complete = 3000")
    outcome = []
    call = "SELECT file_groups, rows_written FROM hudi.compact('customers')"
    thread = threading.Thread(target=lambda: outcome.append(caller.execute(call).fetchone()))
    thread.start()
    try:
        shown = wait_for(lambda: conn.execute(
            "SELECT query, state FROM pg_stat_activity WHERE pid = %s AND query ~ ': (\\d+)/\\1 file groups, \\d+ rows$'",
            (caller_pid,)).fetchone(), timeout=20)
        assert shown, "the call's progress in pg_stat_activity"
        query, state = shown
        assert state == "active" and query.startswith("pg_hudi: compaction of "), shown
        running = conn.execute("SELECT state, pid, progress FROM hudi.table_services "
                               "WHERE relation = 'customers'::regclass AND service = 'compaction'").fetchone()
        assert running[0] == "running" and running[1] == caller_pid and query.endswith(running[2]), running
    finally:
        thread.join(30)
    (file_groups, rows_written), = outcome
    done = query.rsplit(": ", 1)[1]
    assert done == f"{file_groups}/{file_groups} file groups, {rows_written} rows", (query, outcome)
    assert rows_written == 40 and file_groups >= 2
    assert wait_for(lambda: conn.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (caller_pid,)).fetchone()[0] == call)
    # (The worker, woken by the inserts, may be looking at the table meanwhile.)
    assert conn.execute("SELECT pid FROM hudi.table_services WHERE relation = 'customers'::regclass "
                        "AND service = 'compaction'").fetchone()[0] != caller_pid
    caller.close()


def test_a_table_locked_by_a_session_is_left_to_the_next_round_without_a_crash(lake, cluster):
    """A session holding ACCESS EXCLUSIVE on a table with services 'auto' makes the worker
    leave it to the next round, which it logs at DEBUG1 with the table's name — a name once
    looked up outside the round's transaction, which crashed the worker and so the server."""
    conn, _ = lake
    conn.execute("INSERT INTO customers VALUES (1, 'a', 'nl', 1, now())")
    conn.execute("ALTER SYSTEM SET log_min_messages = debug1")
    postmaster = (cluster.data_dir / "postmaster.pid").read_text().split()[0]
    with cluster.connect() as locker:
        locker.execute("BEGIN")
        locker.execute("ALTER FOREIGN TABLE customers OWNER TO postgres")  # ACCESS EXCLUSIVE until COMMIT
        serve_databases(conn)
        assert wait_for(lambda: "table customers is locked; its services wait for the next round" in cluster.log())
        locker.execute("COMMIT")
    assert "terminated by signal" not in cluster.log()
    assert conn.execute("SELECT 1").fetchone() == (1,)
    assert (cluster.data_dir / "postmaster.pid").read_text().split()[0] == postmaster
