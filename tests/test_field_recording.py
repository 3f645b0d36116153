"""The field run's recording (tests/data/field/h200-eagle3.json, from an H200 through `smoke --runner process`)
agrees with the gates' own logic: re-evaluated from its recorded figures, the verdict, every failure line and
each gate's verdict come out as recorded. And the one thing that must hold whatever the draft is: under greedy
decoding the EAGLE-3 server's output equalled the baseline's, on every prompt."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sglstack.matrix import Gates
from sglstack.smoke.gates import evaluate
from sglstack.smoke.measure import PhaseStats, ServerRun

REPO = Path(__file__).resolve().parent.parent
RECORDING = json.loads((REPO / "tests" / "data" / "field" / "h200-eagle3.json").read_text())
REPORT = RECORDING["report"]


def _phase(data: dict[str, Any] | None) -> PhaseStats | None:
    return None if data is None else PhaseStats(**{**data, "errors": tuple(data["errors"])})


def _server_run(kind: str) -> ServerRun:
    run = REPORT[kind]
    return ServerRun(kind=kind, started=run["started"], failure=run["failure"], startup_s=run["startup_s"],
                     single=_phase(run["concurrency_1"]), concurrent=_phase(run["concurrency_n"]),
                     accept_length_meta=run["accept_length_meta"], accept_length_server=run["accept_length_server"])


def test_the_gates_give_the_recorded_verdict_from_the_recorded_figures():
    verdict = evaluate(Gates(**REPORT["gates"]), _server_run("baseline"), _server_run("eagle3"), REPORT["agreement"],
                       REPORT["regression_reference"])
    assert list(verdict.failures) == REPORT["failures"]
    assert ("pass" if verdict.passed else "fail") == REPORT["verdict"]
    assert verdict.speedup == pytest.approx(REPORT["speedup"]) and verdict.accept_length == REPORT["accept_length"]
    for kind in ("baseline", "eagle3"):
        assert _server_run(kind).to_dict() | {"runs": REPORT[kind]["runs"]} == REPORT[kind]


def test_each_gates_verdict_is_the_recorded_one():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import field_record  # the recorder's own rule for a gate's verdict (benchmarks/ is not a package)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    assert field_record.gate_verdicts(REPORT) == RECORDING["gate_verdicts"]
    # A random draft: its proposals are rarely accepted, so EAGLE-3 is slower and the two speed gates fail.
    assert RECORDING["gate_verdicts"]["min_speedup"] == RECORDING["gate_verdicts"]["min_accept_length"] == "fail"
    assert RECORDING["gate_verdicts"]["min_agreement"] == "pass"


def test_greedy_eagle3_output_equalled_the_baseline_token_for_token():
    assert REPORT["agreement"] == 1.0
    assert REPORT["baseline"]["completed"] == REPORT["baseline"]["requests"] == REPORT["eagle3"]["requests"]
    assert REPORT["eagle3"]["completed"] == REPORT["eagle3"]["requests"]


def test_every_step_got_through_and_the_process_runner_measured_it():
    assert [name for name, step in RECORDING["steps"].items() if not step["ok"]] == []
    assert set(RECORDING["steps"]) == {"imports", "kernel_load", "baseline_model_load", "baseline_first_token",
                                       "eagle3_model_load", "eagle3_first_token"}
    assert REPORT["runner"]["kind"] == "process" and REPORT["image"]["runner"] == "process"
    eagle = REPORT["commands"]["eagle3"]
    assert eagle[eagle.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert [eagle[eagle.index(f) + 1] for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                                 "--speculative-num-draft-tokens")] == ["3", "1", "4"]
    assert any("LlamaForCausalLMEagle3" in line for line in RECORDING["server_milestones"]["eagle3"])
    assert "H200" in RECORDING["device"]
