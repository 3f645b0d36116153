"""The bisect loop (`driver.Session`) in process and fast: a release stack without patches, so no git history
and no patch engine; `build_stack`, `run_smoke` and the package index's release list are stand-ins.

tests/cli/test_bisect_driver.py runs the same loop over a real git history with the real patch engine (a few
seconds a test); this file checks every line and record of the loop itself, word for word, in milliseconds.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglstack.bisect import driver, refs
from sglstack.bisect.driver import BisectRequest, run_bisect
from sglstack.bisect.log import BisectLog
from sglstack.core.errors import BuildError, SglstackError
from sglstack.imagebuild.plan import BuildResult
from sglstack.inimage import patchkit
from sglstack.smoke import SmokeReport

RELEASES = ["0.5.0", "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.5", "0.5.6"]
SLOW_FROM = "0.5.4"
# Each run of a batch: a level per release and a fixed spread, so every verdict and p-value is the same each run.
SPREAD = (1.0, 1.004, 0.996, 1.002, 0.998)

STACKS = textwrap.dedent("""
    stacks:
      rel:
        description: a release stack for the bisect loop's tests
        base_image: debian:bookworm-slim
        python: "3.11"
        sglang: {version: "0.5.6"}
        publish: {repository: 127.0.0.1:1/sglstack-test/bisect}
        serving: {model: test-org/tiny-model, tp: 1, gpus: 0, startup_timeout_s: 60, shm_size: 256m}
        smoke: {max_new_tokens: 24, concurrency: 1, num_prompts: 3}
    """)


class Clock:
    """`time.monotonic` for the driver alone: every reading is `step` seconds after the one before."""

    def __init__(self, step: float = 1.0) -> None:
        self.now = 100.0
        self.step = step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


class Fakes:
    def __init__(self) -> None:
        self.builds: list[tuple[str, object]] = []
        self.smokes: list[tuple[str, str, object]] = []
        self.images: set[str] = set()
        self.fail_build: set[str] = set()
        self.no_serve: set[str] = set()
        self.no_digest = False

    def build_stack(self, stack, options):
        ref = stack.sglang.version
        self.builds.append((ref, options))
        if ref in self.fail_build:
            raise BuildError(f"stack 'rel': BuildKit failed at {ref}")
        skipped = ref in self.images
        self.images.add(ref)
        return BuildResult(stack.name, "runtime", f"hash-{ref}", f"sha256:id-{ref}", f"sglstack/rel:{ref}",
                           skipped, None, "none" if skipped else "classic")

    def run_smoke(self, stack, image, options):
        ref = stack.sglang.version
        self.smokes.append((ref, image, options))
        level = 270.0 if patchkit.Version.parse(ref) >= patchkit.Version.parse(SLOW_FROM) else 300.0
        started = ref not in self.no_serve
        runs = [{"tokens_per_s": level * SPREAD[i % len(SPREAD)], "completed": 3, "requests": 3, "ttft_s": 0.01,
                 "flushed": True, "accept_length": None} for i in range(options.runs)]
        return SmokeReport({"verdict": "pass", "failures": [],
                            "image": {} if self.no_digest else {"digest": f"sha256:dg-{ref}"},
                            "baseline": {"started": started,
                                         "failure": None if started else "the server exited with code 1",
                                         "runs": runs if started else []},
                            "eagle3": {"started": False}})


@pytest.fixture
def loop(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SGLSTACK_CA_BUNDLE", raising=False)
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(STACKS)
    fakes = Fakes()
    clock = Clock()
    monkeypatch.setattr(driver, "build_stack", fakes.build_stack)
    monkeypatch.setattr(driver, "run_smoke", fakes.run_smoke)
    monkeypatch.setattr(refs, "available_versions",
                        lambda name: ["0.4.9", *RELEASES, "0.6.0"] if name == "sglang" else [])
    monkeypatch.setattr(driver, "time", SimpleNamespace(monotonic=clock.monotonic))
    return SimpleNamespace(matrix=matrix, fakes=fakes, clock=clock, folder=tmp_path / "build" / "rel" / "bisect",
                           build=tmp_path / "build")


def bisect(loop, good="0.5.0", bad="0.5.6", **kw) -> tuple[driver.BisectResult, list[str]]:
    lines: list[str] = []
    request = BisectRequest(stack="rel", good=good, bad=bad, stacks_file=loop.matrix, smoke={"gpus": 0}, **kw)
    return run_bisect(request, log=lines.append), lines


def events(loop) -> list[dict]:
    return BisectLog(loop.folder).read()


STEPS = [
    "bisect: ref 0/6 0.5.0 (sglang 0.5.0): good endpoint",
    "bisect: 0.5.0: batch 1: median 300.00 tok/s -> good",
    "bisect: ref 0/6 0.5.0 (sglang 0.5.0): good endpoint",
    "bisect: 0.5.0: batch 2: median 300.00 tok/s -> good",
    "bisect: ref 6/6 0.5.6 (sglang 0.5.6): bad endpoint",
    "bisect: 0.5.6: batch 1: median 270.00 tok/s -> bad",
    "bisect: ref 6/6 0.5.6 (sglang 0.5.6): bad endpoint",
    "bisect: 0.5.6: batch 2: median 270.00 tok/s -> bad",
    "bisect: ref 3/6 0.5.3 (sglang 0.5.3): bisect between 0 and 6 of 6",
    "bisect: 0.5.3: batch 1: median 300.00 tok/s -> good (vs good p=1, vs bad p=0.000666)",
    "bisect: ref 4/6 0.5.4 (sglang 0.5.4): bisect between 3 and 6 of 6",
    "bisect: 0.5.4: batch 1: median 270.00 tok/s -> bad (vs good p=0.000666, vs bad p=1)",
    "bisect: ref 4/6 0.5.4 (sglang 0.5.4): confirm: one more server start of the answer",
    "bisect: 0.5.4: batch 2: median 270.00 tok/s -> bad (vs good p=1.08e-05, vs bad p=1)",
    "bisect: ref 3/6 0.5.3 (sglang 0.5.3): confirm: one more server start of the answer",
    "bisect: 0.5.3: batch 2: median 300.00 tok/s -> good (vs good p=1, vs bad p=1.08e-05)",
]
FAST = [300.0, 301.2, 298.8, 300.6, 299.4]
SLOW = [270.0, 271.08, 268.92, 270.54, 269.46]


def without_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time"} for r in records]


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


def interrupt_after(loop, smokes: int) -> None:
    real = loop.fakes.run_smoke

    def run_smoke(stack, image, options):
        if len(loop.fakes.smokes) == smokes:
            raise KeyboardInterrupt
        return real(stack, image, options)

    driver.run_smoke = run_smoke  # restored by the fixture's monkeypatch


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


def test_a_failed_build_is_a_skip_said_with_its_reason_and_the_bisect_is_undecided(loop):
    loop.fakes.fail_build = {"0.5.6"}
    result, lines = bisect(loop)
    reason = "the build failed: stack 'rel': BuildKit failed at 0.5.6"
    assert lines[5:7] == ["bisect: ref 6/6 0.5.6 (sglang 0.5.6): bad endpoint",
                          f"bisect: 0.5.6: skip ({reason}); a new run retries it"]
    assert lines[-2:] == [f"bisect: undecided: {result.outcome.reason}",
                          f"bisect: report {loop.folder / 'report.json'} (1 builds, 2 refs tested)"]
    assert result.exit_code == driver.EXIT_UNDECIDED == 1 and result.outcome.first_bad is None
    assert reason in result.outcome.reason
    assert {"event": "skip", "ref": "0.5.6", "kind": "build", "reason": reason} in without_time(events(loop))
    assert result.data["timing"]["build_s"] == 2.0  # the failed build's second counts too
    assert [ref for ref, _o in loop.fakes.builds] == ["0.5.0", "0.5.6"]  # tried once in this run


def test_a_server_that_measured_nothing_is_a_skip_with_the_smoke_s_reason(loop):
    loop.fakes.no_serve = {"0.5.3"}
    result, lines = bisect(loop)
    i = lines.index("bisect: ref 3/6 0.5.3 (sglang 0.5.3): bisect between 0 and 6 of 6")
    reason = "the baseline server did not serve: the server exited with code 1"
    assert lines[i + 1] == f"bisect: 0.5.3: skip ({reason}); a new run retries it"
    skip = [e for e in without_time(events(loop)) if e["event"] == "skip"]
    assert skip == [{"event": "skip", "ref": "0.5.3", "kind": "serve", "reason": reason,
                     "report": str(loop.folder / "smoke" / "0.5.3-1.json")}]
    assert [ref for ref, _i, _o in loop.fakes.smokes].count("0.5.3") == 1  # skipped refs are not measured again
    assert (result.exit_code, result.outcome.candidates, result.outcome.last_good) == (1, ("0.5.3", "0.5.4"), "0.5.2")


def test_a_patch_that_cannot_apply_is_a_lasting_skip_before_any_build(loop, monkeypatch):
    tried = []

    def patch_skip(stack, ref, patches_dir):
        tried.append((stack.sglang.version, ref, patches_dir))
        return ("patch", "drift: patch 'p': class gone") if ref == "0.5.3" else None

    monkeypatch.setattr(driver, "patch_skip", patch_skip)
    result, lines = bisect(loop)
    assert "bisect: 0.5.3: skip (drift: patch 'p': class gone)" in lines
    assert ("0.5.3", "0.5.3", driver.DEFAULT_PATCHES_DIR) in tried
    assert "0.5.3" not in [ref for ref, _o in loop.fakes.builds]
    assert {"event": "skip", "ref": "0.5.3", "kind": "patch", "reason": "drift: patch 'p': class gone"} in \
        without_time(events(loop))
    assert (result.exit_code, result.outcome.candidates, result.outcome.last_good) == (1, ("0.5.3", "0.5.4"), "0.5.2")
    assert result.outcome.reason.endswith("0.5.3 (skip: drift: patch 'p': class gone)")
    assert len(tried) == len(set(tried))  # each ref's patches are tried once per run


def test_a_report_without_a_digest_records_none(loop):
    loop.fakes.no_digest = True
    bisect(loop)
    assert {e.get("digest") for e in events(loop) if e["event"] == "batch"} == {None}


def test_refs_without_a_subject_are_said_with_empty_parentheses(loop, monkeypatch):
    monkeypatch.setattr(driver, "subjects_of", lambda stack, refs: {})
    result, lines = bisect(loop)
    assert lines[1] == "bisect: ref 0/6 0.5.0 (): good endpoint"
    assert lines[-2] == "bisect: first bad release: 0.5.4 (); last good 0.5.3"
    assert result.exit_code == 0


def test_notes_follow_the_verdict_and_an_unfinished_run_is_undecided(loop):
    stack, metric, config, overrides, _options = driver.prepare(
        BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix, smoke={"gpus": 0}))
    lines: list[str] = []
    session = driver.Session(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix),
                             stack, metric, config, overrides, lines.append)
    session.key = {"mode": "release"}
    planner = driver.Planner(RELEASES, config)
    outcome = driver.Outcome(driver.FOUND, "why", first_bad="0.5.4", last_good="0.5.3", candidates=("0.5.4",),
                             notes=("0.5.5 measures like the good endpoint", "second note"))
    result = session.finish(planner, outcome)
    assert lines == ["bisect: first bad release: 0.5.4 (); last good 0.5.3",
                     "bisect: note: 0.5.5 measures like the good endpoint", "bisect: note: second note",
                     f"bisect: report {loop.folder / 'report.json'} (0 builds, 0 refs tested)"]
    assert result.exit_code == 0 and result.outcome is outcome
    lines.clear()
    session.key = {"mode": "git"}
    assert session.finish(planner, outcome).exit_code == 0
    assert lines[0] == "bisect: first bad commit: 0.5.4 (); last good 0.5.3"
    lines.clear()
    result = session.finish(planner, None)
    assert lines == ["bisect: undecided: not finished",
                     f"bisect: report {loop.folder / 'report.json'} (0 builds, 0 refs tested)"]
    assert result.exit_code == 1 and result.outcome is None
    lines.clear()
    assert session.finish(planner, driver.Outcome("not_found", "no change")).exit_code == 1
    assert lines[0] == "bisect: undecided: no change"


def test_a_log_with_a_sample_that_is_not_a_number_is_refused_before_any_build(loop):
    bisect(loop)
    log = loop.folder / "log.jsonl"
    text = log.read_text().splitlines()
    text = [line.replace('"samples": [300.0', '"samples": ["fast"') if '"batch": 1' in line and "0.5.0" in line
            else line for line in text if '"event": "done"' not in line]
    log.write_text("\n".join(text) + "\n")
    built = len(loop.fakes.builds)
    with pytest.raises(SglstackError) as err:
        bisect(loop)
    assert str(err.value).startswith(f"{log}: event 3 (batch): 'samples[0]': 'fast' is not a number")
    assert err.value.exit_code == 2 and len(loop.fakes.builds) == built


def test_a_release_s_patches_are_tried_on_its_own_wheel_with_the_stack_s_policy(loop, monkeypatch, tmp_path):
    stack = driver.prepare(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix,
                                         smoke={"gpus": 0}))[0]
    stack = stack.model_copy(update={"patches": ["p1", "p2"]})
    calls = []
    monkeypatch.setattr(refs, "fetch_wheel", lambda name, version: calls.append(("fetch", name, version))
                        or tmp_path / f"{name}-{version}.whl")
    monkeypatch.setattr(refs, "load_specs", lambda ids, patches_dir: calls.append(("specs", ids, patches_dir))
                        or ["spec"])

    def unpack(wheel, specs, dest):
        calls.append(("unpack", wheel.name, specs, dest.name.startswith("sglstack-bisect-")))
        return dest / "root"

    def apply(root, patches_dir, ids, version, on_upstream):
        calls.append(("apply", root.name, patches_dir, ids, version, on_upstream))
        if version == "0.5.3":
            raise patchkit.PatchDrift("class KimiK25 is gone", patch="p2", file="kimi.py")

    monkeypatch.setattr(refs, "unpack_for_patches", unpack)
    monkeypatch.setattr(patchkit, "apply_patches", apply)
    patches = tmp_path / "patches"
    assert driver.patch_skip(stack, "0.5.2", patches) is None
    assert calls == [("fetch", "sglang", "0.5.2"), ("specs", ["p1", "p2"], patches),
                     ("unpack", "sglang-0.5.2.whl", ["spec"], True),
                     ("apply", "root", patches, ["p1", "p2"], "0.5.2", stack.patch_policy.on_upstream)]
    assert driver.patch_skip(stack, "0.5.3", patches) == (
        "patch", "drift: patch 'p2': kimi.py: class KimiK25 is gone")


class RecordingGit:
    """`GitSource` as the driver uses it, recording the logins each use is given."""

    made: list[tuple[str, tuple]] = []

    def __init__(self, url, *, logins=()):
        self.url, self.logins = url, tuple(logins)
        RecordingGit.made.append((url, self.logins))

    @property
    def label(self):
        return f"git source {self.url}"

    def resolve(self, ref):
        return ref * 2

    def is_ancestor(self, good, bad):
        return True

    def first_parent_range(self, good, bad):
        return [bad]

    def subjects(self, refs):
        return {r: f"subject {r}" for r in refs}

    def export(self, ref, subdirectory, root):
        (root / "sglang").mkdir(parents=True)
        (root / "sglang" / "version.py").write_text(f'__version__ = "0.6.0.dev{len(ref)}"\n')


def test_every_use_of_a_private_git_source_gets_the_stack_s_logins(loop, monkeypatch, tmp_path):
    (tmp_path / "git.yaml").write_text(STACKS.replace('sglang: {version: "0.5.6"}',
                                                      'sglang: {git: {repo: "https://user:tok3n@git.example/sglang",'
                                                      ' ref: "' + "a" * 40 + '"}}'))
    stack = driver.prepare(BisectRequest(stack="rel", good="a", bad="b", stacks_file=tmp_path / "git.yaml",
                                         smoke={"gpus": 0}))[0]
    stack = stack.model_copy(update={"patches": ["p1"]})
    assert stack.sglang.git.repo == "https://git.example/sglang" and stack.credentials
    RecordingGit.made = []
    monkeypatch.setattr(refs, "GitSource", RecordingGit)
    applied = []
    monkeypatch.setattr(patchkit, "apply_patches",
                        lambda root, pdir, ids, version, on_upstream: applied.append((ids, version)))
    assert refs.source_of(stack) == "git source https://git.example/sglang"
    assert refs.resolve_endpoint(stack, "abc", "good") == "abcabc"
    assert refs.refs_between(stack, "g", "b") == ["g", "b"]
    assert driver.subjects_of(stack, ["g"]) == {"g": "subject g"}
    assert driver.patch_skip(stack, "abcd", tmp_path) is None
    # the version the patches are checked against is the exported tree's own
    assert applied == [(["p1"], "0.6.0.dev4")]
    assert RecordingGit.made == [("https://git.example/sglang", stack.credentials)] * 5


def test_a_step_s_seconds_are_kept_to_the_millisecond(loop):
    loop.clock.step = 0.1234567  # two readings per build or batch: 0.2469134 s
    bisect(loop)
    logged = [e for e in events(loop) if e["event"] in ("build", "batch")]
    assert {e["seconds"] for e in logged} == {0.247}


def test_a_ref_that_could_not_be_built_is_not_built_again_in_the_same_run(loop):
    stack, metric, config, overrides, _options = driver.prepare(
        BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix, smoke={"gpus": 0}))
    session = driver.Session(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix),
                             stack, metric, config, overrides, lambda _m: None)
    planner = driver.Planner(RELEASES, config)
    loop.fakes.fail_build = {"0.5.3"}
    assert session.image_for(planner, "0.5.3") is None
    assert session.image_for(planner, "0.5.3") is None
    assert [ref for ref, _o in loop.fakes.builds] == ["0.5.3"]
    image = session.image_for(planner, "0.5.4")
    assert image == driver.StepImage("sglstack/rel:0.5.4", "sha256:id-0.5.4", "hash-0.5.4")
    assert session.image_for(planner, "0.5.4") is image and len(loop.fakes.builds) == 2


def test_each_line_reaches_a_pipe_as_it_is_said(monkeypatch):
    class Pipe:
        def __init__(self):
            self.seen: list[str] = []

        def write(self, text):
            self.seen.append(text)

        def flush(self):
            self.seen.append("<flush>")

    pipe = Pipe()
    monkeypatch.setattr(driver.sys, "stdout", pipe)
    driver._stdout("bisect: a line")
    assert "".join(pipe.seen) == "bisect: a line\n<flush>"


def test_a_bad_endpoint_is_named_by_its_option(loop):
    for good, bad, line in (("main", "0.5.6", "--good main: stack 'rel' takes SGLang releases: "),
                            ("0.5.0", "HEAD", "--bad HEAD: stack 'rel' takes SGLang releases: ")):
        with pytest.raises(driver.BisectInputError) as err:
            bisect(loop, good=good, bad=bad)
        assert str(err.value).startswith(line) and err.value.exit_code == 2
    assert loop.fakes.builds == [] and not loop.folder.exists()


def test_a_bisect_of_a_stack_another_task_holds_is_refused_naming_the_bisect(loop):
    import fcntl

    lock = loop.build / "rel" / ".lock"
    lock.parent.mkdir(parents=True)
    with lock.open("w") as fh:
        fh.write("invoke build (pid 1, since 2026-12-04T00:00:00Z)\n")
        fh.flush()
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # another open of the file: refused like another process
        with pytest.raises(SglstackError) as err:
            bisect(loop)
    assert str(err.value) == (f"stack 'rel' is busy: invoke build (pid 1, since 2026-12-04T00:00:00Z) holds {lock}; "
                              "one build, deploy, bisect or render of a stack at a time: run `invoke bisect` again "
                              "when it ends")
    assert err.value.exit_code == 75 and loop.fakes.builds == []


def test_the_request_s_threshold_is_the_planner_s(loop):
    result, lines = bisect(loop, threshold_pct=20)
    assert result.exit_code == 1 and result.outcome.first_bad is None
    assert lines[-2] == ("bisect: undecided: the endpoints differ by only -10.0%, below the threshold of 20%: "
                         "nothing worth a bisect")
    assert [ref for ref, _o in loop.fakes.builds] == ["0.5.0", "0.5.6"]


def test_a_finished_undecided_bisect_gives_the_same_answer_again(loop, monkeypatch):
    loop.fakes.fail_build = {"0.5.6"}
    first, first_lines = bisect(loop)

    def forbidden(*_a, **_k):
        raise AssertionError("a finished bisect neither builds nor smokes")

    monkeypatch.setattr(driver, "build_stack", forbidden)
    monkeypatch.setattr(driver, "run_smoke", forbidden)
    again, lines = bisect(loop)
    assert again.exit_code == first.exit_code == 1
    assert lines[1:] == first_lines[-2:] and lines[1] == f"bisect: undecided: {first.outcome.reason}"
    assert again.outcome == first.outcome


def test_an_unfinished_bisect_retries_a_ref_whose_build_failed(loop, monkeypatch):
    loop.fakes.fail_build = {"0.5.3"}
    monkeypatch.setattr(driver, "run_smoke", loop.fakes.run_smoke)
    interrupt_after(loop, 5)  # after 0.5.3's failed build, at 0.5.4's first batch
    with pytest.raises(KeyboardInterrupt):
        bisect(loop)
    assert [e["kind"] for e in events(loop) if e["event"] == "skip"] == ["build"]
    monkeypatch.setattr(driver, "run_smoke", loop.fakes.run_smoke)
    loop.fakes.fail_build = set()
    result, _lines = bisect(loop)
    assert result.exit_code == 0 and result.outcome.first_bad == "0.5.4"
    assert [ref for ref, _o in loop.fakes.builds].count("0.5.3") == 2


def test_the_request_s_patch_folder_is_where_the_stack_s_patches_are_looked_up(loop, tmp_path):
    (tmp_path / "mine" / "p1").mkdir(parents=True)
    (tmp_path / "mine" / "p1" / "patch.toml").write_text("")
    loop.matrix.write_text(STACKS.replace("    python:", "    patches: [p1]\n    python:"))
    stack = driver.prepare(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix,
                                         patches_dir=tmp_path / "mine", smoke={"gpus": 0}))[0]
    assert list(stack.patches) == ["p1"]
    with pytest.raises(driver.BisectInputError, match="unknown patch id 'p1'"):
        driver.prepare(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix,
                                     patches_dir=tmp_path / "elsewhere", smoke={"gpus": 0}))


def test_the_smallest_repeats_and_threshold_are_taken_and_a_word_is_refused_whole(loop):
    def prepared(**kw):
        return driver.prepare(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix,
                                            smoke={"gpus": 0}, **kw))

    config = prepared(repeats=1, threshold_pct=0.5)[2]
    assert (config.runs_per_batch, config.threshold) == (1, 0.005)
    with pytest.raises(driver.BisectInputError) as err:
        prepared(max_batches="four")
    assert str(err.value) == "--runs and --max-batches take whole numbers"


def test_the_key_of_a_bisect_does_not_depend_on_the_order_of_the_stack_s_mappings(loop, tmp_path):
    def fingerprint(env: str) -> str:
        path = tmp_path / f"stacks-{abs(hash(env))}.yaml"
        path.write_text(STACKS.replace("shm_size: 256m}", f"shm_size: 256m, env: {env}}}"))
        return driver.stack_fingerprint(driver.prepare(BisectRequest(
            stack="rel", good="0.5.0", bad="0.5.6", stacks_file=path, smoke={"gpus": 0}))[0])

    assert fingerprint("{A: '1', B: '2'}") == fingerprint("{B: '2', A: '1'}")
    assert fingerprint("{A: '1', B: '2'}") != fingerprint("{A: '1', B: '3'}")


def test_a_source_tree_s_version_is_read_as_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pyproject.toml").write_text('[project]\nname = "sglang"  # café\nversion = "0.6.0"\n',
                                                   encoding="utf-8")
    (tmp_path / "b" / "sglang").mkdir(parents=True)
    (tmp_path / "b" / "sglang" / "version.py").write_text('# café\n__version__ = "0.6.1"\n', encoding="utf-8")
    assert refs.source_version(tmp_path / "a") == "0.6.0"
    assert refs.source_version(tmp_path / "b") == "0.6.1"


def test_a_ref_whose_patches_do_not_apply_is_tried_once_in_a_run(loop, monkeypatch):
    tried = []
    monkeypatch.setattr(driver, "patch_skip", lambda stack, ref, pdir: tried.append(ref) or ("patch", "drift: x"))
    stack, metric, config, overrides, _options = driver.prepare(
        BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix, smoke={"gpus": 0}))
    session = driver.Session(BisectRequest(stack="rel", good="0.5.0", bad="0.5.6", stacks_file=loop.matrix),
                             stack, metric, config, overrides, lambda _m: None)
    planner = driver.Planner(RELEASES, config)
    assert session.image_for(planner, "0.5.3") is None and session.image_for(planner, "0.5.3") is None
    assert tried == ["0.5.3"] and loop.fakes.builds == []
