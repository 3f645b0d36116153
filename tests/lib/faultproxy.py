"""A fault-injecting HTTP proxy in front of a real distribution registry, and a black hole.

`FaultProxy(upstream_port)` forwards every request to the registry, except those a `Fault` picks:
  Fault("PUT", r"/manifests/cpu-test$", "status", status=500)        # every PUT of that tag answers 500
  Fault("PUT", r"/manifests/", "status", nth=3, times=2, status=503)  # the 3rd and 4th manifest PUT: 503
  Fault("PUT", r"/manifests/x$", "hang")                              # read the request, never answer
  Fault("GET", r"/tags/list", "status", status=200, body=b"<html>")   # 200 with a body that isn't JSON
  Fault(None, r".", "close")                                          # close without an answer
Faults are matched in the order they were added; `seen` and `injected` count per fault. `log` lists
(method, path, what happened) for every request. Request bodies may be chunked (dockerd's blob uploads).

`BlackHole()` accepts connections and never reads or answers.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import select
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from engine_refs import free_port
from httpserve import ThreadedServer

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


@dataclass
class Fault:
    method: str | None  # None: any method
    path: str  # regex searched in the request path (with its query)
    action: str  # "status" | "hang" | "close"
    nth: int = 1  # the first matching request that fails (1-based)
    times: int | None = None  # how many matching requests fail from the nth on (None: all of them)
    status: int = 500
    body: bytes = b'{"errors":[{"code":"UNKNOWN","message":"injected fault"}]}'
    content_type: str = "application/json"
    seen: int = 0
    injected: int = 0
    enabled: bool = True

    def matches(self, method: str, path: str) -> bool:
        wanted = self.method is None or self.method == method
        return self.enabled and wanted and re.search(self.path, path) is not None

    def fires(self) -> bool:
        """Count one matching request; True when this one is to fail."""
        self.seen += 1
        if self.seen < self.nth:
            return False
        if self.times is not None and self.seen >= self.nth + self.times:
            return False
        self.injected += 1
        return True


@dataclass
class FaultProxy:
    upstream_port: int
    faults: list[Fault] = field(default_factory=list)
    log: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.hanging = threading.Event()  # set when a request starts hanging
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    # A bytearray: `bytes +=` copies all so far per chunk, and a pushed layer comes in
                    # thousands of chunks (that copying was most of a release test's time).
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                fault = proxy._pick(self.command, self.path)
                if fault is None:
                    proxy._note(self.command, self.path, "forwarded")
                    self._forward(body)
                elif fault.action == "status":
                    proxy._note(self.command, self.path, f"answered {fault.status}")
                    self.send_response(fault.status)
                    self.send_header("Content-Type", fault.content_type)
                    self.send_header("Content-Length", str(len(fault.body)))
                    self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(fault.body)
                elif fault.action == "hang":
                    proxy._note(self.command, self.path, "hung")
                    proxy.hanging.set()
                    self._hang()
                else:
                    proxy._note(self.command, self.path, "closed")
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)

            def _hang(self) -> None:
                """Answer nothing until the client gives up (closes) or the proxy closes."""
                self.close_connection = True
                while not proxy._closing.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.2)
                    if readable:
                        try:
                            if not self.connection.recv(1, socket.MSG_PEEK):
                                return
                        except OSError:
                            return

            def _forward(self, body: bytes) -> None:
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if body or self.command in ("PUT", "POST", "PATCH"):
                    headers["Content-Length"] = str(len(body))
                try:
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    resp = upstream.getresponse()
                    data = resp.read()
                finally:
                    upstream.close()
                self.send_response(resp.status, resp.reason)
                for key, value in resp.getheaders():
                    if key.lower() in HOP_BY_HOP or (key.lower() == "content-length" and self.command != "HEAD"):
                        continue
                    self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        self._server = ThreadedServer(Handler)
        self.port = self._server.port  # handler threads are daemons (ThreadingHTTPServer's own default)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            for fault in self.faults:
                fault.enabled = False
            self.faults.clear()

    def requests(self, method: str | None = None, path: str = "") -> list[tuple[str, str, str]]:
        with self._lock:
            return [e for e in self.log if (method is None or e[0] == method) and re.search(path, e[1])]

    def _pick(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path) and fault.fires():
                    return fault
        return None

    def _note(self, method: str, path: str, outcome: str) -> None:
        with self._lock:
            self.log.append((method, path, outcome))

    def close(self) -> None:
        self._closing.set()
        self._server.close()


class BlackHole:
    """Accepts TCP connections and never reads or answers (until closed)."""

    def __init__(self) -> None:
        self.port = free_port()
        self._sock = socket.create_server(("127.0.0.1", self.port))
        self._held: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)

    def close(self) -> None:
        self._sock.close()
        for conn in self._held:
            with contextlib.suppress(OSError):
                conn.close()
