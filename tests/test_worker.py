"""The pg_hudi background worker: runs under its backend_type, exits cleanly on SIGTERM and
when the postmaster dies, and never takes the cluster down."""

import os
import signal
import time


def wait_for(predicate, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def worker_pid(conn):
    row = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_hudi worker'").fetchone()
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


def test_worker_starts_and_logs_once(cluster):
    with cluster.connect() as conn:
        pid = wait_for(lambda: worker_pid(conn))
        assert pid, "no backend with backend_type 'pg_hudi worker'"
        name = conn.execute(
            "SELECT backend_type, datname FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        assert name == ("pg_hudi worker", "postgres")
    assert wait_for(lambda: "pg_hudi worker started" in cluster.log())
    assert cluster.log().count("pg_hudi worker started") == 1


def test_worker_exits_cleanly_on_sigterm_and_cluster_stays_up(cluster):
    with cluster.connect() as conn:
        pid = wait_for(lambda: worker_pid(conn))
        assert pid
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        assert wait_for(lambda: not alive(pid)), "worker did not exit on SIGTERM"
        assert wait_for(lambda: "pg_hudi worker exiting" in cluster.log())
        # Exit status 0: the postmaster neither restarts the cluster nor reports a crash.
        log = cluster.log()
        assert "terminated by signal" not in log and "exited with exit code" not in log, log
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_worker_exits_when_the_postmaster_dies(cluster):
    with cluster.connect() as conn:
        pid = wait_for(lambda: worker_pid(conn))
        assert pid
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    os.kill(postmaster, signal.SIGKILL)
    assert wait_for(lambda: not alive(pid), timeout=30), "worker outlived the postmaster"
    # Leave nothing behind for the fixture's stop: remove the stale pid file.
    (cluster.data_dir / "postmaster.pid").unlink(missing_ok=True)


def test_the_worker_compacts_and_cleans_tables_with_services_auto(lake, cluster):
    """With `services 'auto'` and small thresholds, and no call of any service, the worker
    compacts the file groups that gathered enough logs, cleans the slices no read needs and
    archives the oldest instants;
    the rows stay those of a heap copy (and of the reference reader); a table without the
    option is left alone, and one whose services fail is logged without stopping the rest."""
    from conftest import archived_instants, our_rows, reference_rows
    conn, table = lake
    lake_root = table.parent
    conn.execute("ALTER SYSTEM SET hudi.worker_naptime = 1")
    conn.execute("SELECT pg_reload_conf()")
    conn.execute("CREATE TABLE heap (id bigint PRIMARY KEY, name text, country text, balance numeric(12, 2), ts timestamptz)")
    conn.execute("""CREATE FOREIGN TABLE untouched (id bigint, name text) SERVER lake
                    OPTIONS (path 'untouched', primary_key 'id', merge_mode 'commit_time')""")
    conn.execute("SELECT hudi.create_table('untouched')")
    conn.execute("ALTER FOREIGN TABLE customers OPTIONS (ADD services 'auto', ADD compaction_delta_commits '2', "
                 "ADD clean_retain_commits '2', ADD archive_min_instants '3', ADD archive_max_instants '4')")
    # A table whose services fail every round: logged, and nothing else is disturbed.
    conn.execute("CREATE FOREIGN TABLE broken (id bigint) SERVER lake OPTIONS (path 'nowhere', services 'auto')")
    worker = worker_pid(conn)

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
    log = cluster.log()
    assert "services of table broken failed" in log and "services of table customers failed" not in log
    waits = [int(line.rsplit("next attempt in ", 1)[1].split()[0]) for line in log.splitlines()
             if "services of table broken failed" in line]
    assert waits == sorted(waits) and waits[0] == 2 and len(set(waits)) == len(waits), f"a doubling back-off: {waits}"
    assert worker_pid(conn) == worker, "the worker never restarted"


def test_a_worker_waiting_on_storage_stops_at_once_on_sigterm(cluster):
    """The worker's services wait on a store that accepts connections and never answers (a
    request timeout of a minute): SIGTERM still ends the worker within seconds, cleanly."""
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
            conn.execute("ALTER SYSTEM SET hudi.worker_naptime = 1")
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE SERVER silent FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://lake', "
                         "request_timeout '60s')")
            conn.execute("CREATE USER MAPPING FOR PUBLIC SERVER silent OPTIONS (aws_access_key_id 'k', "
                         f"aws_secret_access_key 's', aws_endpoint 'http://127.0.0.1:{port}', aws_allow_http 'true')")
            conn.execute("CREATE FOREIGN TABLE waiting (id bigint) SERVER silent OPTIONS (path 't', services 'auto')")
            assert accepted.wait(30), "the worker reached the store"
            pid = worker_pid(conn)
            started = time.monotonic()
            assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
            assert wait_for(lambda: not alive(pid), timeout=20), "the worker went on waiting"
            assert time.monotonic() - started < 10
            assert wait_for(lambda: "pg_hudi worker exiting" in cluster.log())
            assert "exited with exit code" not in cluster.log()
    finally:
        listener.close()
        for connection in held:
            connection.close()
