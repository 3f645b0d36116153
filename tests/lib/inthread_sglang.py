"""The SGLang double served on a thread of the test process, behind the process adapter's seam.

`running_in_thread` has `adapters.process.running_process`'s signature: it parses the server argv with the
double's own parser (SGLang 0.5.9's flags), answers SGLang's routes and JSON fields with the double's own
`Engine` and `Handler` on the port the argv names, writes the start lines SGLang logs (stamped as SGLang stamps
them) to the log file, and yields a stand-in of the `Popen` the smoke server reads (`poll`, `wait`, `pid`).
No venv, no child process: a smoke run is measured in process, fast enough for mutation testing.

What the double reads from its environment (SGLANG_DOUBLE_*) is taken from the `env` the server is given.
SGLANG_DOUBLE_CRASH_AT_START ends the "process" with exit code 1 and the traceback lines before it serves;
SGLANG_DOUBLE_NEVER_HEALTHY keeps it answering 503.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import runpy
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from httpserve import ThreadedServer

from sglstack.smoke import report as report_mod
from sglstack.smoke import server as server_mod

DOUBLE = Path(__file__).resolve().parents[1] / "doubles" / "sglang-double"


@contextlib.contextmanager
def _double_on_path() -> Iterator[None]:
    """The double's `sglang` importable inside; taken out of sys.modules again after, so that nothing else in the
    test process sees the double as an installed SGLang."""
    saved = {name: mod for name, mod in sys.modules.items() if name == "sglang" or name.startswith("sglang.")}
    sys.path.insert(0, str(DOUBLE))
    try:
        yield
    finally:
        sys.path.remove(str(DOUBLE))
        for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def _double_modules() -> tuple[Any, Any]:
    """The double's http_server and server_args modules, imported from its folder."""
    with _double_on_path():
        return (importlib.import_module("sglang.srt.entrypoints.http_server"),
                importlib.import_module("sglang.srt.server_args"))


HTTP_SERVER, SERVER_ARGS = _double_modules()


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time()))


class ThreadProc:
    """What the smoke server reads of a `subprocess.Popen`: `poll`, `wait` and `pid`."""

    pid = 0

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.waited: list[float | None] = []

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.waited.append(timeout)
        if self.returncode is None:
            import subprocess  # the exception Popen.wait raises, as the caller catches it

            raise subprocess.TimeoutExpired("thread-double", timeout or 0)
        return self.returncode


class ThreadServers:
    """The servers started through `running_in_thread`: each one's argv, env and log path, and the procs."""

    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []
        self.ended: list[str] = []
        self.engines: list[Any] = []  # each server's double engine: a test may make one ready (`ready = True`)
        self.hold_ready = False  # True: servers start unready, for the test to make ready on its own clock

    @contextlib.contextmanager
    def running_in_thread(self, argv: Sequence[str], *, env: Mapping[str, str], log_path: Path,
                          cwd: str | None = None, log_root: Path | None = None) -> Iterator[ThreadProc]:
        if list(argv[1:3]) == ["-m", "sglang.compile_deep_gemm"]:
            yield self._compile_deep_gemm(argv, env, log_path)
            return
        assert list(argv[1:3]) == ["-m", "sglang.launch_server"], argv
        args = SERVER_ARGS.parse_server_args(list(argv[3:]))
        kind = "eagle3" if args["speculative_algorithm"] else "baseline"
        self.started.append({"kind": kind, "argv": list(argv), "env": dict(env), "log_path": log_path,
                             "log_root": log_root, "args": args})
        double_env = _double_env(env)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        proc = ThreadProc()
        httpd: ThreadedServer | None = None
        with open(log_path, "a", encoding="utf-8") as log, mock.patch.dict(os.environ, double_env):
            def line(text: str) -> None:
                log.write(f"[{_stamp()}] {text}\n")
                log.flush()

            line(f"server_args={args}")
            engine = HTTP_SERVER.Engine(args)
            speculative = engine.speculative
            if HTTP_SERVER._applies("SGLANG_DOUBLE_CRASH_AT_START", speculative):
                line("Scheduler hit an exception: Traceback (most recent call last):")
                line("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB (simulated by the double)")
                proc.returncode = 1
            else:
                handler = type("H", (HTTP_SERVER.Handler,), {"engine": engine, "log_message": lambda *a: None})
                httpd = ThreadedServer(handler, host=args["host"], port=args["port"], poll_interval=0.01)
                line("Load weight end. elapsed=0.00 s, type=DoubleForCausalLM, avail mem=0.00 GB, mem usage=0.00 GB.")
                self.engines.append(engine)
                HTTP_SERVER._capture_graphs(args, speculative)  # its kernel files, in the caches env names
                if not self.hold_ready and not HTTP_SERVER._applies("SGLANG_DOUBLE_NEVER_HEALTHY", speculative):
                    line("Capture target decode CUDA graph end. Time elapsed: 0.00 s.")
                    engine.ready = True
                    line("The server is fired up and ready to roll!")
            try:
                yield proc
            finally:
                if httpd is not None:
                    httpd.close()
                if proc.returncode is None:
                    proc.returncode = -15
                self.ended.append(kind)

    def _compile_deep_gemm(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> ThreadProc:
        """The double's DeepGEMM pre-compiler run to its end, its output in the log: a proc that exited 0."""
        self.started.append({"kind": "compile_deep_gemm", "argv": list(argv), "env": dict(env), "log_path": log_path})
        log_path.parent.mkdir(parents=True, exist_ok=True)
        proc = ThreadProc()
        with (open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log),
              mock.patch.dict(os.environ, _double_env(env)), mock.patch.object(sys, "argv", ["x", *argv[3:]]),
              _double_on_path()):
            runpy.run_path(str(DOUBLE / "sglang" / "compile_deep_gemm.py"), run_name="__main__")
        proc.returncode = 0
        return proc


def _double_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the double reads of the environment it is given: its own settings and the caches it writes to."""
    return {k: v for k, v in env.items() if k.startswith(("SGLANG_", "TRITON_", "FLASHINFER_"))}


def serve_in_threads(monkeypatch: Any) -> ThreadServers:
    """The process runner's seam (`server.running_process`) served by a new `ThreadServers`, and the report's
    chart not drawn (matplotlib, seconds a report: its own tests draw it): what a test's `servers` fixture is."""
    threads = ThreadServers()
    monkeypatch.setattr(server_mod, "running_process", threads.running_in_thread)
    monkeypatch.setattr(report_mod, "smoke_chart", lambda data, history: b"png")
    return threads


def python_env(root: Path) -> Path:
    """A folder the process runner takes for a Python environment: an executable bin/python3 (never run here)."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python3").symlink_to(sys.executable)
    return root
