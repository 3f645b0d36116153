"""tests/lib/signal_guard.py: the test that leaves the process's signal state changed fails, no later one."""

from __future__ import annotations

import os
import signal
import types
from pathlib import Path

import pytest
import signal_guard
from signal_guard import SignalState, leaks
from waits import sigint_once_written

from sglstack.core.safefiles import write_with

LIB = Path(signal_guard.__file__).resolve().parent
REPO = LIB.parents[1]
INNER = '''
import signal

from sglstack.core.signals import deferred, signals_raise


def test_clean():
    with signals_raise(), deferred():
        pass


LEFT_OPEN = []


def test_a_context_entered_and_never_left():
    LEFT_OPEN.append(signals_raise())  # as a generator never closed leaves it (held, as gc.freeze holds one)
    LEFT_OPEN[0].__enter__()


def test_not_a_victim():
    assert "signals_raise" not in repr(signal.getsignal(signal.SIGINT))


def test_blocks_sighup():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGHUP])


def test_arms_a_timer():
    signal.setitimer(signal.ITIMER_REAL, 5000)  # later than any hang limit of the run this one runs in


def test_after_them():
    assert signal.SIGHUP not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.getitimer(signal.ITIMER_REAL)[0] < 4000


def test_close_what_was_left_open():  # its handlers were put back already: this changes nothing
    LEFT_OPEN.pop().__exit__(None, None, None)
'''


def test_each_leaking_test_fails_by_name_and_the_next_tests_pass(pytester):
    pytester.makeconftest("pytest_plugins = ['signal_guard']\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-q", "-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=7, errors=3)  # the three leakers pass, then fail in their tear-down
    result.stdout.fnmatch_lines([
        "*test_inner.py::test_a_context_entered_and_never_left left the process's signal state changed: "
        "SIGHUP handler * became sglstack.core.signals: <function signals_raise.<locals>.handler at *>; "
        "SIGINT handler * became sglstack.core.signals: <function signals_raise.<locals>.handler at *>; "
        "SIGTERM handler * became *",
    ])
    result.stdout.fnmatch_lines(["*test_inner.py::test_blocks_sighup left * changed: SIGHUP left blocked"])
    result.stdout.fnmatch_lines(["*test_inner.py::test_arms_a_timer left * changed: the real-time timer (SIGALRM) "
                                 "was * s left (interval 0.0), is * s (interval 0.0)"])
    assert "test_not_a_victim" not in "".join(line for line in result.outlines if "ERROR" in line)


def test_a_failed_test_is_not_blamed_for_the_timer_pytest_timeout_stops(pytester, monkeypatch):
    """Once a test fails, pytest-timeout stops its timer and puts SIGALRM back to SIG_DFL: the test's own doing
    is its failure, not a leak. (In a child: pytest-timeout would stop this test's own timer too.)"""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(LIB), str(REPO), os.environ.get("PYTHONPATH", "")]))
    pytester.makeini("[pytest]\ntimeout = 300\n")
    pytester.makeconftest("pytest_plugins = ['signal_guard']\n")
    pytester.makepyfile(test_inner="def test_fails():\n    assert 1 == 2\n\n\ndef test_passes():\n    pass\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    assert "signal state" not in result.stdout.str()


def state(timer: tuple[float, float] = (0.0, 0.0), blocked: frozenset[int] = frozenset(),
          handlers: tuple[object, ...] | None = None) -> SignalState:
    return SignalState(handlers or tuple(signal.SIG_DFL for _ in signal_guard.WATCHED), blocked, timer)


def test_a_timer_counting_down_is_no_leak_one_moved_or_cleared_is():
    armed = state((100.0, 0.0))
    assert leaks(armed, state((99.5, 0.0))) == []
    assert leaks(armed, state((0.0, 0.0))) == [
        "the real-time timer (SIGALRM) was 100.000 s left (interval 0.0), is 0.000 s (interval 0.0)"]
    assert len(leaks(armed, state((100.5, 0.0)))) == 1  # pushed later: a hang would be ended later
    assert len(leaks(armed, state((99.0, 1.0)))) == 1


def test_a_signal_unblocked_is_a_leak_too():
    assert leaks(state(blocked=frozenset({signal.SIGTERM, signal.SIGHUP})), state()) == [
        "SIGHUP, SIGTERM left unblocked"]


def test_sigint_ignored_on_entry_gets_pythons_own_handler():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a script's background job starts
    try:
        signal_guard.pytest_configure(None)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        signal.signal(signal.SIGINT, previous)
        own = signal.getsignal(signal.SIGINT)
        signal_guard.pytest_configure(None)
        assert signal.getsignal(signal.SIGINT) is own  # a handler of its own is left as it is
    finally:
        signal.signal(signal.SIGINT, previous)


# ---- the Ctrl-C-in-a-write helper (tests/lib/waits.py), with SIGINT ignored on entry --------------------------------

def test_the_ctrl_c_helper_interrupts_a_write_even_where_sigint_was_ignored_on_entry(tmp_path, monkeypatch):
    """As in a shell script's background job (CI runs 13 and 14): with the handler it found (SIG_IGN) the helper's
    SIGINT was dropped and both kernel-cache Ctrl-C tests said "DID NOT RAISE"; it installs Python's own for its
    write, and puts back what it found."""
    module = types.SimpleNamespace(write_with=write_with, __name__="a module that writes")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt), sigint_once_written(monkeypatch, module, 4096):
            module.write_with(tmp_path, tmp_path / "layer", lambda fh: [fh.write(b"x" * 1024) for _ in range(16)])
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert list(tmp_path.iterdir()) == []  # the half-written temp file went with the interrupted write
