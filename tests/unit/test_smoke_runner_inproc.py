"""`run_smoke` with the process runner, in process: the SGLang double answers on a thread of the test (its own
routes, JSON fields and flag parser: tests/lib/inthread_sglang) behind the process adapter's seam, so the
runner, the server module and the measurement run whole, with no venv and no child process. Verdicts come
from the double's scripted behaviour (crash, never healthy, speculation), never from measured speed."""

from __future__ import annotations

import json

import pytest
from inthread_sglang import python_env, serve_in_threads
from smoke_fixtures import FAST

from sglstack.smoke import report as report_mod
from sglstack.smoke import run_smoke, smoke_options
from sglstack.smoke.outputs import server_log_path

# Each flag of the double is far from any gate: the verdict does not depend on the machine's speed.
ENV = {"SGLANG_DOUBLE_TOKENS_PER_S": "4000", "SGLANG_DOUBLE_SPEC_SPEEDUP": "4.0", "SGLANG_DOUBLE_TTFT_S": "0"}
SPEED_GATES = {"min_speedup": 0.01, "max_regression": 1.0}


@pytest.fixture
def servers(monkeypatch):
    return serve_in_threads(monkeypatch)


@pytest.fixture
def charts(monkeypatch, servers):
    """The chart's drawing (matplotlib, seconds a report: its own tests draw it) replaced by what it was given."""
    drawn: list[tuple[dict, tuple]] = []
    monkeypatch.setattr(report_mod, "smoke_chart", lambda data, history: drawn.append((data, history)) or b"png")
    return drawn


@pytest.fixture
def env_dir(tmp_path):
    return python_env(tmp_path / "env")


def _options(tmp_path, env_dir, env=None, **overrides):
    settings = {**FAST, "max_new_tokens": 8, "num_prompts": 2, **SPEED_GATES, **overrides}
    return smoke_options(None, env={**ENV, **(env or {})}, build_dir=str(tmp_path / "build"),
                         report=str(tmp_path / "report.json"), runner="process", python_env=str(env_dir),
                         **settings)


def _run(tmp_path, env_dir, env=None, **overrides):
    lines: list[str] = []
    report = run_smoke(None, None, _options(tmp_path, env_dir, env, **overrides), log=lines.append)
    return report, lines


def test_both_servers_are_served_measured_gated_and_recorded(servers, tmp_path, env_dir):
    report, lines = _run(tmp_path, env_dir)
    data = report.data
    assert report.passed, data["failures"]
    assert [s["kind"] for s in servers.started] == ["baseline", "eagle3"]
    assert servers.ended == ["baseline", "eagle3"]  # each ended before the next started
    for kind in ("baseline", "eagle3"):
        run = data[kind]
        assert run["started"] and run["failure"] is None
        assert run["tokens_per_s"] > 0 and run["startup_s"] >= 0
        assert run["phases"]["phases_s"]["to_healthy"] is not None or "off_clock" in run["phases"]
    # The argv each server was started with: the environment's python, a free port per run, the double parsed it.
    for started in servers.started:
        argv = started["argv"]
        assert data["commands"][started["kind"]] == argv
        assert argv[0] == str(env_dir / "bin" / "python3")
        assert started["args"]["port"] == int(argv[argv.index("--port") + 1])
        assert started["log_path"] == server_log_path(tmp_path / "report.json", started["kind"])
        assert started["log_root"] == tmp_path  # the log sits beside the report: its folder bounds the writes
    assert "--speculative-algorithm" in data["commands"]["eagle3"]
    assert "--speculative-algorithm" not in data["commands"]["baseline"]
    assert data["agreement"] == 1.0
    # The double verifies 3 tokens a step: 8 tokens in 3 steps, read from meta_info and from /get_server_info.
    assert data["accept_length"] == pytest.approx(8 / 3)
    assert data["eagle3"]["accept_length_server"] == pytest.approx(8 / 3)
    assert data["baseline"]["accept_length_meta"] is None and data["baseline"]["accept_length_server"] is None
    assert data["image"]["runner"] == "process" and data["image"]["id"].startswith("env-sha256:")
    assert f"smoke: baseline: {' '.join(data['commands']['baseline'])}" in lines
    assert any(line.startswith("smoke: baseline: healthy after ") and line.endswith("; warming up") for line in lines)
    assert any(line.startswith("smoke: eagle3: concurrency 1: ") and "2/2 completed" in line for line in lines)
    assert any(line.startswith("smoke: eagle3: concurrency 2: ") and "tok/s aggregate" in line for line in lines)
    assert lines[-1].startswith("smoke: report ") and "report.md" in lines[-1]
    history = tmp_path / "build" / "_no-stack" / "smoke-history.jsonl"
    assert [json.loads(line)["runner"] for line in history.open()] == ["process"]
    assert len(report.history) == 1
    assert json.loads((tmp_path / "report.json").read_text())["verdict"] == "pass"


def test_a_second_run_compares_with_the_first_in_its_history(servers, charts, tmp_path, env_dir):
    first, _ = _run(tmp_path, env_dir)
    second, _ = _run(tmp_path, env_dir)
    assert first.passed and second.passed
    assert len(second.history) == 2
    assert second.history[0] == first.history[0]
    assert [len(history) for _data, history in charts] == [1, 2]
    assert charts[1][0]["time"] == second.data["time"] and charts[1][0]["eagle3"] == second.data["eagle3"]
    assert second.data["regression_reference"] is not None


