"""Pure planning: options from stacks.yaml + overrides, and the two launches (no Docker)."""

from __future__ import annotations

import pytest

from sglstack.errors import SmokeError
from sglstack.matrix import load_matrix
from sglstack.smoke import launch_commands, smoke_options
from sglstack.smoke.plan import container_plan
from sglstack.smoke.runner import docker_run_kwargs


@pytest.fixture(scope="module")
def cu130(repo_root):
    return load_matrix(repo_root / "stacks.yaml").get("cu130")


def test_cu130_launches_kimi_k25_with_and_without_eagle3(cu130):
    commands = launch_commands(smoke_options(cu130))
    assert commands["baseline"] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--model-path",
        "moonshotai/Kimi-K2.5",
        "--tp-size",
        "8",
        "--trust-remote-code",
    ]
    assert commands["eagle3"] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--model-path",
        "moonshotai/Kimi-K2.5",
        "--tp-size",
        "8",
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
        ({"model": "m", "draft_model": "d", "env": ["NOEQUALS"]}, "--env 'NOEQUALS': expected KEY=VALUE"),
        ({"model": "m", "draft_model": "d", "mounts": ["relative"]}, "--mount 'relative': expected HOST:CONTAINER"),
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
    from sglstack.smoke.plan import redact_command, smoke_options

    cmd = ["python3", "-m", "sglang.launch_server", "--api-key", "sk-secret", "--admin-api-key=adm-secret",
           "--tp-size", "8"]
    shown = redact_command(cmd)
    assert "sk-secret" not in shown and "--admin-api-key=adm-secret" not in shown
    assert shown == ["python3", "-m", "sglang.launch_server", "--api-key", "***", "--admin-api-key=***",
                     "--tp-size", "8"]
    options = smoke_options(None, model="m", draft_model="d", extra_args="--api-key sk-secret")
    assert "sk-secret" not in str(options.describe())
