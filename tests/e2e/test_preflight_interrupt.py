"""SIGINT, SIGTERM and SIGHUP during `invoke preflight --image` remove the container it created and exit
128 + the signal. The engine is reached through a proxy that never passes the container's start on, so
the task is caught waiting on the engine, with its container created: the worst moment to be stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from smoke_fixtures import UnixSocketProxy, default_docker_socket

REPO = Path(__file__).resolve().parents[2]
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
pytestmark = pytest.mark.docker


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_while_waiting_on_the_engine_removes_the_preflight_container(signum, tmp_path, docker_client):
    proxy = UnixSocketProxy(tmp_path / "engine.sock", default_docker_socket(), stall_on=b"/start HTTP/1.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "preflight", "--stack", "cpu-test",
         "--stacks-file", str(CPU_MATRIX), "--docker-host", proxy.url, "--image", "debian:bookworm-slim"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proxy.stalled.wait(60), proc.communicate(timeout=10)
        [name] = proxy.created
        assert docker_client.containers.get(name).status == "created"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.close()
    assert proc.returncode == 128 + signum, out + err
    assert f"interrupted ({signum.name})" in err and "Traceback" not in err
    assert docker_client.containers.list(all=True, filters={"name": f"^/{name}$"}) == []
