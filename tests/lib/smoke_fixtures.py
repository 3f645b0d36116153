"""Helpers for the smoke tests: a unique label per test, and a second Docker endpoint (a unix-socket proxy)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sysconfig
import threading
import venv
from pathlib import Path

from sglstack.smoke import smoke_options

LABEL = "io.sglstack.test"

# Fast double settings: tokens/s in the hundreds, short generations, a small prompt set.
FAST = {
    "model": "moonshotai/Kimi-K2.5",
    "draft_model": "AQ-MedAI/Kimi-K25-eagle3",
    "tp": 1,
    "gpus": 0,
    "timeout": 60,
    "concurrency": 2,
    "num_prompts": 4,
    "max_new_tokens": 16,
}


# Margins wide enough for a busy 2-core machine: EAGLE-3 at twice the baseline's speed unless a test says otherwise.
DOUBLE_ENV = {"SGLANG_DOUBLE_TOKENS_PER_S": "300", "SGLANG_DOUBLE_SPEC_SPEEDUP": "2.0"}


def fast_options(tmp_path: Path, label: str, env: dict[str, str] | None = None, **overrides):
    settings = {**FAST, **overrides}
    return smoke_options(
        None,
        env={**DOUBLE_ENV, **(env or {})},
        labels={LABEL: label},
        build_dir=str(tmp_path / "build"),
        report=str(tmp_path / "report.json"),
        **settings,
    )


def make_double_env(root: Path, repo_root: Path) -> Path:
    """A venv (no pip: seconds) whose site-packages points at the double's `sglang` package: a Python
    environment for `smoke --runner process`."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    purelib = sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)})
    Path(purelib, "sglang_double.pth").write_text(str(repo_root / "tests" / "doubles" / "sglang-double") + "\n")
    return root


def default_docker_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    return host.removeprefix("unix://") if host.startswith("unix://") else "/var/run/docker.sock"


class UnixSocketProxy:
    """A second Docker endpoint: a unix socket whose connections are relayed to the engine's socket.

    With `stall_on`, a request whose bytes contain it is never passed on (its connection hangs, as with a
    stuck engine), and `stalled` is set: a test can then signal the client while it waits. The names of
    the containers created through the proxy are kept in `created`.
    """

    def __init__(self, path: Path, target: str, *, stall_on: bytes | None = None) -> None:
        self.path, self.target, self.stall_on = path, target, stall_on
        self.connections = 0
        self.created: list[str] = []
        self.stalled = threading.Event()
        self._closed = threading.Event()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_client:
                    self.created += [m.decode() for m in re.findall(rb"/containers/create\?name=([\w.-]+)", data)]
                    if self.stall_on is not None and self.stall_on in data:
                        self.stalled.set()
                        self._closed.wait()
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed.set()
        self.server.close()
        self.path.unlink(missing_ok=True)
