"""Shared pytest fixtures: the Spark-written Hudi fixtures and throwaway PostgreSQL clusters."""

import contextlib
import os
import pathlib
import subprocess

import psycopg
import pytest

from servers import REPO, AzureServer, Cluster, GcsServer, S3Server


@pytest.fixture(scope="session")
def fixtures_root():
    root = pathlib.Path(os.environ.get("HUDI_FIXTURES", REPO / "tests" / "fixtures" / "hudi"))
    assert root.is_dir(), f"fixtures not found at {root} (set HUDI_FIXTURES)"
    return root


def give_to_postgres(path):
    """Lets the server (the postgres OS user, when we are root) read and write below `path`."""
    if os.geteuid() != 0:
        return
    import shutil
    for root, dirs, files in os.walk(path):
        shutil.chown(root, "postgres")
        for name in files:
            shutil.chown(os.path.join(root, name), "postgres")


def serve_databases(conn, naptime=1):
    """Lets the cluster's workers serve every database, a round every `naptime` seconds (the
    tests' clusters serve none until asked, see servers.Cluster.start)."""
    conn.execute(f"ALTER SYSTEM SET hudi.worker_naptime = {naptime}")
    conn.execute("ALTER SYSTEM RESET hudi.worker_databases")
    conn.execute("SELECT pg_reload_conf()")


def served_lake(cluster, root=None):
    """A lake directory (`root`, by default in the cluster's folder) and workers every second:
    (conn, root) with pg_hudi and the server `lake` on it, in the database postgres."""
    root = root or cluster.directory / "lake"
    root.mkdir(exist_ok=True)
    give_to_postgres(root)
    conn = cluster.connect()
    serve_databases(conn)
    create_lake_server(conn, root)
    return conn, root


def create_lake_server(conn, root):
    """pg_hudi and a server `lake` whose base URI is the directory `root`."""
    conn.execute("CREATE EXTENSION pg_hudi")
    conn.execute(f"CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'file://{root}')")


@pytest.fixture
def cluster(request):
    """A fresh cluster per test, under the run folder that the postgres user can reach."""
    run_dir = pathlib.Path(os.environ.get("PG_HUDI_RUN_DIR", REPO / "build"))
    directory = run_dir / "pytest" / request.node.name
    subprocess.run(["rm", "-rf", directory], check=True)
    c = Cluster(directory).start()
    yield c
    c.stop()


@contextlib.contextmanager
def module_cluster(name, role):
    """A cluster for a test module (named `name`) with a lake, the server `lake` on it, and a
    role `role` that may use the server and create tables and is not a superuser: yields
    (cluster, lake root); the cluster stops after the module."""
    run_dir = pathlib.Path(os.environ.get("PG_HUDI_RUN_DIR", REPO / "build"))
    directory = run_dir / "pytest" / name
    subprocess.run(["rm", "-rf", directory], check=True)
    c = Cluster(directory).start()
    root = directory / "lake"
    root.mkdir(exist_ok=True)
    give_to_postgres(root)
    with c.connect() as conn:
        create_lake_server(conn, root)
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON FOREIGN SERVER lake TO {role}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
    try:
        yield c, root
    finally:
        c.stop()


@contextlib.contextmanager
def new_lake(cluster, fixtures_root=None, zips=(), by_kind=False):
    """A lake directory with the fixture `zips` unpacked in it (below their kind's folder, e.g.
    sample_table/cow, with `by_kind`), pg_hudi and the server `lake` on it, and a connection in
    UTC: (connection, root)."""
    import hudi_rows
    root = cluster.directory / "lake"
    root.mkdir(exist_ok=True)
    for z in zips:
        hudi_rows.unpack(fixtures_root, z, root / z.parent if by_kind else root)
    give_to_postgres(root)
    with cluster.connect() as conn:
        create_lake_server(conn, root)
        conn.execute("SET timezone = 'UTC'")
        yield conn, root


