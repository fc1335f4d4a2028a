"""The servers tests (and `make demo-multi`) start of their own, each on a free loopback port:
PostgreSQL clusters with pg_hudi preloaded, an S3-compatible server (moto) and Azure's
emulator (Azurite). Stopped by whoever started them."""

import os
import pathlib
import subprocess

import psycopg

REPO = pathlib.Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO / "scripts" / "cluster.sh"


class Cluster:
    """A PostgreSQL 15 cluster of its own, with pg_hudi preloaded, on a free loopback port."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory)
        self.port = None

    def start(self, environment=None):
        """Starts the server; `environment` adds variables to its process's environment. Its
        workers serve no database (the tables of hudi.create_table have services 'auto', and
        commits wake the worker) until a test asks for them (conftest.serve_databases): other
        tests see only their own writes."""
        env = {"PG_HUDI_WORKER_DATABASES": "pg_hudi_tests_serve_none", **os.environ, **(environment or {})}
        out = subprocess.run([CLUSTER_SH, "start", self.directory], check=True,
                             capture_output=True, text=True, env=env)
        self.port = int(out.stdout.strip().splitlines()[-1])
        return self

    def stop(self, mode="fast"):
        """Stops the server (`mode`: pg_ctl's shutdown mode; "immediate" is a crash)."""
        subprocess.run([CLUSTER_SH, "stop", self.directory, mode], check=True, capture_output=True)

    def worker_pid(self, what):
        """The process id of the server's child whose title has `what`, or None."""
        postmaster = (self.data_dir / "postmaster.pid").read_text().split()[0]
        out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", postmaster], capture_output=True, text=True).stdout
        return next((int(line.split()[0]) for line in out.splitlines() if what in line), None)

    @property
    def data_dir(self):
        return self.directory / "data"

    def log(self):
        return (self.directory / "server.log").read_text(errors="replace")

    def connect(self, dbname="postgres", user="postgres"):
        return psycopg.connect(host="127.0.0.1", port=self.port, user=user,
                               dbname=dbname, autocommit=True)


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
                self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                                env={**os.environ, **self.environment()})
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

    def environment(self):
        """Variables the server process gets besides ours."""
        return {}

    def stop(self):
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


class S3Server(StoreServer):
    """moto's S3-compatible server, from the venv, with its conditional writes made atomic
    (tests/moto_server.py)."""

    NAME = "s3"
    ACCESS_KEY, SECRET_KEY, REGION = "pg-hudi-test-key", "pg-hudi-test-secret-do-not-log", "us-east-1"
    SECRET = SECRET_KEY

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def command(self):
        import sys
        return [sys.executable, str(pathlib.Path(__file__).parent / "moto_server.py"), "-H", "127.0.0.1", "-p", str(self.port)]

    def environment(self):
        # moto records requests (when asked to) as it handles them, before it answers.
        return {"MOTO_RECORDER_FILEPATH": str(self.directory / "requests.jsonl")}

    def record_requests(self):
        """Starts (again) recording the requests the server handles."""
        import urllib.request
        for step in ("reset-recording", "start-recording"):
            urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{step}", method="POST"))

    def recorded_requests(self):
        """What the server handled since `record_requests`: (method, path, query) triples, in order."""
        import json
        import urllib.parse
        path = self.directory / "requests.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        out = []
        for line in lines:
            entry = json.loads(line)
            url = urllib.parse.urlsplit(entry["url"])
            out.append((entry["method"], urllib.parse.unquote(url.path), urllib.parse.unquote(url.query)))
        return out

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


class AzureServer(StoreServer):
    """Azure's storage emulator Azurite (blob service, from `scripts/deps.sh`'s npm packages)."""

    NAME = "azurite"
    ACCOUNT = "devstoreaccount1"
    # Azurite's published development key (not a secret; the same in every installation).
    KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    SECRET = KEY

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


class GcsServer(StoreServer):
    """Google Cloud Storage: fake-gcs-server behind tests/gcs_server.py's proxy, which serves
    object_store's XML-API uploads (with their generation preconditions) through the JSON API."""

    NAME = "gcs"
    # Not a credential (the emulator checks none); the tests look for it where a secret must not show.
    SECRET = "pg-hudi-gcs-secret-do-not-log"

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def command(self):
        import sys
        return [sys.executable, str(pathlib.Path(__file__).parent / "gcs_server.py"), "-H", "127.0.0.1", "-p", str(self.port)]

    def _request(self, method, path, body=None):
        import json
        import urllib.request
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.endpoint + path, data=data, method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read() or b"{}")

    def ready(self):
        self._request("GET", "/storage/v1/b")

    def create_bucket(self):
        self._request("POST", "/storage/v1/b", {"name": self.bucket})

    @property
    def base_uri(self):
        return f"gs://{self.bucket}"

    def storage_options(self):
        import json
        # object_store's way to an emulator: the key names its base URL and turns OAuth off.
        key = {"gcs_base_url": self.endpoint, "disable_oauth": True, "client_email": "", "private_key": "",
               "private_key_id": self.SECRET}
        return {"google_service_account_key": json.dumps(key, separators=(",", ":"))}

    def keys(self, prefix):
        import urllib.parse
        out, token = [], None
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            page = self._request("GET", f"/storage/v1/b/{self.bucket}/o?{urllib.parse.urlencode(query)}")
            out.extend(item["name"] for item in page.get("items", []))
            token = page.get("nextPageToken")
            if not token:
                return out