def test_an_eagle3_server_that_crashes_fails_with_its_exit_and_log_tail(servers, tmp_path, env_dir):
    report, lines = _run(tmp_path, env_dir, env={"SGLANG_DOUBLE_CRASH_AT_START": "speculative"})
    data = report.data
    assert not report.passed
    assert data["baseline"]["started"] and data["baseline"]["tokens_per_s"] > 0
    failure = data["eagle3"]["failure"]
    assert failure.startswith("the server exited with code 1 before it was healthy; last log lines: ")
    assert failure.endswith("(simulated by the double)")
    assert "smoke: eagle3: the server exited with code 1 before it was healthy" in lines
    assert any(line.startswith("  | ") and "CUDA out of memory" in line for line in lines)
    assert not data["eagle3"]["started"]


def test_a_baseline_that_crashes_skips_eagle3_and_fails(servers, tmp_path, env_dir):
    report, lines = _run(tmp_path, env_dir, env={"SGLANG_DOUBLE_CRASH_AT_START": "baseline"})
    assert [s["kind"] for s in servers.started] == ["baseline"]
    assert "smoke: eagle3 skipped: the baseline server failed" in lines
    assert report.data["eagle3"]["started"] is False and report.data["eagle3"]["failure"] is None
    assert not report.passed
    assert "kernel caches" not in " ".join(lines)


def test_a_server_that_never_gets_healthy_fails_after_the_timeout(servers, tmp_path, env_dir):
    report, lines = _run(tmp_path, env_dir, env={"SGLANG_DOUBLE_NEVER_HEALTHY": "speculative"}, timeout=1)
    failure = report.data["eagle3"]["failure"]
    assert failure.startswith("not healthy after 1s (/health_generate last answered 503)")
    assert "smoke: eagle3: not healthy after 1s (/health_generate last answered 503)" in lines
    assert report.data["baseline"]["started"] and not report.passed


def test_a_baseline_only_run_serves_one_server(servers, tmp_path, env_dir):
    report, _ = _run(tmp_path, env_dir, kinds="baseline", concurrency=1)
    assert [s["kind"] for s in servers.started] == ["baseline"]
    assert set(report.data["commands"]) == {"baseline"}
    assert report.data["baseline"]["started"] and report.data["baseline"]["concurrency_n"] is None


def test_runs_flush_the_cache_between_them_and_say_so(servers, tmp_path, env_dir):
    report, lines = _run(tmp_path, env_dir, runs=2, flush_cache=True, kinds="baseline", concurrency=1)
    assert report.passed, report.data["failures"]
    said = [line for line in lines if "concurrency 1:" in line]
    assert [line.split(":")[2].strip() for line in said] == ["run 1/2 concurrency 1", "run 2/2 concurrency 1"]
    assert all(line.endswith(", cache flushed") for line in said)
    assert [r["flushed"] for r in report.data["baseline"]["runs"]] == [True, True]


def test_each_named_level_is_measured_once(servers, tmp_path, env_dir):
    report, lines = _run(tmp_path, env_dir, kinds="baseline", concurrency=2, concurrency_levels="1,2,3")
    levels = [line.split(":")[2].strip() for line in lines if line.startswith("smoke: baseline: concurrency")]
    assert levels == ["concurrency 1", "concurrency 2", "concurrency 3"]
    assert list(report.data["baseline"]["concurrency_levels"]) == ["3"]  # 1 and 2 are the two phases


def test_a_sweep_serves_eagle3_at_each_other_setting(servers, tmp_path, env_dir):
    report, lines = _run(tmp_path, env_dir, sweep="3:1:4,5:1:6")
    kinds = [(s["kind"], s["args"]["speculative_num_steps"]) for s in servers.started]
    assert kinds == [("baseline", None), ("eagle3", 3), ("eagle3", 5)]
    assert "smoke: sweep: EAGLE-3 at " in " ".join(lines)
    assert servers.started[2]["log_path"] == tmp_path / "report.eagle3.s5-k1-d6.log"
    settings = report.data["sweep"]["settings"]
    assert [(s["setting"], s["configured"]) for s in settings] == [("3:1:4", True), ("5:1:6", False)]
    assert settings[1]["command"] == servers.started[2]["argv"]
    assert settings[1]["eagle3"]["started"] is True
    assert "smoke: sweep: EAGLE-3 at 5 steps, topk 1, 6 draft tokens" in lines
    assert f"smoke: eagle3: {' '.join(servers.started[2]['argv'])}" in lines


@pytest.mark.parametrize(("env", "kinds"), [({"SGLANG_DOUBLE_CRASH_AT_START": "baseline"}, "baseline,eagle3"),
                                           ({"SGLANG_DOUBLE_CRASH_AT_START": "speculative"}, "eagle3")])
def test_a_sweep_without_a_measured_baseline_serves_nothing_more(servers, tmp_path, env_dir, env, kinds):
    """A baseline that failed, or was not run: no sweep setting is served (each is judged against it)."""
    report, lines = _run(tmp_path, env_dir, env=env, kinds=kinds, sweep="3:1:4,5:1:6,7:1:8")
    assert len(servers.started) == 1
    skipped = [line for line in lines if line.startswith("smoke: sweep ")]
    assert skipped == [f"smoke: sweep {key} skipped: the baseline server failed" for key in ("5:1:6", "7:1:8")]
    runs = [setting["eagle3"] for setting in report.data["sweep"]["settings"][1:]]
    assert [(run["started"], run["failure"]) for run in runs] == [(False, "not served: the baseline failed")] * 2
