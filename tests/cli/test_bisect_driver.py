"""The bisect driver's loop, log and report, with Build and Smoke replaced by fast fakes.

The git side is real (a synthetic SGLang history in a local repository, the real patch engine on the
host); only `build_stack` and `run_smoke` are stand-ins (tests/lib/bisect_fakes). tests/e2e/test_bisect_e2e.py
runs the same driver with real BuildKit builds and the real smoke of the CPU double.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_fakes import BAD_FROM, SPEEDS, N, events, history, history_template, request  # noqa: F401 - fixtures
from bisect_fixtures import make_history, stack_yaml
from clirun import run_invoke

from sglstack.bisect import driver, refs
from sglstack.bisect.driver import BisectRequest, run_bisect, source_version
from sglstack.bisect.log import BisectLog
from sglstack.cli.bisect import BisectOptions, bisect_request


def test_names_the_first_slow_commit_and_writes_the_report(history):  # noqa: F811
    shas, matrix, fakes, folder = history
    lines: list[str] = []
    result = run_bisect(request(matrix, shas[0], shas[-1]), log=lines.append)
    assert result.exit_code == 0 and result.outcome.first_bad == shas[BAD_FROM]
    # the lines a user reads: what is bisected, the skip with its reason, the answer with both refs, the report
    assert lines[0] == f"bisect: synth: {N} commits after {shas[0][:10]} up to {shas[-1][:10]}; metric baseline"
    assert f"bisect: {shas[6][:10]}: skip (drift: patch 'kimi-k25-eagle3': " in "\n".join(lines)
    subject = f"commit {BAD_FROM}: serve at {SPEEDS[BAD_FROM]:g} tok/s"
    assert lines[-2] == f"bisect: first bad commit: {shas[BAD_FROM]} ({subject}); last good {shas[BAD_FROM - 1]}"
    assert lines[-1].startswith(f"bisect: report {folder / 'report.json'} (")
    data = json.loads((folder / "report.json").read_text())
    assert data["status"] == "found" and data["first_bad"] == shas[BAD_FROM] and data["last_good"] == shas[BAD_FROM - 1]
    assert data["metric"]["name"] == "baseline" and data["mode"] == "git" and data["refs_in_range"] == N
    steps = {s["ref"]: s for s in data["steps"]}
    assert steps[shas[6]]["verdict"] == "skip" and "drift" in steps[shas[6]]["skip"]
    assert shas[6] not in fakes.builds  # the patch was tried on the host: no build spent on a skip
    for ref in fakes.builds:
        step = steps[ref]
        assert step["built"] is True and step["image"] == f"sha256:{ref}" and len(step["samples"]) >= 5
        assert step["verdict"] in ("good", "bad")
    assert data["builds"] == len(fakes.builds) <= 4 + 3  # ceil(log2 12) + 3
    assert (folder / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (folder / "report.md").read_text()
    assert f"`{shas[BAD_FROM][:10]}`" in markdown and "first bad" in markdown
    logged = events(folder)
    assert logged[0]["event"] == "start" and logged[-1]["event"] == "done"


def test_a_finished_bisect_costs_no_build_and_no_smoke(history, monkeypatch):  # noqa: F811
    shas, matrix, _fakes, folder = history
    first = run_bisect(request(matrix, shas[0], shas[-1]), log=lambda _m: None)

    def forbidden(*_a, **_k):
        raise AssertionError("a finished bisect must not build or smoke")

    monkeypatch.setattr(driver, "build_stack", forbidden)
    monkeypatch.setattr(driver, "run_smoke", forbidden)
    lines = []
    again = run_bisect(request(matrix, shas[0][:10], shas[-1]), log=lines.append)  # a short sha is the same ref
    assert again.exit_code == 0 and again.outcome.first_bad == first.outcome.first_bad
    assert any("finished before" in line for line in lines)
    assert json.loads((folder / "report.json").read_text())["first_bad"] == shas[BAD_FROM]


def test_an_interrupted_bisect_continues_where_it_stopped(history):  # noqa: F811
    shas, matrix, fakes, folder = history
    fakes.interrupt_at = 4
    with pytest.raises(KeyboardInterrupt):
        run_bisect(request(matrix, shas[0], shas[-1]), log=lambda _m: None)
    logged = events(folder)
    assert [e["event"] for e in logged].count("batch") == 4 and logged[-1]["event"] != "done"
    assert json.loads((folder / "report.json").read_text())["status"] == "running"
    built_before = list(fakes.builds)
    fakes.interrupt_at = None
    lines = []
    result = run_bisect(request(matrix, shas[0], shas[-1]), log=lines.append)
    assert result.exit_code == 0 and result.outcome.first_bad == shas[BAD_FROM]
    assert any("continuing (4 batches" in line for line in lines)
    assert len(fakes.builds) == len(set(fakes.builds))  # no image was built twice
    data = json.loads((folder / "report.json").read_text())
    built = {s["ref"] for s in data["steps"] if s["built"]}
    assert set(built_before) <= built  # built in the first run still counts as built by this bisect
    assert sum(1 for e in events(folder) if e["event"] == "start") == 1


def test_another_bisect_starts_a_new_log_and_keeps_the_old_one(history):  # noqa: F811
    shas, matrix, _fakes, folder = history
    run_bisect(request(matrix, shas[0], shas[-1]), log=lambda _m: None)
    run_bisect(request(matrix, shas[3], shas[-1]), log=lambda _m: None)
    archived = list(folder.glob("log-*.jsonl"))
    assert len(archived) == 1 and BisectLog(folder).read()[0]["key"]["good"] == shas[3]


def test_a_failed_build_is_a_skip_for_this_run_and_retried_by_the_next(history):  # noqa: F811
    shas, matrix, fakes, folder = history
    fakes.fail_build = {shas[-1]}
    lines: list[str] = []
    result = run_bisect(request(matrix, shas[0], shas[-1]), log=lines.append)
    assert result.exit_code == 1
    assert "the bad endpoint" in result.outcome.reason and "BuildKit failed" in result.outcome.reason
    assert f"bisect: undecided: {result.outcome.reason}" in lines  # the verdict line names why
    assert not any("first bad" in line for line in lines)
    # a finished bisect is answered from its log; an unfinished one retries: drop the 'done' line
    log = BisectLog(folder)
    kept = [line for line in log.path.read_text().splitlines() if '"event": "done"' not in line]
    log.path.write_text("\n".join(kept) + "\n")
    fakes.fail_build = set()
    again = run_bisect(request(matrix, shas[0], shas[-1]), log=lambda _m: None)
    assert again.exit_code == 0 and again.outcome.first_bad == shas[BAD_FROM]


def test_a_server_that_does_not_serve_makes_the_step_a_skip(history):  # noqa: F811
    shas, matrix, fakes, folder = history
    fakes.no_serve = {shas[5]}  # the neighbour tried when the midpoint 6 cannot take the patch
    result = run_bisect(request(matrix, shas[0], shas[-1]), log=lambda _m: None)
    [skip] = [e for e in events(folder) if e["event"] == "skip" and e["ref"] == shas[5]]
    assert skip["kind"] == "serve" and "exited with code 1" in skip["reason"]
    assert result.outcome.first_bad in (None, shas[BAD_FROM])


def test_a_torn_last_line_is_ignored_when_resuming(history):  # noqa: F811
    shas, matrix, fakes, folder = history
    fakes.interrupt_at = 3
    with pytest.raises(KeyboardInterrupt):
        run_bisect(request(matrix, shas[0], shas[-1]), log=lambda _m: None)
    with BisectLog(folder).path.open("a") as fh:
        fh.write('{"event": "batch", "ref": "')  # killed while writing
    fakes.interrupt_at = None
    assert run_bisect(request(matrix, shas[0], shas[-1]), log=lambda _m: None).exit_code == 0


def test_source_version_reads_pyproject_or_version_py(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.9"\n')
    assert source_version(tmp_path / "a") == "0.5.9"
    (tmp_path / "b" / "sglang").mkdir(parents=True)
    (tmp_path / "b" / "pyproject.toml").write_text('[project]\nname = "sglang"\ndynamic = ["version"]\n')
    (tmp_path / "b" / "sglang" / "version.py").write_text('__version__ = "0.5.10rc0"\n')
    assert source_version(tmp_path / "b") == "0.5.10rc0"
    assert source_version(tmp_path) is None


@pytest.mark.parametrize(("args", "message"), [
    (("--stack", "nope"), "stack 'nope'"),
    (("--good", "no-such-ref"), "--good no-such-ref: git source"),
    (("--swap",), "is not an ancestor of --bad"),
    (("--metric", "latency"), "unknown metric 'latency'"),
    (("--threshold", "0"), "--threshold 0: a percentage"),
    (("--runs", "0"), "--runs 0"),
    (("--metric", "speedup"), "no draft model"),
    (("--smoke-opt", "bogus"), "--smoke-opt #1: expected KEY=VALUE (it has no '='; not shown, as it may be a secret)"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_build(tmp_path, args, message):
    repo = tmp_path / "sglang"
    shas = make_history(repo, [300.0, 300.0, 270.0], with_kimi=False)
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(stack_yaml(str(repo), shas[-1], patches=()))
    opts = {"--stack": "synth", "--good": shas[0], "--bad": shas[-1]}
    extra = list(args)
    if extra == ["--swap"]:
        opts["--good"], opts["--bad"] = shas[-1], shas[0]
        extra = []
    for i in range(0, len(extra), 2):
        opts[extra[i]] = extra[i + 1]
    argv = [x for kv in opts.items() for x in kv]
    proc = run_invoke("bisect", *argv, "--stacks-file", str(matrix), cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build"), "SGLSTACK_CACHE": str(tmp_path / "cache"),
                           "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert not (tmp_path / "build" / "synth" / "bisect" / "steps").exists()


# ---- the inputs, in process (the `invoke bisect` test above runs in a child; these check the same lines) ----


@pytest.fixture
def small(tmp_path, monkeypatch):
    """Three commits, no patches: the inputs of a bisect without building anything."""
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SGLSTACK_CA_BUNDLE", raising=False)
    repo = tmp_path / "sglang"
    shas = make_history(repo, [300.0, 300.0, 270.0], with_kimi=False)
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(stack_yaml(str(repo), shas[-1], patches=()))
    return shas, matrix, repo


@pytest.mark.parametrize(("change", "message"), [
    ({"stack": "nope"}, "stack 'nope': unknown stack (known: synth)"),
    ({"metric": "latency"},
     "--metric: unknown metric 'latency' (choose from baseline, eagle3, speedup, accept_length)"),
    ({"threshold_pct": 0}, "--threshold 0: a percentage between 0 and 100 (5 = 5%)"),
    ({"threshold_pct": 100}, "--threshold 100: a percentage between 0 and 100 (5 = 5%)"),
    ({"repeats": 0}, "--runs 0: at least 1 run per server start"),
    ({"repeats": "x"}, "--runs and --max-batches take whole numbers"),
    ({"threshold_pct": "x"}, "--threshold 'x': not a number (a percentage, 5 = 5%)"),
    ({"max_batches": 1}, "--max-batches 1: max_batches must be at least the initial batches"),
    ({"metric": "speedup"}, "no draft model for the smoke in stack 'synth'"),
    ({"ca_bundle": "/nonexistent/ca.pem"}, "CA bundle '/nonexistent/ca.pem' (from --ca-bundle or SGLSTACK_CA_BUNDLE)"),
])
def test_prepare_names_the_bad_input_in_one_line(small, change, message):
    shas, matrix, _repo = small
    req = BisectRequest(**{"stack": "synth", "good": shas[0], "bad": shas[-1], "stacks_file": matrix,
                           "smoke": {"gpus": 0}, **change})
    with pytest.raises(driver.BisectInputError) as err:
        driver.prepare(req)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2


def test_prepare_turns_the_request_into_the_planner_and_smoke_settings(small, tmp_path):
    shas, matrix, _repo = small
    req = BisectRequest(stack="synth", good=shas[0], bad=shas[-1], stacks_file=matrix, metric="baseline", repeats=3,
                        threshold_pct=12.5, max_batches=5, docker_host="unix:///tmp/d.sock",
                        smoke={"gpus": 0, "timeout": None})
    stack, metric, config, overrides, options = driver.prepare(req)
    assert stack.name == "synth" and metric.name == "baseline"
    assert config == driver.PlannerConfig(runs_per_batch=3, max_batches=5, threshold=0.125, higher_is_better=True)
    assert overrides == {"gpus": 0, "kinds": ("baseline",), "runs": 3, "flush_cache": True, "no_history": True,
                         "build_dir": str(tmp_path / "build"), "concurrency": 1, "docker_host": "unix:///tmp/d.sock"}
    assert options.runs == 3 and options.flush_cache and options.no_history and options.kinds == ("baseline",)
    given = driver.prepare(BisectRequest(stack="synth", good=shas[0], bad=shas[-1], stacks_file=matrix,
                                         smoke={"concurrency": 4, "docker_host": "tcp://x:1"},
                                         docker_host="unix:///tmp/d.sock"))
    assert given[3]["concurrency"] == 4 and given[3]["docker_host"] == "tcp://x:1"  # given smoke options win
    assert given[2] == driver.PlannerConfig()  # the defaults: 5 runs, 4 batches at most, 5%


def test_the_endpoints_and_the_range_of_a_git_stack(small):
    shas, matrix, repo = small
    stack = driver.prepare(request(matrix, shas[0], shas[-1]))[0]
    assert refs.mode_of(stack) == "git" and refs.source_of(stack) == str(repo)
    assert refs.resolve_endpoint(stack, shas[0][:10], "good") == shas[0]
    with pytest.raises(driver.BisectInputError, match=r"^--good no-such-ref: git source .*'no-such-ref'$"):
        refs.resolve_endpoint(stack, "no-such-ref", "good")
    assert refs.refs_between(stack, shas[0], shas[-1]) == shas
    with pytest.raises(driver.BisectInputError) as same:
        refs.refs_between(stack, shas[1], shas[1])
    assert str(same.value) == f"--good and --bad are the same commit {shas[1][:12]}"
    with pytest.raises(driver.BisectInputError) as swapped:
        refs.refs_between(stack, shas[-1], shas[0])
    assert str(swapped.value) == f"--good {shas[-1][:12]} is not an ancestor of --bad {shas[0][:12]} in {repo}"
    assert driver.subjects_of(stack, shas[:2]) == {shas[0]: "commit 0: serve at 300 tok/s",
                                                  shas[1]: "commit 1: serve at 300 tok/s"}
    at = refs.stack_at(stack, shas[1])
    assert at.sglang.git.ref == shas[1] and at.sglang.git.repo == stack.sglang.git.repo and at.name == "synth"
    assert stack.sglang.git.ref == shas[-1]  # the stack itself is left as it was
    # no patches: the tree is exported (a ref that is not there is a skip), nothing to apply
    assert driver.patch_skip(stack, shas[0], Path("patches")) is None
    kind, reason = driver.patch_skip(stack, "f" * 40, Path("patches"))
    assert kind == "source" and reason == f"git source {repo}: no commit, tag or branch '{'f' * 40}'"


def test_the_endpoints_and_the_range_of_a_release_stack(small, monkeypatch):
    shas, matrix, _repo = small
    git_stack = driver.prepare(request(matrix, shas[0], shas[-1]))[0]
    stack = git_stack.model_copy(update={"sglang": git_stack.sglang.model_copy(update={"git": None,
                                                                                    "version": "0.5.9"})})
    assert refs.mode_of(stack) == "release" and refs.source_of(stack) == "sglang on the package index"
    assert refs.resolve_endpoint(stack, "0.5.8", "bad") == "0.5.8"
    with pytest.raises(driver.BisectInputError, match=r"^--bad main: stack 'synth' takes SGLang releases: "):
        refs.resolve_endpoint(stack, "main", "bad")
    monkeypatch.setattr(refs, "available_versions", lambda name: ["0.5.7", "0.5.8", "0.5.9", "0.5.10"])
    assert refs.refs_between(stack, "0.5.7", "0.5.9") == ["0.5.7", "0.5.8", "0.5.9"]
    with pytest.raises(driver.BisectInputError, match=r"^--good 0\.5\.9 --bad 0\.5\.7: "):
        refs.refs_between(stack, "0.5.9", "0.5.7")
    assert driver.subjects_of(stack, ["0.5.7", "0.5.8"]) == {"0.5.7": "sglang 0.5.7", "0.5.8": "sglang 0.5.8"}
    at = refs.stack_at(stack, "0.5.8")
    assert at.sglang.version == "0.5.8" and at.sglang.git is None and stack.sglang.version == "0.5.9"
    assert driver.patch_skip(stack.model_copy(update={"patches": []}), "0.5.8", Path("patches")) is None


def test_the_key_of_a_bisect_is_everything_but_the_sglang_ref(small):
    shas, matrix, repo = small
    stack, metric, config, _overrides, options = driver.prepare(request(matrix, shas[0], shas[-1]))
    key = driver.bisect_key(stack, shas[0], shas[-1], metric, config, options)
    assert key == {"stack": "synth", "stack_fingerprint": driver.stack_fingerprint(stack), "mode": "git",
                   "source": str(repo), "good": shas[0], "bad": shas[-1], "metric": "baseline", "threshold": 0.05,
                   "runs_per_batch": 5, "max_batches": 4, "smoke": options.fingerprint()}
    fingerprint = driver.stack_fingerprint(stack)
    assert len(fingerprint) == 16 and int(fingerprint, 16) >= 0
    assert driver.stack_fingerprint(refs.stack_at(stack, shas[0])) == fingerprint  # another ref, the same bisect
    release = stack.model_copy(update={"sglang": stack.sglang.model_copy(update={"git": None, "version": "0.5.9"})})
    assert driver.stack_fingerprint(refs.stack_at(release, "0.5.8")) == driver.stack_fingerprint(release)
    assert driver.stack_fingerprint(release) != fingerprint
    assert driver.stack_fingerprint(stack.model_copy(update={"python": "3.12"})) != fingerprint


def test_source_version_falls_back_and_gives_up_plainly(tmp_path):
    tree = tmp_path / "t"
    (tree / "sglang").mkdir(parents=True)
    (tree / "pyproject.toml").write_text("[project\nversion = 1\n")  # not TOML: version.py decides
    (tree / "sglang" / "version.py").write_text("__version__ = '0.4.0.post1'\n")
    assert source_version(tree) == "0.4.0.post1"
    (tree / "pyproject.toml").write_text('[project]\nversion = 5\n')  # not a string
    assert source_version(tree) == "0.4.0.post1"
    (tree / "pyproject.toml").write_text('[tool.x]\nversion = "9"\n')  # no [project]
    assert source_version(tree) == "0.4.0.post1"
    (tree / "sglang" / "version.py").write_text("VERSION = get()\n")
    assert source_version(tree) is None
    (tree / "pyproject.toml").unlink()
    (tree / "sglang" / "version.py").write_text('__version__="0.3.1"\n')
    assert source_version(tree) == "0.3.1"


def test_the_bisect_task_passes_every_option_on_as_one_request():
    o = BisectOptions(stack="synth", good="a", bad="b", stacks_file="s.yaml", metric="eagle3", runs=7, threshold="2.5",
                      max_batches=6, ca_bundle="ca.pem", docker_cli="dk", docker_host="tcp://h:1", gpus=2)
    assert bisect_request(o) == BisectRequest(
        stack="synth", good="a", bad="b", stacks_file="s.yaml", metric="eagle3", repeats=7, threshold_pct="2.5",
        max_batches=6, ca_bundle="ca.pem", docker_cli="dk", docker_host="tcp://h:1", smoke={"gpus": 2})
    assert bisect_request(BisectOptions(stack="synth", good="a", bad="b", stacks_file="s.yaml")) == BisectRequest(
        stack="synth", good="a", bad="b", stacks_file="s.yaml", threshold_pct="5")


def test_smoke_overrides_are_smoke_s_own_and_a_bad_pair_is_bad_input(capsys):
    assert driver.smoke_overrides(["timeout=30"], gpus=1, model=None) == {"timeout": "30", "gpus": 1}
    with pytest.raises(driver.BisectInputError, match=r"^--smoke-opt #1: expected KEY=VALUE"):
        driver.smoke_overrides(["bogus"])
    driver._stdout("bisect: one line")
    assert capsys.readouterr().out == "bisect: one line\n"
