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
import contextlib
import hashlib
import json
import marshal
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

PROBE = "__sglstack_started__"  # the name each probed function calls, in its module's globals
NOT_IMPORTED = "<not imported>"  # what changed of a file the verified import did not run: all of it
MODULE, CLASS, FUNCTION, INLINE = "module", "class", "function", "inline"
_OPTIMIZED, _VARARGS, _VARKEYWORDS = 0x1, 0x4, 0x8  # inspect.CO_OPTIMIZED, CO_VARARGS, CO_VARKEYWORDS


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
    """`code` and every code object compiled inside it, in code_map's order (children as `_canonical` finds them)."""
    children: list[types.CodeType] = []
    for const in code.co_consts:
        _canonical(const, children)
    return [code, *(c for child in children for c in _preorder(child))]


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
