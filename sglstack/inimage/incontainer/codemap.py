"""What a verified import ran of a file, and whether an edit of that file could change what the import did
(stdlib only: run in the image by importcheck.py; the host only stores what it reports).

An import's outcome (its modules loaded or not, what the server's --help and argv checks print) is decided by
the code the import ran. A function body is compiled into a code object of its own, run only when the function
is called: an edit confined to the bodies of functions the verified import never called, in a file nothing but
the importer read as source, cannot change that outcome. Such an edit is found by comparing code objects, not
text, compiled by the image's own interpreter:

- the code map of a file: each code object (module, class body, function, lambda, comprehension) in pre-order,
  with a digest of everything of it but line numbers (`own`: bytecode, constants, names, flags; a nested code
  object counted by position only) and of what its function object shows without being called (`visible`:
  name, parameters, flags, docstring, free variables);
- which code objects the import started: a function's, by a probe the file is compiled with (only the files
  asked for: a call that adds one number to a set, nothing else of them changes); a module's, when it is run;
  a class body, a lambda or a comprehension counts as started where its parent was (they run with it);
- whether anything but the importer opened the file (an audit hook): `inspect.getsource` (triton's `@jit`,
  `torch.jit.script`) and linecache read it, and what they read is code the import may act on.

An edit is confined when the module was imported and not read, every started code object is the same in the
new file (`own`), and every code object not started keeps its `visible` part (what is under it may change):
then the import runs the same code. Anything else (a file the import did not run, a syntax error, a started
function changed, a parameter renamed) is not confined: the whole check runs.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import importlib.machinery
import json
import marshal
import os
import re
import shutil
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

PROBE = "__sglstack_started__"  # the name each probed function calls, in its module's globals
NOT_IMPORTED = "<not imported>"  # what changed of a file the verified import did not run: all of it
MODULE, CLASS, FUNCTION, INLINE = "module", "class", "function", "inline"
_OPTIMIZED, _VARARGS, _VARKEYWORDS = 0x1, 0x4, 0x8  # inspect.CO_OPTIMIZED, CO_VARARGS, CO_VARKEYWORDS
_SPAWNS = ("os.fork", "os.forkpty", "subprocess.Popen", "os.posix_spawn", "os.exec", "os.system", "fork_exec")
_WORDS = re.compile(r"[\s;&|()<>'\"`]+")  # a shell command's words, roughly (`cd x && python3 -c ...`)
_IMPORTER = ("<frozen importlib._bootstrap_external>", "<frozen importlib._bootstrap>")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, separators=(",", ":")).encode()).hexdigest()[:32]


def _canonical(value: Any, children: list[types.CodeType]) -> Any:
    """A constant as JSON, the same in every process (a frozenset's order follows the hash seed); a nested code
    object by its position among `children`."""
    if isinstance(value, types.CodeType):
        children.append(value)
        return ["code", len(children) - 1]
    if isinstance(value, tuple):
        return ["tuple", [_canonical(v, children) for v in value]]
    if isinstance(value, frozenset):
        return ["frozenset", sorted((_canonical(v, children) for v in value), key=repr)]
    return [type(value).__name__, repr(value)]


def _kind(code: types.CodeType, root: bool) -> str:
    if root:
        return MODULE
    if not code.co_flags & _OPTIMIZED:
        return CLASS
    return INLINE if code.co_name.startswith("<") else FUNCTION


def _visible(code: types.CodeType) -> str:
    """What a function object made from `code` shows without being called (signature, flags, docstring)."""
    named = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & _VARARGS) + \
        bool(code.co_flags & _VARKEYWORDS)
    doc = code.co_consts[0] if code.co_consts and isinstance(code.co_consts[0], str) else None
    return _digest([code.co_name, code.co_qualname, code.co_argcount, code.co_posonlyargcount,
                    code.co_kwonlyargcount, code.co_flags, list(code.co_varnames[:named]), doc,
                    list(code.co_freevars)])


def entry_classes(tree: ast.Module | None) -> list[str]:
    """The class names a model file's module level assigns to `EntryClass` (SGLang's model registry reads them,
    and so does importcheck.py's choice of what to import): all an unimported file can change of an import."""
    names: list[str] = []
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                for t in node.targets):
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            names += [v.id for v in values if isinstance(v, ast.Name)]
    return names


def _entries_of(source: bytes, path: str) -> list[str]:
    try:
        return entry_classes(ast.parse(source, path))
    except (SyntaxError, ValueError):
        return []


