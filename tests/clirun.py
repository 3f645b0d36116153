"""Run this checkout's `invoke` tasks as a user would: from any folder, as a separate process."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_invoke(*args: str, cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 900) -> subprocess.CompletedProcess:
    """`invoke --search-root REPO ARGS...` in `cwd`, output captured; never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


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
