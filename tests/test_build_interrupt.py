"""Ctrl-C during `invoke build` stops the BuildKit client, tags nothing and leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
pytestmark = pytest.mark.docker


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def test_ctrl_c_stops_the_build_and_tags_nothing(tmp_path, docker_cli, docker_client, ca_bundle):
    matrix = tmp_path / "stacks.yaml"
    # A stack of its own; --no-cache makes its apt-get steps take seconds, long enough to interrupt.
    matrix.write_text(CPU_MATRIX.read_text().replace(
        "stacks:\n", "stacks:\n  cpu-test-interrupted:\n    inherits: cpu-test\n", 1))
    proc = subprocess.Popen(
        ["invoke", "--search-root", str(REPO), "build", "--stack", "cpu-test-interrupted", "--stacks-file",
         str(matrix), "--no-cache", "--ca-bundle", str(ca_bundle), "--docker-cli", docker_cli],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    log = tmp_path / "build" / "cpu-test-interrupted" / "build.log"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and "RUN apt-get update" in log.read_text(errors="replace"):
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    dockerfile = "build/cpu-test-interrupted/Dockerfile"
    assert processes_mentioning(dockerfile), "the BuildKit client should be running"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted" in err and "Traceback" not in err
    time.sleep(1)
    assert processes_mentioning(dockerfile) == []
    tags = [t for image in docker_client.images.list() for t in image.tags
            if t.startswith("sglstack/cpu-test-interrupted:")]
    assert tags == []
