"""The process's signal state is the same after each test as before it, or that test fails (a pytest plugin).

A test (or the product code it runs in process) that leaves a handler of its own installed, a signal blocked or a
timer armed changes what every later test in the same worker sees: a SIGINT swallowed by `signals_raise`'s
handler (it ignores every signal after its first) or by `deferred`'s (it only notes it) turns a later Ctrl-C test
into "DID NOT RAISE", far from the cause. Here the test that leaks is the one that fails, with the signal and the
handler named, and the state is put back so that no later test is a victim.

What is compared, taken as each test's set-up starts and again as its tear-down ends (its own fixtures' clean-up
done): the handlers of the signals the product handles (`core.signals.HANDLED`) and of SIGALRM, SIGPIPE and
SIGCHLD, the main thread's blocked-signal mask, and the real-time interval timer (pytest-timeout's, armed for the
whole of each test: a test that moves or clears it leaks too). A few system calls a test: no child process.

And once per process, as it starts: SIGINT ignored on entry (a shell script's background job, `cmd &`, starts
that way, and Python then installs no handler of its own) is given Python's own handler, so the tests see the
same process whether the run was started from a terminal or from a script (CI runs 13 and 14 were started from
a script's background job: every in-process Ctrl-C test then said "DID NOT RAISE").
"""

from __future__ import annotations

import signal
from typing import NamedTuple

import pytest

from sglstack.core.signals import HANDLED

WATCHED = tuple(sorted({*HANDLED, signal.SIGALRM, signal.SIGPIPE, signal.SIGCHLD}))
_BEFORE = pytest.StashKey["SignalState"]()


class SignalState(NamedTuple):
    handlers: tuple[object, ...]  # as WATCHED lists them
    blocked: frozenset[int]
    timer: tuple[float, float]  # ITIMER_REAL: (seconds left, interval)


def current() -> SignalState:
    return SignalState(tuple(signal.getsignal(sig) for sig in WATCHED),
                       frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
                       signal.getitimer(signal.ITIMER_REAL))


def describe(handler: object) -> str:
    """A handler as a reader finds it: SIG_DFL/SIG_IGN by name, a function with its module."""
    if isinstance(handler, signal.Handlers):
        return handler.name
    module = getattr(handler, "__module__", None)
    return f"{module}: {handler!r}" if module else repr(handler)


def leaks(before: SignalState, after: SignalState) -> list[str]:
    """What `after` changed of `before`, one phrase each (empty when nothing): a timer counting down is no change,
    one armed, disarmed, given another interval or pushed later is."""
    found = [f"{signal.Signals(sig).name} handler {describe(was)} became {describe(now)}"
             for sig, was, now in zip(WATCHED, before.handlers, after.handlers, strict=True) if was != now]
    if after.blocked - before.blocked:
        found.append(f"{_names(after.blocked - before.blocked)} left blocked")
    if before.blocked - after.blocked:
        found.append(f"{_names(before.blocked - after.blocked)} left unblocked")
    (was_left, was_every), (now_left, now_every) = before.timer, after.timer
    if (was_left > 0) != (now_left > 0) or was_every != now_every or now_left > was_left:
        found.append(f"the real-time timer (SIGALRM) was {was_left:.3f} s left (interval {was_every}), "
                     f"is {now_left:.3f} s (interval {now_every})")
    return found


def _names(signums: frozenset[int]) -> str:
    return ", ".join(sorted(signal.Signals(sig).name for sig in signums))


def restore(state: SignalState) -> None:
    for sig, handler in zip(WATCHED, state.handlers, strict=True):
        if handler is not None:  # None: a handler not set from Python, which Python cannot put back
            signal.signal(sig, handler)  # type: ignore[arg-type]
    signal.pthread_sigmask(signal.SIG_SETMASK, state.blocked)
    signal.setitimer(signal.ITIMER_REAL, *state.timer)


def pytest_configure(config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_BEFORE] = current()
    return (yield)


@pytest.hookimpl(trylast=True)
def pytest_exception_interact(node) -> None:
    """A test has failed: pytest-timeout has just stopped its timer and put SIGALRM back to SIG_DFL (its own
    `pytest_exception_interact`, tryfirst), so that a debugger is not cut short. From here that is the state the
    test must end in."""
    before = node.stash.get(_BEFORE, None)
    if before is not None:
        now = current()
        handlers = tuple(now_handler if sig == signal.SIGALRM else was
                         for sig, was, now_handler in zip(WATCHED, before.handlers, now.handlers, strict=True))
        node.stash[_BEFORE] = before._replace(handlers=handlers, timer=now.timer)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    before = item.stash.get(_BEFORE, None)
    if before is None:
        return result
    found = leaks(before, current())
    if found:
        restore(before)
        pytest.fail(f"{item.nodeid} left the process's signal state changed: {'; '.join(found)}", pytrace=False)
    return result
