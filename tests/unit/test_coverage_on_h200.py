"""The compatibility rules against a real GPU: every target of benchmarks/coverage_gpu/make_targets.sh was
loaded and run on the lent H200 (CC 9.0) by benchmarks/coverage_gpu/load_on_gpu.py; the recorded answers
are tests/data/coverage/h200-observed.json. The rules must predict each of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglstack.coverage.rules import Capability, Target, runs_on

OBSERVED = json.loads((Path(__file__).resolve().parents[1] / "data" / "coverage" / "h200-observed.json").read_text())


def test_the_recording_is_from_a_capability_9_gpu_and_covers_every_rule():
    assert OBSERVED["capability"] == "9.0" and "H200" in OBSERVED["device"]
    targets = {row["target"] for row in OBSERVED["images"]}
    # plain, `a` and `f` targets, SASS and PTX, below, at and above 9.0
    assert {"sm_80", "sm_90", "sm_90a", "sm_100f", "sm_120a", "compute_80", "compute_90a", "compute_100"} <= targets
    assert len(OBSERVED["images"]) == 28


@pytest.mark.parametrize("row", OBSERVED["images"], ids=lambda r: r["target"])
def test_runs_on_predicts_what_the_h200_did(row):
    target = Target.parse(row["target"], row["kind"])
    loaded = row["load"] == "CUDA_SUCCESS" and row["ran"]
    assert runs_on(target, Capability.parse(OBSERVED["capability"])) is loaded, row
