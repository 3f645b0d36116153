"""`smoke --bisect-exit` never answers "bad" (1) when it could not judge: bad input aborts `git bisect run`.

`git bisect run` marks a commit bad on any exit from 1 to 127 but 125, so a traceback (exit 1) or a verdict
against a threshold or baseline that means nothing sends the bisect the wrong way. Each of these is checked
before the smoke starts (no server is served for it) and exits 128, which `git bisect run` treats as abort.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from types import SimpleNamespace

import pytest
from bisect_fakes import history, history_template  # noqa: F401 - the fixtures: a synthetic SGLang history, fast fakes
from bisect_fakes import request as bisect_request
from clirun import run_invoke

from sglstack.bisect import gitexit
from sglstack.bisect.driver import run_bisect
from sglstack.bisect.gitexit import EXIT_ABORT_GIT_BISECT, smoke_bisect_exit
from sglstack.bisect.log import BisectLog, BisectLogError
from sglstack.core.inputs import MAX_INPUT_BYTES


def _report(*speeds) -> dict:
    return {"baseline": {"started": True, "runs": [{"completed": 4, "tokens_per_s": s} for s in speeds]}}


@pytest.fixture
def served(monkeypatch):
    """Replaces the smoke run (a real one is tests/e2e/test_bisect_smoke_kinds.py): records each call."""
    calls = []

    def run_smoke(stack, image, options):
        calls.append(image)
        return SimpleNamespace(data=_report(89.0, 89.2, 88.9, 89.1, 89.0))

    monkeypatch.setattr(gitexit, "run_smoke", run_smoke)
    return calls


def _exit(baseline, **kw) -> int:
    return smoke_bisect_exit("img:tag", str(baseline), log=lambda _: None, model="test-org/tiny-model", **kw)


def test_a_judgeable_input_still_answers(served, tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_report(89.0, 89.1, 88.8, 89.3, 89.0)))
    assert _exit(good) == 0 and _exit(100.0) == 1 and _exit(89, threshold="5") == 0
    assert len(served) == 3


@pytest.mark.parametrize("threshold", ["nan", "inf", "-inf", "-5", "0", "100", "250", "five"])
def test_a_threshold_that_cannot_be_judged_aborts(served, threshold, capsys):
    assert _exit(89, threshold=threshold) == EXIT_ABORT_GIT_BISECT
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --threshold '{threshold}': ") and "\n" not in err
    assert served == []


@pytest.mark.parametrize("value", ["nan", "inf", "-89", "0"])
def test_a_known_good_value_that_cannot_be_judged_aborts(served, value, capsys):
    assert _exit(value) == EXIT_ABORT_GIT_BISECT
    assert capsys.readouterr().err.startswith(f"error: --bisect-exit '{value}': ")
    assert served == []


@pytest.mark.parametrize(("content", "why"), [
    ("[1, 2]", "the report is list, not an object"),
    ("89", "the report is int, not an object"),
    ('{"baseline": "fast"}', "'baseline' is str, not an object"),
    ('{"baseline": {"started": true, "runs": {"a": 1}}}', "'baseline.runs' is not a list of objects"),
    (json.dumps(_report(89.0, "fast")), "'baseline.runs[1].tokens_per_s': 'fast' is not a number"),
    ('{"baseline": {"started": true, "runs": [{"completed": 1, "tokens_per_s": Infinity}]}}',
     "'baseline.runs[0].tokens_per_s': inf is not a finite positive number"),
    (json.dumps(_report(89.0, -3.0)), "'baseline.runs[1].tokens_per_s': -3.0 is not a finite positive number"),
    ('{"baseline": {"started": false}}', "the baseline report has no baseline samples"),
    ('{"baseline": ', "not a number or a smoke report"),
])
def test_a_malformed_baseline_report_aborts(served, tmp_path, content, why, capsys):
    path = tmp_path / "good.json"
    path.write_text(content)
    assert _exit(path) == EXIT_ABORT_GIT_BISECT
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --bisect-exit {path}: ") and why in err and "\n" not in err
    assert served == []


@pytest.mark.parametrize("runs", ["0", "-2", "many"])
def test_a_run_count_that_cannot_be_measured_aborts(served, runs):
    assert _exit(89, runs=runs) == EXIT_ABORT_GIT_BISECT
    assert served == []


# ---- the bisect log: an event that parsed as JSON but cannot be replayed --------------------------------

@pytest.mark.parametrize(("edit", "why"), [
    (lambda e: {**e, "samples": [e["samples"][0], "fast"]}, "'samples[1]': 'fast' is not a number"),
    (lambda e: {**e, "samples": [float("nan")]}, "'samples[0]': nan is not a finite positive number"),
    (lambda e: {**e, "samples": 300.0}, "'samples' is not a list of numbers"),
    (lambda e: {k: v for k, v in e.items() if k != "ref"}, "'ref' is not a ref"),
])
def test_a_bisect_log_event_that_cannot_be_replayed_is_one_line_before_any_build(history, edit, why):  # noqa: F811
    shas, matrix, fakes, folder = history
    fakes.interrupt_at = 3
    with pytest.raises(KeyboardInterrupt):
        run_bisect(bisect_request(matrix, shas[0], shas[-1]), log=lambda _m: None)
    path = BisectLog(folder).path
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    n = next(i for i, row in enumerate(rows, 1) if row["event"] == "batch")
    rows[n - 1] = edit(rows[n - 1])
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    fakes.interrupt_at, built, smoked = None, list(fakes.builds), list(fakes.smokes)
    with pytest.raises(BisectLogError) as caught:
        run_bisect(bisect_request(matrix, shas[0], shas[-1]), log=lambda _m: None)
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith(f"{path}: event {n} (batch): {why}: remove that line")
    assert fakes.builds == built and fakes.smokes == smoked


# ---- a baseline that cannot even be read: bounded, and "cannot judge" (issue 34) ----------------------

def test_a_deeply_nested_baseline_report_aborts_instead_of_crashing(served, tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text('{"baseline": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert _exit(path) == EXIT_ABORT_GIT_BISECT
    assert capsys.readouterr().err == (f"error: --bisect-exit {path}: not a number or a smoke report: "
                                       f"not JSON: nested more than 64 levels deep\n")
    assert served == []


def test_a_baseline_nested_just_past_the_bound_aborts_and_one_within_it_is_judged(served, tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({**_report(89.0, 89.1, 88.8), "extra": json.loads("[" * 63 + "]" * 63)}))
    assert _exit(path) == 0
    path.write_text(json.dumps({**_report(89.0, 89.1, 88.8), "extra": json.loads("[" * 64 + "]" * 64)}))
    assert _exit(path) == EXIT_ABORT_GIT_BISECT
    assert capsys.readouterr().err.endswith(": not JSON: nested more than 64 levels deep\n")
    assert len(served) == 1


@contextlib.contextmanager
def unblocked_later(fifo):
    """A safety net for code that blocks on `fifo` (today's fix does not): a writer opens and closes it after a
    minute, so such code fails the test rather than hanging the suite."""
    def open_and_close():
        with contextlib.suppress(OSError):  # nobody reading (the fix): nothing to unblock
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(60, open_and_close)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def test_a_fifo_or_a_folder_as_baseline_aborts_at_once(served, tmp_path, capsys):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # nobody writes to it: reading it would wait for ever
    with unblocked_later(fifo):
        assert _exit(fifo) == EXIT_ABORT_GIT_BISECT
    assert capsys.readouterr().err == (f"error: --bisect-exit {fifo}: not a number or a smoke report: "
                                       f"is not a regular file\n")
    assert _exit(tmp_path) == EXIT_ABORT_GIT_BISECT
    assert capsys.readouterr().err == (f"error: --bisect-exit {tmp_path}: not a number or a smoke report: "
                                       f"is a directory, not a smoke report\n")
    assert served == []


def test_a_baseline_over_the_size_limit_aborts_unread(served, tmp_path, capsys):
    path = tmp_path / "huge.json"
    with path.open("wb") as fh:
        fh.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk used
    assert _exit(path) == EXIT_ABORT_GIT_BISECT
    assert capsys.readouterr().err == (f"error: --bisect-exit {path}: not a number or a smoke report: "
                                       f"is larger than the {MAX_INPUT_BYTES // 1024} KiB limit for a smoke report\n")
    assert served == []


def test_a_deeply_nested_bisect_log_line_is_one_line(tmp_path):
    log = BisectLog(tmp_path)
    log.path.parent.mkdir(parents=True, exist_ok=True)
    log.path.write_text('{"event": "start"}\n' + "[" * 100_000 + "]" * 100_000 + "\n" + '{"event": "skip"}\n')
    with pytest.raises(BisectLogError) as caught:
        log.read()
    assert str(caught.value) == f"{log.path}:2: not a bisect event"


# ---- what is not a verdict is never "bad" (attack pass of issue 34) -------------------------------------

def test_a_crash_while_judging_aborts_instead_of_answering_bad(monkeypatch, tmp_path, capsys):
    # Finite positive samples near the float limit pass every check on the report, then overflow the
    # statistics (OverflowError is no ValueError): a traceback is exit 1, "bad" to `git bisect run`.
    huge = _report(1.7e308, 1e308, 1e308, 1e308, 1e308)
    monkeypatch.setattr(gitexit, "run_smoke", lambda stack, image, options: SimpleNamespace(data=huge))
    path = tmp_path / "good.json"
    path.write_text(json.dumps(huge))
    assert _exit(path) == EXIT_ABORT_GIT_BISECT
    err = capsys.readouterr().err
    assert err.startswith("error: --bisect-exit cannot judge this commit: OverflowError: ") and err.count("\n") == 1


@pytest.mark.parametrize("tail", [("--bogus",), ("--mount",), ("--runs",), ("--tp",)])
def test_a_bad_command_line_under_bisect_exit_aborts(tmp_path, tail):
    # exit 2 is "bad" to `git bisect run`: a typo in the command it runs would mark every commit bad
    proc = run_invoke("smoke", "--bisect-exit", "89", "--image", "img:tag", "--model", "m", *tail, cwd=tmp_path,
                      timeout=120)
    assert proc.returncode == EXIT_ABORT_GIT_BISECT, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: smoke: ")
    assert proc.stdout == ""
    plain = run_invoke("smoke", "--image", "img:tag", "--model", "m", *tail, cwd=tmp_path, timeout=120)
    assert plain.returncode == 2 and plain.stderr == proc.stderr
