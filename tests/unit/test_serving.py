"""The serving spec: one server definition that smoke and deploy (and later manifests) both render."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from sglstack.adapters.docker import docker_host_address, effective_docker_host, is_local_docker_host
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError
from sglstack.render import compose as cmp
from sglstack.serving import (
    CPU_ULIMITS,
    GPU_ULIMITS,
    NodeArgs,
    ServingError,
    ServingOverrides,
    serving_argv,
    serving_spec,
)
from sglstack.smoke import launch_argvs, smoke_options
from sglstack.smoke.plan import container_plan

REPO = Path(__file__).resolve().parents[2]
MATRICES = {"stacks.yaml": REPO / "stacks.yaml", "stacks-cpu.yaml": REPO / "tests" / "fixtures" / "stacks-cpu.yaml"}
EVERY_STACK = [(file, name) for file, path in MATRICES.items() for name in load_matrix(path).names()]
DIGEST_REF = "127.0.0.1:5000/sglstack/sglang@sha256:" + "ab" * 32


def _compose_argv(stack, **options) -> list[str]:
    text = cmp.render_compose(stack, DIGEST_REF, options=cmp.ComposeOptions(**options))
    return yaml.safe_load(text)["services"][cmp.SERVICE]["command"]


@pytest.mark.parametrize(("file", "name"), EVERY_STACK)
def test_what_is_smoke_tested_is_what_is_deployed(file: str, name: str) -> None:
    stack = load_matrix(MATRICES[file]).get(name)
    smoke = smoke_options(stack)
    argvs = launch_argvs(smoke)

    assert argvs["eagle3"] == _compose_argv(stack)
    assert argvs["baseline"] == _compose_argv(stack, eagle3=False)
    # The containers carry the very same argv, and the speculative flags are the only difference.
    assert list(container_plan(smoke, "img", "eagle3", host_env={}).command) == argvs["eagle3"]
    extra = [a for a in argvs["eagle3"] if a not in argvs["baseline"]]
    assert extra and all(a.startswith("--speculative") or not a.startswith("--") for a in extra)


@pytest.mark.parametrize(("file", "name"), EVERY_STACK)
def test_smoke_and_compose_serve_the_same_resources(file: str, name: str) -> None:
    stack = load_matrix(MATRICES[file]).get(name)
    spec = serving_spec(stack)
    service = yaml.safe_load(cmp.render_compose(stack, DIGEST_REF))["services"][cmp.SERVICE]
    plan = container_plan(smoke_options(stack), "img", "eagle3", host_env={})

    assert service["shm_size"] == plan.shm_size == spec.shm_size
    assert service["ipc"] == plan.ipc_mode == "host"
    assert service["ports"] == [f"{spec.port}:{plan.container_port}"]
    assert service.get("environment", {}) == dict(plan.environment) == spec.environment
    assert {name: (soft, hard) for name, soft, hard in plan.ulimits} == {
        name: (value, value) for name, value in service.get("ulimits", {}).items()
    }
    gpus = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [{}])[0]
    assert gpus.get("count", 0) == plan.gpus == spec.gpus
    assert [v.split(":", 1)[1] for v in service.get("volumes", [])] == [b.split(":", 1)[1] for b in plan.binds]


def test_multi_node_argv_is_a_function_of_the_spec_not_of_compose() -> None:
    stack = load_matrix().get("cu130")
    spec = serving_spec(stack, ServingOverrides(nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:5000"))
    argv = serving_argv(spec)
    assert argv[argv.index("--nnodes"):argv.index("--nnodes") + 6] == [
        "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000"]
    assert argv == _compose_argv(stack, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:5000")
    assert argv[-1] == "--trust-remote-code"  # the stack's extra args stay last
    # A LeaderWorkerSet passes its downward-API variables instead of numbers; the rest is unchanged.
    lws = NodeArgs("$(LWS_GROUP_SIZE)", "$(LWS_WORKER_INDEX)", "$(LWS_LEADER_ADDRESS):5000")
    on_lws = serving_argv(spec, node=lws)
    assert on_lws[on_lws.index("--nnodes") + 1] == "$(LWS_GROUP_SIZE)"
    assert on_lws[on_lws.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):5000"
    values = {argv.index(flag) + 1 for flag in ("--nnodes", "--node-rank", "--dist-init-addr")}
    assert [a for i, a in enumerate(on_lws) if i not in values] == [a for i, a in enumerate(argv) if i not in values]
    # One node: no placement flags at all.
    assert "--nnodes" not in serving_argv(serving_spec(stack))


def test_the_spec_is_frozen_and_derived_deterministically() -> None:
    stack = load_matrix().get("cu130")
    spec = serving_spec(stack)
    assert spec == serving_spec(stack)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.port = 1  # type: ignore[misc]
    assert spec.ulimits == GPU_ULIMITS
    assert serving_spec(stack, ServingOverrides(gpus=0)).ulimits == CPU_ULIMITS
    assert spec.healthcheck.start_period_s == 3600 and spec.healthcheck.path == "/health"


def test_overrides_replace_the_stacks_values_and_mounts_by_container_path() -> None:
    stack = load_matrix().get("cu130")
    spec = serving_spec(stack, ServingOverrides(hf_cache="/data/hf", mounts=("/w:/weights:ro",), env={"A": "1"},
                                                 tp=4, gpus=4, host_port=8080, publish_port=True))
    assert [m.bind for m in spec.mounts] == ["/w:/weights:ro", "/data/hf:/root/.cache/huggingface"]
    assert (spec.tp, spec.gpus, spec.host_port, spec.port) == (4, 4, 8080, 30000)
    assert spec.environment == {"A": "1"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (ServingOverrides(nnodes=0), "stack 'cu130': --nnodes 0: must be at least 1"),
        (ServingOverrides(nnodes=2, node_rank=2, dist_init_addr="h:1"), "stack 'cu130': --node-rank 2: not in 0..1"),
        (ServingOverrides(nnodes=2, dist_init_addr="h"), "stack 'cu130': --dist-init-addr 'h': multi-node"),
        (ServingOverrides(tp=16), "stack 'cu130': --tp 16 needs at least 16 GPUs, but --gpus is 8"),
        (ServingOverrides(host_port=65536), "stack 'cu130': --port 65536: not a TCP port"),
        (ServingOverrides(healthcheck_interval_s=0), "stack 'cu130': --health-interval 0: must be at least 1"),
        (ServingOverrides(mounts=("x",)), "stack 'cu130': --mount 'x': expected HOST:CONTAINER"),
        (ServingOverrides(hf_cache=""), "stack 'cu130': --hf-cache: needs a host folder"),
    ],
)
def test_impossible_values_are_one_line_errors_naming_the_option(overrides, message) -> None:
    with pytest.raises(ServingError) as info:
        serving_spec(load_matrix().get("cu130"), overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_serving_keys_left_under_smoke_name_their_new_key(tmp_path: Path) -> None:
    path = tmp_path / "stacks.yaml"
    path.write_text(
        "stacks:\n  s:\n    base_image: debian:bookworm-slim\n    sglang: {version: 0.5.9}\n"
        "    serving: {model: m}\n    smoke:\n      timeout_s: 60\n"
    )
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    assert info.value.key == "smoke.timeout_s" and info.value.line == 7
    assert "move it to 'serving.startup_timeout_s'" in str(info.value)


def test_a_bad_mount_in_stacks_yaml_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "stacks.yaml"
    path.write_text(
        "stacks:\n  s:\n    base_image: debian:bookworm-slim\n    sglang: {version: 0.5.9}\n"
        "    serving:\n      model: m\n      mounts: [/a:relative]\n"
    )
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    assert info.value.key == "serving.mounts.0" and "expected HOST:CONTAINER" in str(info.value)


# ---- the one local-vs-remote Docker host rule ------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "env", "local"),
    [
        (None, None, True),  # the local socket
        ("unix:///run/other.sock", None, True),
        ("npipe:////./pipe/docker_engine", None, True),
        ("tcp://127.0.0.1:2375", None, True),
        ("tcp://127.0.0.2:2376", None, True),
        ("tcp://[::1]:2375", None, True),
        ("ssh://me@localhost", None, True),
        ("tcp://10.1.2.3:2375", None, False),
        ("ssh://me@gpu-node", None, False),
        (None, "ssh://me@gpu-node", False),  # DOCKER_HOST counts when no option is given
        (None, "tcp://127.0.0.1:2375", True),
        ("unix:///var/run/docker.sock", "ssh://me@gpu-node", True),  # the option wins
    ],
)
def test_local_docker_host_rule(monkeypatch, option, env, local) -> None:
    if env is None:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    else:
        monkeypatch.setenv("DOCKER_HOST", env)
    assert is_local_docker_host(option) is local
    assert effective_docker_host(option) == (option or env or "unix:///var/run/docker.sock")
    assert docker_host_address(option) == ("127.0.0.1" if local else "gpu-node" if "gpu-node" in (option or env)
                                           else "10.1.2.3")


def test_smoke_publishes_by_the_same_rule(monkeypatch) -> None:
    stack = load_matrix().get("cu130")
    monkeypatch.setenv("DOCKER_HOST", "ssh://me@gpu-node")
    assert container_plan(smoke_options(stack), "img", "baseline", host_env={}).bind_address == "0.0.0.0"
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert container_plan(smoke_options(stack), "img", "baseline", host_env={}).bind_address == "127.0.0.1"


CPU_TEST = load_matrix(MATRICES["stacks-cpu.yaml"]).get("cpu-test")


@pytest.mark.parametrize(("stack", "overrides", "line"), [
    (None, ServingOverrides(), "no model to serve: pass --model or --stack"),
    (CPU_TEST, ServingOverrides(gpus=2, tp=4), "stack 'cpu-test': --tp 4 needs at least 4 GPUs, but --gpus is 2"),
    (CPU_TEST, ServingOverrides(gpus=2, tp=8, nnodes=2, dist_init_addr="10.0.0.1:5000"),
     "stack 'cpu-test': --tp 8 needs at least 8 GPUs, but --gpus is 2 on each of 2 nodes"),
    (CPU_TEST, ServingOverrides(env={"1BAD": "x"}), "stack 'cpu-test': --env '1BAD': not an environment variable "
     "name (letters, digits and '_', not starting with a digit)"),
    (CPU_TEST, ServingOverrides(env={"GOOD": "a\x00b"}),
     "stack 'cpu-test': --env GOOD: the value holds a NUL character, which no environment value can"),
    (CPU_TEST, ServingOverrides(gpus=-1), "stack 'cpu-test': --gpus -1: must be at least 0"),
    (CPU_TEST, ServingOverrides(tp=0), "stack 'cpu-test': --tp 0: must be at least 1"),
    (CPU_TEST, ServingOverrides(port=70000), "stack 'cpu-test': --port 70000: not a TCP port (1..65535)"),
])
def test_each_bad_serving_value_is_its_exact_error_line(stack, overrides, line) -> None:
    """The line a user reads, word for word: the stack, the option as typed, the value, what is wrong."""
    with pytest.raises(ServingError) as err:
        serving_spec(stack, overrides)
    assert str(err.value) == line


@pytest.mark.parametrize("gpus", [0, 1, 2, 8])
def test_every_server_with_a_gpu_gets_unlimited_locked_memory(gpus: int) -> None:
    spec = serving_spec(CPU_TEST, ServingOverrides(gpus=gpus, tp=1))
    assert spec.ulimits == (GPU_ULIMITS if gpus else CPU_ULIMITS)
    assert spec.gpus == gpus
