"""The field run judged at the concurrency levels the `h200-field` stack serves (issue 42).

- The random-draft recordings (tests/data/field/h200-eagle3*.json): by the per-level gates, EAGLE-3 fails
  min_speedup at concurrency 1 and at 4 (the crossover is 1: it never pays).
- The constructed-draft recording (tests/data/field/h200-constructed*.json, benchmarks/field_run.py --sweep
  3:1:4,7:1:8 on an H200): every setting's verdict, failure lines and crossover re-derived from its figures with
  the gates' own code; the 3-step setting fails at concurrency 4, the 7-step one passes every gate.
- The driver and the recorder end to end on the CPU double, with a stand-in whose EAGLE-3 pays alone and not
  in a batch at 3 steps, and pays at both levels at 7 steps (the double's speeds are set here, per level).
"""

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
from sglstack.smoke.measure import ServerRun

REPO = Path(__file__).resolve().parents[2]
FIELD = REPO / "tests" / "data" / "field"
RANDOM_DRAFT = sorted(FIELD.glob("h200-eagle3*.json"))
CONSTRUCTED = sorted(FIELD.glob("h200-constructed*.json"))
LEVELS = (1, 4)


def _field_record():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import field_record  # the recorder's own rule for a gate's verdict (benchmarks/ is not a package)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return field_record


@pytest.mark.parametrize("path", RANDOM_DRAFT, ids=lambda p: p.stem)
def test_the_random_draft_fails_speed_at_every_level_the_stack_serves(path):
    report = json.loads(path.read_text())["report"]
    stack = load_matrix(REPO / "stacks.yaml").get("h200-field")
    assert stack.smoke.concurrency_levels == LEVELS
    baseline = ServerRun.from_dict("baseline", report["baseline"])
    eagle3 = ServerRun.from_dict("eagle3", report["eagle3"])
    verdict = evaluate(stack.smoke.gates, baseline, eagle3, report["agreement"], None, LEVELS)
    b, e = report["baseline"], report["eagle3"]
    assert list(verdict.failures) == [
        f"min_speedup: at concurrency 1 EAGLE-3 {e['tokens_per_s']:.1f} tok/s per stream vs baseline "
        f"{b['tokens_per_s']:.1f} tok/s is {e['tokens_per_s'] / b['tokens_per_s']:.2f}x, below 1.00x",
        f"min_speedup: at concurrency 4 EAGLE-3 {e['aggregate_tokens_per_s']:.1f} tok/s aggregate vs baseline "
        f"{b['aggregate_tokens_per_s']:.1f} tok/s is {e['aggregate_tokens_per_s'] / b['aggregate_tokens_per_s']:.2f}x,"
        " below 1.00x",
        # The server's accept length is exactly 1.00 (accept rate 0.00): named as a draft none of whose tokens
        # were accepted (tests/unit/test_field_recording.py has the whole line).
        next(f for f in verdict.failures if f.startswith("min_accept_length: no draft token was accepted: ")),
    ]
    assert verdict.crossover == 1
    assert all(s.speedup is not None and s.speedup < 0.8 for s in verdict.levels)


def rederive(report: dict[str, Any]) -> None:
    """Every verdict of a (sweep) report, re-derived from its recorded figures by the gates' own code."""
    gates, levels = Gates(**report["gates"]), tuple(report["options"]["concurrency_levels"])
    baseline = ServerRun.from_dict("baseline", report["baseline"])
    verdict = evaluate(gates, baseline, ServerRun.from_dict("eagle3", report["eagle3"]), report["agreement"],
                       report["regression_reference"], levels)
    assert list(verdict.failures) == report["failures"]
    assert ("pass" if verdict.passed else "fail") == report["verdict"]
    assert verdict.crossover == report["crossover"]
    assert [s.to_dict(gates.min_speedup) for s in verdict.levels] == report["levels"]
    for entry in report["sweep"]["settings"]:
        run = ServerRun.from_dict("eagle3", entry["eagle3"])
        again = evaluate(gates, baseline, run, entry["agreement"], None, tuple(report["sweep"]["levels"]))
        assert list(again.failures) == entry["failures"], entry["setting"]
        assert ("pass" if again.passed else "fail") == entry["verdict"] and again.crossover == entry["crossover"]
        command = entry["command"]
        flags = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
        assert [command[command.index(f) + 1] for f in flags] == entry["setting"].split(":")


