"""A bisect's samples read off a smoke report (bisect/metrics.py, pure; issue 35, planted bug P42: no test file
named the module). One sample per measured run: a run that completed nothing, or measured no speed, is no sample;
a server that did not start gives none and says why; speedup pairs run i with run i."""

from __future__ import annotations

import pytest

from sglstack.bisect.metrics import METRICS, MalformedReport, bisect_exit_code, metric_named, samples, why_no_samples


def server(*runs: tuple[int, float | None, float | None], started: bool = True) -> dict:
    return {"started": started, "runs": [{"completed": c, "tokens_per_s": t, "accept_length": a} for c, t, a in runs]}


REPORT = {
    "baseline": server((1, 80.0, None), (0, 999.0, None), (1, 100.0, None), (1, None, None)),
    "eagle3": server((1, 120.0, 3.0), (1, 160.0, 3.5), (0, 999.0, 9.0), (1, 150.0, None)),
}


def test_a_run_that_completed_nothing_or_measured_no_speed_is_no_sample():
    assert samples(REPORT, METRICS["baseline"]) == [80.0, 100.0]
    assert samples(REPORT, METRICS["eagle3"]) == [120.0, 160.0, 150.0]
    assert samples(REPORT, METRICS["accept_length"]) == [3.0, 3.5]
    # speedup: run i over run i of the kept runs (the same prompts in order)
    assert samples(REPORT, METRICS["speedup"]) == [1.5, 1.6]


def test_a_server_that_did_not_start_gives_no_samples_and_says_why():
    report = {"baseline": server((1, 80.0, None)), "eagle3": {"started": False, "failure": "CUDA out of memory"}}
    assert samples(report, METRICS["eagle3"]) == [] and samples(report, METRICS["speedup"]) == []
    assert why_no_samples(report, METRICS["speedup"]) == "the eagle3 server did not serve: CUDA out of memory"
    assert why_no_samples({"baseline": {"started": False}}, METRICS["baseline"]) == "the baseline server did not start"
    assert why_no_samples({"baseline": server((0, 80.0, None))}, METRICS["baseline"]) == \
        "no run of baseline measured baseline"


def test_a_report_without_runs_is_its_one_run():
    report = {"baseline": {"started": True, "tokens_per_s": 90.0, "completed": 1}}
    assert samples(report, METRICS["baseline"]) == [90.0]
    assert samples({"baseline": {"started": True, "tokens_per_s": 90.0, "completed": 0}}, METRICS["baseline"]) == []


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), True, "80"])
def test_a_sample_that_is_no_finite_positive_number_is_a_malformed_report(value):
    with pytest.raises(MalformedReport, match=r"^'baseline.runs\[0\].tokens_per_s': "):
        samples({"baseline": server((1, value, None))}, METRICS["baseline"])


def test_the_exit_code_against_a_fixed_baseline_value():
    fast = {"baseline": server(*((1, 100.0, None),) * 5)}
    slow = {"baseline": server(*((1, 50.0, None),) * 5)}
    assert bisect_exit_code(fast, METRICS["baseline"], baseline=100.0) == 0
    assert bisect_exit_code(slow, METRICS["baseline"], baseline=100.0) == 1
    # runs that completed nothing are no samples: nothing measured is a skip, never good or bad
    assert bisect_exit_code({"baseline": server((0, 50.0, None))}, METRICS["baseline"], baseline=100.0) == 125
    with pytest.raises(ValueError, match="the baseline report has no baseline samples"):
        bisect_exit_code(fast, METRICS["baseline"], baseline_report={"baseline": server((0, 100.0, None))})


def test_an_unknown_metric_names_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown metric 'speed' \(choose from baseline, eagle3, speedup, "
                                         r"accept_length\)"):
        metric_named("speed")
