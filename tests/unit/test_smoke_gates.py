"""Pure gates, measurement, history and report pieces (no Docker)."""

from __future__ import annotations

import io

import pytest

import sglstack.smoke as smoke
from sglstack.cli.smoke import smoke_command
from sglstack.config.settings import Gates
from sglstack.smoke.chart import BASELINE_COLOR, EAGLE3_COLOR, chart_figure, smoke_chart
from sglstack.smoke.client import Generation
from sglstack.smoke.gates import evaluate, regressions, speedup_of
from sglstack.smoke.history import append_record, history_path, history_record, last_passing, read_history
from sglstack.smoke.measure import (
    PhaseStats,
    ServerRun,
    accept_length_from_meta,
    accept_length_from_server_info,
    agreement,
    phase_stats,
)
from sglstack.smoke.report import SmokeReport, markdown


def run(kind: str, tok_s: float, *, accept: float | None = None, completed: int = 4) -> ServerRun:
    gens = [
        Generation(f"p{i}", text="x", completion_tokens=100, ttft_s=0.05, latency_s=100 / tok_s)
        for i in range(completed)
    ]
    gens += [Generation("bad", error="HTTP 500: boom")] * (4 - completed)
    single = phase_stats(gens, 1, sum(g.latency_s for g in gens))
    return ServerRun(kind=kind, started=True, single=single, accept_length_meta=accept)


GATES = Gates(min_speedup=1.0, min_accept_length=2.0, min_agreement=0.9, max_regression=0.05)


def names(verdict) -> list[str]:
    return [f.split(":")[0] for f in verdict.failures]


def test_pass():
    v = evaluate(GATES, run("baseline", 82), run("eagle3", 95, accept=3.1), 1.0)
    assert v.passed and v.speedup == pytest.approx(95 / 82)


def test_seed_eagle3_59_vs_82_fails_min_speedup():
    v = evaluate(GATES, run("baseline", 82), run("eagle3", 59, accept=3.0), 1.0)
    assert names(v) == ["min_speedup"]
    assert "59.0 tok/s" in v.failures[0] and "82.0 tok/s" in v.failures[0] and "0.72x" in v.failures[0]


def test_low_acceptance_and_divergence_and_missing_accept_length():
    assert names(evaluate(GATES, run("baseline", 82), run("eagle3", 95, accept=1.4), 1.0)) == ["min_accept_length"]
    assert names(evaluate(GATES, run("baseline", 82), run("eagle3", 95, accept=3), 0.5)) == ["min_agreement"]
    missing = evaluate(GATES, run("baseline", 82), run("eagle3", 95), 1.0)
    assert names(missing) == ["min_accept_length"] and "reported no accept length" in missing.failures[0]


def test_seed_regression_89_to_82_fails_at_5_percent():
    last = {"verdict": "pass", "time": "t0", "baseline": {"tokens_per_s": 89.0}, "eagle3": {"tokens_per_s": 95.0}}
    v = evaluate(GATES, run("baseline", 82), run("eagle3", 95, accept=3), 1.0, last)
    assert names(v) == ["max_regression"] and "baseline 82.0 tok/s is 7.9% below" in v.failures[0]
    lenient = Gates(max_regression=0.1)
    assert evaluate(lenient, run("baseline", 82), run("eagle3", 95, accept=3), 1.0, last).passed


def test_failed_requests_and_failed_servers_are_named():
    v = evaluate(GATES, run("baseline", 82, completed=3), run("eagle3", 95, accept=3), 1.0)
    assert names(v) == ["baseline"] and "1/4 requests failed: HTTP 500: boom" in v.failures[0]
    crashed = ServerRun(kind="baseline", started=False, failure="the server exited with code 1")
    v = evaluate(GATES, crashed, ServerRun(kind="eagle3", started=False), None)
    assert v.failures == ("baseline: the server exited with code 1",)


