"""The bisect loop (`driver.Session`) in process and fast, when a step cannot be measured (a failed build, a server
that measured nothing, a patch that cannot apply), its notes and log, private git sources, bad requests and
repeated runs; against the stand-ins of tests/lib/bisect_session_world.
"""

from __future__ import annotations

import pytest
from bisect_session_world import RELEASES, STACKS, bisect, events, interrupt_after, make_loop, without_time

from sglstack.bisect import driver, refs
from sglstack.bisect.driver import BisectRequest
from sglstack.core.errors import SglstackError
from sglstack.inimage import patchkit


@pytest.fixture
def loop(tmp_path, monkeypatch):
    return make_loop(tmp_path, monkeypatch)


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