@pytest.mark.parametrize("path", CONSTRUCTED, ids=lambda p: p.stem)
def test_the_constructed_draft_recording_rederives_3_steps_failing_at_4_and_7_steps_passing(path):
    recording = json.loads(path.read_text())
    report = recording["report"]
    rederive(report)
    by_setting = {e["setting"]: e for e in report["sweep"]["settings"]}
    three, seven = by_setting["3:1:4"], by_setting["7:1:8"]
    assert three["configured"] and three["crossover"] == 4 and three["verdict"] == "fail"
    assert [f.split(":")[0] for f in three["failures"]] == ["min_speedup"]
    assert three["failures"][0].startswith("min_speedup: at concurrency 4 ")
    assert seven["verdict"] == "pass" and seven["crossover"] is None and seven["failures"] == []
    # Every proposal accepted: the accept length is the steps plus one; greedy outputs are the baseline's.
    assert three["accept_length"] == pytest.approx(4.0, abs=0.05)
    assert seven["accept_length"] == pytest.approx(8.0, abs=0.1)
    assert three["agreement"] == seven["agreement"] == 1.0
    assert _field_record().sweep_verdicts(report) == recording["sweep_verdicts"]
    assert recording["sweep_verdicts"]["7:1:8"] == {"min_speedup": "pass", "min_accept_length": "pass",
                                                    "min_agreement": "pass",
                                                    "max_regression": "not applied (no earlier passing run)"}
    assert [name for name, step in recording["steps"].items() if not step["ok"]] == []
    assert "H200" in recording["device"]


def test_the_driver_sweeps_in_one_run_and_the_recorder_keeps_what_rederives(tmp_path, repo_root):
    """benchmarks/field_run.py --sweep on the double: one baseline start, EAGLE-3 at 3 and 7 steps; the double
    serves 3 steps at 2x alone and 0.3x in a batch, 7 steps at 3x alone and 2x in a batch (set here)."""
    env_dir = make_double_env(tmp_path / "venv", repo_root)
    model = tmp_path / "model"
    for kind in ("target", "draft"):
        (model / kind).mkdir(parents=True)
    out = tmp_path / "out"
    speeds = {**DOUBLE_ENV, "SGLANG_DOUBLE_SPEC_SPEEDUP_BY_RUNNING": "3@1=2.0,3@2=0.3,7@1=3.0,7@2=2.0",
              "SGLANG_DOUBLE_ACCEPT_LENGTH": "4"}
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "field_run.py"), "--python-env", str(env_dir),
         "--model", str(model / "target"), "--draft", str(model / "draft"), "--out", str(out), "--gpus", "0",
         "--timeout", "60", "--extra-args", "", "--max-new-tokens", "64", "--num-prompts", "4",
         "--sweep", "3:1:4,7:1:8", *(f"--env={k}={v}" for k, v in speeds.items())],
        capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    crossover = [line for line in run.stdout.splitlines() if "stops paying" in line]
    assert len(crossover) == 1 and crossover[0].startswith("field: EAGLE-3 stops paying at concurrency 4 (0.")
    assert crossover[0].endswith("x, below 1.00x).")
    best = [line for line in run.stdout.splitlines() if line.startswith("field: best at ")]
    assert [line.split(" (")[0] for line in best] == ["field: best at concurrency 1: 7:1:8",
                                                      "field: best at concurrency 4: 7:1:8"]
    target = tmp_path / "h200-constructed.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "field_record.py"), str(out), str(target)],
                   check=True, capture_output=True)
    made = json.loads(target.read_text())
    report = made["report"]
    assert report["stack"] == "h200-field" and report["options"]["concurrency_levels"] == [1, 4]
    rederive(report)
    assert {k: v["min_speedup"] for k, v in made["sweep_verdicts"].items()} == {"3:1:4": "fail", "7:1:8": "pass"}
    assert [e["crossover"] for e in report["sweep"]["settings"]] == [4, None]
    assert [row["setting"] for row in report["sweep"]["best"]] == ["7:1:8", "7:1:8"]
    assert set(made["steps"]) >= {"baseline_model_load", "eagle3_model_load", "eagle3_7-1-8_model_load",
                                  "eagle3_7-1-8_first_token"}
    assert set(made["server_milestones"]) == {"baseline", "eagle3", "eagle3.s7-k1-d8"}