def test_measurements():
    gens = [
        Generation("a", text="x", completion_tokens=30, spec_verify_ct=10, latency_s=0.5, ttft_s=0.1),
        Generation("b", text="y", completion_tokens=30, spec_verify_ct=20, latency_s=1.0, ttft_s=0.3),
        Generation("c", error="timeout"),
    ]
    stats = phase_stats(gens, 2, 1.0)
    assert (stats.completed, stats.requests) == (2, 3)
    assert stats.tokens_per_s == pytest.approx((60 + 30) / 2)  # the median of two
    assert stats.aggregate_tokens_per_s == 60
    assert stats.ttft_s == pytest.approx(0.2)
    assert accept_length_from_meta(gens) == pytest.approx(60 / 30)
    assert accept_length_from_server_info({"internal_states": [{"avg_spec_accept_length": 2.5}]}) == 2.5
    assert accept_length_from_server_info({"internal_states": [{}]}) is None
    assert agreement({"a": "1", "b": "2"}, {"a": "1", "b": "3"}) == 0.5


def test_history_is_append_only_and_compares_like_with_like(tmp_path):
    path = history_path(tmp_path / "build", "cu130")
    assert path == tmp_path / "build" / "cu130" / "smoke-history.jsonl"
    fp = {"model": "m", "tp": 8}
    append_record(path, {"verdict": "pass", "fingerprint": fp, "baseline": {"tokens_per_s": 89}})
    append_record(path, {"verdict": "fail", "fingerprint": fp, "baseline": {"tokens_per_s": 82}})
    append_record(path, {"verdict": "pass", "fingerprint": {"model": "m", "tp": 4}, "baseline": {"tokens_per_s": 50}})
    records = read_history(path)
    assert len(records) == 3
    assert last_passing(records, fp)["baseline"]["tokens_per_s"] == 89
    assert last_passing(records, {"model": "other"}) is None


def test_the_regression_gate_compares_with_the_newest_passing_run_not_the_first(tmp_path):
    """Two passing runs with the same settings: the reference is the later one (a slow drift of many
    small regressions must not hide behind an old, fast first run), and a newer failing run is skipped."""
    path = tmp_path / "smoke-history.jsonl"
    fp = {"model": "m", "tp": 8}
    for verdict, tok_s in (("pass", 80), ("pass", 89), ("fail", 70)):
        append_record(path, {"verdict": verdict, "fingerprint": fp, "baseline": {"tokens_per_s": tok_s}})
    append_record(path, {"verdict": "pass", "fingerprint": {"model": "m", "tp": 4}, "baseline": {"tokens_per_s": 50}})
    records = read_history(path)
    assert last_passing(records, fp)["baseline"]["tokens_per_s"] == 89
    # a fingerprint passed as any mapping (not only a dict) still selects the same runs
    assert last_passing(records, {"tp": 8, "model": "m"})["baseline"]["tokens_per_s"] == 89
    assert last_passing([], fp) is None


CHART_GATES = {"min_speedup": 1.2, "min_accept_length": 1.5, "min_agreement": 0.8, "max_regression": 0.05}


def _history() -> list[dict]:
    runs = [(88.4, 56.1, "fail"), (89.0, 94.2, "pass"), (82.0, 95.0, "fail")]
    return [{"time": f"2026-11-2{i}T09:00:00Z", "verdict": v, "image": {"digest": f"sha256:{i}{'a' * 63}"},
             "baseline": {"tokens_per_s": b}, "eagle3": {"tokens_per_s": e}} for i, (b, e, v) in enumerate(runs)]


def _report(history: list[dict], reference: dict | None) -> dict:
    last = history[-1]
    return {"verdict": last["verdict"], "stack": "cu130", "time": last["time"], "image": last["image"],
            "baseline": last["baseline"], "eagle3": last["eagle3"], "gates": CHART_GATES,
            "speedup": last["eagle3"]["tokens_per_s"] / last["baseline"]["tokens_per_s"],
            "regression_reference": reference}


