"""tests/lib/clirun.py: a task run in a fork of the test process ends as it ends in a real `python -m invoke`,
starts as a fresh Python would (whatever the test process set before), and leaves nothing behind in it."""

from __future__ import annotations

import difflib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import warnings

import clirun
import pytest
from clirun import REPO, in_a_fork, run_invoke

from sglstack.core import console as console_mod

CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"

# The console path as a user starts it, once per kind of outcome: a listing, help, invoke's parser
# refusing (exit 2), a task refusing bad input (exit 2), a task that does its work and writes files.
CALLS = {
    "list": ("--list",),
    "help": ("render", "-h"),
    "unknown task": ("rendr",),
    "unknown stack": ("render", "--stack", "nope", "--stacks-file", str(CPU_MATRIX)),
    "render": ("render", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX)),
    "stacks": ("stacks", "--stacks-file", str(CPU_MATRIX)),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_fork_ends_as_a_real_invoke_process_ends(tmp_path, name):
    outcomes = []
    for real in (True, False):
        where = tmp_path / ("real" if real else "fork")
        where.mkdir()
        proc = run_invoke(*CALLS[name], cwd=where, env={"SGLSTACK_BUILD_DIR": str(where / "build")},
                          real_process=real)
        written = sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file())
        outcomes.append((proc.returncode, proc.stdout.replace(str(where), "WHERE"),
                         proc.stderr.replace(str(where), "WHERE"), written))
    assert outcomes[0] == outcomes[1], "".join(difflib.unified_diff(
        repr(outcomes[0]).replace("\\n", "\\n\n").splitlines(True),
        repr(outcomes[1]).replace("\\n", "\\n\n").splitlines(True), "real", "fork"))
    assert outcomes[0][0] == (2 if name.startswith("unknown") else 0), outcomes[0]


def test_a_task_the_test_process_parsed_keeps_its_help_in_a_fork(tmp_path):
    # invoke takes a task's help texts out of it as it parses its options (Task.arg_opts pops them).
    clirun.task_collection()["render"].get_arguments()
    real = run_invoke("render", "-h", cwd=tmp_path, real_process=True)
    fork = run_invoke("render", "-h", cwd=tmp_path, real_process=False)
    assert "output folder (default: build/STACK" in real.stdout
    assert (fork.returncode, fork.stdout, fork.stderr) == (real.returncode, real.stdout, real.stderr)



def _task_modules() -> None:
    import sglstack.cli.collection  # noqa: F401  (what tasks.py imports)

    print(json.dumps({n: id(m) for n, m in sys.modules.items() if n.partition(".")[2].startswith("cli")
                      and n.startswith("sglstack.")}))


def test_a_fork_takes_task_modules_imported_once_for_the_forks_never_the_test_processes(tmp_path):
    """A fork's sglstack.cli is the one clirun imported aside for the forks: not this process's (which a test
    may have parsed or patched), and not imported again in each fork (most of what a fork cost)."""
    import sglstack.cli.collection as own

    clirun._warm()
    proc = in_a_fork(_task_modules, cwd=tmp_path, env={}, timeout=60, shown=["modules"])
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen == {name: id(module) for name, module in clirun._PRISTINE.items()}
    assert seen["sglstack.cli.collection"] != id(own) and sys.modules["sglstack.cli.collection"] is own

def _probe() -> None:
    """What a fresh Python's program would see, as one JSON line."""
    warnings.warn("a warning of the task's", UserWarning, stacklevel=1)
    print(json.dumps({
        "cwd": os.getcwd(), "env": dict(os.environ), "tmp": tempfile.gettempdir(),
        "root_handlers": len(logging.getLogger().handlers), "root_level": logging.getLogger().level,
        "console_cached": console_mod.console.cache_info().currsize,
        "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "stdout_is_fd_1": sys.stdout.fileno() == 1,
    }))
    logging.getLogger("sglstack.probe").warning("a logged warning")