CUSTOMERS = """CREATE FOREIGN TABLE customers (id bigint, name text, country text, balance numeric(12, 2),
                 ts timestamptz) SERVER lake
               OPTIONS (path 'customers', primary_key 'id,country', ordering_field 'ts',
                        partition_by 'country', buckets '4')"""


@pytest.fixture
def lake(cluster):
    """A writable table `customers` (bucketed by id, partitioned by country) in a new lake."""
    with new_lake(cluster) as (conn, root):
        conn.execute(CUSTOMERS)
        assert conn.execute("SELECT hudi.create_table('customers')").fetchone()[0] == f"file://{root}/customers"
        yield conn, root / "customers"


@contextlib.contextmanager
def second_server(cluster, root, customers=False):
    """A second PostgreSQL server on the lake directory `root`: pg_hudi and its server `lake`,
    and with `customers` the `lake` fixture's foreign table `customers`; stopped afterwards."""
    second = Cluster(cluster.directory / "second").start()
    try:
        with second.connect() as other:
            create_lake_server(other, root)
            if customers:
                other.execute(CUSTOMERS)
        yield second
    finally:
        second.stop()


def reference_rows(path):
    """The rows the reference reader `hudi` 0.5.0 reads, as our_rows shapes them."""
    return reference_rows_at(str(path))


def archived_instants(table):
    """The rows of the LSM history of the table at `table` (a path), read as Hudi's readers
    read it: `_version_`, that manifest, then its Parquet files; {} without a history."""
    import json
    import pyarrow.parquet as pq
    history = table / ".hoodie/timeline/history"
    if not (history / "_version_").exists():
        return {}
    manifest = json.loads((history / f"manifest_{(history / '_version_').read_text()}").read_text())
    rows = {}
    for entry in manifest["files"]:
        for row in pq.read_table(history / entry["fileName"]).to_pylist():
            rows.setdefault(row["instantTime"], row)
    return rows


def our_rows(conn):
    """The rows pg_hudi reads from `customers`."""
    return sorted(conn.execute("SELECT id, name, country, balance FROM customers").fetchall())


def plan_text(conn, sql):
    """The plan `EXPLAIN sql` prints, as one text (`sql` may start with EXPLAIN's options)."""
    return "\n".join(r[0] for r in conn.execute(f"EXPLAIN {sql}"))


def refused(conn, sql, params=None):
    """The SQLSTATE `sql` fails with, or None when it succeeds."""
    try:
        conn.execute(sql, params)
    except psycopg.Error as e:
        return e.sqlstate
    return None


def wait_for(what, condition, timeout=30):
    """Polls `condition` until it holds (an observable event: a file, a row, a log line)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_value(what, value, timeout=30):
    """Polls `value()` until it returns something (not None), and returns that."""
    found = []
    wait_for(what, lambda: (v := value()) is not None and not found.append(v), timeout)
    return found[0]


def set_heartbeat_expiry(conn, seconds):
    """Sets the server setting hudi.heartbeat_expiry (ALTER SYSTEM: sessions cannot set it)
    and waits until `conn` sees it."""
    conn.execute(f"ALTER SYSTEM SET hudi.heartbeat_expiry = {seconds}")
    conn.execute("SELECT pg_reload_conf()")
    wait_for("the new heartbeat expiry", lambda: conn.execute("SHOW hudi.heartbeat_expiry").fetchone()[0] == f"{seconds}s")


def rollback_once_expired(conn, table="customers"):
    """The rows of hudi.rollback_failed_writes(table) once it rolls something back: with an
    expiry of a second, the killed writer's heartbeat is at most that far from expiring."""
    set_heartbeat_expiry(conn, 1)
    rolled = []
    wait_for("the heartbeat to expire",
             lambda: rolled.extend(conn.execute(f"SELECT * FROM hudi.rollback_failed_writes('{table}')").fetchall()) or rolled)
    return rolled


