"""A real compose deployment of the CPU SGLang double, through the production template and code path.

GPU reservations are disabled by the explicit option (this host has no NVIDIA runtime and a finite hard
memlock limit); everything else is what a GPU node gets.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
import requests
from deploy_fixtures import free_port, make_test_stack, write_test_matrix

from sglstack.adapters.compose import detect_compose
from sglstack.adapters.docker import running_container
from sglstack.core.errors import DeployError
from sglstack.deploy.deployment import DeployFailed, Deployment
from sglstack.deploy.flow import deploy
from sglstack.deploy.health import COMPOSE_PROJECT_LABEL
from sglstack.deploy.lifecycle import rollback, undeploy
from sglstack.deploy.status import deployment_status
from sglstack.deploy.store import read_records
from sglstack.render import compose as cmp
from sglstack.serving import ServingError

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
        "never": _build_child(docker_cli, sglang_double_image, f"{repo}:never", "ENV SGLANG_DOUBLE_NEVER_HEALTHY=1"),
    }
    yield refs
    # Every tag of this repository, the ones tests add (`:moving`) included.
    tags = {t for image in client.images.list(name=repo) for t in image.tags if t.startswith(f"{repo}:")}
    for ref in sorted(tags | set(refs.values())):
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
    _remove_project(dep)


@pytest.fixture
def cli_deployment(tmp_path: Path):
    """A stack with a unique name, for `invoke deploy` (whose project is sglstack-STACK); removed afterwards."""
    name = f"tiny-{secrets.token_hex(4)}"
    matrix = write_test_matrix(tmp_path / "matrix", name)
    dep = Deployment(stack=make_test_stack(tmp_path / "matrix", name), build_root=tmp_path / "build")
    yield dep, matrix
    _remove_project(dep)


def _remove_project(dep: Deployment) -> None:
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
    (tmp_path / "hf-cache").mkdir(exist_ok=True)
    settings = dict(
        gpus=0,
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


def test_deploy_status_rollback_undeploy(deployment: Deployment, double_variants, tmp_path: Path, monkeypatch) -> None:
    client = docker.from_env()
    secret = "hf_" + secrets.token_hex(16)
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"HF_TOKEN={secret}\n")
    env_file.chmod(0o600)
    options = _cpu_options(tmp_path, env_file=str(env_file))
    messages: list[str] = []
    # Publish's record of image a's release, with the hash of the smoke report that let it through. The
    # double's local images were never pushed, so they have no registry digest (an image id is not one):
    # the engine is made to answer for a as for an image pulled from the registry, under `released`.
    from sglstack.deploy import flow as deploy_flow
    from sglstack.publish import append_records
    from sglstack.publish import records_path as publish_records

    report = "sha256:" + secrets.token_hex(32)
    released = "sha256:" + secrets.token_hex(32)
    real_identity = deploy_flow.image_identity

    def identity(engine, ref: str) -> tuple[str, str]:
        digest, image_id = real_identity(engine, ref)
        return (released if ref == double_variants["a"] else digest), image_id

    monkeypatch.setattr(deploy_flow, "image_identity", identity)
    append_records(publish_records(deployment.build_root), [{
        "event": "published", "stack": "tiny", "repository": double_variants["a"].split(":")[0], "tag": "tiny",
        "kind": "moving", "digest": released, "smoke_report": "report.json", "smoke_report_sha256": report}])

    first = deploy(deployment, double_variants["a"], options, say=messages.append)
    assert first.result == "healthy" and first.image == double_variants["a"]
    assert first.smoke_report == report
    assert _project_containers(deployment)[0].labels[cmp.LABEL_SMOKE_REPORT] == report
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
    assert row.digest == first.digest == released
    assert first.image_id == client.images.get(double_variants["a"]).id
    assert row.model == "test-org/tiny-model"
    assert row.speculative.startswith("EAGLE3 draft=test-org/tiny-eagle3 steps=3")
    assert row.uptime != "-"
    assert row.smoke_report == report

    # An image that cannot be pulled is refused before `up`: the running deployment stays.
    with pytest.raises(DeployError, match="cannot pull"):
        deploy(deployment, f"{double_variants['a'].split(':')[0]}:never-built", options, say=messages.append)
    assert _running_image_id(deployment) == client.images.get(double_variants["a"]).id

    messages.clear()
    second = deploy(deployment, double_variants["b"], options, say=messages.append)
    assert second.digest == "" and second.image_id == client.images.get(double_variants["b"]).id
    assert _running_image_id(deployment) == client.images.get(double_variants["b"]).id
    # No passing smoke report is known for b: labelled unknown, and said so.
    assert second.smoke_report == "unknown"
    assert _project_containers(deployment)[0].labels[cmp.LABEL_SMOKE_REPORT] == "unknown"
    assert any(m.startswith(f"no passing smoke report is known for {second.image}") for m in messages)

    back = rollback(deployment, say=messages.append)
    assert (back.action, back.image, back.digest) == ("rollback", first.image, first.digest)
    assert back.smoke_report == report
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
        deploy(deployment, double_variants["a"], _cpu_options(tmp_path, gpus=None), say=lambda _: None)
    assert "`up` failed" in str(err.value) and "--gpus 0" in str(err.value)
    assert _project_containers(deployment) == []


# ---- a redeploy never takes down the deployment that is running --------------------------------------


def _serving_container(dep: Deployment):
    (container,) = docker.from_env().containers.list(
        filters={"label": f"{COMPOSE_PROJECT_LABEL}={dep.project_name}"}
    )
    return container


def _fingerprint(dep: Deployment) -> tuple[str, str, str, str]:
    """What must not change when a redeploy is refused: the container, its start, its image, its file."""
    container = _serving_container(dep)
    return (container.id, container.attrs["State"]["StartedAt"], container.image.id,
            (dep.out_dir / cmp.COMPOSE_FILE).read_text())


def _assert_serving(dep: Deployment, image: str, port: int) -> None:
    container = _serving_container(dep)
    assert container.image.id == docker.from_env().images.get(image).id
    assert container.attrs["State"]["Health"]["Status"] == "healthy"
    assert requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200


def test_a_redeploy_to_a_port_someone_else_holds_leaves_the_deployment_untouched(
    deployment: Deployment, double_variants, tmp_path: Path
) -> None:
    options = _cpu_options(tmp_path)
    deploy(deployment, double_variants["a"], options, say=lambda _: None)
    before = _fingerprint(deployment)

    # A process outside Docker listening on the port.
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        with pytest.raises(DeployError) as err:
            deploy(deployment, double_variants["b"], _cpu_options(tmp_path, port=taken), say=lambda _: None)
    assert f"--port {taken}: in use on this machine" in str(err.value) and "\n" not in str(err.value)
    assert _fingerprint(deployment) == before

    # Another container publishing it.
    client = docker.from_env()
    other = free_port()
    with running_container(client, "debian:bookworm-slim", command=["sleep", "60"],
                           name_prefix="sglstack-test-port-holder", ports={"9/tcp": ("0.0.0.0", other)}) as holder:
        with pytest.raises(DeployError) as err:
            deploy(deployment, double_variants["b"], _cpu_options(tmp_path, port=other), say=lambda _: None)
        assert f"--port {other}: already published on this machine by container {holder.name}" in str(err.value)
    assert _fingerprint(deployment) == before
    assert [r.result for r in read_records(deployment.build_root, "tiny")] == ["healthy"]

    # The port the deployment itself holds is free for its own redeploy.
    second = deploy(deployment, double_variants["b"], options, say=lambda _: None)
    assert second.result == "healthy"
    _assert_serving(deployment, double_variants["b"], options.port)


def test_impossible_options_are_refused_before_anything_changes(
    deployment: Deployment, double_variants, tmp_path: Path
) -> None:
    options = _cpu_options(tmp_path)
    deploy(deployment, double_variants["a"], options, say=lambda _: None)
    before = _fingerprint(deployment)
    said: list[str] = []

    for timeout in (0, -5):
        with pytest.raises(DeployError, match=f"--wait-timeout {timeout}: must be more than 0 seconds"):
            deploy(deployment, double_variants["b"], options, wait_timeout_s=timeout, say=said.append)
    with pytest.raises(ServingError, match="--nnodes 0: must be at least 1"):
        deploy(deployment, double_variants["b"], _cpu_options(tmp_path, nnodes=0), say=said.append)
    with pytest.raises(ServingError, match="--health-interval 0"):
        deploy(deployment, double_variants["b"], _cpu_options(tmp_path, healthcheck_interval_s=0), say=said.append)
    missing = tmp_path / "no-such-cache"
    with pytest.raises(ServingError, match=f"--hf-cache '{missing}:/root/.cache/huggingface': {missing} does not"):
        deploy(deployment, double_variants["b"], _cpu_options(tmp_path, hf_cache=str(missing)), say=said.append)
    assert not missing.exists()  # Docker did not create it as root
    with pytest.raises(DeployError, match=r"--env-file .* not found"):
        deploy(deployment, double_variants["b"], _cpu_options(tmp_path, env_file=str(tmp_path / "none.env")),
               say=said.append)

    assert _fingerprint(deployment) == before
    assert not [m for m in said if m.startswith(("deploying", "pulling", "rendered"))]
    assert len(read_records(deployment.build_root, "tiny")) == 1


def test_a_redeploy_of_a_crashing_image_restores_the_previous_one(
    deployment: Deployment, double_variants, tmp_path: Path
) -> None:
    client = docker.from_env()
    options = _cpu_options(tmp_path)
    # Served through a tag that moves on afterwards: the restore must bring back the image that ran.
    moving = f"{double_variants['a'].split(':')[0]}:moving"
    client.images.get(double_variants["a"]).tag(moving)
    first = deploy(deployment, moving, options, say=lambda _: None)
    client.images.get(double_variants["b"]).tag(moving)

    with pytest.raises(DeployFailed) as err:
        deploy(deployment, double_variants["crash"], options, say=lambda _: None)
    message = str(err.value)
    shown = f"{moving} (image id {client.images.get(double_variants['a']).id[:19]})"  # a moved tag: the id ran
    assert f"restored {shown} on port {options.port} (healthy)" in message and "\n" not in message
    assert "CUDA out of memory" in err.value.log_tail
    _assert_serving(deployment, double_variants["a"], options.port)

    records = read_records(deployment.build_root, "tiny")
    # The restore served the image that ran, by its id: the tag points elsewhere now.
    assert [(r.action, r.result, r.image) for r in records] == [
        ("deploy", "healthy", moving),
        ("deploy", "failed", double_variants["crash"]),
        ("restore", "healthy", client.images.get(double_variants["a"]).id),
    ]
    assert "exited with code" in records[1].note and double_variants["crash"] in records[2].note
    assert records[2].digest == first.digest and records[2].options == first.options
    # What runs is recorded as serving: a rollback goes to the image before it (there is none here).
    with pytest.raises(DeployError, match="no earlier healthy deployment"):
        rollback(deployment, say=lambda _: None)
    client.images.remove(moving)


def test_a_failed_restore_says_so_plainly(
    deployment: Deployment, double_variants, docker_cli: str, tmp_path: Path
) -> None:
    options = _cpu_options(tmp_path)
    client = docker.from_env()
    # The previous image disappears (pruned) while the new one crashes: nothing can be brought back.
    gone = _build_child(docker_cli, double_variants["a"], f"{double_variants['a'].split(':')[0]}:gone",
                        f'LABEL io.sglstack.test-gone="{secrets.token_hex(4)}"')
    deploy(deployment, gone, options, say=lambda _: None)
    _serving_container(deployment).remove(force=True)
    client.images.remove(gone, force=True)

    with pytest.raises(DeployFailed) as err:
        deploy(deployment, double_variants["crash"], options, say=lambda _: None)
    assert "restoring the previous deployment" in str(err.value) and "failed too" in str(err.value)
    assert "nothing healthy is serving, the failed one was taken down" in str(err.value)
    assert "no longer points to the image that ran" in str(err.value) and "\n" not in str(err.value)
    assert _project_containers(deployment) == []  # the crashing server does not keep restarting
    assert read_records(deployment.build_root, "tiny")[-1].action == "restore"
    assert read_records(deployment.build_root, "tiny")[-1].result == "failed"


def test_sigterm_during_a_redeploy_restores_the_previous_deployment_and_exits_143(
    cli_deployment, double_variants, tmp_path: Path
) -> None:
    dep, matrix = cli_deployment
    port = free_port()
    (tmp_path / "hf").mkdir()
    cli = [sys.executable, "-m", "invoke", "--search-root", str(Path(__file__).resolve().parents[2]),
           "deploy", "--stack", dep.stack.name, "--stacks-file", str(matrix), "--gpus", "0", "--port", str(port),
           "--hf-cache", str(tmp_path / "hf"), "--start-period", "30", "--health-interval", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "SGLSTACK_BUILD_DIR": str(dep.build_root)}
    first = subprocess.run([*cli, "--image", double_variants["a"]], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=300, check=False)
    assert first.returncode == 0, first.stderr
    _assert_serving(dep, double_variants["a"], port)

    proc = subprocess.Popen([*cli, "--image", double_variants["never"]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        client = docker.from_env()
        label = {"label": [f"{COMPOSE_PROJECT_LABEL}={dep.project_name}",
                           f"{cmp.LABEL_IMAGE}={double_variants['never']}"]}
        deadline = time.monotonic() + 120
        while not client.containers.list(filters=label):  # the new server is starting (it never gets healthy)
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the new deployment never started"
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr
    assert "interrupted (SIGTERM)" in stderr and "restored" in stderr
    _assert_serving(dep, double_variants["a"], port)
    records = read_records(dep.build_root, dep.stack.name)
    assert [(r.action, r.result) for r in records] == [("deploy", "healthy"), ("deploy", "failed"),
                                                       ("restore", "healthy")]
    assert records[1].note == "interrupted (SIGTERM)"