def test_chart_shows_this_run_and_the_history_with_the_gate_band():
    history = _history()
    fig = chart_figure(_report(history, reference=history[1]), history)
    run_ax, history_ax = fig.axes
    assert [round(b.get_height(), 1) for b in run_ax.patches] == [82.0, 95.0]
    assert "tokens/s" in run_ax.get_ylabel() and "tokens/s" in history_ax.get_ylabel()
    texts = [t.get_text() for t in run_ax.texts]
    assert "82.0" in texts and "95.0" in texts
    assert [t.get_text() for t in run_ax.get_legend().get_texts()] == ["min_speedup 1.20x: EAGLE-3 >= 98.4 tok/s"]
    # min_speedup drawn at 1.2 x the baseline
    assert any(line.get_ydata()[0] == pytest.approx(82.0 * 1.2) for line in run_ax.lines)
    # one point per tested image and kind, over time
    series = {line.get_label(): list(line.get_ydata()) for line in history_ax.lines if line.get_marker() == "o"}
    assert series == {"baseline tok/s": [88.4, 89.0, 82.0], "EAGLE-3 tok/s": [56.1, 94.2, 95.0]}
    # the max_regression band: from 5% under the last passing run's tok/s up to it, for both kinds
    bands = {p.get_label(): sorted({round(y, 2) for _, y in p.get_path().transformed(p.get_patch_transform())
                                    .vertices}) for p in history_ax.patches if "gate" in p.get_label()}
    assert bands[next(k for k in bands if k.startswith("baseline"))] == [round(89.0 * 0.95, 2), 89.0]
    assert bands[next(k for k in bands if k.startswith("EAGLE-3"))] == [round(94.2 * 0.95, 2), 94.2]
    legend = [t.get_text() for t in history_ax.get_legend().get_texts()]
    assert "baseline max_regression gate: >= 84.5 tok/s (5% under the last pass, 89.0)" in legend
    assert "failed run" in legend
    # each run's tick names its image and when it was tested
    assert [t.get_text() for t in history_ax.get_xticklabels()] == [
        "0aaaaaa\n11-20 09:00", "1aaaaaa\n11-21 09:00", "2aaaaaa\n11-22 09:00"]
    assert "UTC" in history_ax.get_xlabel()


def test_chart_without_a_passing_run_says_the_regression_gate_did_not_apply():
    history = _history()[:1]
    fig = chart_figure(_report(history, reference=None), history)
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert any("regression gate did not apply" in t for t in texts)
    assert not [p for p in fig.axes[1].patches if "gate" in p.get_label()]


def test_chart_png_is_drawn_with_readable_size_and_the_band_colour():
    from matplotlib.image import imread

    history = _history()
    png = smoke_chart(_report(history, reference=history[1]), history)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    pixels = imread(io.BytesIO(png), format="png")
    assert pixels.shape[:2] == (520, 1300)

    def share_of(hex_colour: str, alpha: float = 1.0) -> float:
        rgb = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        want = [alpha * c + (1 - alpha) for c in rgb]  # blended over white
        close = (abs(pixels[..., :3] - want) < 0.02).all(axis=-1)
        return float(close.mean())

    assert share_of(EAGLE3_COLOR) > 0.02 and share_of(BASELINE_COLOR) > 0.02  # the two bars
    assert share_of(EAGLE3_COLOR, alpha=0.2) > 0.002  # the EAGLE-3 band


def test_markdown_summary_lists_failures_and_history():
    data = {
        "verdict": "fail",
        "stack": "cu130",
        "time": "t1",
        "failures": ["min_speedup: slow"],
        "image": {"ref": "r", "digest": "sha256:abc"},
        "options": {"concurrency": 8},
        "baseline": {"tokens_per_s": 82.0, "completed": 16, "requests": 16},
        "eagle3": {"tokens_per_s": 59.0, "completed": 16, "requests": 16},
        "speedup": 0.72,
        "accept_length": 3.1,
        "agreement": 1.0,
    }
    text = markdown(data, [{"time": "t0", "verdict": "pass", "baseline": {"tokens_per_s": 89.0}}], "r.png")
    assert text.startswith("# Smoke FAIL: cu130")
    assert "- min_speedup: slow" in text and "| t0 | pass |" in text and "](r.png)" in text


def test_history_shares_the_records_store_rules(tmp_path):
    from sglstack.core.errors import SmokeError

    path = tmp_path / "smoke-history.jsonl"
    path.write_text('{"verdict": "pass"}\n\n[1, 2]\n')
    with pytest.raises(SmokeError, match=r"smoke-history\.jsonl:3: not a JSON object"):
        read_history(path)
    path.write_text('{"verdict": "pass"}\n{"verdict": \n')
    with pytest.raises(SmokeError, match=r"smoke-history\.jsonl:2: "):
        read_history(path)


