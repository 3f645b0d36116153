"""The import closure of a built image (stdlib only): the runtime imports `pip check` cannot see.

`pip check` compares what distributions declare; a package that imports a module no requirement declares
passes it and fails at run time (upstream images without `distro`: sgl-project/sglang#25693; without
`cachetools`: verl-project/verl#5596). Run by imagecheck.py in a process of its own, network off, no GPU:

1. the serving path: each module the stack's configuration serves with is imported (the entry point, the
   model class of each served architecture, found by the `EntryClass` of SGLang's model files; the EAGLE
   speculative workers; the attention backends named, found in SGLang's `attention_registry` by their
   registering decorator), and every module then loaded is a file on the serving path;
2. the tree: every `.py` file of site-packages (test suites left out) and of the serving path is parsed with
   `ast` (nothing runs), and the top-level name of each import its module level runs is looked up: the
   standard library, `importlib.metadata.packages_distributions()`, else anything importable by that name.
   Not counted: an import handled when absent (`try: ... except ImportError`, `with suppress(ImportError)`),
   one for type checkers only, one for another interpreter or OS. A function's imports run only when it is
   called: optional by convention. What a file imports is kept by its sha256 (`--facts`: the host's cache) and
   derived only for new bytes, in a process beside step 1 (`--derive-only`); every name is looked up again.

Prints one JSON object; the host judges it (`imagebuild/importclosure.py`): a serving-path module that does
not import for a missing module, or an unconditional import in a serving-path file that nothing provides, is an
error naming module and importer; any other is a listed warning.

    python importcheck.py [--module M ...] [--architecture A ...] [--speculative] [--attention-backend B ...]
                          [--facts FILE] [--site DIR ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator

SPECULATIVE_PREFIX = "eagle_worker"  # sglang/srt/speculative/eagle_worker*.py: the EAGLE / EAGLE3 workers
OPTIONAL_HANDLERS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
SKIPPED_FOLDERS = {"tests", "test", "__pycache__"}


def sglang_folder() -> str | None:
    spec = importlib.util.find_spec("sglang")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return locations[0] if locations else None


def model_modules(root: str, architectures: list[str]) -> tuple[dict[str, str], list[str]]:
    """{architecture: module} from each model file's `EntryClass` (SGLang's registry reads the same), and the
    architectures no model file names."""
    found: dict[str, str] = {}
    folder = os.path.join(root, "srt", "models")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith(".py"):
            continue
        tree = _parse(os.path.join(folder, name))
        for node in tree.body if tree else []:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                    for t in node.targets):
                values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
                for value in values:
                    if isinstance(value, ast.Name) and value.id in architectures:
                        found.setdefault(value.id, f"sglang.srt.models.{name[:-3]}")
    return found, [a for a in architectures if a not in found]


def speculative_modules(root: str) -> list[str]:
    folder = os.path.join(root, "srt", "speculative")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [f"sglang.srt.speculative.{n[:-3]}" for n in names if n.startswith(SPECULATIVE_PREFIX) and n.endswith(".py")]


def attention_modules(root: str, backends: list[str]) -> tuple[list[str], list[str]]:
    """The modules each backend's registered factory imports (`@register_attention_backend("fa3")`), and the
    backends no factory registers."""
    path = os.path.join(root, "srt", "layers", "attention", "attention_registry.py")
    tree = _parse(path) if os.path.isfile(path) else None
    if tree is None:
        return [], list(backends)
    modules: list[str] = ["sglang.srt.layers.attention.attention_registry"]
    registered: set[str] = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        names = {d.args[0].value for d in node.decorator_list if isinstance(d, ast.Call) and d.args
                 and isinstance(d.args[0], ast.Constant) and isinstance(d.args[0].value, str)}
        if not names & set(backends):
            continue
        registered |= names
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                modules.append(inner.module)
    return list(dict.fromkeys(modules)), [b for b in backends if b not in registered]


def _importer(exc: BaseException) -> str | None:
    """The file whose import statement raised: the innermost frame that is not the import system's own."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    return frames[-1].filename if frames else None


