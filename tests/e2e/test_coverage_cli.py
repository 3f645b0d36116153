# ruff: noqa: F811 - pytest fixtures imported from coverage_fixtures are parameters here
"""`invoke coverage` as a user runs it: the table, --json-out, one line per wheel out of reach, and the exit
codes (0 covered, 1 missing, 2 bad input, 3 incomplete). The stack's sgl-kernel is a local wheel URL made of
the compiled fixtures; its torch index is a closed loopback port (unreachable, like PyTorch's index here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clirun import REPO, run_invoke
from coverage_fixtures import FAKE_SGL_KERNEL, cuobjdump_tool, make_wheel  # noqa: F401 - fixtures

pytestmark = pytest.mark.network  # cuobjdump's wheel comes from PyPI (once per machine)

STACKS = """stacks:
  fake:
    base_image: nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
    python: "3.12"
    cuda_arch_list: ["9.0", "10.0", "10.3"]
    sgl_kernel:
      version: 0.0.1
      url: {url}
{torch}    sglang: {{version: "0.5.9"}}
    serving: {{model: m}}
{coverage}"""
UNREACHABLE_TORCH = "    torch:\n      version: 2.9.1\n      index_url: http://127.0.0.1:9/whl/cu130\n"
WAIVE = """    coverage:
      require: ptx
      exceptions:
        - extension: sgl_kernel.common_ops
          capability: "10.3"
          reason: sm_100a does not run on B300; waiting for an sm_103a build
        - extension: sgl_kernel.flash_ops
          reason: FA3 is Hopper-only; SGLang uses FlashInfer on Blackwell
"""


@pytest.fixture
def env(tmp_path, cuobjdump_tool):
    return {"SGLSTACK_CACHE": str(tmp_path / "cache"), "SGLSTACK_CUOBJDUMP": str(cuobjdump_tool.binary)}


def stacks_file(tmp_path, *, torch: bool, coverage: str = "") -> str:
    wheel = make_wheel(tmp_path, "sgl-kernel", "0.0.1", FAKE_SGL_KERNEL)
    path = tmp_path / "stacks.yaml"
    path.write_text(STACKS.format(url=wheel.as_uri(), torch=UNREACHABLE_TORCH if torch else "", coverage=coverage))
    return str(path)


def test_a_missing_capability_exits_1_naming_extension_and_capability(tmp_path, env):
    out = tmp_path / "coverage.json"
    proc = run_invoke("coverage", "--stack", "fake", "--stacks-file", stacks_file(tmp_path, torch=True),
                      "--json-out", str(out), cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any("sgl_kernel.common_ops gives no native code on 10.3 (missing)" in ln for ln in lines), proc.stdout
    assert any("sgl_kernel.flash_ops gives no native code on 10.0 (missing), 10.3 (missing)" in ln for ln in lines)
    unreachable = [ln for ln in lines if ln.startswith("not checked")]
    assert len(unreachable) == 1 and "torch 2.9.1" in unreachable[0] and "127.0.0.1:9" in unreachable[0]
    data = json.loads(out.read_text())
    rows = {r["name"]: r["cells"] for r in data["extensions"]}
    assert rows["sgl_kernel.common_ops"] == {"9.0": "native", "10.0": "native", "10.3": "missing"}
    assert rows["lib/mscclpp.so"] == {"9.0": "ptx", "10.0": "ptx", "10.3": "ptx"}
    assert data["exit_code"] == 1 and data["complete"] is False and data["platform"] == "linux/amd64"


def test_declared_exceptions_and_a_wheel_out_of_reach_exit_3(tmp_path, env):
    proc = run_invoke("coverage", "--stack", "fake", "--stacks-file",
                      stacks_file(tmp_path, torch=True, coverage=WAIVE), cwd=tmp_path, env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "excepted sgl_kernel.common_ops on 10.3: missing (sm_100a does not run on B300" in proc.stdout
    assert "incomplete" in proc.stdout and "not covered" not in proc.stdout


def test_everything_covered_exits_0_with_the_label(tmp_path, env):
    out = tmp_path / "coverage.json"
    proc = run_invoke("coverage", "--stack", "fake", "--stacks-file",
                      stacks_file(tmp_path, torch=False, coverage=WAIVE), "--json-out", str(out), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(out.read_text())["label"] == "9.0:ptx,10.0:ptx,10.3:ptx"
    assert "coverage covered; label 9.0:ptx,10.0:ptx,10.3:ptx" in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--stack", "nope"), "unknown stack"),
    (("--stack", "fake", "--json-out", "/nonexistent-folder/x.json"), "--json-out /nonexistent-folder/x.json: its"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, env, args, message):
    path = stacks_file(tmp_path, torch=False)
    proc = run_invoke("coverage", "--stacks-file", path, *args, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


def test_a_bad_policy_and_a_missing_option_exit_2(tmp_path, env):
    path = tmp_path / "bad.yaml"
    path.write_text(Path(stacks_file(tmp_path, torch=False)).read_text() + "    coverage: {require: fast}\n")
    proc = run_invoke("coverage", "--stack", "fake", "--stacks-file", str(path), cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "key 'coverage.require'" in proc.stderr
    proc = run_invoke("coverage", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: coverage: missing required option --stack"


def test_sigterm_mid_listing_exits_143_and_leaves_no_scratch_files(tmp_path, env, cuobjdump_tool):
    """A slow cuobjdump (a wrapper that sleeps before listing) is interrupted: the task exits 128+15,
    and the unpacked wheel members are gone."""
    slow = tmp_path / "slow-cuobjdump"
    slow.write_text(f'#!/bin/sh\n[ "$1" = --version ] || sleep 2\nexec "{cuobjdump_tool.binary}" "$@"\n')
    slow.chmod(0o755)
    path = stacks_file(tmp_path, torch=False)
    scratch = tmp_path / "cache" / "coverage" / "tmp"
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "coverage", "--stack", "fake",
         "--stacks-file", path], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env, "SGLSTACK_CUOBJDUMP": str(slow)})
    deadline = time.monotonic() + 60
    while not (scratch.is_dir() and any(scratch.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scratch.is_dir() and any(scratch.iterdir()), "the listing never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "interrupted (SIGTERM)" in err and not any(scratch.iterdir())


def test_help_names_the_options_and_the_exit_codes(tmp_path):
    proc = run_invoke("coverage", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "-s NAME, --stack NAME" in proc.stdout and "--json-out PATH" in proc.stdout and "3 incomplete" in proc.stdout
