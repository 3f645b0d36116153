"""Adapters on the branches a user meets: `--docker-host` over the caller's DOCKER_HOST, a container created when
Ctrl-C arrives still removed, a cached wheel whose bytes no longer match its sha256 not used (real pip, no index),
and kubectl run with the context named and without sglstack's own secrets (a real child process standing in for
kubectl, recording what it was given). Planted bugs P70-P72, P75 and P76 (`benchmarks/planted_bugs.py`)."""

from __future__ import annotations

import hashlib
import json
import stat
import sys
import zipfile
from pathlib import Path

import docker.errors
import pytest

from sglstack.adapters import wheels
from sglstack.adapters.docker import OWNER_LABEL, effective_docker_host, is_local_docker_host, running_container
from sglstack.adapters.kubectl import Kubectl
from sglstack.core.credentials import REGISTRY_PASSWORD_ENV, SIGNING_KEY_ENV

# ---- the Docker host: the option first, then DOCKER_HOST, then the local socket ------------------------


def test_the_docker_host_option_wins_over_the_callers_docker_host(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "ssh://user@gpu-node")
    assert effective_docker_host("tcp://127.0.0.1:2375") == "tcp://127.0.0.1:2375"
    assert is_local_docker_host("tcp://127.0.0.1:2375")
    assert effective_docker_host(None) == "ssh://user@gpu-node"
    assert not is_local_docker_host(None)


def test_without_either_the_engine_is_the_local_socket(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert effective_docker_host(None) == "unix:///var/run/docker.sock"
    assert is_local_docker_host(None)


# ---- a container created when Ctrl-C arrives ------------------------------------------------------------


class _Container:
    def __init__(self, engine: _Engine, name: str) -> None:
        self.engine, self.name = engine, name

    def remove(self, *, force: bool = False, v: bool = False) -> None:
        assert force and v
        self.engine.removed.append(self.name)
        self.engine.names.discard(self.name)


class _Containers:
    """docker SDK's `client.containers`: `run` (the container is created, then the call is cut short by the
    signal the test names) and `get` by name (docker.errors.NotFound when there is none)."""

    def __init__(self, engine: _Engine) -> None:
        self.engine = engine

    def run(self, image: str, *, command=None, name: str, labels, detach: bool, **kwargs) -> _Container:
        assert detach and labels[OWNER_LABEL] == "sglstack-test"
        self.engine.names.add(name)
        if self.engine.cut_by is not None:
            raise self.engine.cut_by()
        return _Container(self.engine, name)

    def get(self, name: str) -> _Container:
        if name not in self.engine.names:
            raise docker.errors.NotFound(f"No such container: {name}")
        return _Container(self.engine, name)


class _Engine:
    def __init__(self, cut_by: type[BaseException] | None) -> None:
        self.cut_by = cut_by
        self.names: set[str] = set()
        self.removed: list[str] = []
        self.containers = _Containers(self)


@pytest.mark.parametrize("cut_by", [KeyboardInterrupt, SystemExit, RuntimeError])
def test_a_container_created_when_the_start_is_cut_short_is_removed(cut_by):
    engine = _Engine(cut_by)
    with pytest.raises(cut_by), \
            running_container(engine, "sglstack/cu130:abc", name_prefix="sglstack-test"):
        pytest.fail("the block ran for a container that did not start")
    assert engine.names == set()
    assert len(engine.removed) == 1 and engine.removed[0].startswith("sglstack-test-")


def test_a_container_that_started_is_removed_when_its_block_is_interrupted():
    engine = _Engine(None)
    with pytest.raises(KeyboardInterrupt), \
            running_container(engine, "sglstack/cu130:abc", name_prefix="sglstack-test"):
        assert len(engine.names) == 1
        raise KeyboardInterrupt
    assert engine.names == set() and len(engine.removed) == 1


# ---- the wheel cache: a wheel is used only while its bytes match its sha256 --------------------------------


def _cached_wheel(dest: Path, *, recorded: str | None = None) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tinypkg/__init__.py", "")
    digest = recorded or hashlib.sha256(wheel.read_bytes()).hexdigest()
    wheels.sidecar(wheel).write_text(f"{digest}  {wheel.name}\n", encoding="ascii")
    return wheel


def test_a_cached_wheel_whose_sha256_matches_is_used_without_pip(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    wheel = _cached_wheel(tmp_path / "cache")
    assert wheels.fetch_wheel("tinypkg", "1.0", dest=tmp_path / "cache") == wheel


def test_a_cached_wheel_changed_since_it_was_recorded_is_dropped_and_fetched_again(tmp_path, monkeypatch):
    # no index to fetch from: pip (the real one) fails at once, so what is tested is that the cache refused it
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    wheel = _cached_wheel(tmp_path / "cache", recorded="0" * 64)
    with pytest.raises(wheels.WheelFetchError, match=r"^pip download tinypkg==1\.0: "):
        wheels.fetch_wheel("tinypkg", "1.0", dest=tmp_path / "cache")
    assert not wheel.exists() and not wheels.sidecar(wheel).exists()


# ---- kubectl: every call names its context, and sglstack's secrets stay here ---------------------------


@pytest.fixture
def kubectl(tmp_path) -> tuple[Path, Path]:
    """A stand-in kubectl (a real executable) that records its argv and environment, and answers `{}`."""
    record = tmp_path / "kubectl-calls.jsonl"
    tool = tmp_path / "kubectl"
    tool.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(record)!r}, 'a') as fh:\n"
        "    fh.write(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}) + '\\n')\n"
        "print('{}')\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool, record


def _calls(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_every_kubectl_call_names_its_context_and_namespace(kubectl, monkeypatch):
    tool, record = kubectl
    Kubectl(str(tool), "gpu-cluster", "serving").run(["get", "pods", "-o", "json"], check="listing pods")
    Kubectl(str(tool), "gpu-cluster").run(["get", "nodes"])
    calls = _calls(record)
    assert calls[0]["argv"] == ["--context", "gpu-cluster", "--namespace", "serving", "get", "pods", "-o", "json"]
    assert calls[1]["argv"] == ["--context", "gpu-cluster", "get", "nodes"]


def test_kubectl_does_not_get_sglstacks_own_secrets(kubectl, monkeypatch):
    tool, record = kubectl
    monkeypatch.setenv(SIGNING_KEY_ENV, "-----BEGIN PRIVATE KEY----- x")
    monkeypatch.setenv(REGISTRY_PASSWORD_ENV, "hunter2")
    monkeypatch.setenv("KUBECONFIG", "/tmp/kubeconfig-of-the-user")
    Kubectl(str(tool), "gpu-cluster").run(["version", "--client"])
    env = _calls(record)[0]["env"]
    assert SIGNING_KEY_ENV not in env and REGISTRY_PASSWORD_ENV not in env
    assert env["KUBECONFIG"] == "/tmp/kubeconfig-of-the-user"  # what kubectl itself reads still reaches it