def code_map(code: types.CodeType) -> list[list[Any]]:
    """[[at, kind, own, visible, children]] of `code` and everything compiled inside it, in pre-order; `at` is
    `first line:qualified name` (how a started function is found)."""
    out: list[list[Any]] = []

    def walk(c: types.CodeType, root: bool) -> None:
        children: list[types.CodeType] = []
        consts = [_canonical(v, children) for v in c.co_consts]
        own = _digest([c.co_code.hex(), consts, list(c.co_names), list(c.co_varnames), list(c.co_freevars),
                       list(c.co_cellvars), c.co_flags, c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount,
                       c.co_nlocals, c.co_stacksize, c.co_exceptiontable.hex(), c.co_qualname])
        out.append([f"{c.co_firstlineno}:{c.co_qualname}", _kind(c, root), own, _visible(c), len(children)])
        for child in children:
            walk(child, False)
    walk(code, True)
    return out


def file_map(source: bytes, path: str) -> list[list[Any]]:
    """The code map of a file's source, a code object that gets no probe (not a `def`: a type alias's lazy value,
    a TypeVar's bound, 3.14's `__annotate__`) counted as run with its parent: something may evaluate it at
    import (pydantic, `typing.get_type_hints`, `X.__value__`) and no probe would say so."""
    with warnings.catch_warnings():  # compile_warnings says what they are; a filter set by an import is not ours
        warnings.simplefilter("ignore")
        entries = code_map(compiled(source, path))
        defs = [PROBE in c.co_names for c in _preorder(probed(source, path))]
    return [[e[0], INLINE if e[1] == FUNCTION and not d else e[1], *e[2:]]
            for e, d in zip(entries, defs, strict=True)]  # the probes add no code object: the same shape


def _preorder(code: types.CodeType) -> list[types.CodeType]:
    out = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _preorder(const)
        elif isinstance(const, tuple | frozenset):
            out += [c for v in _flat(const) for c in _preorder(v)]
    return out


def _flat(value: Any) -> list[types.CodeType]:
    if isinstance(value, types.CodeType):
        return [value]
    if isinstance(value, tuple):
        return [c for v in value for c in _flat(v)]
    if isinstance(value, frozenset):
        return [c for v in sorted(value, key=repr) for c in _flat(v)]
    return []


def compile_warnings(source: bytes, path: str) -> list[str]:
    """The warnings compiling `source` gives (an invalid escape, `is` with a literal), by category and message,
    no line: a filter an earlier import set (`warnings.simplefilter("error")`) makes each an import error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(SyntaxError, ValueError):
            compiled(source, path)
    return sorted(f"{w.category.__name__}: {w.message}" for w in caught)


def compiled(source: bytes, path: str) -> types.CodeType:
    """`source` as the importer compiles it (SourceLoader.source_to_code)."""
    return compile(source, path, "exec", dont_inherit=True)


class _Probes(ast.NodeTransformer):
    """Each function's body starts with `PROBE(first line)`, after its docstring; the line is the one its code
    object has (its first decorator's, else its `def`'s), so a hit names the function."""

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        self.generic_visit(node)
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        body = node.body
        at = 1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str) else 0
        where = body[min(at, len(body) - 1)]
        parts = [ast.Name(PROBE, ast.Load()), ast.Constant(first)]
        call = ast.Expr(ast.Call(parts[0], [parts[1]], []))
        for part in (*parts, call.value, call):  # located here: fix_missing_locations recurses through all
            ast.copy_location(part, where)
        body.insert(at, call)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def generic_visit(self, node: ast.AST) -> ast.AST:
        """Statements only: a `def` is one, and is in no expression; walking a long expression (a generated
        2000-term sum) recursed past the interpreter's limit where the importer compiles it fine."""
        for _, value in ast.iter_fields(node):
            for item in value if isinstance(value, list) else []:
                if isinstance(item, ast.stmt | ast.excepthandler | ast.match_case):
                    self.visit(item)
        return node


def probed(source: bytes, path: str) -> types.CodeType:
    tree = _Probes().visit(ast.parse(source, path))
    return compile(tree, path, "exec", dont_inherit=True)


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
        self.skipped = tuple({*_IMPORTER, *(os.path.realpath(o) for o in ours), *ours})
        self.ours = tuple({*(os.path.realpath(o) for o in ours), *ours})
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
            import _posixsubprocess
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
            if sys._getframe(2).f_code.co_filename not in self.skipped:
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


def read_source(path: str) -> bytes:
    with open(path, "rb") as f:  # this module's own read: not counted as the import's
        return f.read()


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


def started_flags(entries: list[list[Any]], hits: set[Any]) -> list[list[Any]]:
    """Each entry with whether the import started it: the module if it ran, a function if its probe was hit,
    anything else with its parent (conservatively: a class body or lambda under a started code object ran)."""
    out: list[list[Any]] = []
    stack: list[tuple[bool, int]] = []  # (started, children left) of the open parents

    for entry in entries:
        at, kind, *_, children = entry
        if not stack:
            started = MODULE in hits
        elif kind == FUNCTION:
            started = stack[-1][0] and int(at.split(":", 1)[0]) in hits
        else:
            started = stack[-1][0]
        out.append([*entry, started])
        if stack:
            parent, left = stack.pop()
            if left > 1:
                stack.append((parent, left - 1))
        if children:
            stack.append((started, children))
    return out


