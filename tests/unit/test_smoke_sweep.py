"""The sweep's ranking (smoke/sweep.py, pure; issue 35, planted bug P41): entries as `judge` writes them, with
speedups set by the test. The recommended setting is the one whose WORST level is best (a setting fast at
concurrency 1 and slow at 32 is no setting to serve both with); per level, only settings whose outputs agree
count, and a level where the best does not reach min_speedup is served without speculation."""

from __future__ import annotations

from typing import Any

from sglstack.config.settings import Gates
from sglstack.smoke.sweep import best_per_level, recommendation_lines, recommended_setting
from sglstack.smoke.sweepspec import SpecSetting

GATES = Gates(min_speedup=1.1, min_agreement=0.9)


def entry(setting: SpecSetting, speedups: dict[int, float], *, verdict: str = "pass", agreement: float = 1.0,
          configured: bool = False) -> dict[str, Any]:
    return {**setting.to_dict(), "configured": configured, "verdict": verdict, "agreement": agreement,
            "levels": [{"concurrency": c, "speedup": s, "pays": s >= GATES.min_speedup}
                       for c, s in sorted(speedups.items())]}


SPIKY = SpecSetting(7, 1, 8)  # fast alone, slow under load
EVEN = SpecSetting(3, 1, 4)  # good at both levels
OFF = SpecSetting(5, 1, 6)  # fastest everywhere, but its outputs differ from the baseline's


def test_the_recommended_setting_is_the_one_whose_worst_level_is_best():
    entries = [entry(SPIKY, {1: 2.4, 32: 1.15}, configured=True), entry(EVEN, {1: 1.6, 32: 1.4})]
    best = recommended_setting(entries)
    assert best == {"setting": "3:1:4", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "configured": False,
                    "worst_speedup": 1.4}
    # the order of the entries decides nothing
    assert recommended_setting(entries[::-1]) == best


def test_a_setting_that_fails_a_gate_is_never_recommended():
    assert recommended_setting([entry(SPIKY, {1: 3.0, 32: 3.0}, verdict="fail"), entry(EVEN, {1: 1.2, 32: 1.2})]
                               )["setting"] == "3:1:4"
    assert recommended_setting([entry(SPIKY, {1: 3.0}, verdict="fail")]) is None


def test_per_level_the_fastest_agreeing_setting_and_no_speculation_where_none_pays():
    entries = [entry(SPIKY, {1: 2.4, 32: 1.05}), entry(EVEN, {1: 1.6, 32: 1.08}),
               entry(OFF, {1: 3.0, 32: 2.0}, verdict="fail", agreement=0.5)]
    rows = best_per_level(entries, [32, 1], GATES)
    assert rows == [
        {"concurrency": 1, "setting": "7:1:8", "speedup": 2.4, "pays": True},
        {"concurrency": 32, "setting": None, "speedup": 1.08, "pays": False, "closest": "3:1:4"},
    ]
    lines = recommendation_lines(rows, GATES.min_speedup)
    assert lines[0].startswith("concurrency 1: 7:1:8 (steps:topk:draft tokens), 2.40x ")
    assert lines[1] == "concurrency 32: no speculation (the best, 3:1:4, is 1.08x, below 1.10x)"


def test_a_speedup_exactly_at_min_speedup_pays():
    rows = best_per_level([entry(EVEN, {1: 1.1})], [1], GATES)
    assert rows == [{"concurrency": 1, "setting": "3:1:4", "speedup": 1.1, "pays": True}]


def test_a_level_no_agreeing_setting_measured_says_so():
    rows = best_per_level([entry(OFF, {1: 3.0}, agreement=0.2), entry(EVEN, {32: 1.5})], [1], GATES)
    assert rows == [{"concurrency": 1, "setting": None, "speedup": None, "pays": False}]
    assert recommendation_lines(rows, GATES.min_speedup) == [
        "concurrency 1: no setting measured with agreeing outputs"]
