"""The k8s deploy flow tests' cluster (tests/unit/test_deploy_k8s_flow*.py): the recording kubectl stand-in
(tests/doubles/kubectl), run in this process as the adapter would run it, its state read back, and the test's clock.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from deploy_fixtures import make_test_stack
from fake_clock import FakeClock

from sglstack.adapters import kubectl as kubectl_adapter
from sglstack.adapters.kubectl import Kubectl
from sglstack.deploy import k8s_flow
from sglstack.deploy.k8s_flow import K8sDeployment
from sglstack.deploy.store import read_records
from sglstack.render import k8s

DOUBLE = Path(__file__).resolve().parents[1] / "doubles" / "kubectl"
REPO = "127.0.0.1:5000/sglstack/sglang"
A = f"{REPO}@sha256:{'a' * 64}"
B = f"{REPO}@sha256:{'b' * 64}"
OPTIONS = k8s.K8sOptions(gpus=False, nnodes=2)
NAME = k8s.object_name("tiny")  # sglstack-tiny


_DOUBLE_CODE = compile((DOUBLE / "kubectl").read_text(encoding="utf-8"), str(DOUBLE / "kubectl"), "exec")
_real_run = subprocess.run
_ADAPTER_PROCESSES = kubectl_adapter.subprocess  # what the adapter starts kubectl with


def _kubectl_in_process(argv, *, env=None, **kwargs):
    """The kubectl stand-in's own code, run in this process with the argv and environment the adapter gives
    it, its exit and output returned as `subprocess.run` returns them. A fresh Python per kubectl call
    cost ~0.1 s of CPU, 5-100 a test: most of this module's time. What these tests check is the flow;
    the adapter's real child process is tests/cli/test_deploy_k8s.py's (and the first test here). No `env`
    inherits the caller's environment, as a real child does."""
    if argv[0] != str(DOUBLE / "kubectl"):
        return _real_run(argv, env=env, **kwargs)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    child_env = dict(os.environ) if env is None else env
    with mock.patch.object(sys, "argv", list(argv)), mock.patch.dict(os.environ, child_env, clear=True), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(_DOUBLE_CODE, {"__name__": "kubectl_double"})
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1  # as Python exits
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def make_cluster(tmp_path, monkeypatch, request):
    """The kubectl stand-in on PATH (run in this process unless the test asks for `kubectl_as_a_child`), its state
    folder, the test's clock and a deployment of `tiny` (the tests' `cluster` fixture)."""
    if "kubectl_as_a_child" not in request.fixturenames:
        monkeypatch.setattr(kubectl_adapter.subprocess, "run", _kubectl_in_process)
    monkeypatch.setenv("PATH", f"{DOUBLE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KUBECTL_DOUBLE_STATE", str(tmp_path / "kube"))
    monkeypatch.setenv("KUBECTL_DOUBLE_CONTEXT", "kind-sglstack")
    for name in ("KUBECTL_DOUBLE_UNREADY", "KUBECTL_DOUBLE_QUOTA", "KUBECTL_DOUBLE_FORBID_DELETE",
                 "KUBECTL_DOUBLE_POD_STARTED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    # The default build root is not the deployment's: a record written to the default one is not found.
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "default-build"))
    clock = FakeClock(100.0)
    monkeypatch.setattr(k8s_flow, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    said: list[str] = []
    dep = K8sDeployment(stack=make_test_stack(tmp_path / "m"), build_root=tmp_path / "build",
                        kubectl=Kubectl(str(DOUBLE / "kubectl"), "kind-sglstack"))
    return dep, said, clock, tmp_path / "kube"


def calls(state: Path) -> list[list[str]]:
    return [json.loads(line)[2:] for line in (state / "argv.jsonl").read_text().splitlines()]


def applied_image(state: Path) -> str | None:
    path = state / "objects" / f"LeaderWorkerSet.default.{NAME}.json"
    if not path.is_file():
        return None
    obj = json.loads(path.read_text())
    return obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["image"]


def one_poll_per_wait_set(monkeypatch):
    """A rollback that never gets ready waits its recorded options' whole limit (540 s here): at the 5 s poll
    that is 108 runs of the kubectl stand-in (a Python program, ~0.1 s of CPU each). The poll is this
    module's own setting and these tests assert what is said and recorded at the deadline, not the polls."""
    monkeypatch.setattr(k8s_flow, "POLL_S", 10_000.0)


def rows(dep: K8sDeployment) -> list[tuple[str, str, str, str]]:
    return [(r.action, r.result, r.image, r.note) for r in read_records(dep.build_root, "tiny")]