class NotConfined(Exception):
    """The edit may change what the import ran (the reason is the message)."""


def confined(old: Mapping[str, Any], source: bytes, path: str) -> tuple[list[list[Any]], list[str]]:
    """The new file's map (started flags carried from `old`, the stored map of the verified import) and the
    functions whose bodies changed, when the edit is confined to bodies the import never started; else
    NotConfined saying why."""
    if old.get("error") or not isinstance(old.get("code"), list):
        raise NotConfined("no code map of it from the verified import")
    if old.get("read"):
        raise NotConfined("something other than the importer read its source during the verified import")
    try:
        new = file_map(source, path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise NotConfined(f"it does not compile: {type(exc).__name__}: {exc}") from None
    if compile_warnings(source, path) != old.get("warnings", []):
        raise NotConfined("compiling it warns otherwise (a filter an import sets may make a warning an error)")
    before: list[list[Any]] = old["code"]
    if not before:
        raise NotConfined("no code map of it from the verified import")
    if not before[0][-1]:
        # Not imported, not read: only the model classes it names could make an import take it.
        if old.get("entry") != _entries_of(source, path):
            raise NotConfined("the verified import did not run it, and the classes it names as EntryClass changed")
        return [[*e, False] for e in new], [NOT_IMPORTED]
    out: list[list[Any]] = []
    changed: list[str] = []
    i = j = 0
    while i < len(before):
        o, n = before[i], new[j] if j < len(new) else None
        name = o[0].split(":", 1)[1]
        if n is None or n[1] != o[1] or n[0].split(":", 1)[1] != name:
            raise NotConfined(f"its code objects differ in shape at {name}")
        if o[-1]:
            if n[2] != o[2]:
                raise NotConfined(f"{name} ran during the verified import and changed")
            out.append([*n, True])
            i, j = i + 1, j + 1
            continue
        if n[3] != o[3]:
            raise NotConfined(f"{name} shows another signature, docstring or flags")
        size_old, size_new = _subtree(before, i), _subtree(new, j)
        if [e[2] for e in before[i:i + size_old]] != [e[2] for e in new[j:j + size_new]]:
            changed.append(name)
        out += [[*e, False] for e in new[j:j + size_new]]
        i, j = i + size_old, j + size_new
    if j != len(new):
        raise NotConfined("its code objects differ in shape")
    return out, list(dict.fromkeys(changed))


def _subtree(entries: Sequence[Sequence[Any]], index: int) -> int:
    """How many entries the code object at `index` and everything under it take (pre-order)."""
    end, left = index + 1, entries[index][4]
    while left:
        left += entries[end][4] - 1
        end += 1
    return end - index


def listed_paths(record: bytes) -> str:
    """A RECORD by the files it lists, not their hashes and sizes: an edit changes those of the files it edits,
    which are compared themselves; nothing an import does reads them."""
    rows = {line.split(b",", 1)[0] for line in record.splitlines() if line.strip()}
    return hashlib.sha256(b"\n".join(sorted(rows))).hexdigest()


def same_bytecode(pyc: bytes, source: bytes, path: str) -> bool:
    """Does a .pyc hold the code its source compiles to (then whichever Python runs, the same code runs)?"""
    try:
        code = marshal.loads(pyc[16:])
    except (EOFError, ValueError, TypeError):
        return False
    return isinstance(code, types.CodeType) and code_map(code) == code_map(compiled(source, path))


def confined_edits(stored: Mapping[str, Any], read: Callable[[str], bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The host's request (`code`: {path: stored map}, `bytecode`: {pyc: its source}, `records`: {RECORD: its
    listed paths' digest}) checked against the files now: ({path: new stored map}, {path: bodies changed}), or
    NotConfined naming the first file that is not."""
    maps, changed = {}, {}
    for path, old in sorted(stored["code"].items()):
        source = read(path)
        try:
            code, bodies = confined(old, source, path)
        except NotConfined as exc:
            raise NotConfined(f"{path}: {exc}") from None
        maps[path] = {"sha256": hashlib.sha256(source).hexdigest(), "read": False, "serving": old.get("serving"),
                      "entry": _entries_of(source, path), "warnings": compile_warnings(source, path), "code": code}
        changed[path] = bodies
    for pyc, path in sorted(stored["bytecode"].items()):
        if not same_bytecode(read(pyc), read(path), path):
            raise NotConfined(f"{pyc} is not the code of {path}")
    for path, digest in sorted(stored["records"].items()):
        if listed_paths(read(path)) != digest:
            raise NotConfined(f"{path} lists other files")
    return maps, changed