def test_a_fork_starts_as_a_fresh_python_whatever_the_test_process_set(tmp_path, monkeypatch, caplog):
    console_mod.console()  # a cache filled here
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # computed here from another TMPDIR
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        (tmp_path / "work").mkdir()
        (tmp_path / "tmp").mkdir()
        env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path / "tmp"), "ONLY_THIS": "1"}
        with warnings.catch_warnings(record=True):  # the test process records warnings; the task prints them
            warnings.simplefilter("error")
            proc = in_a_fork(_probe, cwd=tmp_path / "work", env=env, timeout=60, shown=["probe"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen == {"cwd": str(tmp_path / "work"), "env": env, "tmp": str(tmp_path / "tmp"), "root_handlers": 0,
                    "root_level": logging.WARNING, "console_cached": 0, "sigint": True, "sigterm": True,
                    "stdout_is_fd_1": True}
    assert proc.stderr.splitlines()[0].endswith(": UserWarning: a warning of the task's")
    assert proc.stderr.splitlines()[-1] == "a logged warning"  # logging's last resort, as in a fresh Python


def _leave_traces() -> None:
    os.environ["LEFT_BY_THE_TASK"] = "1"
    os.chdir("/")
    clirun.FORK_BY_DEFAULT = "changed by the task"
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    raise SystemExit(3)


def test_nothing_a_forked_task_does_comes_back_to_the_test_process(tmp_path):
    before = (dict(os.environ), os.getcwd(), clirun.FORK_BY_DEFAULT, signal.getsignal(signal.SIGUSR1))
    proc = in_a_fork(_leave_traces, cwd=tmp_path, env={}, timeout=60, shown=["traces"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "", "")
    assert (dict(os.environ), os.getcwd(), clirun.FORK_BY_DEFAULT, signal.getsignal(signal.SIGUSR1)) == before


def _crash() -> None:
    print("half", end="")
    raise RuntimeError("uncaught")


def test_an_uncaught_exception_is_exit_1_with_its_traceback_and_the_output_before_it(tmp_path):
    proc = in_a_fork(_crash, cwd=tmp_path, env={}, timeout=60, shown=["crash"])
    assert (proc.returncode, proc.stdout) == (1, "half")
    assert proc.stderr.startswith("Traceback (most recent call last):\n")
    assert proc.stderr.endswith("RuntimeError: uncaught\n")


def _interrupted() -> None:
    raise KeyboardInterrupt


def test_an_uncaught_keyboard_interrupt_ends_the_fork_by_sigint_as_python_does(tmp_path):
    proc = in_a_fork(_interrupted, cwd=tmp_path, env={}, timeout=60, shown=["interrupted"])
    assert proc.returncode == -signal.SIGINT
    assert proc.stderr.endswith("KeyboardInterrupt\n")


def _hang() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open("pid", "w") as f:
        f.write(str(os.getpid()))
    while True:
        signal.pause()


def test_a_fork_past_its_time_limit_is_killed_and_raises_as_subprocess_run_does(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        in_a_fork(_hang, cwd=tmp_path, env={}, timeout=5, shown=["hang"])
    with pytest.raises(ProcessLookupError):  # killed and reaped: no process left behind
        os.kill(int((tmp_path / "pid").read_text()), 0)


@pytest.mark.parametrize("variable", ["PYTHONHASHSEED", "LC_ALL", "LANG"])
def test_a_variable_read_as_python_starts_gets_a_real_process(tmp_path, monkeypatch, variable):
    def no_fork(*_a, **_k):
        raise AssertionError("forked")

    monkeypatch.setattr(clirun, "in_a_fork", no_fork)
    monkeypatch.setattr(clirun, "FORK_BY_DEFAULT", True)
    proc = run_invoke("--list", cwd=tmp_path, env={variable: os.environ.get(variable, "C.UTF-8")
                                                   if variable != "PYTHONHASHSEED" else "0"})
    assert proc.returncode == 0 and "render" in proc.stdout


def test_the_tests_in_tests_cli_run_invoke_in_a_fork():
    assert clirun.FORK_BY_DEFAULT is True
