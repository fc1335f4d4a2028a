"""An HTTP proxy that puts faults between pg_hudi and an object-store server: some requests are
answered 503 (before or after the server saw them), some answers are held back past the
client's timeout (after the server acted on the request). Seeded, so a failing run can be
repeated; it counts what it did, so a test can show the faults happened."""

import http.client
import http.server
import random
import threading
import time


class FaultProxy:
    def __init__(self, upstream_port, seed, unavailable=0.10, delayed=0.03, delay=1.5, first_creates=()):
        """`unavailable`: share of requests answered 503; `delayed`: share whose answer waits
        `delay` seconds; `first_creates`: faults for the first conditional creates (PUT with
        If-None-Match), in order, each 'unavailable' or 'delayed' — the cases where a create
        reached the server but its caller cannot know."""
        self.upstream_port, self.delay = upstream_port, delay
        self.rng, self.lock = random.Random(seed), threading.Lock()
        self.unavailable, self.delayed = unavailable, delayed
        self.first_creates = list(first_creates)
        self.counts = {"requests": 0, "unavailable": 0, "delayed": 0, "creates_faulted": 0}
        self.server = self.thread = None

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def fault_for(self, method, headers):
        """What to do with one request: None, ('unavailable', before_upstream) or 'delayed'."""
        with self.lock:
            self.counts["requests"] += 1
            if method == "PUT" and headers.get("If-None-Match") == "*" and self.first_creates:
                self.counts["creates_faulted"] += 1
                kind = self.first_creates.pop(0)
                return ("unavailable", False) if kind == "unavailable" else "delayed"
            draw = self.rng.random()
            if draw < self.unavailable:
                return ("unavailable", self.rng.random() < 0.5)
            if draw < self.unavailable + self.delayed:
                return "delayed"
            return None

    def count(self, fault):
        with self.lock:
            self.counts[fault] += 1

    def start(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in two writes: without this, each answer waits for the
            # client's delayed ACK (40 ms).
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = proxy.fault_for(self.command, self.headers)
                if fault == ("unavailable", True):  # the server never sees it
                    proxy.count("unavailable")
                    return self.reply(503, {}, b"")
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    # A HEAD's Content-Length is the object's size; other answers get the body's.
                    dropped = ("connection", "transfer-encoding") + (() if self.command == "HEAD" else ("content-length",))
                    reply_headers = {k: v for k, v in response.getheaders() if k.lower() not in dropped}
                    status = response.status
                finally:
                    upstream.close()
                if fault == ("unavailable", False):  # the server acted, its answer is lost
                    proxy.count("unavailable")
                    return self.reply(503, {}, b"")
                if fault == "delayed":
                    proxy.count("delayed")
                    time.sleep(proxy.delay)
                self.reply(status, reply_headers, data, head=self.command == "HEAD")

            def reply(self, status, headers, data, head=False):
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    if not head:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if not head:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting: the point of a delay

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
