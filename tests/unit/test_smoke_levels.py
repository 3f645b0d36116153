"""Gates at the concurrency a deployment serves (issue 42): min_speedup and max_regression at every level the stack
names (smoke.concurrency_levels), the speedup per level in the report, and the crossover where EAGLE-3 stops
paying. The fixtures are the rows of the issue's table, measured on an H200 with the constructed draft."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.config.settings import Gates
from sglstack.core.errors import ConfigError, SmokeInputError
from sglstack.smoke.gates import evaluate
from sglstack.smoke.history import history_record, last_passing
from sglstack.smoke.levels import crossover_line, level_regressions, recorded_at
from sglstack.smoke.measure import PhaseStats, ServerRun
from sglstack.smoke.overrides import smoke_options
from sglstack.smoke.report import markdown

REPO = Path(__file__).resolve().parents[2]
GATES = Gates(min_speedup=1.0, min_accept_length=2.0, min_agreement=0.9, max_regression=0.05)


def _phase(level: int, per_stream: float, aggregate: float) -> PhaseStats:
    return PhaseStats(concurrency=level, requests=8, completed=8, tokens_per_s=per_stream,
                      aggregate_tokens_per_s=aggregate, ttft_s=0.01, wall_s=1.0)


def server(kind: str, c1: float, c4: float, accept: float | None = None, **more: float) -> ServerRun:
    """A run measured at concurrency 1 (tokens/s per stream) and 4 (aggregate), and at more levels (c8=...)."""
    extra = {int(k[1:]): _phase(int(k[1:]), v / int(k[1:]), v) for k, v in more.items()}
    return ServerRun(kind=kind, started=True, single=_phase(1, c1, c1), concurrent=_phase(4, c4 / 4, c4),
                     accept_length_meta=accept, level_phases=extra)


# The table (H200, SGLang 0.5.17, the h200-field stack, the constructed draft).
THREE_STEPS = (server("baseline", 663, 2493), server("eagle3", 1002, 1262, accept=4.0))
SEVEN_STEPS = (server("baseline", 568, 2025), server("eagle3", 1804, 3732, accept=8.0))


def test_the_3_step_row_fails_at_concurrency_4():
    verdict = evaluate(GATES, *THREE_STEPS, 1.0, None, (1, 4))
    assert verdict.failures == (
        "min_speedup: at concurrency 4 EAGLE-3 1262.0 tok/s aggregate vs baseline 2493.0 tok/s is 0.51x, below 1.00x",)
    assert verdict.crossover == 4
    assert [(s.concurrency, round(s.speedup or 0, 2), s.pays(1.0)) for s in verdict.levels] == [
        (1, 1.51, True), (4, 0.51, False)]
    assert crossover_line(verdict.levels, 1.0) == "EAGLE-3 stops paying at concurrency 4 (0.51x, below 1.00x)."


def test_the_3_step_row_passed_the_gate_that_read_concurrency_1_alone():
    """What the issue found: without named levels the same figures are green."""
    assert evaluate(GATES, *THREE_STEPS, 1.0).failures == ()


def test_the_7_step_row_passes_at_both_levels():
    verdict = evaluate(GATES, *SEVEN_STEPS, 1.0, None, (1, 4))
    assert verdict.passed and verdict.crossover is None
    assert [round(s.speedup or 0, 2) for s in verdict.levels] == [3.18, 1.84]
    assert crossover_line(verdict.levels, 1.0) == "EAGLE-3 pays at every named level (concurrency 1, 4)."


def test_a_stand_in_with_a_crossover_between_named_levels():
    baseline = server("baseline", 100, 380, c8=700, c16=1200)
    eagle3 = server("eagle3", 210, 600, accept=3.0, c8=690, c16=800)
    verdict = evaluate(GATES, baseline, eagle3, 1.0, None, (16, 1, 8, 4))  # any order: ascending
    assert verdict.crossover == 8
    assert list(verdict.failures) == [
        "min_speedup: at concurrency 8 EAGLE-3 690.0 tok/s aggregate vs baseline 700.0 tok/s is 0.99x, below 1.00x",
        "min_speedup: at concurrency 16 EAGLE-3 800.0 tok/s aggregate vs baseline 1200.0 tok/s is 0.67x, below 1.00x",
    ]
    # A stricter min_speedup moves the crossover down to the first level below it.
    stricter = GATES.model_copy(update={"min_speedup": 1.6})
    assert evaluate(stricter, baseline, eagle3, 1.0, None, (1, 4, 8)).crossover == 4


def test_a_level_nothing_measured_fails_and_is_the_crossover():
    eagle3 = ServerRun(kind="eagle3", started=True, single=_phase(1, 200, 200), accept_length_meta=3.0)
    verdict = evaluate(GATES, server("baseline", 100, 380), eagle3, 1.0, None, (1, 4))
    assert verdict.failures == ("min_speedup: at concurrency 4 nothing was measured",) and verdict.crossover == 4


def test_a_baseline_only_run_has_no_level_and_no_crossover():
    """A warm-start run serves the baseline alone: no EAGLE-3 figure, so no level is judged and no crossover named
    (the field's warm-start run printed "EAGLE-3 stops paying at concurrency 1 (nothing measured)")."""
    verdict = evaluate(GATES, server("baseline", 100, 380), ServerRun(kind="eagle3", started=False), None, None, (1, 4))
    assert verdict.levels == () and verdict.crossover is None and crossover_line(verdict.levels, 1.0) == ""


def test_the_regression_gate_applies_at_every_named_level():
    last = {"time": "2026-12-01T00:00:00Z", "verdict": "pass",
            "levels": {"baseline": {"1": 663.0, "4": 2493.0}, "eagle3": {"1": 1002.0, "4": 1500.0}}}
    assert level_regressions(0.05, (1, 4), *THREE_STEPS, last) == [
        "max_regression: at concurrency 4 EAGLE-3 1262.0 tok/s aggregate is 15.9% below the last passing run's "
        "1500.0 tok/s (2026-12-01T00:00:00Z), more than 5%"]
    verdict = evaluate(GATES, *SEVEN_STEPS, 1.0, last, (1, 4))
    assert [f.split(":")[0] for f in verdict.failures] == ["max_regression", "max_regression"]  # baseline c1, c4
    # A record from before levels holds concurrency 1 only: the other levels have no reference yet.
    legacy = {"baseline": {"tokens_per_s": 700.0}, "eagle3": {"tokens_per_s": 1002.0}}
    assert recorded_at(legacy, "baseline", 1) == 700.0 and recorded_at(legacy, "baseline", 4) is None


def test_the_report_and_its_history_line_show_each_level_and_the_crossover():
    verdict = evaluate(GATES, *THREE_STEPS, 1.0, None, (1, 4))
    data = {"verdict": "fail", "failures": list(verdict.failures), "stack": "h200-field", "time": "T",
            "image": {"ref": "python-env:/env", "digest": "env-sha256:ab", "runner": "process"},
            "baseline": THREE_STEPS[0].to_dict(), "eagle3": THREE_STEPS[1].to_dict(), "speedup": verdict.speedup,
            "accept_length": 4.0, "agreement": 1.0, "options": {"concurrency": 4},
            "levels": [s.to_dict(1.0) for s in verdict.levels], "crossover": verdict.crossover,
            "crossover_line": crossover_line(verdict.levels, 1.0)}
    text = markdown(data, [], "chart.png")
    assert "| 1 | per stream | 663.0 | 1002.0 | 1.51x | yes |" in text.splitlines()
    assert "| 4 | aggregate | 2493.0 | 1262.0 | 0.51x | no |" in text.splitlines()
    assert "EAGLE-3 stops paying at concurrency 4 (0.51x, below 1.00x)." in text.splitlines()
    line = history_record(data, {"k": 1})
    assert line["levels"] == {"baseline": {"1": 663.0, "4": 2493.0}, "eagle3": {"1": 1002.0, "4": 1262.0}}
    assert line["crossover"] == 4
    # Without levels a history line keeps its old shape.
    assert "levels" not in history_record({**data, "levels": None}, {"k": 1})
    assert last_passing([{**line, "verdict": "pass", "fingerprint": {"k": 1}}], {"k": 1}) is not None


def test_a_run_and_its_report_entry_round_trip_with_the_levels_beyond_two():
    run = server("eagle3", 210, 600, accept=3.0, c8=690)
    entry = json.loads(json.dumps(run.to_dict()))
    assert set(entry["concurrency_levels"]) == {"8"}
    back = ServerRun.from_dict("eagle3", entry)
    assert back.tokens_per_s_at(8) == 690 and back.tokens_per_s_at(4) == 600 and back.tokens_per_s_at(1) == 210
    assert back.requests == 24 and back.to_dict() == entry


def _stacks(tmp_path: Path, levels: str) -> Path:
    named = "      concurrency_levels: [1, 4]"
    text = (REPO / "stacks.yaml").read_text().replace(named, f"      concurrency_levels: {levels}")
    path = tmp_path / "stacks.yaml"
    path.write_text(text)
    return path


def test_the_field_stack_names_its_levels_and_the_smoke_reads_them():
    stack = load_matrix(REPO / "stacks.yaml").get("h200-field")
    assert stack.smoke.concurrency_levels == (1, 4)
    options = smoke_options(stack)
    assert options.concurrency_levels == (1, 4) and options.fingerprint()["concurrency_levels"] == [1, 4]
    assert smoke_options(stack, concurrency_levels="8,1").concurrency_levels == (1, 8)  # an override, ascending
    assert "concurrency_levels" not in smoke_options(load_matrix(REPO / "stacks.yaml").get("cu130")).fingerprint()


@pytest.mark.parametrize(("levels", "message"), [
    ("[1, 4, 4]", "concurrency 4 is named twice"),
    ("[0, 4]", "greater than or equal to 1"),
    ("[1, four]", "valid integer"),
])
def test_a_bad_level_in_the_stack_is_one_line_naming_the_key(tmp_path, levels, message):
    with pytest.raises(ConfigError) as info:
        load_matrix(_stacks(tmp_path, levels))
    text = str(info.value)
    assert "\n" not in text and "h200-field" in text and "concurrency_levels" in text and message in text


@pytest.mark.parametrize(("value", "message"), [
    ("1,x", "smoke option concurrency_levels 'x' is not a whole number"),
    ("1,0", "smoke option concurrency_levels: 0 must be >= 1 and <= 65536"),
    ("4,4", "smoke option concurrency_levels: 4 is named twice"),
    (",", "smoke option concurrency_levels: name at least one level (e.g. 1,4)"),
])
def test_a_bad_level_option_is_one_line(value, message):
    stack = load_matrix(REPO / "stacks.yaml").get("h200-field")
    with pytest.raises(SmokeInputError) as info:
        smoke_options(stack, concurrency_levels=value)
    assert str(info.value) == message


def test_the_chart_draws_the_speedup_per_level_and_names_the_crossover():
    from sglstack.smoke.chart import chart_figure, smoke_chart

    verdict = evaluate(GATES, *THREE_STEPS, 1.0, None, (1, 4))
    report = {"verdict": "fail", "stack": "h200-field", "time": "2026-12-05T04:00:00Z", "image": {"ref": "env"},
              "baseline": THREE_STEPS[0].to_dict(), "eagle3": THREE_STEPS[1].to_dict(), "speedup": verdict.speedup,
              "gates": GATES.model_dump(), "regression_reference": None,
              "levels": [s.to_dict(1.0) for s in verdict.levels], "crossover": verdict.crossover}
    fig = chart_figure(report, [])
    assert len(fig.axes) == 3
    levels_ax = fig.axes[2]
    assert levels_ax.get_title() == "speedup per concurrency level: stops paying at 4"
    assert [t.get_text() for t in levels_ax.texts] == ["1.51x", "0.51x"]
    assert [round(bar.get_height(), 2) for bar in levels_ax.patches] == [1.51, 0.51]
    assert smoke_chart(report, []).startswith(b"\x89PNG")
    assert len(chart_figure({k: v for k, v in report.items() if k != "levels"}, []).axes) == 2  # as before


def test_a_level_left_out_is_not_gated_but_concurrency_1_still_feeds_accept_and_agreement():
    """A deployment that names only 4: EAGLE-3 slower alone does not fail it; a low accept length still does."""
    baseline, eagle3 = server("baseline", 600, 1000), server("eagle3", 500, 1500, accept=1.2)
    verdict = evaluate(GATES, baseline, eagle3, 1.0, None, (4,))
    assert list(verdict.failures) == ["min_accept_length: accept length 1.20 is below 2.00"]
    assert [s.concurrency for s in verdict.levels] == [4] and verdict.crossover is None
