"""Crashes of the worker in the middle of its services: kill -9 of the worker while a
compaction has written its base files but not completed, while a clean has deleted its files
but not completed, and while an archival has published to the history but not removed the
active instants. Reads never fail meanwhile; after the crash restart the next rounds finish
each service (or redo it), nothing committed is lost, and the reference reader agrees."""

import os
import signal
import time

import pytest

from conftest import archived_instants, reference_rows


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
    "compaction": ("compaction_delta_commits '1', clean_retain_commits '1000', archive_max_instants '1000', archive_min_instants '999'",
                   lambda t: [p for p in t.rglob("*.parquet") if ".hoodie" not in p.parts and pending(t, "compaction") in p.name]),
    "clean": ("compaction_delta_commits '1000', clean_retain_commits '2', archive_max_instants '1000', archive_min_instants '999'",
              lambda t: (t / ".hoodie/timeline").glob("*.clean.inflight") and pending(t, "clean")),
    "archive": ("compaction_delta_commits '1000', clean_retain_commits '1000', archive_max_instants '4', archive_min_instants '2'",
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


@pytest.mark.parametrize("service", SERVICES)
def test_a_worker_killed_mid_service_loses_nothing(lake, cluster, service):
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
    # The worker pauses at the service's crash point; locks and heartbeats expire fast.
    for setting, value in (("hudi.debug_pause_before_complete", "60000"), ("hudi.lock_lease", "3"),
                           ("hudi.heartbeat_expiry", "2"), ("hudi.worker_naptime", "1")):
        conn.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
    conn.execute("SELECT pg_reload_conf()")
    conn.execute(f"ALTER FOREIGN TABLE customers OPTIONS (ADD services 'auto', {', '.join('ADD ' + o for o in options.split(', '))})")

    activity = f"pg_hudi: {service} of "
    worker = wait_for(f"the worker at the {service}'s pause", lambda: stopped_at_pause(table) and conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_hudi worker' AND starts_with(query, %s)", (activity,)).fetchone())[0]
    assert rows(conn) == expected, "what the service has not completed is invisible"
    log_before = len(cluster.log())
    os.kill(worker, signal.SIGKILL)
    conn.close()

    conn = reconnect(cluster, log_before)
    assert rows(conn) == expected, "reads after the crash restart"
    conn.execute("ALTER SYSTEM RESET hudi.debug_pause_before_complete")
    conn.execute("SELECT pg_reload_conf()")

    def finished():
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