def import_each(modules: list[str]) -> list[dict]:
    results = []
    for module in modules:
        try:
            importlib.import_module(module)
            results.append({"module": module, "ok": True})
        except ModuleNotFoundError as exc:
            results.append({"module": module, "ok": False, "missing": exc.name, "importer": _importer(exc),
                            "error": f"ModuleNotFoundError: {exc}"})
        except (Exception, SystemExit) as exc:  # a module that cannot load without a GPU is reported, not fatal
            results.append({"module": module, "ok": False, "missing": None, "importer": _importer(exc),
                            "error": f"{type(exc).__name__}: {exc}"[:2000]})
    return results


def _parse(path: str) -> ast.Module | None:
    try:
        with open(path, "rb") as f:
            return ast.parse(f.read(), filename=path)
    except (SyntaxError, ValueError, OSError, RecursionError):
        return None


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


def tree_files(sites: list[str]) -> list[str]:
    files: list[str] = []
    for site in sites:
        for folder, dirs, names in os.walk(site):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not d.endswith((".dist-info", ".data")))
            files.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(".py"))
    return files


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


def _valid_fact(fact: object) -> bool:
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


def _derived(source: bytes, path: str, provided: Provided) -> tuple[dict, bool]:
    """A file's facts from its bytes, and whether it was parsed (only once a mentioned name is not provided)."""
    fact: dict = {"mentioned": sorted(n for n in mentioned_imports(source.decode("utf-8", "replace"))
                                      if n.isidentifier()), "imports": None}
    if all(provided(n) for n in fact["mentioned"]):
        return fact, False
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError):
        tree = None
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
            with open(path, "rb") as f:
                source = f.read()
        except OSError:
            continue
        digest = digests[path] = hashlib.sha256(source).hexdigest()
        if digest in new or _valid_fact(known.get(digest)):
            continue
        new[digest], was_parsed = _derived(source, path, provided)
        parsed += was_parsed
    return {"digests": digests, "new_facts": new, "parsed": parsed}


def scan(files: list[str], serving: set[str], known: dict[str, dict] | None = None,
         beside: dict | None = None) -> dict:
    """The unprovided imports of `files`, each file's facts taken from `known` (by its sha256) where there, else
    from `beside` (`derive_facts`' result for these files, when it ran beside the imports), else derived from its
    bytes here; the facts derived (`new_facts`) for the host to keep."""
    provided = Provided()
    known = known or {}
    digests, new = dict((beside or {}).get("digests") or {}), dict((beside or {}).get("new_facts") or {})
    unprovided: list[dict] = []
    reused, parsed = 0, int((beside or {}).get("parsed") or 0)
    for path in files:
        source = None
        if path not in digests:
            try:
                with open(path, "rb") as f:
                    source = f.read()
            except OSError:
                continue
            digests[path] = hashlib.sha256(source).hexdigest()
        digest = digests[path]
        given = known.get(digest)
        if digest not in new and isinstance(given, dict) and _valid_fact(given):
            fact: dict = given
            reused += 1
        elif _valid_fact(new.get(digest)):
            fact = new[digest]
        else:
            source = source if source is not None else _read(path)
            fact, was_parsed = _derived(source, path, provided)
            new[digest], parsed = fact, parsed + was_parsed
        if all(provided(n) for n in fact["mentioned"]):
            continue
        if fact["imports"] is None:  # here a mentioned name is not provided: parsed, as a full scan does
            tree = _parse_source(source if source is not None else _read(path), path)
            fact = new[digest] = {**fact, "imports": [list(i) for i in top_level_imports(tree)] if tree else []}
            parsed += 1
        for name, line, conditional in fact["imports"]:
            if not provided(name):
                unprovided.append({"module": name, "importer": path, "line": line, "serving": path in serving,
                                   "conditional": conditional})
    scanned = len([f for f in files if f in digests])
    return {"unprovided": unprovided, "scanned_files": len(files), "new_facts": new,
            "facts": {"files": scanned, "reused": reused, "derived": scanned - reused, "parsed": parsed,
                      "beside": beside is not None}}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _parse_source(source: bytes, path: str) -> ast.Module | None:
    try:
        return ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError):
        return None


