"""The one way a test serves HTTP itself: a `ThreadingHTTPServer` (on 127.0.0.1 unless told) in a daemon thread.

`ThreadedServer(Handler)` listens at once on a free port (`port=0`: the kernel's pick, no race with another
test, claimed for this session like every registry's: `engine_refs`), serves in a thread, and `close()` (or
leaving its `with` block, however the test ends) shuts it down, closes its socket and joins the thread;
closing twice is a no-op. `wrap` replaces the listening socket (a TLS context's `wrap_socket`).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from engine_refs import claim_port


class ThreadedServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler], *, host: str = "127.0.0.1", port: int = 0,
                 wrap: Callable[[socket.socket], socket.socket] | None = None, poll_interval: float = 0.05) -> None:
        self.server = ThreadingHTTPServer((host, port), handler)
        self.address = host
        self.port: int = self.server.server_address[1]
        claim_port(self.port)
        if wrap is not None:
            self.server.socket = wrap(self.server.socket)
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": poll_interval},
                                        daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT` (the address it listens on), as a registry client names it."""
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> ThreadedServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
