"""Bytes a registry receives: a candidate push of IMAGE vs its promotion to the release tags.

Usage: python3 benchmarks/bench_publish_promotion.py [IMAGE]   (default debian:bookworm-slim, local)
Starts a throwaway distribution registry on a free loopback port behind a byte-counting TCP proxy.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from sglstack.adapters.docker import docker_client
from sglstack.config.imageref import parse_repository
from sglstack.publish import promote, push_candidate
from sglstack.registry.client import RegistryClient
from sglstack.registry.local import registry_config, start_binary, stop_process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Counter:
    def __init__(self, upstream: int) -> None:
        self.port, self.up, self.bytes = free_port(), upstream, 0
        self.sock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            up = socket.create_connection(("127.0.0.1", self.up))
            threading.Thread(target=self.pipe, args=(conn, up, True), daemon=True).start()
            threading.Thread(target=self.pipe, args=(up, conn, False), daemon=True).start()

    def pipe(self, a: socket.socket, b: socket.socket, count: bool) -> None:
        try:
            while data := a.recv(65536):
                self.bytes += len(data) if count else 0
                b.sendall(data)
        except OSError:
            pass
        finally:
            b.close()


def main() -> None:
    image = sys.argv[1] if len(sys.argv) > 1 else "debian:bookworm-slim"
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-") as tmp:
        port = free_port()
        proc = start_binary(registry_config(port, Path(tmp) / "data"), Path(tmp), port)
        try:
            proxy = Counter(port)
            repo = parse_repository(f"127.0.0.1:{proxy.port}/bench/promotion")
            client = RegistryClient(repo.registry)
            t0 = time.monotonic()
            digest = push_candidate(docker_client(), image, repo, "candidate-bench-000000000000", client)
            push_s, pushed = time.monotonic() - t0, proxy.bytes
            proxy.bytes = 0
            t0 = time.monotonic()
            promote(client, repo, digest, immutable="1.0-bench-20000101-00000000", moving=("1.0-bench", "bench"))
            promote_s, promoted = time.monotonic() - t0, proxy.bytes
        finally:
            stop_process(proc.pid)
    print(
        f"image {image}: candidate push {pushed} bytes in {push_s:.1f}s; "
        f"promotion to 3 tags {promoted} bytes in {promote_s:.2f}s; ratio {pushed / max(promoted, 1):.0f}x"
    )


if __name__ == "__main__":
    main()
