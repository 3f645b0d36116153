# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""The registry client against a real distribution registry (split from tests/unit/test_registry_client.py):
connection resets retried, a missing manifest named."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

import pytest
from registry_fixtures import free_port, plain_registry  # noqa: F401 - fixture

from sglstack.registry.client import ManifestNotFound, RegistryClient


class _ResettingProxy:
    """Resets the first `resets` connections (RST), then forwards to the real registry."""

    def __init__(self, upstream, resets):
        self.resets, self.upstream = resets, upstream
        self.port = free_port()
        self.sock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.resets > 0:
                self.resets -= 1
                conn.recv(65536)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                continue
            up = socket.create_connection(("127.0.0.1", self.upstream))
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def test_connection_resets_are_retried_against_a_real_registry(plain_registry):
    proxy = _ResettingProxy(plain_registry.port, resets=2)
    delays = []
    client = RegistryClient(f"127.0.0.1:{proxy.port}", sleep=delays.append)
    assert client.list_tags("nothing/here") == []
    assert len(delays) == 2
    proxy.sock.close()


def test_real_registry_404_is_manifest_not_found(plain_registry):
    client = RegistryClient(plain_registry.host)
    with pytest.raises(ManifestNotFound, match=f"registry {plain_registry.host}"):
        client.get_manifest("nothing/here", "sha256:" + "0" * 64)
