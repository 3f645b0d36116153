"""Pure gates, measurement, history and report pieces (no Docker)."""

from __future__ import annotations

import struct
import zlib

import pytest

from sglstack.matrix import Gates
from sglstack.smoke.chart import bar_chart
from sglstack.smoke.client import Generation
from sglstack.smoke.gates import evaluate
from sglstack.smoke.history import append_record, history_path, last_passing, read_history
from sglstack.smoke.measure import (
    ServerRun,
    accept_length_from_meta,
    accept_length_from_server_info,
    agreement,
    phase_stats,
)
from sglstack.smoke.report import markdown


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


def _png_chunks(data: bytes) -> dict[bytes, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, pos = {}, 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body)
        chunks[kind] = body
        pos += 12 + length
    return chunks


def test_bar_chart_is_a_valid_png_with_proportional_bars():
    png = bar_chart([(50.0, (255, 0, 0)), (100.0, (0, 0, 255))], width=100, height=120)
    chunks = _png_chunks(png)
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    raw = zlib.decompress(chunks[b"IDAT"])
    rows = [raw[y * (1 + width * 3) + 1 : (y + 1) * (1 + width * 3)] for y in range(height)]

    def column_height(color: bytes) -> int:
        return sum(1 for row in rows if color in [row[i : i + 3] for i in range(0, len(row), 3)])

    red, blue = column_height(b"\xff\x00\x00"), column_height(b"\x00\x00\xff")
    assert blue > 0 and red == pytest.approx(blue / 2, abs=1)


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