def test_chart_of_a_long_history_keeps_the_tick_labels_readable():
    history = [{"time": f"2026-11-{1 + i // 2:02d}T{(i % 2) * 12:02d}:00:00Z", "verdict": "pass",
                "image": {"digest": f"sha256:{i:02d}{'b' * 62}"}, "baseline": {"tokens_per_s": 88.0 + i % 3},
                "eagle3": {"tokens_per_s": 95.0}} for i in range(30)]
    axis = chart_figure(_report(history, reference=history[-2]), history).axes[1]
    labels = [t.get_text() for t in axis.get_xticklabels()]
    assert 1 < len(labels) <= 12 and labels[-1].startswith("29bbbbb")  # the newest run is always labelled
    assert len(axis.lines[0].get_ydata()) == 30


# ---- exact gate edges and messages (what the mutation run showed unchecked) ------------------------


def stats(tok_s: float, *, requests: int = 4, completed: int = 4, errors: tuple[str, ...] = ()) -> PhaseStats:
    return PhaseStats(concurrency=1, requests=requests, completed=completed, tokens_per_s=tok_s,
                      aggregate_tokens_per_s=tok_s * 2, ttft_s=0.05, wall_s=1.0, errors=errors)


def server(kind: str, tok_s: float, *, accept: float | None = 3.0, **kw) -> ServerRun:
    return ServerRun(kind=kind, started=True, single=stats(tok_s, **kw), accept_length_meta=accept)


def test_a_gate_met_exactly_passes():
    edge = Gates(min_speedup=1.25, min_accept_length=2.5, min_agreement=0.75, max_regression=0.25)
    last = {"time": "t0", "baseline": {"tokens_per_s": 80.0}, "eagle3": {"tokens_per_s": 100.0}}
    v = evaluate(edge, server("baseline", 60.0), server("eagle3", 75.0, accept=2.5), 0.75, last)
    assert v.failures == () and v.speedup == 1.25 and v.accept_length == 2.5 and v.agreement == 0.75


def test_each_failed_gate_reads_exactly():
    last = {"baseline": {"tokens_per_s": 100.0}, "eagle3": {"tokens_per_s": 100.0}}  # no time recorded
    v = evaluate(GATES, server("baseline", 80.0, requests=4, completed=3),
                 server("eagle3", 40.0, accept=None), None, last)
    assert v.failures == (
        "baseline: 1/4 requests failed",
        "min_speedup: EAGLE-3 40.0 tok/s vs baseline 80.0 tok/s is 0.50x, below 1.00x",
        "min_accept_length: the EAGLE-3 server reported no accept length "
        "(no meta_info spec_verify_ct, no avg_spec_accept_length)",
        "min_agreement: no greedy outputs to compare",
        "max_regression: baseline 80.0 tok/s is 20.0% below the last passing run's 100.0 tok/s (?), more than 5%",
        "max_regression: EAGLE-3 40.0 tok/s is 60.0% below the last passing run's 100.0 tok/s (?), more than 5%",
    )
    assert v.accept_length is None and v.agreement is None and v.speedup == 0.5
    low = evaluate(GATES, server("baseline", 80.0), server("eagle3", 90.0, accept=1.5), 0.5)
    assert low.failures == ("min_accept_length: accept length 1.50 is below 2.00",
                            "min_agreement: 50% of greedy outputs match the baseline, below 90%")
    assert low.accept_length == 1.5 and low.agreement == 0.5


def test_no_speedup_without_two_measured_runs_and_no_gates_when_one_did_not_run():
    assert speedup_of(server("baseline", 80.0), ServerRun(kind="eagle3", started=False)) is None
    assert speedup_of(ServerRun(kind="baseline", started=False), server("eagle3", 80.0)) is None
    assert speedup_of(server("baseline", 0.0), server("eagle3", 80.0)) is None
    assert speedup_of(server("baseline", 0.5), server("eagle3", 1.0)) == 2.0
    zero = evaluate(GATES, server("baseline", 0.0), server("eagle3", 80.0), 1.0)
    assert zero.failures == ("min_speedup: EAGLE-3 80.0 tok/s vs baseline 0.0 tok/s is 0.00x, below 1.00x",)
    # EAGLE-3 never started: its failure is the only one, the comparing gates do not apply
    v = evaluate(GATES, server("baseline", 80.0), ServerRun(kind="eagle3", started=False, failure="timed out"), 1.0)
    assert v.failures == ("eagle3: timed out",)


