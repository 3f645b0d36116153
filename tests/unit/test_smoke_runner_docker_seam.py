"""`run_smoke` with the docker runner, in process: the engine's side is a double of what the server module reads
of docker's SDK, whose containers' commands are served by the SGLang double on a thread, parsed by its own flag
parser (tests/lib/inthread_docker). The image is taken as resolved (`open_what_to_serve`, the runner's subject
seam)."""

from __future__ import annotations

import json

import pytest
from inthread_docker import Engine
from smoke_fixtures import FAST

from sglstack.smoke import report as report_mod
from sglstack.smoke import run_smoke, smoke_options
from sglstack.smoke import runner as runner_mod
from sglstack.smoke import server as server_mod

IMAGE_ID = "sha256:" + "5" * 64
ENV = {"SGLANG_DOUBLE_TOKENS_PER_S": "4000", "SGLANG_DOUBLE_TTFT_S": "0"}


@pytest.fixture
def engine(monkeypatch, tmp_path):
    double = Engine(tmp_path)
    monkeypatch.setattr(server_mod, "running_container", double.running_container)
    monkeypatch.setattr(report_mod, "smoke_chart", lambda data, history: b"png")  # drawn by its own tests
    info = {"ref": "sglstack/cpu:test", "digest": None, "id": IMAGE_ID, "repo_digests": []}

    def open_what_to_serve(stack, image, options, interpreter, log):
        double.opened.append((stack, image, interpreter))
        return "the engine", info

    monkeypatch.setattr(runner_mod, "open_what_to_serve", open_what_to_serve)
    return double


def _run(tmp_path, env=None, **more):
    options = smoke_options(None, env={**ENV, **(env or {})}, build_dir=str(tmp_path / "build"),
                            report=str(tmp_path / "report.json"), labels={"io.sglstack.test": "seam"},
                            **{**FAST, "max_new_tokens": 8, "num_prompts": 2, "min_speedup": 0.01,
                               "max_regression": 1.0, **more})
    lines: list[str] = []
    return run_smoke(None, "sglstack/cpu:test", options, log=lines.append), lines


def test_each_kind_is_a_container_of_the_image_measured_through_its_published_port(engine, tmp_path):
    report, lines = _run(tmp_path, concurrency_levels="1,2,3")
    data = report.data
    assert report.passed, data["failures"]
    assert engine.opened == [(None, "sglstack/cpu:test", None)]  # the image asked for; no interpreter
    assert [level["concurrency"] for level in data["levels"]] == [1, 2, 3]
    assert [(r["engine"], r["image"], r["name_prefix"]) for r in engine.runs] == [
        ("the engine", IMAGE_ID, "sglstack-smoke")] * 2
    assert all(r["labels"]["io.sglstack.test"] == "seam" for r in engine.runs)
    for run, kind in zip(engine.runs, ("baseline", "eagle3"), strict=True):
        assert run["command"] == data["commands"][kind]
        assert f"smoke: {kind}: {' '.join(run['command'])}" in lines
        assert data[kind]["started"] and data[kind]["tokens_per_s"] > 0
        # The engine's own stamps: every milestone of the start is known.
        assert data[kind]["phases"]["unknown"] == []
    assert "--speculative-algorithm" in engine.runs[1]["command"]
    assert data["accept_length"] == pytest.approx(8 / 3)


def test_a_sweep_serves_each_other_setting_as_a_container(engine, tmp_path):
    report, lines = _run(tmp_path, sweep="3:1:4,5:1:6")
    commands = [r["command"] for r in engine.runs]
    assert len(commands) == 3
    assert [(r["engine"], r["image"]) for r in engine.runs] == [("the engine", IMAGE_ID)] * 3
    steps = commands[2][commands[2].index("--speculative-num-steps") + 1]
    assert steps == "5"
    assert f"smoke: eagle3: {' '.join(commands[2])}" in lines
    settings = report.data["sweep"]["settings"]
    assert settings[1]["command"] == commands[2] and settings[1]["eagle3"]["started"] is True
    assert json.dumps(settings[0]["command"]) == json.dumps(commands[1])


def test_a_container_that_never_gets_healthy_fails_with_the_engines_log_tail(engine, tmp_path):
    report, lines = _run(tmp_path, env={"SGLANG_DOUBLE_NEVER_HEALTHY": "speculative"}, timeout=1)
    failure = report.data["eagle3"]["failure"]
    assert failure.startswith("not healthy after 1s (/health_generate last answered 503); last log lines: ")
    assert "Load weight end." in failure and "[20" not in failure  # the engine's stamps are not in the tail
    assert not report.passed
    assert "smoke: eagle3: not healthy after 1s (/health_generate last answered 503)" in lines