def run_in_threads(target, count):
    """Runs `target(n)` for n in range(count), each on a thread of its own, and returns what
    they raised (a check inside a thread must reach the test)."""
    import threading
    errors = []

    def run(n):
        try:
            target(n)
        except Exception as e:  # noqa: BLE001 - handed to the caller
            errors.append(e)
    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def kill_backend_and_wait(cluster, pid):
    """SIGKILL one backend: the postmaster resets every session and recovers; waits until the
    server log says recovery is over (a connection right after the kill may still reach the
    old server, before the reset starts)."""
    import signal
    logged = len(cluster.log())
    os.kill(pid, signal.SIGKILL)

    def recovered():
        _, reset, after_reset = cluster.log()[logged:].partition("reinitializing")
        return bool(reset) and "ready to accept connections" in after_reset
    wait_for("the cluster to come back", recovered, timeout=60)


def _unreleased_lock_epoch(table):
    """The table lock's latest epoch file while it is not released (it may have expired)."""
    epochs = table / ".hoodie/.locks/epochs"
    names = {p.name for p in epochs.iterdir()} if epochs.exists() else set()
    numbered = sorted(n for n in names if n.isdigit())
    return epochs / numbered[-1] if numbered and f"{numbered[-1]}.released" not in names else None


def lock_held(table):
    """Whether the table lock's latest epoch is not released (it may have expired)."""
    return _unreleased_lock_epoch(table) is not None


def lock_holder(table):
    """The owner (`node:pid`) of the table lock's latest epoch while it is not released."""
    import json
    epoch = _unreleased_lock_epoch(table)
    try:
        return json.loads(epoch.read_text())["owner"] if epoch else None
    except (FileNotFoundError, json.JSONDecodeError):  # replaced by a newer epoch meanwhile
        return None


def commit_on_a_thread(cluster, settings, statements):
    """A session that applies `settings` (e.g. a debug pause), runs `statements` in a
    transaction and COMMITs it on a thread: (session, its pid, the thread, a list that
    receives COMMIT's SQLSTATE or None)."""
    import threading
    session = cluster.connect()
    pid = session.execute("SELECT pg_backend_pid()").fetchone()[0]
    session.execute(f"SET {settings}")
    session.execute("BEGIN")
    for sql in statements:
        session.execute(sql)
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(refused(session, "COMMIT")), daemon=True)
    thread.start()
    return session, pid, thread, outcome


@pytest.fixture(params=["s3", "azure", "gcs"])
def object_store(request, cluster):
    """A real object-store server of each kind: moto's S3, Azure's Azurite and fake-gcs-server."""
    kind = {"s3": S3Server, "azure": AzureServer, "gcs": GcsServer}[request.param]
    server = kind(cluster.directory / request.param).start()
    yield server
    server.stop()


def reference_rows_at(uri, storage_options=None, columns=("id", "name", "country", "balance")):
    """The rows the reference reader reads at `uri` (any store): `columns` of each, sorted (as
    our_rows shapes them by default)."""
    import pyarrow as pa
    from hudi import HudiReadOptions, HudiTableBuilder

    builder = HudiTableBuilder.from_base_uri(uri)
    if storage_options:
        builder = builder.with_storage_options(storage_options)
    batches = builder.build().read(HudiReadOptions())
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return sorted(tuple(r[c] for c in columns) for r in rows)




def dump_and_restore(cluster, into):
    """pg_dump of the database postgres restored with psql into a new database `into`."""
    bin_dir = "/usr/lib/postgresql/15/bin"
    dump = cluster.directory / f"dump-{into}.sql"
    with cluster.connect() as conn:
        conn.execute(f"CREATE DATABASE {into}")
    subprocess.run([f"{bin_dir}/pg_dump", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "-f", dump, "postgres"],
                   check=True, capture_output=True)
    subprocess.run([f"{bin_dir}/psql", "-X", "-v", "ON_ERROR_STOP=1", "-q", "-h", "127.0.0.1", "-p", str(cluster.port),
                    "-U", "postgres", "-d", into, "-f", dump], check=True, capture_output=True)
