"""A real compose deployment of the CPU SGLang double, through the production template and code path.

GPU reservations are disabled by the explicit option (this host has no NVIDIA runtime and a finite hard
memlock limit); everything else is what a GPU node gets.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from pathlib import Path

import docker
import pytest
import requests
from deploy_fixtures import free_port, make_test_stack

from sglstack import compose as cmp
from sglstack.deploy import (
    COMPOSE_PROJECT_LABEL,
    DeployFailed,
    Deployment,
    deploy,
    deployment_status,
    detect_compose,
    read_records,
    rollback,
    undeploy,
)
from sglstack.errors import DeployError

pytestmark = pytest.mark.docker


def _build_child(docker_cli: str, base: str, tag: str, line: str) -> str:
    dockerfile = f"FROM {base}\n{line}\n"
    proc = subprocess.run(
        [docker_cli, "build", "-q", "-t", tag, "-"],
        input=dockerfile,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return tag


@pytest.fixture(scope="module")
def double_variants(sglang_double_image: str, docker_cli: str):
    """Two different images of the double (for rollback) and one that crashes while loading."""
    client = docker.from_env()
    repo = f"sglstack-test-deploy-{secrets.token_hex(4)}"
    client.images.get(sglang_double_image).tag(repo, "a")
    refs = {
        "a": f"{repo}:a",
        "b": _build_child(docker_cli, sglang_double_image, f"{repo}:b", 'LABEL io.sglstack.test-variant="b"'),
        "crash": _build_child(docker_cli, sglang_double_image, f"{repo}:crash", "ENV SGLANG_DOUBLE_CRASH_AT_START=1"),
    }
    yield refs
    for ref in refs.values():
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(ref)


@pytest.fixture
def deployment(tmp_path: Path):
    """A deployment with a unique compose project; always `down -v` afterwards."""
    dep = Deployment(
        stack=make_test_stack(tmp_path),
        build_root=tmp_path / "build",
        project=f"sglstack-test-deploy-{secrets.token_hex(4)}",
    )
    yield dep
    client = docker.from_env()
    project_filter = {"label": f"{COMPOSE_PROJECT_LABEL}={dep.project_name}"}
    leftovers = client.containers.list(all=True, filters=project_filter) + client.networks.list(filters=project_filter)
    compose_file = dep.out_dir / cmp.COMPOSE_FILE
    if leftovers and compose_file.exists():
        argv = [*detect_compose().argv, "-p", dep.project_name, "-f", str(compose_file)]
        subprocess.run([*argv, "down", "-v", "-t", "1"], capture_output=True, check=False)
    for c in client.containers.list(all=True, filters=project_filter):
        c.remove(force=True, v=True)
    for n in client.networks.list(filters=project_filter):
        n.remove()


def _cpu_options(tmp_path: Path, **overrides) -> cmp.ComposeOptions:
    settings = dict(
        gpus=False,
        port=free_port(),
        hf_cache=str(tmp_path / "hf-cache"),
        start_period_s=30,
        healthcheck_interval_s=1,
        healthcheck_timeout_s=2,
        stop_grace_period_s=1,
    )
    return cmp.ComposeOptions(**{**settings, **overrides})


def _running_image_id(dep: Deployment) -> str:
    client = docker.from_env()
    (container,) = client.containers.list(filters={"label": f"{COMPOSE_PROJECT_LABEL}={dep.project_name}"})
    return container.image.id


def _project_containers(dep: Deployment) -> list:
    return docker.from_env().containers.list(all=True, filters={"label": f"{COMPOSE_PROJECT_LABEL}={dep.project_name}"})


def test_deploy_status_rollback_undeploy(deployment: Deployment, double_variants, tmp_path: Path) -> None:
    client = docker.from_env()
    secret = "hf_" + secrets.token_hex(16)
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"HF_TOKEN={secret}\n")
    env_file.chmod(0o600)
    options = _cpu_options(tmp_path, env_file=str(env_file))
    messages: list[str] = []

    first = deploy(deployment, double_variants["a"], options, say=messages.append)
    assert first.result == "healthy" and first.image == double_variants["a"]
    assert any(m.startswith("compose: ") and "(v" in m for m in messages)  # says which compose it used
    assert _running_image_id(deployment) == client.images.get(double_variants["a"]).id
    # The server really serves the stack's model, with EAGLE-3, on the published port.
    base = f"http://127.0.0.1:{options.port}"
    assert requests.get(f"{base}/health", timeout=5).status_code == 200
    out = requests.post(
        f"{base}/generate",
        json={"text": "Hello", "sampling_params": {"temperature": 0, "max_new_tokens": 8}},
        timeout=30,
    ).json()
    assert out["meta_info"]["completion_tokens"] == 8
    assert out["meta_info"]["spec_verify_ct"] > 0
    # The server gets HF_TOKEN from the env file; no file the deployment wrote and no label holds it.
    (container,) = _project_containers(deployment)
    assert f"HF_TOKEN={secret}" in container.attrs["Config"]["Env"]
    assert secret not in str(container.labels)

    (row,) = deployment_status(build_root=deployment.build_root, project=deployment.project_name)
    assert (row.stack, row.state, row.health) == ("tiny", "running", "healthy")
    assert row.digest == first.digest == client.images.get(double_variants["a"]).id
    assert row.model == "test-org/tiny-model"
    assert row.speculative.startswith("EAGLE3 draft=test-org/tiny-eagle3 steps=3")
    assert row.uptime != "-"

    # An image that cannot be pulled is refused before `up`: the running deployment stays.
    with pytest.raises(DeployError, match="cannot pull"):
        deploy(deployment, f"{double_variants['a'].split(':')[0]}:never-built", options, say=messages.append)
    assert _running_image_id(deployment) == client.images.get(double_variants["a"]).id

    second = deploy(deployment, double_variants["b"], options, say=messages.append)
    assert second.digest != first.digest
    assert _running_image_id(deployment) == client.images.get(double_variants["b"]).id

    back = rollback(deployment, say=messages.append)
    assert (back.action, back.image, back.digest) == ("rollback", first.image, first.digest)
    assert _running_image_id(deployment) == client.images.get(double_variants["a"]).id
    assert [r.action for r in read_records(deployment.build_root, "tiny")] == ["deploy", "deploy", "rollback"]

    assert undeploy(deployment, say=messages.append) == 0
    assert _project_containers(deployment) == []
    assert deployment_status(build_root=deployment.build_root, project=deployment.project_name) == []
    assert read_records(deployment.build_root, "tiny")[-1].action == "undeploy"
    assert (
        docker.from_env().networks.list(filters={"label": f"{COMPOSE_PROJECT_LABEL}={deployment.project_name}"}) == []
    )
    written = [p for p in deployment.build_root.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {cmp.COMPOSE_FILE, cmp.ENV_EXAMPLE_FILE, "deployments.jsonl"}
    for path in written:
        assert secret not in path.read_text(), path


def test_a_crashing_image_fails_deploy_with_its_logs_and_leaves_nothing(
    deployment: Deployment, double_variants, tmp_path: Path
) -> None:
    with pytest.raises(DeployFailed) as err:
        deploy(deployment, double_variants["crash"], _cpu_options(tmp_path), say=lambda _: None)

    assert "CUDA out of memory" in err.value.log_tail
    assert "stack 'tiny'" in str(err.value) and "\n" not in str(err.value)
    assert _project_containers(deployment) == []
    # The failure is recorded, and there is nothing healthy to roll back to.
    assert [(r.action, r.result) for r in read_records(deployment.build_root, "tiny")] == [("deploy", "failed")]
    with pytest.raises(DeployError, match="no earlier healthy deployment"):
        rollback(deployment, say=lambda _: None)


def test_gpu_reservations_on_a_cpu_host_fail_with_a_hint_and_leave_nothing(
    deployment: Deployment, double_variants, tmp_path: Path
) -> None:
    with pytest.raises(DeployFailed) as err:
        deploy(deployment, double_variants["a"], _cpu_options(tmp_path, gpus=True), say=lambda _: None)
    assert "`up` failed" in str(err.value) and "--no-gpus" in str(err.value)
    assert _project_containers(deployment) == []