def test_the_regression_gate_skips_a_run_without_a_reference_and_checks_the_other():
    only_eagle3 = {"time": "t0", "eagle3": {"tokens_per_s": 100.0}}
    assert regressions(0.05, server("baseline", 10.0), server("eagle3", 50.0), only_eagle3) == [
        "max_regression: EAGLE-3 50.0 tok/s is 50.0% below the last passing run's 100.0 tok/s (t0), more than 5%"]
    both = {"time": "t0", "baseline": {"tokens_per_s": 100.0}, "eagle3": {"tokens_per_s": 1.0}}
    # a run that measured nothing is not compared (its own gates failed it); a slow one is
    assert regressions(0.05, server("baseline", 0.0), server("eagle3", 0.5), both) == [
        "max_regression: EAGLE-3 0.5 tok/s is 50.0% below the last passing run's 1.0 tok/s (t0), more than 5%"]
    assert regressions(0.05, server("baseline", 10.0), server("eagle3", 10.0), None) == []


def test_phase_stats_count_what_finished_and_leave_out_what_cannot_be_divided():
    gens = [Generation("a", text="x", completion_tokens=100, ttft_s=0.1, latency_s=1.0),
            Generation("b", text="x", completion_tokens=300, ttft_s=0.3, latency_s=2.0),
            Generation("c", text="x", completion_tokens=50, ttft_s=None, latency_s=0.0),
            Generation("d", error="HTTP 500: boom"), Generation("e", error="HTTP 500: boom")]
    p = phase_stats(gens, 4, 2.0)
    assert p == PhaseStats(concurrency=4, requests=5, completed=3, tokens_per_s=125.0, aggregate_tokens_per_s=225.0,
                           ttft_s=0.2, wall_s=2.0, errors=("HTTP 500: boom",))
    assert phase_stats([], 1, 0.0) == PhaseStats(concurrency=1, requests=0, completed=0, tokens_per_s=0.0,
                                                 aggregate_tokens_per_s=0.0, ttft_s=None, wall_s=0.0)
    assert p.to_dict() == {"concurrency": 4, "requests": 5, "completed": 3, "tokens_per_s": 125.0,
                           "aggregate_tokens_per_s": 225.0, "ttft_s": 0.2, "wall_s": 2.0,
                           "errors": ["HTTP 500: boom"]}


def test_accept_length_and_agreement_edges():
    gens = [Generation("a", text="x", completion_tokens=30, spec_verify_ct=10),
            Generation("b", text="x", completion_tokens=10, spec_verify_ct=None),
            Generation("c", error="HTTP 500", completion_tokens=90, spec_verify_ct=10)]
    assert accept_length_from_meta(gens) == 3.0
    assert accept_length_from_meta(gens[1:]) is None and accept_length_from_meta([]) is None
    assert accept_length_from_server_info({"internal_states": [["not", "a", "mapping"]]}) is None
    assert accept_length_from_server_info({"internal_states": [{"avg_spec_accept_length": 2}]}) == 2.0
    assert agreement({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "2", "c": "x", "d": "4"}) == 2 / 3
    assert agreement({"a": "1"}, {"b": "1"}) is None