def loaded_files(roots: list[str]) -> set[str]:
    """The files of the modules loaded now that live under `roots` (the sites and SGLang's folder): the
    standard library is not the image's packages."""
    folders = tuple(os.path.realpath(r).rstrip("/") + "/" for r in roots)
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py") and os.path.realpath(path).startswith(folders):
            files.add(os.path.realpath(path))
    return files


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", action="append", default=[])
    ap.add_argument("--architecture", action="append", default=[])
    ap.add_argument("--speculative", action="store_true")
    ap.add_argument("--attention-backend", action="append", default=[])
    ap.add_argument("--site", action="append", default=[])
    ap.add_argument("--out", help="write the report here (what the imports print cannot mix into it)")
    ap.add_argument("--facts", help="the host's fact cache (JSON: {namespaces: {namespace: {sha256: fact}}})")
    ap.add_argument("--derive-only", action="store_true", help="only hash the sites' files and derive the facts "
                    "the cache lacks (run beside the serving path's imports)")
    opts = ap.parse_args(args)
    start = time.monotonic()
    namespace = facts_namespace()
    known, no_facts = read_facts(opts.facts, namespace)
    paths = sysconfig.get_paths()
    sites = opts.site or list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    if opts.derive_only:
        return _write(opts.out, derive_facts(sorted({os.path.realpath(f) for f in tree_files(sites)}), known))
    with tempfile.TemporaryDirectory(prefix="sglstack-facts-") as tmp, _beside(sites, opts.facts, tmp) as beside:
        report = closure(opts, sites, known, beside, start)
    report["facts"] = {**report["facts"], "namespace": namespace, "not_given": no_facts}
    return _write(opts.out, report)


def _write(path: str | None, report: dict) -> int:
    with open(path, "w", encoding="utf-8") if path else contextlib.nullcontext(sys.stdout) as out:
        json.dump(report, out, indent=1, sort_keys=True)
        out.write("\n")
    return 0


@contextlib.contextmanager
def _beside(sites: list[str], facts: str | None, tmp: str) -> Iterator[Callable[[], dict | None]]:
    """`--derive-only` in a process of its own, started now; the callable waits for its result (None if it
    failed: the scan then derives every fact itself). Ended on every exit."""
    out = os.path.join(tmp, "derived.json")
    command = [sys.executable, os.path.abspath(__file__), "--derive-only", *(f"--site={s}" for s in sites),
               *([f"--facts={facts}"] if facts else []), f"--out={out}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the same lookups as here
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    def result() -> dict | None:
        if child.wait() != 0:
            return None
        try:
            with open(out, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    try:
        yield result
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def closure(opts: argparse.Namespace, sites: list[str], known: dict[str, dict],
            beside: Callable[[], dict | None], start: float) -> dict:
    """The serving path imported, then every file scanned (its facts from the cache, the derivation beside, or
    derived here) and each import resolved in this process."""
    root = sglang_folder()
    roots = [*sites, *([os.path.dirname(root)] if root else [])]
    before = loaded_files(roots)
    modules = list(opts.module)
    architectures: dict[str, str] = {}
    unknown_archs, unknown_backends = list(opts.architecture), list(opts.attention_backend)
    if root is not None:
        architectures, unknown_archs = model_modules(root, opts.architecture)
        modules += list(architectures.values())
        if opts.speculative:
            modules += speculative_modules(root)
        backend_modules, unknown_backends = attention_modules(root, opts.attention_backend)
        modules += backend_modules
    modules = list(dict.fromkeys(modules))
    with contextlib.redirect_stdout(sys.stderr):  # what an imported module prints is not the report
        results = import_each(modules)
    imported = time.monotonic()
    # The serving path: what importing it loaded, and the files whose imports failed on the way.
    serving = loaded_files(roots) - before
    serving |= {os.path.realpath(r["importer"]) for r in results if r.get("importer")}
    files = sorted({os.path.realpath(f) for f in tree_files(sites)} | serving)
    scanned = scan(files, serving, known, beside())
    return {"modules": results, "architectures": architectures, "unknown_architectures": unknown_archs,
            "unknown_attention_backends": unknown_backends, "serving_files": len(serving), "sites": sites,
            **scanned, "seconds": round(time.monotonic() - start, 2), "seconds_imports": round(imported - start, 2),
            "seconds_scan": round(time.monotonic() - imported, 2)}


if __name__ == "__main__":
    sys.exit(main())
