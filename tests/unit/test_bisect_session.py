"""The bisect loop (`driver.Session`) in process and fast: a release stack without patches, so no git history
and no patch engine; `build_stack`, `run_smoke` and the package index's release list are stand-ins
(tests/lib/bisect_session_world). Each step said, every event of the log, the report's times, an interrupted and a
finished bisect (more: test_bisect_session_skips.py).

tests/cli/test_bisect_driver.py runs the same loop over a real git history with the real patch engine (a few
seconds a test); this file checks every line and record of the loop itself, word for word, in milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_session_world import FAST, RELEASES, SLOW, STEPS, bisect, events, interrupt_after, make_loop, without_time

from sglstack.bisect import driver, refs
from sglstack.bisect.driver import BisectRequest, run_bisect


@pytest.fixture
def loop(tmp_path, monkeypatch):
    return make_loop(tmp_path, monkeypatch)


def test_a_release_bisect_says_each_step_and_names_the_first_slow_release(loop):
    result, lines = bisect(loop)
    report = loop.folder / "report.json"
    assert lines == [
        "bisect: rel: 6 releases after 0.5.0 up to 0.5.6; metric baseline",
        *STEPS,
        "bisect: first bad release: 0.5.4 (sglang 0.5.4); last good 0.5.3",
        f"bisect: report {report} (4 builds, 4 refs tested)",
    ]
    assert result.exit_code == driver.EXIT_FOUND == 0 and result.report == report
    assert result.data["log"] == str(loop.folder / "log.jsonl")
    assert (result.outcome.first_bad, result.outcome.last_good) == ("0.5.4", "0.5.3")
    assert result.data == json.loads(report.read_text())
    # each ref is built once; its second server start reuses the image
    assert [ref for ref, _options in loop.fakes.builds] == ["0.5.0", "0.5.6", "0.5.3", "0.5.4"]
    assert [ref for ref, _image, _options in loop.fakes.smokes] == [
        "0.5.0", "0.5.0", "0.5.6", "0.5.6", "0.5.3", "0.5.4", "0.5.4", "0.5.3"]


def test_every_event_of_the_log_in_order(loop):
    bisect(loop)
    logged = without_time(events(loop))
    smoke = loop.folder / "smoke"
    start = logged[0]
    assert start["event"] == "start" and start["refs"] == RELEASES
    assert start["key"]["mode"] == "release" and start["key"]["source"] == "sglang on the package index"

    def build(ref):
        return {"event": "build", "ref": ref, "built": True, "config_hash": f"hash-{ref}", "image": f"sha256:id-{ref}",
                "tag": f"sglstack/rel:{ref}", "seconds": 2.0}

    def batch(ref, n, samples):
        return {"event": "batch", "ref": ref, "batch": n, "samples": samples, "image": f"sha256:id-{ref}",
                "digest": f"sha256:dg-{ref}", "report": str(smoke / f"{ref}-{n}.json"), "seconds": 2.0}

    assert logged[1:] == [
        build("0.5.0"), batch("0.5.0", 1, FAST), batch("0.5.0", 2, FAST),
        build("0.5.6"), batch("0.5.6", 1, SLOW), batch("0.5.6", 2, SLOW),
        build("0.5.3"), batch("0.5.3", 1, FAST),
        build("0.5.4"), batch("0.5.4", 1, SLOW), batch("0.5.4", 2, SLOW),
        batch("0.5.3", 2, FAST),
        {"event": "done", "status": "found", "first_bad": "0.5.4", "last_good": "0.5.3",
         "reason": "0.5.4 is the first bad ref (-10.0% against the good endpoint)"},
    ]


def test_each_step_builds_and_smokes_with_the_requests_settings(loop, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    patches = tmp_path / "patches"
    patches.mkdir()
    bisect(loop, ca_bundle=str(ca), docker_cli="/usr/bin/docker", docker_host="unix:///run/d.sock",
           patches_dir=patches)
    ref, options = loop.fakes.builds[0]
    assert ref == "0.5.0"
    assert (options.ca_bundle, options.docker_cli, options.docker_host) == (
        str(ca), "/usr/bin/docker", "unix:///run/d.sock")
    assert options.show_progress is False and options.patches_dir == patches
    assert options.out_dir == loop.folder / "steps" / "0.5.0"
    assert (options.target, options.force, options.no_cache) == (None, False, False)
    # the first server start runs the preflight, the next ones do not; each batch has its own report
    first, second = loop.fakes.smokes[:2]
    assert first[1] == "sglstack/rel:0.5.0" and first[2].skip_preflight is False
    assert second[2].skip_preflight is True
    assert [Path(o.report).name for _r, _i, o in loop.fakes.smokes[:3]] == ["0.5.0-1.json", "0.5.0-2.json",
                                                                         "0.5.6-1.json"]
    smoke = loop.fakes.smokes[0][2]
    assert (smoke.kinds, smoke.runs, smoke.flush_cache, smoke.no_history, smoke.docker_host) == (
        ("baseline",), 5, True, True, "unix:///run/d.sock")


def test_a_preflight_skipped_by_the_request_is_skipped_from_the_first_start(loop):
    lines: list[str] = []
    request = BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix,
                            smoke={"gpus": 0, "skip_preflight": True})
    run_bisect(request, log=lines.append)
    assert all(options.skip_preflight is True for _r, _i, options in loop.fakes.smokes)


def test_the_report_times_building_smoking_and_the_rest(loop):
    result, _lines = bisect(loop)
    # the clock moves one second per reading: 4 builds of 1 s, 8 smokes of 1 s, 45 s from start to the end
    assert result.data["timing"] == {"build_s": 4.0, "smoke_s": 8.0, "total_s": 45.0, "overhead_s": 33.0}
    assert (loop.folder / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "`0.5.4`" in (loop.folder / "report.md").read_text()


def test_the_overhead_is_never_negative(loop, monkeypatch):
    session = driver.Session(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix),
                             *driver.prepare(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6",
                                                           stacks_file=loop.matrix, smoke={"gpus": 0}))[:3],
                             {}, lambda _m: None)
    session.timing = {"build_s": 500.0, "smoke_s": 0.5}
    planner = driver.Planner(RELEASES, session.config)
    data = session.report(planner, None, chart=False)
    assert data["timing"]["overhead_s"] == 0.0 and data["timing"]["build_s"] == 500.0
    assert data["status"] == "running" and not (loop.folder / "report.png").exists()


def test_an_interrupted_bisect_keeps_a_running_report_and_continues_from_its_log(loop, monkeypatch):
    monkeypatch.setattr(driver, "run_smoke", loop.fakes.run_smoke)
    interrupt_after(loop, 3)
    with pytest.raises(KeyboardInterrupt):
        bisect(loop)
    report = json.loads((loop.folder / "report.json").read_text())
    assert report["status"] == "running" and not (loop.folder / "report.png").exists()
    assert [s["ref"] for s in report["steps"] if s["samples"]] == ["0.5.0", "0.5.6"]
    monkeypatch.setattr(driver, "run_smoke", loop.fakes.run_smoke)
    # the package index moved meanwhile: the continued bisect keeps the refs of its log
    monkeypatch.setattr(refs, "available_versions", lambda name: [*RELEASES[:3], "0.5.2.post1", *RELEASES[3:]])
    result, lines = bisect(loop)
    assert lines[0] == f"bisect: rel: continuing (3 batches in {loop.folder / 'log.jsonl'})"
    assert lines[1:] == [*STEPS[6:], "bisect: first bad release: 0.5.4 (sglang 0.5.4); last good 0.5.3",
                         f"bisect: report {loop.folder / 'report.json'} (4 builds, 4 refs tested)"]
    assert result.exit_code == 0 and result.data["refs_in_range"] == 6
    assert [ref for ref, _o in loop.fakes.builds] == ["0.5.0", "0.5.6", "0.5.6", "0.5.3", "0.5.4"]
    assert sum(1 for e in events(loop) if e["event"] == "start") == 1


def test_a_finished_bisect_is_answered_from_its_log(loop, monkeypatch):
    bisect(loop)
    done = events(loop)[-1]

    def forbidden(*_a, **_k):
        raise AssertionError("a finished bisect neither builds nor smokes")

    monkeypatch.setattr(driver, "build_stack", forbidden)
    monkeypatch.setattr(driver, "run_smoke", forbidden)
    result, lines = bisect(loop)
    assert lines == [f"bisect: rel: finished before ({done['time']}): nothing to build",
                     "bisect: first bad release: 0.5.4 (sglang 0.5.4); last good 0.5.3",
                     f"bisect: report {loop.folder / 'report.json'} (4 builds, 4 refs tested)"]
    assert result.exit_code == 0 and result.outcome.first_bad == "0.5.4"
    assert (loop.folder / "report.png").exists()
    assert [e["event"] for e in events(loop)].count("done") == 1


def test_another_bisect_of_the_stack_keeps_the_old_log_aside(loop):
    bisect(loop)
    result, lines = bisect(loop, good="0.5.1")
    [archived] = loop.folder.glob("log-*.jsonl")
    assert lines[0] == ("bisect: rel: 5 releases after 0.5.1 up to 0.5.6; metric baseline"
                        f" (previous log kept as {archived})")
    assert result.exit_code == 0 and events(loop)[0]["key"]["good"] == "0.5.1"
