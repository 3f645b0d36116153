"""The rendered Compose file: pure rendering, checked by the real `docker-compose config` (more:
test_compose_render_files.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_fixtures import DIGEST_REF, _service, make_test_stack

from sglstack.config.fields import parse_bind
from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.context import write_compose
from sglstack.render import compose as cmp
from sglstack.serving import ServingError

SPEC_FLAGS = (
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
)


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _compose_config(folder: Path, name: str = cmp.COMPOSE_FILE) -> dict:
    """Run the real compose CLI's `config` on a rendered file; return its normalised output."""
    from sglstack.adapters.compose import detect_compose

    (folder / cmp.ENV_FILE).touch()
    cli = detect_compose()
    proc = subprocess.run(
        [*cli.argv, "-p", "sglstack-test-config", "-f", str(folder / name), "config"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"{cli.label} config rejected {name}:\n{proc.stderr}"
    return yaml.safe_load(proc.stdout)


needs_compose = pytest.mark.skipif(
    not (shutil.which("docker-compose") or shutil.which("docker")), reason="no compose CLI"
)


@needs_compose
@pytest.mark.parametrize("stack_name", load_matrix().names())
def test_every_stack_renders_a_file_compose_accepts(stack_name: str, tmp_path: Path) -> None:
    stack = load_matrix().get(stack_name)
    write_compose(stack, DIGEST_REF, tmp_path)
    config = _compose_config(tmp_path)["services"][cmp.SERVICE]

    assert config["image"] == DIGEST_REF
    command = config["command"]
    assert command[:3] == ["python3", "-m", "sglang.launch_server"]
    assert _flag(command, "--model-path") == stack.serving.model
    assert _flag(command, "--tp-size") == str(stack.serving.tp)
    assert _flag(command, "--speculative-draft-model-path") == stack.serving.speculative.draft_model
    assert _flag(command, "--speculative-num-draft-tokens") == str(stack.serving.speculative.num_draft_tokens)
    devices = config["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": stack.serving.gpus, "capabilities": ["gpu"]}]
    assert config["ulimits"]["memlock"] == -1
    assert config["ipc"] == "host"
    # The stack's own startup budget (Kimi's 3600 s; the field stack's 200 s), as compose writes it back.
    assert _seconds(config["healthcheck"]["start_period"]) == int(stack.serving.startup_timeout_s)
    assert config["restart"] == "unless-stopped"
    for mount in stack.serving.mounts:
        target = parse_bind(mount)[1]
        assert any(target in str(v) for v in config["volumes"])  # short or long syntax


def _seconds(duration: str) -> int:
    """compose's duration ("3600s", "1h0m0s", "3m20s") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", duration))


def test_eagle3_off_drops_every_speculative_flag(tmp_path: Path) -> None:
    stack = make_test_stack(tmp_path)
    on = _service(cmp.render_compose(stack, DIGEST_REF))
    off = _service(cmp.render_compose(stack, DIGEST_REF, options=cmp.ComposeOptions(eagle3=False)))

    assert all(flag in on["command"] for flag in SPEC_FLAGS)
    assert not [arg for arg in off["command"] if arg.startswith("--speculative")]
    assert off["labels"][cmp.LABEL_SPECULATIVE] == "off"
    assert "EAGLE3" in on["labels"][cmp.LABEL_SPECULATIVE]
    # Everything else serves the same model the same way.
    assert next(a for a in on["command"] if a not in off["command"]) == "--speculative-algorithm"
    assert _flag(off["command"], "--model-path") == "test-org/tiny-model"


def test_cpu_profile_asks_for_no_gpu_and_no_memlock(tmp_path: Path) -> None:
    stack = make_test_stack(tmp_path)
    text = cmp.render_compose(stack, DIGEST_REF, options=cmp.ComposeOptions(gpus=0))
    service = _service(text)

    assert "deploy" not in service
    assert "memlock" not in service.get("ulimits", {})
    assert "memlock" not in text
    assert "nvidia" not in text
    assert service["ipc"] == "host"
    assert service["shm_size"] == "256m"


@needs_compose
def test_multi_node_renders_one_file_per_node(tmp_path: Path) -> None:
    stack = make_test_stack(tmp_path)
    options = cmp.ComposeOptions(nnodes=3, dist_init_addr="10.0.0.1:5000")
    write_compose(stack, DIGEST_REF, tmp_path, options=options)

    names = sorted(p.name for p in tmp_path.glob("compose*.yaml"))
    assert names == ["compose.node0.yaml", "compose.node1.yaml", "compose.node2.yaml"]
    texts = []
    for rank in range(3):
        config = _compose_config(tmp_path, f"compose.node{rank}.yaml")["services"][cmp.SERVICE]
        command = config["command"]
        assert _flag(command, "--nnodes") == "3"
        assert _flag(command, "--node-rank") == str(rank)
        assert _flag(command, "--dist-init-addr") == "10.0.0.1:5000"
        assert config["network_mode"] == "host"
        assert "ports" not in config
        texts.append((tmp_path / f"compose.node{rank}.yaml").read_text())
    # The nodes differ only in their rank: the header, the --node-rank value and the node label.
    diff = [(a, b) for a, b in zip(*[t.splitlines() for t in texts[:2]], strict=True) if a != b]
    assert [b for _, b in diff] == [
        diff[0][1],
        '      - "1"',
        '      "io.sglstack.node": "1/3"',
    ]
    assert "node 1 of 3" in diff[0][1]
    assert not list(tmp_path.glob("compose.yaml"))


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (cmp.ComposeOptions(nnodes=2), "--dist-init-addr"),
        (cmp.ComposeOptions(nnodes=2, dist_init_addr="no-port"), "--dist-init-addr 'no-port'"),
        (cmp.ComposeOptions(nnodes=2, dist_init_addr="h:99999"), "--dist-init-addr 'h:99999'"),
        (cmp.ComposeOptions(nnodes=2, node_rank=2, dist_init_addr="h:1"), "--node-rank 2"),
        (cmp.ComposeOptions(node_rank=-1), "--node-rank -1"),
        (cmp.ComposeOptions(nnodes=0), "--nnodes 0"),
        (cmp.ComposeOptions(restart="sometimes"), "--restart 'sometimes'"),
        (cmp.ComposeOptions(port=70000), "--port 70000"),
        (cmp.ComposeOptions(port=0), "--port 0"),
        (cmp.ComposeOptions(start_period_s=0), "--start-period 0"),
        (cmp.ComposeOptions(healthcheck_interval_s=0), "--health-interval 0"),
        (cmp.ComposeOptions(healthcheck_interval_s=-3), "--health-interval -3"),
    ],
)
def test_bad_options_are_one_line_errors_naming_stack_and_option(tmp_path, options, flag) -> None:
    stack = make_test_stack(tmp_path)
    with pytest.raises(ServingError) as err:
        cmp.render_compose(stack, DIGEST_REF, options=options)
    assert str(err.value).startswith(f"stack 'tiny': {flag}:"), str(err.value)
    assert "\n" not in str(err.value)


def test_rendering_is_deterministic(tmp_path: Path) -> None:
    first = cmp.render_compose(make_test_stack(tmp_path / "a"), DIGEST_REF)
    second = cmp.render_compose(make_test_stack(tmp_path / "b"), DIGEST_REF, options=cmp.ComposeOptions())
    assert first == second
    assert first.endswith("\n") and "\n\n\n" not in first


def test_options_reach_the_file(tmp_path: Path) -> None:
    stack = make_test_stack(tmp_path)
    options = cmp.ComposeOptions(port=8080, hf_cache="/srv/hf", start_period_s=900, restart="on-failure")
    service = _service(cmp.render_compose(stack, DIGEST_REF, options=options))

    assert service["ports"] == ["8080:30000"]
    assert service["volumes"] == ["/srv/hf:/root/.cache/huggingface"]
    assert service["healthcheck"]["start_period"] == "900s"
    assert service["restart"] == "on-failure"
    assert _flag(service["command"], "--port") == "30000"
    assert _flag(service["command"], "--host") == "0.0.0.0"
    assert "http://127.0.0.1:30000/health" in service["healthcheck"]["test"][-1]
    # The default start period is the stack's load timeout, not a short generic one.
    default = _service(cmp.render_compose(stack, DIGEST_REF))
    assert default["healthcheck"]["start_period"] == "120s"


def test_hf_cache_replaces_the_stacks_own_cache_mount() -> None:
    stack = load_matrix().get("cu130")
    assert any(m.endswith(":/root/.cache/huggingface") for m in stack.serving.mounts)
    service = _service(cmp.render_compose(stack, DIGEST_REF, options=cmp.ComposeOptions(hf_cache="/data/hf")))
    assert service["volumes"] == ["/data/hf:/root/.cache/huggingface"]


@needs_compose
def test_dollar_signs_survive_compose_interpolation(tmp_path: Path) -> None:
    stack = make_test_stack(tmp_path)
    stack = stack.model_copy(
        update={"serving": stack.serving.model_copy(update={"extra_args": ("--served-model-name", "m$HOME")})}
    )
    write_compose(stack, DIGEST_REF, tmp_path)
    config = _compose_config(tmp_path)["services"][cmp.SERVICE]
    # `config` prints a compose file again, so the literal `$` stays escaped instead of becoming $HOME's value.
    assert config["command"][-2:] == ["--served-model-name", "m$$HOME"]


def test_no_secret_in_any_rendered_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "hf_SeCrEt" + "x9" * 12
    monkeypatch.setenv("HF_TOKEN", secret)
    stack = make_test_stack(tmp_path)
    out = tmp_path / "build"
    written = write_compose(stack, DIGEST_REF, out, options=cmp.ComposeOptions(gpus=0))
    written += write_compose(
        stack, DIGEST_REF, out / "multi", options=cmp.ComposeOptions(nnodes=2, dist_init_addr="h:1")
    )

    assert {p.name for p in written} >= {cmp.COMPOSE_FILE, cmp.ENV_EXAMPLE_FILE, "compose.node1.yaml"}
    for path in written:
        assert secret not in path.read_text(), path
    service = _service((out / cmp.COMPOSE_FILE).read_text())
    assert service["env_file"] == [cmp.ENV_FILE]
    assert "HF_TOKEN" not in str(service.get("environment", {}))
    example = (out / cmp.ENV_EXAMPLE_FILE).read_text().splitlines()
    assert "HF_TOKEN=" in example  # the name, with an empty value


def test_project_names_are_valid_for_compose_v1() -> None:
    assert cmp.project_name("cu130-sglang0510") == "sglstack-cu130-sglang0510"
    assert cmp.project_name("cu13.0_x") == "sglstack-cu13-0_x"


def test_the_service_carries_the_smoke_report_that_passed_its_image(tmp_path: Path) -> None:
    stack = make_test_stack(tmp_path)
    report = "sha256:" + "5e" * 32
    labels = _service(cmp.render_compose(stack, DIGEST_REF, smoke_report=report))["labels"]
    assert labels[cmp.LABEL_SMOKE_REPORT] == report
    # Nothing known: said so, never invented.
    assert _service(cmp.render_compose(stack, DIGEST_REF))["labels"][cmp.LABEL_SMOKE_REPORT] == "unknown"


def test_render_reads_no_records_and_serves_the_given_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy_fixtures import write_test_matrix

    from sglstack.imagebuild.context import render_stack_folder
    from sglstack.publish import append_records, records_path

    build = tmp_path / "elsewhere"
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(build))
    monkeypatch.chdir(tmp_path)
    matrix = write_test_matrix(tmp_path / "m")
    published = "sha256:" + "cd" * 32
    append_records(
        records_path(build),
        [
            {
                "event": "published",
                "stack": "tiny",
                "repository": "reg/sglang",
                "tag": "tiny",
                "kind": "moving",
                "digest": published,
            }
        ],
    )

    render_stack_folder(str(matrix), load_matrix(matrix).get("tiny"))
    # Under SGLSTACK_BUILD_DIR, next to the records; the moving tag, not the recorded digest.
    service = _service((build / "tiny" / cmp.COMPOSE_FILE).read_text())
    stack = make_test_stack(tmp_path / "n")
    assert service["image"] == f"{stack.publish.repository}:tiny" == cmp.moving_tag_ref(stack)
    assert published not in (build / "tiny" / cmp.COMPOSE_FILE).read_text()
    assert not (tmp_path / "build").exists()

    render_stack_folder(str(matrix), load_matrix(matrix).get("tiny"), out_dir=str(tmp_path / "out"), image=DIGEST_REF)
    assert _service((tmp_path / "out" / cmp.COMPOSE_FILE).read_text())["image"] == DIGEST_REF


def test_render_and_compose_import_nothing_of_deploy_or_publish(repo_root: Path) -> None:
    """Data flows one way: rendering cannot reach records, so no compose <-> deploy cycle can come back."""
    import sys

    code = (
        "import sys, sglstack.render.compose, sglstack.render.dockerfile, sglstack.serving; "
        "print(sorted(m for m in sys.modules if m.startswith(('sglstack.deploy', 'sglstack.publish', "
        "'sglstack.smoke', 'docker'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=repo_root,
        env={"PYTHONPATH": str(repo_root), "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout.strip() == "[]"
