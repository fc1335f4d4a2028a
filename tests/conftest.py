"""Shared pytest fixtures: the Spark-written Hudi fixtures and throwaway PostgreSQL clusters."""

import contextlib
import os
import pathlib
import subprocess

import psycopg
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO / "scripts" / "cluster.sh"


@pytest.fixture(scope="session")
def fixtures_root():
    root = pathlib.Path(os.environ.get("HUDI_FIXTURES", REPO / "tests" / "fixtures" / "hudi"))
    assert root.is_dir(), f"fixtures not found at {root} (set HUDI_FIXTURES)"
    return root


class Cluster:
    """A PostgreSQL 15 cluster of its own, with pg_hudi preloaded, on a free loopback port."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory)
        self.port = None

    def start(self):
        out = subprocess.run([CLUSTER_SH, "start", self.directory], check=True,
                             capture_output=True, text=True)
        self.port = int(out.stdout.strip().splitlines()[-1])
        return self

    def stop(self):
        subprocess.run([CLUSTER_SH, "stop", self.directory], check=True, capture_output=True)

    @property
    def data_dir(self):
        return self.directory / "data"

    def log(self):
        return (self.directory / "server.log").read_text(errors="replace")

    def connect(self, dbname="postgres"):
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                               dbname=dbname, autocommit=True)


def give_to_postgres(path):
    """Lets the server (the postgres OS user, when we are root) read and write below `path`."""
    if os.geteuid() != 0:
        return
    import shutil
    for root, dirs, files in os.walk(path):
        shutil.chown(root, "postgres")
        for name in files:
            shutil.chown(os.path.join(root, name), "postgres")


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


@pytest.fixture
def lake(cluster):
    """A writable table `customers` (bucketed by id, partitioned by country) in a new lake."""
    with new_lake(cluster) as (conn, root):
        conn.execute("""CREATE FOREIGN TABLE customers (id bigint, name text, country text, balance numeric(12, 2),
                          ts timestamptz) SERVER lake
                        OPTIONS (path 'customers', primary_key 'id', ordering_field 'ts',
                                 partition_by 'country', buckets '4')""")
        assert conn.execute("SELECT hudi.create_table('customers')").fetchone()[0] == f"file://{root}/customers"
        yield conn, root / "customers"


def reference_rows(path):
    """The rows the reference reader `hudi` 0.5.0 reads, as our_rows shapes them."""
    return reference_rows_at(str(path))


def our_rows(conn):
    """The rows pg_hudi reads from `customers`."""
    return sorted(conn.execute("SELECT id, name, country, balance FROM customers").fetchall())


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


def lock_held(table):
    """Whether the table lock's latest epoch is not released (it may have expired)."""
    epochs = table / ".hoodie/.locks/epochs"
    names = {p.name for p in epochs.iterdir()} if epochs.exists() else set()
    numbered = sorted(n for n in names if n.isdigit())
    return bool(numbered) and f"{numbered[-1]}.released" not in names


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


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StoreServer:
    """An object-store server process of its own on a free loopback port, with one bucket (or
    container) `bucket`; subclasses say how to run it (`command`), when it answers (`ready`) and
    how to make the bucket (`create_bucket`)."""

    NAME = "store"

    def __init__(self, directory, bucket="lake"):
        self.directory, self.bucket = pathlib.Path(directory), bucket
        self.port = self.process = None

    def start(self):
        import time
        self.directory.mkdir(parents=True, exist_ok=True)
        log_path = self.directory / f"{self.NAME}.log"
        for _ in range(5):  # a port taken between choosing it and binding it: choose again
            self.port = free_port()
            with open(log_path, "w") as log:
                self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    self.ready()
                    self.create_bucket()
                    return self
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise AssertionError(f"the {self.NAME} server did not start: {log_path.read_text()[-2000:]}")

    def stop(self):
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


class S3Server(StoreServer):
    """moto's S3-compatible `moto_server`, from the venv."""

    NAME = "s3"
    ACCESS_KEY, SECRET_KEY, REGION = "pg-hudi-test-key", "pg-hudi-test-secret-do-not-log", "us-east-1"

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def command(self):
        import sys
        return [str(pathlib.Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)]

    def ready(self):
        import urllib.request
        urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1)

    def create_bucket(self):
        self.client().create_bucket(Bucket=self.bucket)

    def client(self):
        import boto3
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.ACCESS_KEY,
                            aws_secret_access_key=self.SECRET_KEY, region_name=self.REGION)

    @property
    def base_uri(self):
        return f"s3://{self.bucket}"

    def storage_options(self):
        """object_store's names, as a user mapping and the reference reader take them."""
        return {"aws_access_key_id": self.ACCESS_KEY, "aws_secret_access_key": self.SECRET_KEY,
                "aws_region": self.REGION, "aws_endpoint": self.endpoint, "aws_allow_http": "true"}

    def keys(self, prefix):
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.fixture(params=["s3", "azure"])
def object_store(request, cluster):
    """A real object-store server of each kind: moto's S3 and Azure's Azurite."""
    kind = {"s3": S3Server, "azure": AzureServer}[request.param]
    server = kind(cluster.directory / request.param).start()
    yield server
    server.stop()


def reference_rows_at(uri, storage_options=None):
    """The rows the reference reader reads at `uri` (any store), as our_rows shapes them."""
    import pyarrow as pa
    from hudi import HudiReadOptions, HudiTableBuilder

    builder = HudiTableBuilder.from_base_uri(uri)
    if storage_options:
        builder = builder.with_storage_options(storage_options)
    batches = builder.build().read(HudiReadOptions())
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return sorted((r["id"], r["name"], r["country"], r["balance"]) for r in rows)


class AzureServer(StoreServer):
    """Azure's storage emulator Azurite (blob service, from `scripts/deps.sh`'s npm packages)."""

    NAME = "azurite"
    ACCOUNT = "devstoreaccount1"
    # Azurite's published development key (not a secret; the same in every installation).
    KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}/{self.ACCOUNT}"

    def command(self):
        build = pathlib.Path(os.environ.get("BUILD", REPO / "build"))
        server = build / "node" / "node_modules" / ".bin" / "azurite-blob"
        assert server.exists(), f"{server} is missing: run scripts/deps.sh venv"
        return [str(server), "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location", str(self.directory),
                "--skipApiVersionCheck", "--loose"]

    def ready(self):
        import socket
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()

    def create_bucket(self):
        self.client().create_container(self.bucket)

    def client(self):
        from azure.storage.blob import BlobServiceClient
        return BlobServiceClient(account_url=self.endpoint, credential={"account_name": self.ACCOUNT, "account_key": self.KEY})

    @property
    def base_uri(self):
        return f"az://{self.bucket}"

    def storage_options(self):
        return {"azure_storage_account_name": self.ACCOUNT, "azure_storage_account_key": self.KEY,
                "azure_storage_endpoint": self.endpoint, "azure_allow_http": "true"}

    def keys(self, prefix):
        return [b.name for b in self.client().get_container_client(self.bucket).list_blobs(name_starts_with=prefix)]
