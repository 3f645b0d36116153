"""Run this checkout's `invoke` tasks as a user would: from any folder, in a process of their own.

Two ways, the same outcome (tests/cli/test_clirun.py holds them to it):
- a real child, `python -m invoke ...`: the console path as a user starts it (e2e tests, and any test that
  asks `real_process=True`);
- a fork of the test process, which then runs invoke's own `__main__` as `python -m invoke` does (tests/cli,
  through tests/conftest.py). The fork already holds invoke and sglstack imported, which is most of what
  a fresh Python spends on each call (about 0.25 s on an idle core; tests/cli makes hundreds of calls).
  Being a process, it leaks nothing back: the task's env, cwd, signal handlers, module globals and open files
  end with it. What the test process set that a fresh Python would not have (functools caches, the task
  objects, the temp dir, logging handlers, warning filters, signal handlers, pytest's stdio) is put back to a
  fresh start in the child.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import importlib.util
import io
import locale
import logging
import os
import pkgutil
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
# Read by Python itself as it starts (or by the locale it sets up then): a fork has started already, so a
# call that sets one of these runs as a real child.
_STARTUP_VARIABLES = ("PYTHON", "LC_", "LANG")
# tests/conftest.py sets this for the tests in tests/cli; elsewhere every call is a real child.
FORK_BY_DEFAULT = False


def run_invoke(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900,
               real_process: bool | None = None) -> subprocess.CompletedProcess:
    """`invoke --search-root REPO ARGS...` in `cwd`, output captured; never raises on a non-zero exit.

    A forked child unless `real_process` (default: not FORK_BY_DEFAULT) or `env` sets a variable Python
    reads at start-up, or this process's sglstack is not this checkout's."""
    argv = ["--search-root", str(REPO), *args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    if real_process is None:
        real_process = not FORK_BY_DEFAULT
    if real_process or not _can_fork(env or {}):
        return subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=cwd, capture_output=True, text=True,
                              check=False, timeout=timeout, env=full_env)
    _warm()
    return in_a_fork(functools.partial(_invoke_main, argv), cwd=Path(cwd), env=full_env, timeout=timeout,
                     shown=[sys.executable, "-m", "invoke", *argv])


def start_invoke(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    """`invoke --search-root REPO ARGS...` started as a real child (a test that signals it, or reads it as it
    goes), this checkout's sglstack on its path; its output piped as text unless `popen` says otherwise."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen([sys.executable, "-m", "invoke", "--search-root", str(REPO), *args], cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, **popen)


def _can_fork(env: dict[str, str]) -> bool:
    if any(name.startswith(_STARTUP_VARIABLES) and name != "PYTHONPATH" for name in env):
        return False
    import sglstack

    return Path(sglstack.__file__).resolve().is_relative_to(REPO)


def _warm() -> None:
    """Import what every call imports, once, in this process: the forks start with it; and sglstack.cli's
    modules a second time, kept aside (_PRISTINE), which a fork takes instead of importing them anew.
    Once, whichever of a test's threads calls first (the others wait: the import aside swaps sys.modules)."""
    with _WARM_LOCK:
        if _PRISTINE:
            return
        import invoke.program  # noqa: F401

        task_collection()
        _import_the_parts()
        _PRISTINE.update(_imported_aside(("sglstack.cli.collection", "sglstack.cli.program")))
        gc.freeze()  # all of sglstack, imported to stay: out of this process's collections too (as the forks')


_WARM_LOCK = threading.Lock()


def _import_the_parts() -> None:
    """Every module of sglstack below its command line, imported here once rather than by each fork that needs
    it (a fork's task imported about a dozen, and cryptography, jsonschema, docker with them). Sound because
    they only define at import (no module reads the environment, the folder or a clock as it loads): a module
    imported before it is used is the same module. sglstack.cli is the forks' own (_PRISTINE); inimage runs in
    images, and a `__main__` is a program."""
    import sglstack

    for info in pkgutil.walk_packages(sglstack.__path__, "sglstack."):
        if not info.name.startswith(("sglstack.cli", "sglstack.inimage")) and not info.name.endswith("__main__"):
            importlib.import_module(info.name)


# sglstack.cli's modules as a fresh import leaves them, never used in this process (so never parsed by invoke,
# never monkeypatched by a test): a fork puts them in sys.modules, as a fresh Python's import would, for
# about a third of what executing their bodies again costs (most of a fork's time).
_PRISTINE: dict[str, ModuleType] = {}


def _is_fresh(name: str) -> bool:
    return name in _FRESH_MODULES or name.startswith("sglstack.cli.")


def _imported_aside(names: tuple[str, ...]) -> dict[str, ModuleType]:
    """Import `names` anew and return the fresh sglstack.cli modules; this process's own stay in place."""
    own = {n: m for n, m in sys.modules.items() if _is_fresh(n)}
    for name in own:
        del sys.modules[name]
    try:
        for name in names:
            importlib.import_module(name)
        return {n: m for n, m in sys.modules.items() if _is_fresh(n) and n.startswith("sglstack.cli")}
    finally:
        for name in [n for n in sys.modules if _is_fresh(n)]:
            del sys.modules[name]
        _install(own)
        for name in _FRESH_MODULES:  # a package attribute that an import aside set and this process lacks
            parent, _, child = name.rpartition(".")
            if name not in own and parent in sys.modules and hasattr(sys.modules[parent], child):
                delattr(sys.modules[parent], child)


