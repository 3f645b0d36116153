"""The serving spec: one server definition that smoke and deploy (and later manifests) both render."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from sglstack.adapters.docker import docker_host_address, effective_docker_host, is_local_docker_host
from sglstack.config.fields import MAX_COUNT
from sglstack.config.matrix import load_matrix
from sglstack.config.settings import SpeculativeSettings
from sglstack.core.errors import ConfigError
from sglstack.render import compose as cmp
from sglstack.serving import (
    CPU_ULIMITS,
    GPU_ULIMITS,
    Healthcheck,
    Mount,
    NodeArgs,
    Nodes,
    ServingError,
    ServingOverrides,
    check_mount_sources,
    serving_argv,
    serving_spec,
)
from sglstack.smoke import launch_argvs, smoke_options
from sglstack.smoke.launch import container_plan

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
    assert argv[argv.index("--nnodes") : argv.index("--nnodes") + 6] == [
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--dist-init-addr",
        "10.0.0.1:5000",
    ]
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
    spec = serving_spec(
        stack,
        ServingOverrides(
            hf_cache="/data/hf",
            mounts=("/w:/weights:ro",),
            env={"A": "1"},
            tp=4,
            gpus=4,
            host_port=8080,
            publish_port=True,
        ),
    )
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
    assert docker_host_address(option) == (
        "127.0.0.1" if local else "gpu-node" if "gpu-node" in (option or env) else "10.1.2.3"
    )


def test_smoke_publishes_by_the_same_rule(monkeypatch) -> None:
    stack = load_matrix().get("cu130")
    monkeypatch.setenv("DOCKER_HOST", "ssh://me@gpu-node")
    assert container_plan(smoke_options(stack), "img", "baseline", host_env={}).bind_address == "0.0.0.0"
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert container_plan(smoke_options(stack), "img", "baseline", host_env={}).bind_address == "127.0.0.1"


CPU_TEST = load_matrix(MATRICES["stacks-cpu.yaml"]).get("cpu-test")


@pytest.mark.parametrize(
    ("stack", "overrides", "line"),
    [
        (None, ServingOverrides(), "no model to serve: pass --model or --stack"),
        (CPU_TEST, ServingOverrides(gpus=2, tp=4), "stack 'cpu-test': --tp 4 needs at least 4 GPUs, but --gpus is 2"),
        (
            CPU_TEST,
            ServingOverrides(gpus=2, tp=8, nnodes=2, dist_init_addr="10.0.0.1:5000"),
            "stack 'cpu-test': --tp 8 needs at least 8 GPUs, but --gpus is 2 on each of 2 nodes",
        ),
        (
            CPU_TEST,
            ServingOverrides(env={"1BAD": "x"}),
            "stack 'cpu-test': --env '1BAD': not an environment variable "
            "name (letters, digits and '_', not starting with a digit)",
        ),
        (
            CPU_TEST,
            ServingOverrides(env={"GOOD": "a\x00b"}),
            "stack 'cpu-test': --env GOOD: the value holds a NUL character, which no environment value can",
        ),
        (CPU_TEST, ServingOverrides(gpus=-1), "stack 'cpu-test': --gpus -1: must be at least 0"),
        (CPU_TEST, ServingOverrides(tp=0), "stack 'cpu-test': --tp 0: must be at least 1"),
        (CPU_TEST, ServingOverrides(port=70000), "stack 'cpu-test': --port 70000: not a TCP port (1..65535)"),
    ],
)
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


# ---- each checked value, word for word (in process: what mutation testing sees) --------------------


def _refused(stack, **overrides) -> str:
    with pytest.raises(ServingError) as err:
        serving_spec(stack, ServingOverrides(**overrides))
    return str(err.value)


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"healthcheck_interval_s": 0}, "--health-interval 0: must be at least 1 second"),
        ({"healthcheck_timeout_s": 0}, "--health-timeout 0: must be at least 1 second"),
        ({"healthcheck_retries": 0}, "--health-retries 0: must be at least 1"),
        ({"healthcheck_start_period_s": 0}, "--start-period 0: must be at least 1 second"),
        ({"healthcheck_interval_s": True}, "--health-interval 'True': not a whole number"),
        ({"healthcheck_retries": 2.5}, "--health-retries '2.5': not a whole number"),
        ({"startup_timeout_s": 0}, "--timeout 0: must be more than 0 seconds"),
        ({"startup_timeout_s": -1.5}, "--timeout -1.5: must be more than 0 seconds"),
        ({"nnodes": True}, "--nnodes 'True': not a whole number"),
        ({"node_rank": True}, "--node-rank True: not in 0..0 (for --nnodes 1)"),
        ({"node_rank": -1}, "--node-rank -1: not in 0..0 (for --nnodes 1)"),
        ({"node_rank": 1}, "--node-rank 1: not in 0..0 (for --nnodes 1)"),
        ({"nnodes": 2, "node_rank": "1", "dist_init_addr": "h:1"}, "--node-rank 1: not in 0..1 (for --nnodes 2)"),
        ({"nnodes": 2}, "--dist-init-addr: multi-node serving needs HOST:PORT of node 0"),
        ({"nnodes": 2, "dist_init_addr": ""}, "--dist-init-addr: multi-node serving needs HOST:PORT of node 0"),
        ({"dist_init_addr": "h:0"}, "--dist-init-addr 'h:0': multi-node serving needs HOST:PORT of node 0"),
        ({"dist_init_addr": ":5"}, "--dist-init-addr ':5': multi-node serving needs HOST:PORT of node 0"),
        ({"dist_init_addr": "h:"}, "--dist-init-addr 'h:': multi-node serving needs HOST:PORT of node 0"),
        ({"dist_init_addr": "h:x"}, "--dist-init-addr 'h:x': multi-node serving needs HOST:PORT of node 0"),
        (
            {"nnodes": 2, "dist_init_addr": "h:65536"},
            "--dist-init-addr 'h:65536': multi-node serving needs HOST:PORT of node 0",
        ),
        ({"hf_cache": "a:b"}, "--hf-cache 'a:b': a host folder without ':' or control characters"),
        ({"hf_cache": "a\tb"}, "--hf-cache 'a\\tb': a host folder without ':' or control characters"),
        ({"hf_cache": ""}, "--hf-cache: needs a host folder"),
        ({"mounts": ("x",)}, "--mount 'x': expected HOST:CONTAINER[:ro] with an absolute container path"),
        ({"num_steps": 0}, "--num-steps '0': must be >= 1"),
        ({"num_draft_tokens": -1}, "--num-draft-tokens '-1': must be >= 1"),
        (
            {"speculative_algorithm": "FOO"},
            "--speculative-algorithm 'FOO': not one of 'EAGLE3', 'EAGLE' or 'NEXTN'",
        ),
        (
            {"speculative_algorithm": "FOO", "flags": {"speculative_algorithm": "--algo"}},
            "--algo 'FOO': not one of 'EAGLE3', 'EAGLE' or 'NEXTN'",
        ),
        (
            {"eagle_topk": "x"},
            "--eagle-topk 'x': not a whole number",
        ),
        ({"host_port": 0, "flags": {"host_port": "--publish"}}, "--publish 0: not a TCP port (1..65535)"),
    ],
)
def test_each_bad_option_is_its_exact_line(overrides, line) -> None:
    assert _refused(CPU_TEST, **overrides) == f"stack 'cpu-test': {line}"


def test_the_healthcheck_counts_the_stacks_startup_in_whole_seconds() -> None:
    assert serving_spec(CPU_TEST).healthcheck == Healthcheck(
        path="/health", interval_s=30, timeout_s=10, retries=3, start_period_s=120
    )
    # A sub-second startup still gives a start period of one second.
    assert serving_spec(CPU_TEST, ServingOverrides(startup_timeout_s=0.5)).healthcheck.start_period_s == 1
    assert serving_spec(CPU_TEST, ServingOverrides(startup_timeout_s=90.7)).healthcheck.start_period_s == 90
    given = ServingOverrides(
        healthcheck_interval_s=1, healthcheck_timeout_s=1, healthcheck_retries=1, healthcheck_start_period_s=1
    )
    assert serving_spec(CPU_TEST, given).healthcheck == Healthcheck(
        path="/health", interval_s=1, timeout_s=1, retries=1, start_period_s=1
    )


def test_node_placement_takes_its_edges() -> None:
    assert serving_spec(CPU_TEST).nodes == Nodes(nnodes=1, node_rank=0, dist_init_addr=None)
    # An address given for one node is still checked, and kept.
    one = serving_spec(CPU_TEST, ServingOverrides(dist_init_addr="h:65535"))
    assert one.nodes == Nodes(nnodes=1, node_rank=0, dist_init_addr="h:65535")
    assert one.nodes.args() is None and not one.host_network
    # An IPv6 host keeps its colons: the port is what follows the last one.
    last = serving_spec(CPU_TEST, ServingOverrides(nnodes=2, node_rank=1, dist_init_addr="[fe80::1]:1"))
    assert last.nodes == Nodes(nnodes=2, node_rank=1, dist_init_addr="[fe80::1]:1")
    assert last.nodes.args() == NodeArgs("2", "1", "[fe80::1]:1")
    assert last.host_network and last.host_port == last.port == 30000


def test_speculative_settings_come_from_the_draft_given_or_the_stack() -> None:
    # A stack without a draft: step counts alone name nothing to serve.
    assert serving_spec(None, ServingOverrides(model="m")).speculative is None
    assert serving_spec(None, ServingOverrides(model="m", num_steps=5)).speculative is None
    drafted = serving_spec(None, ServingOverrides(model="m", draft_model="d", num_steps=5)).speculative
    assert drafted == SpeculativeSettings(
        algorithm="EAGLE3", draft_model="d", num_steps=5, eagle_topk=1, num_draft_tokens=6
    )  # topk 1: the draft tokens follow the steps, as SGLang serves them
    # Given values replace the stack's one by one.
    stacked = serving_spec(CPU_TEST, ServingOverrides(eagle_topk=2, speculative_algorithm="NEXTN")).speculative
    assert stacked == CPU_TEST.serving.speculative.model_copy(update={"eagle_topk": 2, "algorithm": "NEXTN"})
    assert _refused(None, draft_model="d", model="m", num_steps=0) == (
        "--num-steps '0': must be >= 1"
    )
    # steps whose derived draft tokens (steps + 1, topk 1) pass the bound: the flag given is the one named
    assert _refused(None, draft_model="d", model="m", num_steps=MAX_COUNT) == (
        f"--num-steps '{MAX_COUNT}': with topk 1 it serves steps + 1 draft tokens, which must be <= {MAX_COUNT}"
    )
    assert _refused(None, draft_model="d", model="m", num_steps=3, num_draft_tokens=5) == (
        "--num-draft-tokens '5': with topk 1 SGLang serves steps + 1 = 4 draft tokens, not 5 (set 4, or a topk above 1)"
    )


def test_mounts_keep_the_stacks_order_normalise_targets_and_name_their_origin(tmp_path: Path) -> None:
    stack = CPU_TEST.model_copy(
        update={
            "serving": CPU_TEST.serving.model_copy(
                update={"mounts": ("/models:/models:ro", "/hf:/root/.cache/huggingface", "/x:/opt/x/")}
            )
        }
    )
    spec = serving_spec(stack, ServingOverrides(mounts=("/b:/w/../opt/x", "~/data:/data"), hf_cache="/srv/hf"))
    assert [(m.bind, m.origin) for m in spec.mounts] == [
        ("/models:/models:ro", "serving.mounts[0]"),
        ("/b:/opt/x", "--mount"),
        ("~/data:/data", "--mount"),
        ("/srv/hf:/root/.cache/huggingface", "--hf-cache"),
    ]
    assert spec.mounts[2].bind_on_this_machine() == f"{Path.home()}/data:/data"
    assert spec.mounts[0].bind_on_this_machine() == "/models:/models:ro"
    bad = CPU_TEST.model_copy(update={"serving": CPU_TEST.serving.model_copy(update={"mounts": ("/a:/b", "z")})})
    assert (
        _refused(bad)
        == "stack 'cpu-test': serving.mounts[1] 'z': expected HOST:CONTAINER[:ro] with an absolute container path"
    )


def test_mount_sources_are_checked_here_or_named_for_the_remote_host(tmp_path: Path) -> None:
    assert check_mount_sources(serving_spec(CPU_TEST), local=True) is None
    assert check_mount_sources(serving_spec(CPU_TEST), local=False) is None
    (tmp_path / "there").mkdir()
    spec = serving_spec(CPU_TEST, ServingOverrides(mounts=(f"{tmp_path}/there:/a",), hf_cache=f"{tmp_path}/hf"))
    assert check_mount_sources(spec, local=False) == (
        f"mount sources ({tmp_path}/there, {tmp_path}/hf) are on the remote Docker host: they cannot be checked "
        "from here"
    )
    with pytest.raises(ServingError) as err:
        check_mount_sources(spec, local=True)
    assert str(err.value) == (
        f"stack 'cpu-test': --hf-cache '{tmp_path}/hf:/root/.cache/huggingface': {tmp_path}/hf does not exist "
        "(Docker would create it as root); create it first"
    )
    (tmp_path / "hf").mkdir()
    assert check_mount_sources(spec, local=True) is None
    # A mount built without an origin is named as a mount.
    bare = dataclasses.replace(spec, mounts=(Mount(source=f"{tmp_path}/gone", target="/g", read_only=True),))
    with pytest.raises(ServingError) as err:
        check_mount_sources(bare, local=True)
    assert str(err.value) == (
        f"stack 'cpu-test': mount '{tmp_path}/gone:/g:ro': {tmp_path}/gone does not exist "
        "(Docker would create it as root); create it first"
    )


def test_a_deployments_options_read_back_from_its_record() -> None:
    """A rollback serves what was recorded; keys another sglstack wrote that this one lacks are left out."""
    options = cmp.ComposeOptions(port=8080, eagle3=False, nnodes=2, dist_init_addr="h:1")
    record = options.to_record()
    assert record["port"] == 8080 and record["dist_init_addr"] == "h:1" and record["restart"] == "unless-stopped"
    assert set(record) == {f.name for f in dataclasses.fields(cmp.ComposeOptions)}
    assert cmp.ComposeOptions.from_record(record) == options
    assert cmp.ComposeOptions.from_record({**record, "from_the_future": 1}) == options
    assert cmp.ComposeOptions.from_record({"port": 9000}) == cmp.ComposeOptions(port=9000)


def test_the_baseline_is_the_same_server_without_speculation_and_back() -> None:
    spec = serving_spec(CPU_TEST)
    baseline = spec.baseline()
    assert baseline == dataclasses.replace(spec, eagle3=False)
    assert not baseline.speculative_on and baseline.speculative_summary() == "off"
    assert baseline.with_speculation() == spec
    assert spec.models() == ["test-org/tiny-model", "test-org/tiny-eagle3"]
    assert serving_spec(None, ServingOverrides(model="m")).models() == ["m"]


def test_ports_take_1_and_65535_and_refuse_a_bool() -> None:
    assert serving_spec(CPU_TEST, ServingOverrides(port=1, host_port=65535, publish_port=True)).port == 1
    assert serving_spec(CPU_TEST, ServingOverrides(port=65535, host_port=1)).host_port == 1
    assert _refused(CPU_TEST, port=True) == "stack 'cpu-test': --port True: not a TCP port (1..65535)"


def test_extra_args_given_replace_the_stacks_and_no_port_is_published_unless_asked() -> None:
    assert serving_spec(CPU_TEST).extra_args == ("--trust-remote-code",)
    assert serving_spec(CPU_TEST, ServingOverrides(extra_args=("--x", "1"))).extra_args == ("--x", "1")
    assert serving_spec(CPU_TEST, ServingOverrides(extra_args=())).extra_args == ()
    # No host port named: the engine picks a free one (smoke); publishing takes the listen port.
    assert serving_spec(CPU_TEST).host_port is None
    assert serving_spec(CPU_TEST, ServingOverrides(publish_port=True)).host_port == 30000
