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
