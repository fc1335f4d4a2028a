"""Crashes in the middle of table services: kill -9 of the worker, or of a backend running the
service from SQL, while a compaction has written its base files but not completed, while a
clean has deleted its files but not completed, and while an archival has published to the
history but not removed the active instants. Reads never fail meanwhile; after the crash
restart the next run (the worker's round, or the next SQL call) finishes each service (or
redoes it), nothing committed is lost, and the reference reader agrees."""

import os
import signal
import threading
import time

import psycopg
import pytest

from conftest import archived_instants, reference_rows, serve_databases


def wait_for(what, predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def reconnect(cluster, log_before):
    """A connection once the server restarted after the crash (its log says it is ready again
    after `log_before` characters of log)."""
    wait_for("the crash restart", lambda: "database system is ready to accept connections" in cluster.log()[log_before:])

    def attempt():
        try:
            return cluster.connect()
        except Exception:
            return None
    return wait_for("a connection after the crash restart", attempt)


def rows(conn):
    conn.execute("SET hudi.debug_pause_before_complete = 0")
    return sorted(conn.execute("SELECT id, name, country, balance FROM customers").fetchall())


# service → (table options that make it the one due, the timeline or history files that show
# it stopped at its pause point, what shows it finished)
SERVICES = {
    "compaction": ("compaction_delta_commits '1', clean_retain_commits '1000', clean_retain '1 microsecond', archive_max_instants '1000', archive_min_instants '999'",
                   lambda t: [p for p in t.rglob("*.parquet") if ".hoodie" not in p.parts and pending(t, "compaction") in p.name]),
    "clean": ("compaction_delta_commits '1000', clean_retain_commits '2', clean_retain '1 microsecond', archive_max_instants '1000', archive_min_instants '999'",
              lambda t: (t / ".hoodie/timeline").glob("*.clean.inflight") and pending(t, "clean")),
    "archive": ("compaction_delta_commits '1000', clean_retain_commits '1000', clean_retain '1 microsecond', archive_max_instants '4', archive_min_instants '2'",
                lambda t: (t / ".hoodie/timeline/history/_version_").exists()),
}


def pending(table, action):
    """The requested time of a pending `action` of the table, or ''."""
    names = {p.name for p in (table / ".hoodie/timeline").iterdir()}
    for name in sorted(names):
        if name.endswith(f".{action}.requested"):
            instant = name.split(".")[0]
            if not any(n.startswith(f"{instant}_") for n in names):
                return instant
    return ""


# service → the SQL call that runs it, and the one that finishes it after a crash.
SQL_CALLS = {
    "compaction": ("SELECT * FROM hudi.compact('customers')", "SELECT * FROM hudi.run_compaction('customers', %s)"),
    "clean": ("SELECT * FROM hudi.clean('customers')", "SELECT * FROM hudi.clean('customers')"),
    "archive": ("SELECT * FROM hudi.archive('customers')", "SELECT * FROM hudi.archive('customers')"),
}


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("killed", ["worker", "backend"])
def test_a_process_killed_mid_service_loses_nothing(lake, cluster, service, killed):
    conn, table = lake
    options, stopped_at_pause = SERVICES[service]
    conn.execute("CREATE TABLE heap (id bigint PRIMARY KEY, name text, country text, balance numeric(12, 2))")
    for n in range(6):
        for t in ("customers", "heap"):
            conn.execute(f"INSERT INTO {t} SELECT g, 'n{n}-' || g, (ARRAY['nl','be'])[g % 2 + 1], g + {n}"
                         + (", now()" if t == "customers" else "")
                         + " FROM generate_series(1, 20) g"
                         + (" ON CONFLICT (id) DO UPDATE SET name = excluded.name, balance = excluded.balance" if t == "heap" else ""))
        if service != "compaction":
            assert conn.execute("SELECT count(*) FROM hudi.compact('customers')").fetchone()[0] == 1
    expected = sorted(conn.execute("SELECT * FROM heap").fetchall())
    assert rows(conn) == expected
    # The table has services 'auto' (hudi.create_table); its thresholds come before the worker
    # serves it. The worker pauses at the service's crash point; locks and heartbeats expire fast.
    conn.execute(f"ALTER FOREIGN TABLE customers OPTIONS ({', '.join('ADD ' + o for o in options.split(', '))})")
    settings = {"hudi.lock_lease": "3", "hudi.heartbeat_expiry": "2"}
    if killed == "worker":
        settings["hudi.debug_pause_before_complete"] = "60000"
    for setting, value in settings.items():
        conn.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
    conn.execute("SELECT pg_reload_conf()")
    if killed == "worker":
        serve_databases(conn)
    run_call, finish_call = SQL_CALLS[service]
    if killed == "backend":
        # The call pauses at the same point; a crash ends it with an error on its connection.
        caller = cluster.connect()
        caller.execute("SET hudi.debug_pause_before_complete = 60000")
        # Its lock's lease is the reloaded one (the crash leaves the lock to expire).
        wait_for("the caller's reloaded settings", lambda: caller.execute("SHOW hudi.lock_lease").fetchone()[0] == "3s")
        ended = []

        def call():
            try:
                caller.execute(run_call)
            except Exception as e:
                ended.append(e)
        thread = threading.Thread(target=call)
        thread.start()

    activity = f"pg_hudi: {service} of "
    backend_type = "pg_hudi worker" if killed == "worker" else "client backend"
    pid = wait_for(f"the {killed} at the {service}'s pause", lambda: stopped_at_pause(table) and conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = %s AND starts_with(query, %s)", (backend_type, activity)).fetchone())[0]
    assert rows(conn) == expected, "what the service has not completed is invisible"
    log_before = len(cluster.log())
    os.kill(pid, signal.SIGKILL)
    conn.close()
    if killed == "backend":
        thread.join(30)
        assert ended, "the call ended with the crash"

    conn = reconnect(cluster, log_before)
    assert rows(conn) == expected, "reads after the crash restart"
    if killed == "backend":
        # After the crash the worker serves the table too.
        serve_databases(conn)
    conn.execute("ALTER SYSTEM RESET hudi.debug_pause_before_complete")
    conn.execute("SELECT pg_reload_conf()")

    def finished():
        if killed == "backend":
            # The next SQL call finishes it (or the worker's first round after the restart:
            # the table has services 'auto'); one that finds the other's lock or heartbeat
            # still fresh fails and is tried again.
            try:
                conn.execute(finish_call, (pending(table, "compaction"),) if service == "compaction" else None)
            except psycopg.Error:
                pass
        if service == "archive":
            names = {p.name for p in (table / ".hoodie/timeline").iterdir()}
            archived = archived_instants(table)
            return archived and not any(n.split(".")[0].split("_")[0] in archived for n in names)
        completed = conn.execute("SELECT count(*) FROM hudi.timeline('customers') WHERE action = %s AND state = 'completed'",
                                 ("commit" if service == "compaction" else service,)).fetchone()[0]
        return completed >= 1 and not pending(table, service)
    wait_for(f"the {service} finished after the crash", finished)
    assert rows(conn) == expected == reference_rows(table)
    pendings = conn.execute("SELECT instant, action FROM hudi.timeline('customers') WHERE state <> 'completed'").fetchall()
    assert pendings == [], pendings
