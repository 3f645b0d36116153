"""A real build, its record, compose file and smoke report land in one build tree (split from
tests/cli/test_build_root.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import run_invoke
from smoke_fixtures import DOUBLE_ENV, LABEL

REPO = Path(__file__).resolve().parents[2]


CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"


@pytest.mark.docker
def test_record_compose_file_and_smoke_report_land_in_one_tree(tmp_path, docker_cli, ca_bundle, sglang_double_image,
                                                               docker_client):
    tree, elsewhere = tmp_path / "tree", tmp_path / "cwd"
    elsewhere.mkdir()
    env = {"SGLSTACK_BUILD_DIR": str(tree)}
    common = ("--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX))
    render = run_invoke("render", *common, cwd=elsewhere, env=env)
    assert render.returncode == 0, render.stderr
    build = run_invoke("build", *common, "--ca-bundle", str(ca_bundle), "--docker-cli", docker_cli,
                       cwd=elsewhere, env=env)
    assert build.returncode == 0, build.stderr
    label = f"{LABEL}=build-root-{tmp_path.name}"
    smoke = run_invoke("smoke", "--image", sglang_double_image, *common, "--num-prompts", "2",
                       "--max-new-tokens", "64", "--concurrency", "2", "--label", label,
                       *[arg for k, v in DOUBLE_ENV.items() for arg in ("--env", f"{k}={v}")],
                       cwd=elsewhere, env=env, timeout=300)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert docker_client.containers.list(all=True, filters={"label": label}) == []
    stack_dir = tree / "cpu-test"
    for name in ("Dockerfile", "compose.yaml", "record.json", "smoke-report.json", "smoke-report.md",
                 "smoke-report.png", "smoke-history.jsonl"):
        assert (stack_dir / name).is_file(), name
    assert json.loads((stack_dir / "record.json").read_text())["stack"] == "cpu-test"
    assert json.loads((stack_dir / "smoke-report.json").read_text())["history_file"] == str(
        stack_dir / "smoke-history.jsonl")
    assert not (elsewhere / "build").exists()
