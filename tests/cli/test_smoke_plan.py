"""Pure planning: options from stacks.yaml + overrides, and the two launches (no Docker)."""

from __future__ import annotations

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import SmokeError
from sglstack.smoke import launch_argvs, smoke_options
from sglstack.smoke.launch import container_plan
from sglstack.smoke.server import docker_run_kwargs


@pytest.fixture(scope="module")
def cu130(repo_root):
    return load_matrix(repo_root / "stacks.yaml").get("cu130")


def test_cu130_launches_kimi_k25_with_and_without_eagle3(cu130):
    commands = launch_argvs(smoke_options(cu130))
    assert commands["baseline"] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "moonshotai/Kimi-K2.5",
        "--tp-size",
        "8",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--trust-remote-code",
    ]
    assert commands["eagle3"] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "moonshotai/Kimi-K2.5",
        "--tp-size",
        "8",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "AQ-MedAI/Kimi-K25-eagle3",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--trust-remote-code",
    ]


def test_overrides_use_cli_names_and_override_the_stack(cu130):
    opts = smoke_options(
        cu130,
        model="/models/k2",
        draft_model="/models/draft",
        tp=4,
        gpus=4,
        timeout=30,
        concurrency=16,
        min_speedup=1.2,
        max_regression=0.1,
        env=["A=1", "B=x=y"],
        mounts=["/data/hf:/root/.cache/huggingface", "/w:/weights:ro"],
        report="r.json",
        no_history=True,
        docker_host="ssh://me@gpu-node",
    )
    assert (opts.model, opts.draft_model, opts.tp, opts.gpus, opts.timeout) == ("/models/k2", "/models/draft", 4, 4, 30)
    assert opts.gates.min_speedup == 1.2 and opts.gates.max_regression == 0.1
    assert opts.gates.min_accept_length == cu130.smoke.gates.min_accept_length
    assert opts.serving.model == "/models/k2" and opts.serving.speculative.draft_model == "/models/draft"
    assert dict(opts.env) == {"A": "1", "B": "x=y"}
    # the CLI mount replaces the stack's HF cache mount (same container path) and adds the other
    assert opts.mounts == ("/data/hf:/root/.cache/huggingface", "/w:/weights:ro")
    assert opts.no_history and opts.report == "r.json" and opts.docker_host == "ssh://me@gpu-node"


def test_gpu_profile_asks_for_production_limits(cu130):
    plan = container_plan(
        smoke_options(cu130), "img@sha256:" + "a" * 64, "eagle3", host_env={"HF_TOKEN": "hf_secret", "OTHER": "no"}
    )
    assert plan.ipc_mode == "host" and plan.shm_size == "32g"
    assert ("memlock", -1, -1) in plan.ulimits and ("stack", 67108864, 67108864) in plan.ulimits
    assert plan.environment["HF_TOKEN"] == "hf_secret" and "OTHER" not in plan.environment
    assert plan.redacted_environment()["HF_TOKEN"] == "***"
    kwargs = docker_run_kwargs(plan)
    assert kwargs["device_requests"][0]["Count"] == 8
    assert kwargs["ports"] == {"30000/tcp": ("127.0.0.1", None)}
    assert any(b.endswith(":/root/.cache/huggingface") and not b.startswith("~") for b in kwargs["volumes"])


def test_cpu_profile_asks_for_no_gpu_and_no_memlock(cu130):
    plan = container_plan(smoke_options(cu130, gpus=0), "img", "baseline", host_env={})
    assert all(name != "memlock" for name, _, _ in plan.ulimits)
    assert "device_requests" not in docker_run_kwargs(plan)
    assert "HF_TOKEN" not in plan.environment


def test_hf_token_never_lands_in_the_report_view(cu130):
    opts = smoke_options(cu130, env=["HF_TOKEN=hf_secret"])
    assert "hf_secret" not in repr(opts.describe())


