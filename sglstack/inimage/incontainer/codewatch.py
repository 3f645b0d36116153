"""The files a verified import is watched on (stdlib only; a sibling of importcheck.py in the image's tools
folder): imported through probes that say which of their functions started, with an audit hook that says
whether anything but the probed loader read their source, ran their code past the probes, or started another
Python (a child, a fork) whose code no probe sees. What is done with that is `codemap.py`'s.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib.machinery
import json
import os
import re
import shutil
import sys
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

try:  # imported as sglstack.inimage.incontainer.codewatch (the tests, the host)
    from .codemap import MODULE, PROBE, _entries_of, compile_warnings, compiled, file_map, probed, started_flags
except ImportError:  # run as a script in the image: its sibling in the tools folder
    from codemap import (  # type: ignore[no-redef]
        MODULE,
        PROBE,
        _entries_of,
        compile_warnings,
        compiled,
        file_map,
        probed,
        started_flags,
    )

_SPAWNS = ("os.fork", "os.forkpty", "subprocess.Popen", "os.posix_spawn", "os.exec", "os.system", "fork_exec")
_WORDS = re.compile(r"[\s;&|()<>'\"`]+")  # a shell command's words, roughly (`cd x && python3 -c ...`)


class Watch:
    """The files asked for, imported through probes: which of their functions started, which modules ran, and
    which of them something other than the importer (or this tool) opened. Install once, before the imports."""

    def __init__(self, paths: Iterable[str], roots: Sequence[str], ours: Iterable[str] = ()) -> None:
        self.paths = {os.path.realpath(p) for p in paths}
        self.names = {n: p for p in self.paths if (n := module_name(p, roots)) is not None}
        self.started: dict[str, set[Any]] = {p: set() for p in self.paths}
        self.read: set[str] = set()
        self.complete = True  # False once something ran that the probes could not see (a forked child's report lost)
        self.probed: list[types.CodeType] = []  # the module code the probed loader made (kept: compared by identity)
        self.ours = tuple({*(os.path.realpath(o) for o in ours), *ours})  # this tool's files: its own reads and fork
        self._names = {os.path.basename(p) for p in self.paths}  # realpath only what may be one of them
        self.loading: tuple[str, int] | None = None  # (path, thread) the probed loader reads now: the import's read

    def install(self) -> None:
        if not self.names:
            return
        # A watched file run before the probes (a .pth at start-up, say) ran code no probe saw.
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and os.path.realpath(path) in self.paths:
                self.complete = False
        sys.meta_path.insert(0, _Finder(self))
        sys.addaudithook(self._audit)
        self._wrap_fork_exec()
        # A probed function run in other globals than its module's (runpy.run_module of a watched module, as the
        # --help child runs sglang.launch_server; FunctionType(code, globals)) finds its probe here, by file.
        builtins.__dict__[PROBE] = self._probe_by_file

    def _probe_by_file(self, line: int) -> None:
        name = sys._getframe(1).f_code.co_filename
        hits = self.started.get(name) if name in self.started else self.started.get(os.path.realpath(name))
        if hits is not None:
            hits.add(line)

    def _wrap_fork_exec(self) -> None:
        """multiprocessing's spawn and forkserver start Python through `_posixsubprocess.fork_exec`, which raises
        no audit event: the call is seen here (what it does is unchanged)."""
        try:
            import _posixsubprocess  # here: CPython's own, absent on other platforms and interpreters
        except ImportError:
            return
        real = _posixsubprocess.fork_exec

        def fork_exec(*args: Any, **kwargs: Any) -> Any:
            argv = list(args[0]) if args and isinstance(args[0], list | tuple) else []
            self._spawned("fork_exec", (argv[0] if argv else None, argv))
            return real(*args, **kwargs)
        _posixsubprocess.fork_exec = fork_exec

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event in _SPAWNS:
            self._spawned(event, args)
            return
        if event == "exec" and args and isinstance(args[0], types.CodeType):
            self._executed(args[0])
            return
        if event != "open" or not args:
            return
        name = os.fspath(args[0]) if isinstance(args[0], os.PathLike) else args[0]
        if isinstance(name, bytes):
            name = os.fsdecode(name)
        if not isinstance(name, str) or os.path.basename(name) not in self._names:  # a link named otherwise: not seen
            return
        path = os.path.realpath(name)
        # Not by the import system's frames: `__loader__.get_source(name)`, `get_data(path)` read through them.
        if path in self.paths and self.loading != (path, threading.get_ident()) and \
                sys._getframe(1).f_code.co_filename not in self.ours:
            self.read.add(path)

    def _executed(self, code: types.CodeType) -> None:
        """A watched file's module code run other than by the probed loader (`spec_from_file_location`, a
        second copy under another name): its functions run unprobed."""
        name = code.co_filename
        if os.path.basename(name) in self._names and os.path.realpath(name) in self.paths and \
                not any(code is ours for ours in self.probed):
            self.complete = False

    def _spawned(self, event: str, args: tuple[Any, ...]) -> None:
        """Another Python started (or this one forked) by what is imported: what it runs is not watched."""
        if event in ("os.fork", "os.forkpty"):
            if sys._getframe(2).f_code.co_filename not in self.ours:
                self.complete = False
            return
        program, argv = (*args, None, None)[:2]
        words = [program, *(argv if isinstance(argv, list | tuple) else [argv])]  # a shell's `-c` command too
        for word in words:  # any word of a shell command: `sh -c "cd x && python3 ..."`, `os.system(...)`
            text = os.fsdecode(word) if isinstance(word, str | bytes | os.PathLike) else ""
            for w in _WORDS.split(text):
                if os.path.basename(w).startswith("python") or w == sys.executable or _python_script(w):
                    self.complete = False
                elif os.path.basename(w) in self._names and os.path.realpath(w) in self.paths:
                    self.read.add(os.path.realpath(w))  # `grep x plug.py`: a child reads its source

    def report(self) -> bytes:
        """What a forked child says of itself for `merge`."""
        return json.dumps({"started": self.hits(), "read": sorted(self.read), "complete": self.complete}).encode()

    def merge(self, started: Mapping[str, Iterable[Any]], read: Iterable[str], complete: bool = True) -> None:
        """What a forked child reported (its probes hit after the fork)."""
        self.complete = self.complete and complete
        for path, hits in started.items():
            if path in self.started:
                self.started[path].update(hits)
        self.read.update(p for p in read if p in self.paths)

    def hits(self) -> dict[str, list[Any]]:
        return {p: sorted(h, key=str) for p, h in self.started.items()}

    def maps(self, source_of: Callable[[str], bytes]) -> dict[str, dict[str, Any]]:
        """{path: stored map} of each file asked for: its code map, what started, whether it was read."""
        out: dict[str, dict[str, Any]] = {}
        for path in sorted(self.paths):
            try:
                source = source_of(path)
                entries = file_map(source, path)
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError) as exc:
                out[path] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            out[path] = {"sha256": hashlib.sha256(source).hexdigest(), "read": path in self.read,
                         "warnings": compile_warnings(source, path),
                         "entry": _entries_of(source, path), "code": started_flags(entries, self.started[path])}
        return out


def module_name(path: str, roots: Sequence[str]) -> str | None:
    """The module a file is imported as from the first of `roots` (sys.path) that holds it."""
    for root in roots:
        base = os.path.realpath(root or ".").rstrip("/") + "/"
        if path.startswith(base) and path.endswith(".py"):
            parts = path[len(base):-3].split("/")
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            if parts and all(p.isidentifier() for p in parts):
                return ".".join(parts)
    return None


def _python_script(word: str) -> bool:
    """Is `word` a program whose `#!` line runs Python (a console script: `torchrun`, an entry point)?"""
    if not word or word.startswith("-") or "=" in word:
        return False
    found = shutil.which(word)
    try:
        with open(found or "", "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


class _Finder:
    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.watch.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        origin = os.path.realpath(spec.origin) if spec is not None and spec.origin else None
        if spec is None or origin != self.watch.names[name]:
            return None
        spec.loader = _ProbedLoader(name, str(spec.origin), self.watch)
        return spec


class _ProbedLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, watch: Watch) -> None:
        super().__init__(fullname, path)
        self._watch = watch
        self._started, self._made = watch.started[os.path.realpath(path)], watch.probed

    def get_code(self, fullname: str) -> types.CodeType:
        self._watch.loading = (os.path.realpath(self.path), threading.get_ident())
        try:
            source = self.get_data(self.path)
        finally:
            self._watch.loading = None
        try:
            code = probed(source, self.path)
        except (RecursionError, MemoryError):  # an AST too deep to compile back (a generated 2000-term sum)
            self._watch.complete = False  # the import goes on as the importer's own; no code map is kept
            return compiled(source, self.path)
        self._made.append(code)
        return code

    def exec_module(self, module: types.ModuleType) -> None:
        self._started.add(MODULE)
        module.__dict__[PROBE] = self._started.add
        super().exec_module(module)
