"""A GPU smoke or deploy runs preflight on the node first: here (an engine without a GPU runtime) both stop
at once, with one line that names the failing check, before any server container starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.preflight.remote import GPU_RUNTIME_CHECK

REPO = Path(__file__).resolve().parents[2]
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
pytestmark = pytest.mark.docker


def server_containers(docker_client, label: str) -> list:
    return docker_client.containers.list(all=True, filters={"label": label})


def test_gpu_smoke_stops_at_preflight(tmp_path, sglang_double_image, docker_client):
    label = f"sglstack.test.wiring={os.getpid()}"
    proc = run_invoke("smoke", "--image", sglang_double_image, "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX),
                  "--gpus", "1", "--label", label, "--timeout", "30", cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    # Only preflight runs this check: its name in the error line proves preflight stopped the run.
    assert line.startswith(f"error: preflight for stack 'cpu-test': check '{GPU_RUNTIME_CHECK}' failed: "), line
    assert "smoke: baseline" not in proc.stderr  # no server was planned, let alone started
    assert server_containers(docker_client, label) == []
    assert not (tmp_path / "build" / "cpu-test" / "smoke-history.jsonl").exists()


def test_gpu_deploy_stops_at_preflight(tmp_path, sglang_double_image, docker_client):
    proc = run_invoke("deploy", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX), "--image", sglang_double_image,
                  cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: preflight for stack 'cpu-test': check '{GPU_RUNTIME_CHECK}' failed: "), line
    project = {"label": "com.docker.compose.project=sglstack-cpu-test"}
    assert docker_client.containers.list(all=True, filters=project) == []
