"""The real `invoke preflight` and `python3 -m sglstack.preflight` on a machine without a GPU (CI)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from clirun import run_invoke

from sglstack.inimage.preflight.node import SCHEMA

NO_GPU = shutil.which("nvidia-smi") is None
pytestmark = pytest.mark.skipif(not NO_GPU, reason="these tests are the no-GPU path; this machine has a driver")


def _invoke(repo_root, *args: str) -> subprocess.CompletedProcess:
    return run_invoke("preflight", *args, cwd=repo_root, env={"COLUMNS": "160"}, timeout=120)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert proc.stdout.strip() == ""
    return lines[0]


def test_no_gpu_is_one_clear_line_and_a_json_report(repo_root, tmp_path):
    report_path = tmp_path / "preflight.json"
    proc = _invoke(repo_root, "--stack", "cu130", "--json-out", str(report_path))
    line = _one_error_line(proc)
    assert line.startswith("error: preflight for stack 'cu130': no NVIDIA driver on this node")
    data = json.loads(report_path.read_text())
    assert data["schema"] == SCHEMA and data["status"] == "fail"
    assert data["checks"][0]["name"] == "driver" and data["checks"][0]["threshold"] == ">= 580.65.06 (CUDA 13.0.1)"
    assert data["requirements"]["tp"] == 8 and data["requirements"]["arch_list"] == ["9.0", "10.0", "10.3", "12.0"]


def test_node_module_without_a_gpu(repo_root):
    proc = subprocess.run(
        [sys.executable, "-m", "sglstack.preflight", "--tp", "8", "--cuda", "12.9.1"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert _one_error_line(proc).startswith("preflight FAIL: no NVIDIA driver on this node")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--stack", "nope"), "stack"),
        (("--stack", "cu130", "--sizes", "1M,lots"), "key '--sizes': 'lots' is not a size"),
        (("--stack", "cu130", "--docker-host", "unix:///nonexistent.sock"), "--docker-host needs --image"),
    ],
)
def test_bad_options_are_one_line(repo_root, args, message):
    line = _one_error_line(_invoke(repo_root, *args))
    assert line.startswith("error: ") and message in line


def test_unreachable_docker_host_is_one_line(repo_root):
    line = _one_error_line(
        _invoke(
            repo_root,
            "--stack",
            "cu130",
            "--docker-host",
            "unix:///nonexistent.sock",
            "--image",
            "debian:bookworm-slim",
        )
    )
    assert "cannot reach the Docker engine at unix:///nonexistent.sock" in line


@pytest.mark.docker
def test_docker_host_without_gpus_is_one_line_and_leaves_no_container(repo_root, docker_client):
    """The real engine here has no GPU runtime: the GPU device request is refused, cleanly."""
    before = {c.id for c in docker_client.containers.list(all=True)}
    line = _one_error_line(
        _invoke(
            repo_root,
            "--stack",
            "cu130",
            "--docker-host",
            "unix:///var/run/docker.sock",
            "--image",
            "debian:bookworm-slim",
        )
    )
    assert "with GPUs" in line or "cannot create the preflight container" in line, line
    assert "debian:bookworm-slim" in line or "unix:///var/run/docker.sock" in line
    leaked = [
        c.name
        for c in docker_client.containers.list(all=True)
        if c.id not in before and c.name.startswith("sglstack-preflight")
    ]
    assert leaked == []
