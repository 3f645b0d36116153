"""What a Python file imports, read without running it (stdlib only; a sibling of importcheck.py in the image's
tools folder): the top-level names its module level imports (`ast`), the first pass that sees every name an
import statement could bring in, and the file's facts (both) kept by its sha256 by the host
(`imagebuild/importfacts.py`) under a namespace naming the interpreter and this program's text. Whether a name
is provided is `Provided`'s answer in the image, asked again on every run.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Iterator

OPTIONAL_HANDLERS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _handles_absence(node: ast.Try | ast.TryStar) -> bool:
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for kind in kinds:
            if kind is None or (isinstance(kind, ast.Name) and kind.id in OPTIONAL_HANDLERS) or \
                    (isinstance(kind, ast.Attribute) and kind.attr in OPTIONAL_HANDLERS):
                return True
    return False


def _suppresses_absence(node: ast.With) -> bool:
    """`with suppress(ImportError):` (contextlib's): the body's imports are handled when absent, as in a try."""
    for item in node.items:
        call = item.context_expr
        suppress = isinstance(call, ast.Call) and (
            (isinstance(call.func, ast.Name) and call.func.id == "suppress")
            or (isinstance(call.func, ast.Attribute) and call.func.attr == "suppress"))
        if suppress and any((isinstance(a, ast.Name) and a.id in OPTIONAL_HANDLERS)
                            or (isinstance(a, ast.Attribute) and a.attr in OPTIONAL_HANDLERS)
                            for a in getattr(call, "args", ())):
            return True
    return False


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


# A branch on the interpreter or the OS is another platform's code, not this image's.
PLATFORM_TESTS = ("version_info", "platform", "os.name", "sys.implementation", "PY3", "PY2")


def _other_platform(node: ast.If) -> bool:
    text = ast.unparse(node.test)
    return any(word in text for word in PLATFORM_TESTS)


def top_level_imports(tree: ast.Module) -> list[tuple[str, int, bool]]:
    """(top-level module name, line, conditional) of each absolute import a file runs when it is imported (its
    module level, class bodies included; a function's imports run only if it is called). Not counted: an
    import handled when absent (in a `try` whose handler takes ImportError, and its fallback in the handler),
    one only for type checkers, one for another interpreter or OS. `conditional`: under an `if` (a GPU's branch,
    a feature flag), which this machine may not have taken."""
    out: list[tuple[str, int, bool]] = []

    def visit(body: list[ast.stmt], conditional: bool) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.extend((alias.name.split(".")[0], node.lineno, conditional) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0 and node.module:
                    out.append((node.module.split(".")[0], node.lineno, conditional))
            elif isinstance(node, ast.Try | ast.TryStar):
                if not _handles_absence(node):
                    visit(node.body, conditional)
                    for handler in node.handlers:
                        visit(handler.body, True)
                visit(node.orelse, conditional)
                visit(node.finalbody, conditional)
            elif isinstance(node, ast.If):
                if _type_checking(node) or _other_platform(node):
                    continue
                visit(node.body, True)
                visit(node.orelse, True)
            elif isinstance(node, ast.With) and _suppresses_absence(node):
                continue
            elif isinstance(node, ast.With | ast.ClassDef):
                visit(node.body, conditional)

    visit(tree.body, False)
    return out


class Provided:
    """Is a top-level module name importable here, from the standard library or an installed distribution?"""

    def __init__(self) -> None:
        self.names = set(sys.stdlib_module_names) | set(sys.builtin_module_names) | {"__main__"}
        self.names |= set(importlib.metadata.packages_distributions())
        self.found: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        if name in self.names:
            return True
        if name not in self.found:
            try:  # a top-level name: finding it runs no package code
                self.found[name] = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):
                self.found[name] = False
        return self.found[name]


# Every name a file's import statements could bring in, wherever they stand: a cheap first pass, so that only
# a file importing something not provided here is parsed (a serving image holds tens of thousands of files).
_IMPORT_NAMES = re.compile(r"(?:^|;)[ \t]*import[ \t]+([^\n#;]+)|(?:^|;)[ \t]*from[ \t]+([A-Za-z_][\w]*)", re.M)


def mentioned_imports(text: str) -> set[str]:
    names = set()
    for listed, source in _IMPORT_NAMES.findall(text):
        if source:
            names.add(source)
        for part in listed.replace("(", " ").replace(")", " ").replace("\\", " ").split(","):
            words = part.split()
            if words:
                names.add(words[0].split(".")[0])
    return names


# What a file imports (its facts) is a fact of its bytes, this interpreter's grammar and this program's rules:
# computed once per sha256 and kept by the host (`imagebuild/importfacts.py`); whether each name is provided
# here is looked up again on every run. `mentioned`: the first pass's names; `imports`: the parsed top-level
# imports, made only once a mentioned name was not provided (None until then).
FACTS_FORMAT = 1


def facts_namespace() -> str:
    """What a file's facts depend on besides its bytes: the interpreter (its `ast`) and this program's text."""
    with open(os.path.abspath(__file__), "rb") as f:
        program = hashlib.sha256(f.read()).hexdigest()[:16]
    return f"{sys.implementation.name}-{platform.python_version()}-{program}-{FACTS_FORMAT}"


def valid_fact(fact: object) -> bool:
    """A fact as `scan` writes it; anything else (a corrupt or foreign entry) is ignored and made again."""
    if not isinstance(fact, dict) or not isinstance(fact.get("mentioned"), list) or \
            not all(isinstance(n, str) for n in fact["mentioned"]):
        return False
    imports = fact.get("imports")
    return imports is None or (isinstance(imports, list) and all(
        isinstance(i, list) and len(i) == 3 and isinstance(i[0], str) and type(i[1]) is int and type(i[2]) is bool
        for i in imports))


def read_facts(path: str | None, namespace: str) -> tuple[dict[str, dict], str | None]:
    """{sha256: fact} of `namespace` from the host's facts file, and why none were taken (None when some were)."""
    if not path:
        return {}, "no fact cache given"
    try:
        with open(path, encoding="utf-8") as f:
            given = json.load(f)
    except (OSError, ValueError) as exc:
        return {}, f"the fact cache could not be read: {type(exc).__name__}"
    by_namespace = given.get("namespaces") if isinstance(given, dict) else None
    facts = by_namespace.get(namespace) if isinstance(by_namespace, dict) else None
    if not isinstance(facts, dict):
        return {}, f"no facts for {namespace}"
    return facts, None


def derived_fact(source: bytes, path: str, provided: Provided) -> tuple[dict, bool]:
    """A file's facts from its bytes, and whether it was parsed (only once a mentioned name is not provided)."""
    fact: dict = {"mentioned": sorted(n for n in mentioned_imports(source.decode("utf-8", "replace"))
                                      if n.isidentifier()), "imports": None}
    if all(provided(n) for n in fact["mentioned"]):
        return fact, False
    tree = parse_source(source, path)
    return {**fact, "imports": [list(i) for i in top_level_imports(tree)] if tree else []}, True


def derive_facts(files: list[str], known: dict[str, dict]) -> dict:
    """{path: sha256} of `files` and the facts of those whose bytes `known` has none for (`--derive-only`: run
    beside the serving path's imports, which it does not need; the scan resolves with them afterwards)."""
    provided = Provided()
    digests: dict[str, str] = {}
    new: dict[str, dict] = {}
    parsed = 0
    for path in files:
        try:
            source = read_bytes(path)
        except OSError:
            continue
        digest = digests[path] = hashlib.sha256(source).hexdigest()
        if digest in new or valid_fact(known.get(digest)):
            continue
        new[digest], was_parsed = derived_fact(source, path, provided)
        parsed += was_parsed
    return {"digests": digests, "new_facts": new, "parsed": parsed}


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def parse_source(source: bytes, path: str) -> ast.Module | None:
    try:
        return ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError):
        return None


DERIVE_PROCESSES = max(1, min(2, os.cpu_count() or 1))  # the derivation's share of the CPUs, beside the imports


@contextlib.contextmanager
def derived_beside(script: str, sites: list[str], facts: str | None, tmp: str,
                   processes: int = DERIVE_PROCESSES) -> Iterator[Callable[[], dict | None]]:
    """`script --derive-only` (importcheck.py) in `processes` processes of their own (each every Nth file),
    started now; the callable waits for their merged result (None if any failed: the scan then derives every
    fact itself). Ended on every exit."""
    outs = [os.path.join(tmp, f"derived-{k}.json") for k in range(processes)]
    # The same lookups as here; nothing else of this process's environment: parsing files needs none of it.
    env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    children = [subprocess.Popen([sys.executable, script, "--derive-only",
                                  *(f"--site={s}" for s in sites), *([f"--facts={facts}"] if facts else []),
                                  f"--part={k}/{processes}", f"--out={out}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
                for k, out in enumerate(outs)]

    def result() -> dict | None:
        merged: dict = {"digests": {}, "new_facts": {}, "parsed": 0}
        for child, out in zip(children, outs, strict=True):
            if child.wait() != 0:
                return None
            try:
                with open(out, encoding="utf-8") as f:
                    part = json.load(f)
            except (OSError, ValueError):
                return None
            merged["digests"].update(part["digests"])
            merged["new_facts"].update(part["new_facts"])
            merged["parsed"] += part["parsed"]
        return merged
    try:
        yield result
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