def test_a_server_run_and_a_history_line_keep_every_headline_figure():
    single, concurrent = stats(80.0), stats(60.0, requests=8, completed=8)
    r = ServerRun(kind="eagle3", started=True, startup_s=12.5, single=single, concurrent=concurrent,
                  accept_length_meta=3.0, accept_length_server=2.9,
                  runs=({"tokens_per_s": 80.0, "flushed": True},))
    assert r.to_dict() == {
        "started": True, "failure": None, "startup_s": 12.5, "tokens_per_s": 80.0, "aggregate_tokens_per_s": 120.0,
        "ttft_s": 0.05, "completed": 12, "requests": 12, "concurrency_1": single.to_dict(),
        "concurrency_n": concurrent.to_dict(), "accept_length_meta": 3.0, "accept_length_server": 2.9,
        "runs": [{"tokens_per_s": 80.0, "flushed": True}]}
    down = ServerRun(kind="baseline", started=False, failure="exited").to_dict()
    assert (down["tokens_per_s"], down["aggregate_tokens_per_s"], down["ttft_s"], down["concurrency_1"],
            down["concurrency_n"], down["completed"], down["requests"], down["runs"]) == (
        0.0, None, None, None, None, 0, 0, [])
    report = {"time": "t1", "verdict": "pass", "image": "img@sha256:x", "speedup": 1.5, "accept_length": 3.0,
              "agreement": 1.0, "failures": [], "per_request": ["not kept"],
              "baseline": {"tokens_per_s": 50.0, "aggregate_tokens_per_s": 90.0, "ttft_s": 0.1, "completed": 4,
                           "startup_s": 9.0},
              "eagle3": {"tokens_per_s": 75.0, "aggregate_tokens_per_s": 120.0, "ttft_s": 0.2, "completed": 4}}
    fp = {"model": "m", "tp": 1}
    assert history_record(report, fp) == {
        "time": "t1", "verdict": "pass", "image": "img@sha256:x",
        # startup_s too: the start-time regression gate compares it (issue 40)
        "baseline": {"tokens_per_s": 50.0, "aggregate_tokens_per_s": 90.0, "ttft_s": 0.1, "completed": 4,
                     "startup_s": 9.0},
        "eagle3": {"tokens_per_s": 75.0, "aggregate_tokens_per_s": 120.0, "ttft_s": 0.2, "completed": 4},
        "speedup": 1.5, "accept_length": 3.0, "agreement": 1.0, "failures": [], "fingerprint": fp,
        "runner": "docker"}


# ---- the verdict lines `invoke smoke` prints (what a user reads, and CI logs keep) -----------------

def _smoked(gates: Gates, baseline: ServerRun, eagle3: ServerRun, share: float | None):
    """A stand-in for run_smoke (no Docker): the report it builds from the real gates' verdict."""
    def fake_run_smoke(stack, image, options):
        verdict = evaluate(gates, baseline, eagle3, share)
        return SmokeReport({"verdict": "pass" if verdict.passed else "fail", "failures": list(verdict.failures),
                            "image": {"digest": "sha256:" + "ab" * 32}, "baseline": baseline.to_dict(),
                            "eagle3": eagle3.to_dict(), "speedup": verdict.speedup,
                            "accept_length": verdict.accept_length, "agreement": verdict.agreement})
    return fake_run_smoke


@pytest.mark.parametrize(("eagle3", "share", "code", "expected"), [
    (run("eagle3", 95, accept=3.1), 1.0, 0, [
        "smoke PASS: img:1 (sha256:" + "ab" * 32 + ", docker runner)",
        "  baseline 82.0 tok/s, EAGLE-3 95.0 tok/s, speedup 1.16x, accept length 3.10, agreement 100%"]),
    (run("eagle3", 59, accept=1.5), 0.5, 1, [
        "smoke FAIL: img:1 (sha256:" + "ab" * 32 + ", docker runner)",
        "  baseline 82.0 tok/s, EAGLE-3 59.0 tok/s, speedup 0.72x, accept length 1.50, agreement 50%",
        "  FAIL min_speedup: EAGLE-3 59.0 tok/s vs baseline 82.0 tok/s is 0.72x, below 1.00x",
        "  FAIL min_accept_length: accept length 1.50 is below 2.00",
        "  FAIL min_agreement: 50% of greedy outputs match the baseline, below 90%"]),
    (ServerRun(kind="eagle3", started=False, failure="the server exited with code 1"), None, 1, [
        "smoke FAIL: img:1 (sha256:" + "ab" * 32 + ", docker runner)",
        "  baseline 82.0 tok/s, EAGLE-3 0.0 tok/s, speedup n/a, accept length n/a, agreement n/a",
        "  FAIL eagle3: the server exited with code 1"]),
])
def test_smoke_prints_its_verdict_the_measures_and_every_failure(monkeypatch, capsys, eagle3, share, code,
                                                                   expected):
    monkeypatch.setattr(smoke, "run_smoke", _smoked(GATES, run("baseline", 82), eagle3, share))
    exit_code = smoke_command("img:1", model="o/m", draft_model="o/d")
    assert (exit_code, capsys.readouterr().out.splitlines()) == (code, expected)
