"""The field run's recording (tests/data/field/h200-eagle3.json, from an H200 through `smoke --runner process`)
agrees with the gates' own logic: re-evaluated from its recorded figures, the verdict, every failure line and
each gate's verdict come out as recorded. And the one thing that must hold whatever the draft is: under greedy
decoding the EAGLE-3 server's output equalled the baseline's, on every prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from smoke_fixtures import DOUBLE_ENV, make_double_env

from sglstack.config.matrix import load_matrix
from sglstack.config.settings import Gates
from sglstack.smoke.gates import evaluate
from sglstack.smoke.launch import process_plan
from sglstack.smoke.measure import ServerRun
from sglstack.smoke.overrides import smoke_options

REPO = Path(__file__).resolve().parents[2]
# Two runs on two machine starts (the second after the SIGTERM check of benchmarks/field_sigterm.sh).
RECORDINGS = sorted((REPO / "tests" / "data" / "field").glob("h200-eagle3*.json"))


@pytest.fixture(params=RECORDINGS, ids=lambda p: p.stem)
def recording(request) -> dict[str, Any]:
    return json.loads(request.param.read_text())


def _server_run(report: dict[str, Any], kind: str) -> ServerRun:
    return ServerRun.from_dict(kind, report[kind])


# The field run's draft is random: the server's accept length was exactly 1.00 (its log's "accept rate: 0.00").
# Recorded before the gate named that case, its line said only "below 2.00"; re-evaluated now, it is named.
NONE_ACCEPTED = (
    "min_accept_length: no draft token was accepted: the server's accept length is 1.00 (accept rate 0.00); accept "
    "length 1.01 over the requests: the draft ran, and none of its tokens were accepted, so EAGLE-3 only costs "
    "time; likely causes: --speculative-algorithm does not match the draft (an EAGLE-3 draft served as EAGLE or "
    "NEXTN runs without its auxiliary hidden states), or the draft does not match the target (a draft trained for "
    "another model, hidden size or vocabulary, or one never trained)")


def test_there_are_two_recordings():
    assert len(RECORDINGS) == 2


def test_the_gates_give_the_recorded_verdict_from_the_recorded_figures(recording):
    report = recording["report"]
    # The levels the run was gated at (smoke.concurrency_levels; none in a report from before them).
    levels = tuple(report["options"].get("concurrency_levels") or ())
    verdict = evaluate(Gates(**report["gates"]), _server_run(report, "baseline"), _server_run(report, "eagle3"),
                       report["agreement"], report["regression_reference"], levels)
    recorded = [NONE_ACCEPTED if f == "min_accept_length: accept length 1.01 is below 2.00" else f
                for f in report["failures"]]
    assert list(verdict.failures) == recorded
    assert ("pass" if verdict.passed else "fail") == report["verdict"]
    assert verdict.speedup == pytest.approx(report["speedup"]) and verdict.accept_length == report["accept_length"]
    for kind in ("baseline", "eagle3"):
        assert _server_run(report, kind).to_dict() == report[kind]


def test_the_recorded_accept_rate_0_is_named_a_draft_none_of_whose_tokens_were_accepted(recording):
    report = recording["report"]
    assert report["eagle3"]["accept_length_server"] == 1.0
    verdict = evaluate(Gates(**report["gates"]), _server_run(report, "baseline"), _server_run(report, "eagle3"),
                       report["agreement"], report["regression_reference"])
    assert [f for f in verdict.failures if f.startswith("min_accept_length:")] == [NONE_ACCEPTED]
    # Named whatever the gate: accepting no draft token at all is not a matter of degree.
    lax = evaluate(Gates(**{**report["gates"], "min_accept_length": 0}), _server_run(report, "baseline"),
                   _server_run(report, "eagle3"), report["agreement"], report["regression_reference"])
    assert [f for f in lax.failures if f.startswith("min_accept_length:")] == [NONE_ACCEPTED]


def test_each_gates_verdict_is_the_recorded_one(recording):
    rec, report = recording, recording["report"]
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import field_record  # the recorder's own rule for a gate's verdict (benchmarks/ is not a package)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    assert field_record.gate_verdicts(report) == rec["gate_verdicts"]
    # A random draft: its proposals are rarely accepted, so EAGLE-3 is slower and the two speed gates fail.
    assert rec["gate_verdicts"]["min_speedup"] == rec["gate_verdicts"]["min_accept_length"] == "fail"
    assert rec["gate_verdicts"]["min_agreement"] == "pass"


def test_greedy_eagle3_output_equalled_the_baseline_token_for_token(recording):
    report = recording["report"]
    assert report["agreement"] == 1.0
    assert report["baseline"]["completed"] == report["baseline"]["requests"] == report["eagle3"]["requests"]
    assert report["eagle3"]["completed"] == report["eagle3"]["requests"]


def test_every_step_got_through_and_the_process_runner_measured_it(recording):
    rec, report = recording, recording["report"]
    assert [name for name, step in rec["steps"].items() if not step["ok"]] == []
    assert set(rec["steps"]) == {"imports", "kernel_load", "baseline_model_load", "baseline_first_token",
                                       "eagle3_model_load", "eagle3_first_token"}
    assert report["runner"]["kind"] == "process" and report["image"]["runner"] == "process"
    eagle = report["commands"]["eagle3"]
    assert eagle[eagle.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert [eagle[eagle.index(f) + 1] for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                                 "--speculative-num-draft-tokens")] == ["3", "1", "4"]
    assert any("LlamaForCausalLMEagle3" in line for line in rec["server_milestones"]["eagle3"])
    assert "H200" in rec["device"]


def test_the_field_run_served_what_the_h200_field_stack_declares(recording):
    """The recorded launch commands are, flag for flag, the process runner's plan for stacks.yaml's `h200-field`
    given only the node's folders (its Python environment; the model and draft, recorded as `<field-model>/`,
    which the stack names where a container mounts them); its smoke sizes, startup budget and gates too."""
    report = recording["report"]
    stack = load_matrix(REPO / "stacks.yaml").get("h200-field")
    options = smoke_options(stack, runner="process", python_env=report["runner"]["python_env"],
                            model="<field-model>/target", draft_model="<field-model>/draft")
    for kind in ("baseline", "eagle3"):
        command = report["commands"][kind]
        port = int(command[command.index("--port") + 1])  # the process runner serves on a free port it picks
        assert list(process_plan(options, kind, port, host_env={}).argv) == command
    recorded = report["options"]
    assert (recorded["max_new_tokens"], recorded["num_prompts"], recorded["concurrency"]) == (
        stack.smoke.max_new_tokens, stack.smoke.num_prompts, stack.smoke.concurrency)
    assert (recorded["timeout"], recorded["gpus"], recorded["tp"]) == (
        stack.serving.startup_timeout_s, stack.serving.gpus, stack.serving.tp)
    assert report["gates"] == stack.smoke.gates.model_dump()
    assert set(stack.serving.env) <= set(recorded["env_keys"])


def test_the_driver_and_the_recorder_make_a_recording_these_tests_accept(tmp_path, repo_root):
    """benchmarks/field_run.py (served by the double here) and field_record.py, end to end: the recording
    holds every step, and the gates re-derive its verdict (the double's EAGLE-3 is 2x faster: it passes)."""
    env_dir = make_double_env(tmp_path / "venv", repo_root)
    model = tmp_path / "model"
    for kind in ("target", "draft"):
        (model / kind).mkdir(parents=True)
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "field_run.py"), "--python-env", str(env_dir),
         "--model", str(model / "target"), "--draft", str(model / "draft"), "--out", str(out), "--gpus", "0",
         "--timeout", "60", "--extra-args", "", "--max-new-tokens", "16", "--num-prompts", "4",
         "--concurrency", "2", *(f"--env={k}={v}" for k, v in DOUBLE_ENV.items())],
        capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "field_record.py"), str(out), str(tmp_path / "r.json")],
                   check=True, capture_output=True)
    made = json.loads((tmp_path / "r.json").read_text())
    assert made["stack"] == made["report"]["stack"] == "h200-field"  # the driver serves the stack's settings
    assert made["report"]["verdict"] == "pass" and made["gate_verdicts"]["min_speedup"] == "pass"
    # No torch beside the double: the probes say how far they got, and the servers' steps still count.
    assert made["steps"]["imports"]["ok"] is False and made["steps"]["baseline_first_token"]["ok"] is True
    test_the_gates_give_the_recorded_verdict_from_the_recorded_figures(made)