def test_remote_docker_host_publishes_on_the_node(cu130):
    plan = container_plan(smoke_options(cu130, docker_host="ssh://me@gpu-node"), "img", "baseline", host_env={})
    assert plan.bind_address == "0.0.0.0"
    local = container_plan(smoke_options(cu130, docker_host="unix:///run/other.sock"), "img", "baseline", host_env={})
    assert local.bind_address == "127.0.0.1"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "no model for the smoke in the options: pass --model or --stack"),
        ({"model": "m"}, "no draft model for the smoke in the options: pass --draft-model or --stack"),
        ({"model": "m", "draft_model": "d", "env": ["NOEQUALS"]}, "--env #1: expected KEY=VALUE"
            " (it has no '='; not shown, as it may be a secret)"),
        ({"model": "m", "draft_model": "d", "mounts": ["relative"]}, "--mount 'relative': expected HOST:CONTAINER"),
        ({"model": "m", "draft_model": "d", "mounts": ["/a:/b:rx"]}, "--mount '/a:/b:rx': mode 'rx' is not ro or rw"),
        ({"model": "m", "draft_model": "d", "tp": "eight"}, "invalid smoke option: tp 'eight' is not a whole number"),
        ({"model": "m", "draft_model": "d", "timeout": 0}, "--timeout 0: must be more than 0 seconds"),
        ({"model": "m", "draft_model": "d", "port": 70000}, "--port 70000: not a TCP port"),
        ({"model": "m", "draft_model": "d", "tp": 8, "gpus": 2}, "--tp 8 needs at least 8 GPUs, but --gpus is 2"),
        ({"model": "m", "draft_model": "d", "min_agreement": 2}, "invalid gate override"),
        ({"model": "m", "draft_model": "d", "bogus": 1}, "unknown smoke option(s): bogus"),
    ],
)
def test_bad_options_are_one_line_errors(overrides, message):
    with pytest.raises(SmokeError) as info:
        smoke_options(None, **overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_api_keys_are_redacted_in_logs_and_reports():
    from sglstack.smoke.overrides import smoke_options
    from sglstack.smoke.plan import redact_argv

    cmd = ["python3", "-m", "sglang.launch_server", "--api-key", "sk-secret", "--admin-api-key=adm-secret",
           "--tp-size", "8"]
    shown = redact_argv(cmd)
    assert "sk-secret" not in shown and "--admin-api-key=adm-secret" not in shown
    assert shown == ["python3", "-m", "sglang.launch_server", "--api-key", "***", "--admin-api-key=***",
                     "--tp-size", "8"]
    options = smoke_options(None, model="m", draft_model="d", extra_args="--api-key sk-secret")
    assert "sk-secret" not in str(options.describe())


def test_the_smoke_serves_the_stacks_serving_spec(cu130):
    """The smoke containers render from the same serving spec as deploy: env, mounts, shm, ulimits, GPUs."""
    from sglstack.serving import serving_argv, serving_spec

    spec = serving_spec(cu130)
    opts = smoke_options(cu130)
    assert opts.serving == spec.with_speculation()
    plan = container_plan(opts, "img", "baseline", host_env={})
    assert list(plan.command) == serving_argv(spec.baseline()) == launch_argvs(opts)["baseline"]
    assert plan.shm_size == spec.shm_size and plan.gpus == spec.gpus and plan.container_port == spec.port
    assert plan.ulimits == tuple((u.name, u.soft, u.hard) for u in spec.ulimits)
    assert [b.split(":", 1)[1] for b in plan.binds] == [m.target + (":ro" if m.read_only else "") for m in spec.mounts]


def test_a_missing_mount_source_is_refused_before_anything_starts(tmp_path):
    from sglstack.serving import ServingError, check_mount_sources

    missing = tmp_path / "does-not-exist"
    opts = smoke_options(None, model="m", draft_model="d", mounts=[f"{missing}:/x"])
    with pytest.raises(ServingError) as info:
        check_mount_sources(opts.serving, local=True)
    message = str(info.value)
    assert message.startswith(f"--mount '{missing}:/x': {missing} does not exist") and "\n" not in message
    assert not missing.exists()
    # A remote engine's folders cannot be looked at from here: said, not refused.
    assert "cannot be checked from here" in check_mount_sources(opts.serving, local=False)
    missing.mkdir()
    assert check_mount_sources(opts.serving, local=True) is None


def test_smoke_refuses_a_missing_mount_source_before_docker(tmp_path):
    from clirun import run_invoke

    missing = tmp_path / "does-not-exist"
    proc = run_invoke("smoke", "--image", "sglstack-test/never-pulled:1", "--model", "m", "--draft-model", "d",
                      "--gpus", "0", "--mount", f"{missing}:/x", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr  # bad input
    assert proc.stderr.strip() == (f"error: --mount '{missing}:/x': {missing} does not exist "
                                   "(Docker would create it as root); create it first")
    assert not missing.exists() and not (tmp_path / "build").exists()