def _install(modules: dict[str, ModuleType]) -> None:
    """Put `modules` in sys.modules and as their packages' attributes, as importing them sets both."""
    sys.modules.update(modules)
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)


def _invoke_main(argv: list[str]) -> None:
    sys.argv = ["invoke", *argv]
    runpy.run_module("invoke", run_name="__main__", alter_sys=True)


def in_a_fork(main: Callable[[], object], *, cwd: Path, env: dict[str, str], timeout: float,
              shown: list[str]) -> subprocess.CompletedProcess:
    """Run `main()` in a fork of this process as if it were a fresh Python's program, in `cwd` with
    exactly `env`; its exit status and output as `subprocess.run(shown, capture_output=True, text=True)`
    gives them (TimeoutExpired past `timeout`, the child killed)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()  # or the child writes this process's buffered output a second time
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(main, cwd=cwd, env=env, out=out.fileno(), err=err.fileno())
                if code < 0:  # an uncaught KeyboardInterrupt: Python ends by the signal itself
                    signal.signal(-code, signal.SIG_DFL)
                    os.kill(os.getpid(), -code)
            finally:
                os._exit(code & 0xFF)
        try:
            code = _wait(pid, timeout, shown)
        except BaseException:  # as subprocess.run: the child does not outlive a failed wait (a test's time limit)
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            raise
        return subprocess.CompletedProcess(shown, code, _read(out), _read(err))


def _wait(pid: int, timeout: float, shown: list[str]) -> int:
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(shown, timeout)  # the child is killed by the caller
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _read(file) -> str:
    """What the child wrote, decoded as `subprocess.run(text=True)` decodes it."""
    file.seek(0)
    text = file.read().decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _child(main: Callable[[], object], *, cwd: Path, env: dict[str, str], out: int, err: int) -> int:
    """Run `main` as a fresh Python would in `cwd` with `env`, writing to `out` and `err`; its exit code."""
    gc.freeze()  # the test process's objects: a collection here need not walk them
    atexit._clear()  # the test process's handlers are not this process's
    os.dup2(out, 1)
    os.dup2(err, 2)
    try:
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=sys.__stdout__.encoding)
    except OSError:  # no fd 0: a fresh Python has no sys.stdin then
        sys.stdin = None  # type: ignore[assignment]
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=sys.__stdout__.encoding,
                                  errors=sys.__stdout__.errors)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=sys.__stderr__.encoding,
                                  errors="backslashreplace", line_buffering=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    code = 1
    try:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        _fresh_start()
        main()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException as exc:  # what Python prints for an uncaught exception, and its exit code
        traceback.print_exception(exc)
        code = -signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
    try:
        threading._shutdown()  # as a Python ending: wait for the threads the task left running
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                code = code or 120  # Python's own exit code when it cannot flush stdout at the end
    return code


def _exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _fresh_start() -> None:
    """Put back what this (the test) process changed that a fresh Python would not have."""
    # The task objects anew, and invoke's Program: parsing a task's options takes its help texts out of it
    # (invoke's Task.arg_opts pops them), so a task the test process once parsed would print a bare -h.
    for name in [n for n in sys.modules if _is_fresh(n)]:
        del sys.modules[name]
    _install(_PRISTINE)  # none before _warm(): then imported anew by the task
    for name, module in list(sys.modules.items()):
        if name == "sglstack" or name.startswith("sglstack."):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()
    tempfile.tempdir = None  # read again from TMPDIR
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    logging.disable(logging.NOTSET)
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.simplefilter("ignore", category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    warnings.showwarning = _show_warning
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGALRM):
        signal.signal(signum, _FRESH_HANDLERS.get(signum, signal.SIG_DFL))
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


_FRESH_MODULES = ("invoke.main", "tasks", "sglstack.cli")
_FRESH_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGPIPE: signal.SIG_IGN}


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def task_collection():
    """This checkout's `tasks.ns`, loaded as invoke loads it (tasks.py is not a package module)."""
    spec = importlib.util.spec_from_file_location("sglstack_tasks_under_test", REPO / "tasks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ns


def interrupt_when(proc: subprocess.Popen, ready: Callable[[], bool], signum: int, *, what: str,
                   settle_s: float = 0.0, timeout: float = 60) -> tuple[str, str]:
    """Send `signum` to `proc` once `ready()` holds (after `settle_s` more), and return its output.

    A `proc` that exits first, or a `ready` that never comes within `timeout`, fails the test; `proc` is
    killed whatever happens, so a failing test leaves no process behind."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{what} never started"
            time.sleep(0.2)
        time.sleep(settle_s)
        proc.send_signal(signum)
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
