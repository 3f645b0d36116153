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
   derived only for new bytes, in processes beside step 1 (`--derive-only`, two on two CPUs or more, each every
   other file); every name is looked up again.

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
import runpy
import signal
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

try:  # imported as sglstack.inimage.incontainer.importcheck (the tests, the host)
    from .codemap import NotConfined, confined_edits, entry_classes, listed_paths
    from .codewatch import Watch
    from .filefacts import (
        Provided,
        derive_facts,
        derived_beside,
        derived_fact,
        facts_namespace,
        parse_source,
        read_bytes,
        read_facts,
        top_level_imports,
        valid_fact,
    )
except ImportError:  # run as a script in the image: its siblings in the tools folder (the script's folder)
    from codemap import NotConfined, confined_edits, entry_classes, listed_paths  # type: ignore[no-redef]
    from codewatch import Watch  # type: ignore[no-redef]
    from filefacts import (  # type: ignore[no-redef]
        Provided,
        derive_facts,
        derived_beside,
        derived_fact,
        facts_namespace,
        parse_source,
        read_bytes,
        read_facts,
        top_level_imports,
        valid_fact,
    )

SERVER_MODULE = "sglang.launch_server"
SERVER_REPORTS = ("server_help", "serving_argv")  # the server's checks this process runs after its imports
OUTPUT_TAIL = 4000  # characters of a failing command's output kept in the report
SPECULATIVE_PREFIX = "eagle_worker"  # sglang/srt/speculative/eagle_worker*.py: the EAGLE / EAGLE3 workers
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
        for cls in entry_classes(_parse(os.path.join(folder, name))):
            if cls in architectures:
                found.setdefault(cls, f"sglang.srt.models.{name[:-3]}")
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
        source = read_bytes(path)
    except OSError:
        return None
    return parse_source(source, path)


def tree_files(sites: list[str]) -> list[str]:
    files: list[str] = []
    for site in sites:
        for folder, dirs, names in os.walk(site):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not d.endswith((".dist-info", ".data")))
            files.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(".py"))
    return files


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
                source = read_bytes(path)
            except OSError:
                continue
            digests[path] = hashlib.sha256(source).hexdigest()
        digest = digests[path]
        given = known.get(digest)
        if digest not in new and isinstance(given, dict) and valid_fact(given):
            fact: dict = given
            reused += 1
        elif valid_fact(new.get(digest)):
            fact = new[digest]
        else:
            source = source if source is not None else read_bytes(path)
            fact, was_parsed = derived_fact(source, path, provided)
            new[digest], parsed = fact, parsed + was_parsed
        if all(provided(n) for n in fact["mentioned"]):
            continue
        if fact["imports"] is None:  # here a mentioned name is not provided: parsed, as a full scan does
            tree = parse_source(source if source is not None else read_bytes(path), path)
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


class _Refused(Exception):
    pass


def parse_argv(argvs: list[list[str]]) -> dict:
    """Each argv through SGLang's own parser (ServerArgs.add_cli_args), as the server would parse it."""
    start = time.monotonic()
    try:
        from sglang.srt.server_args import ServerArgs  # the image's SGLang: only this check needs it
    except Exception as exc:  # an import that crashes is the finding
        return {"error": f"cannot import sglang.srt.server_args: {type(exc).__name__}: {exc}", "results": []}

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise _Refused(message)

    results = []
    for argv in argvs:
        parser = Parser(prog=SERVER_MODULE, add_help=False)
        ServerArgs.add_cli_args(parser)
        try:
            parser.parse_args(argv)
            results.append({"argv": argv, "ok": True, "error": None})
        except _Refused as exc:
            results.append({"argv": argv, "ok": False, "error": str(exc)})
    return {"error": None, "results": results, "seconds": round(time.monotonic() - start, 2)}


def _run_entry_point(out: int, err: int, probes: int, watch: Watch) -> None:
    """In the forked child: `python -m sglang.launch_server --help` on the modules already loaded, then what it
    started of the watched files written to `probes`; never returns."""
    code = 1
    try:
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # the parent's imports had stdout sent to stderr
        sys.argv = [SERVER_MODULE, "--help"]
        runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:  # as the interpreter exits: None is 0, a number itself, anything else printed, 1
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(probes, watch.report())
        os._exit(code)


def server_help(timeout: float, watch: Watch) -> dict | None:
    """imagecheck.py's --help check, in a child forked after the serving path's imports: the same entry point
    run as `__main__` with the same argv, the same limit and report, without importing SGLang and torch again.
    None where it gives no answer in time: a forked child can hang on a lock another thread held at the fork,
    which is no finding of the image's, so imagecheck.py runs it alone then (a real hang is its finding). What
    the child started of the watched files is merged into `watch`."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as probes:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()  # nothing the parent buffered is written twice
        pid = os.fork()
        if pid == 0:
            _run_entry_point(out.fileno(), err.fileno(), probes.fileno(), watch)
        status = None
        while status is None and time.monotonic() - start < timeout:
            done, raw = os.waitpid(pid, os.WNOHANG)
            status = os.waitstatus_to_exitcode(raw) if done else None
            if status is None:
                time.sleep(0.05)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        text = [_read(f) for f in (out, err)]
        try:
            seen = json.loads(_read(probes))
            watch.merge(seen["started"], seen["read"], seen["complete"] is True)
        except (ValueError, KeyError, TypeError):
            watch.complete = False  # what --help ran is not known: no code map is kept
    ok = status == 0 and "--model-path" in text[0]
    return {"returncode": status, "lists_model_path": "--model-path" in text[0],
            "error": None if ok else (text[1] or text[0])[-OUTPUT_TAIL:], "seconds": round(time.monotonic() - start, 2)}


def _read(f: Any) -> str:
    f.seek(0)
    return f.read().decode("utf-8", "replace")


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
    ap.add_argument("--server-help", action="store_true", help="after the imports, `python -m "
                    "sglang.launch_server --help` in a child forked from this process")
    ap.add_argument("--help-timeout", type=float, default=600)
    ap.add_argument("--argv", action="append", default=[], help="a JSON list: one serving argv, parsed after the "
                    "imports")
    ap.add_argument("--derive-only", action="store_true", help="only hash the sites' files and derive the facts "
                    "the cache lacks (run beside the serving path's imports)")
    ap.add_argument("--part", default="0/1", help="K/N: --derive-only takes every Nth file from the Kth")
    ap.add_argument("--code-map", action="append", default=[], help="a file whose code map the report keeps: "
                    "imported through probes, what of it the import started")
    ap.add_argument("--record-digest", action="append", default=[], help="a RECORD whose listed paths' digest "
                    "the report keeps")
    ap.add_argument("--body-edits", help="a JSON file {path: code map from a verified import}: reuse that import's "
                    "outcome if each file changed only in bodies it never started")
    opts = ap.parse_args(args)
    start = time.monotonic()
    namespace = facts_namespace()
    known, no_facts = read_facts(opts.facts, namespace)
    paths = sysconfig.get_paths()
    sites = opts.site or list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    if opts.derive_only:
        part, parts = (int(n) for n in opts.part.split("/"))
        files = sorted({os.path.realpath(f) for f in tree_files(sites)})[part::parts]
        return _write(opts.out, derive_facts(files, known))
    report = body_edits(opts.body_edits, known) if opts.body_edits else {}
    if not report.get("body_edits", {}).get("reused"):
        with tempfile.TemporaryDirectory(prefix="sglstack-facts-") as tmp, \
                derived_beside(os.path.abspath(__file__), sites, opts.facts, tmp) as beside:
            report = {**closure(opts, sites, known, beside, start), **report}
    report["facts"] = {**report["facts"], "namespace": namespace, "not_given": no_facts}
    return _write(opts.out, {**report, "seconds": round(time.monotonic() - start, 2)})


def body_edits(stored_file: str, known: dict[str, dict]) -> dict:
    """The verified import's outcome kept where every file changed since (the host's `--body-edits`: {path: its
    stored code map}) changed only in bodies that import never started (`codemap.confined`); those files scanned
    again. Else why not: the whole check runs."""
    with open(stored_file, encoding="utf-8") as f:
        stored = json.load(f)
    try:
        maps, changed = confined_edits(stored, read_bytes)
    except (OSError, NotConfined) as exc:
        return {"body_edits": {"reused": False, "why": str(exc)}}
    scanned = scan(sorted(maps), {p for p, m in maps.items() if m["serving"]}, known)
    return {"body_edits": {"reused": True, "changed": changed}, "code_maps": maps, **scanned}


def _listed(records: list[str]) -> dict[str, str]:
    out = {}
    for path in records:
        with contextlib.suppress(OSError):
            out[path] = listed_paths(read_bytes(path))
    return out


def _write(path: str | None, report: dict) -> int:
    with open(path, "w", encoding="utf-8") if path else contextlib.nullcontext(sys.stdout) as out:
        json.dump(report, out, indent=1, sort_keys=True)
        out.write("\n")
    return 0


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
    # The files asked for are imported through probes from here on; this tool's own reads are not counted
    # (model_modules reads only module level), but attention_modules' reads of function bodies are.
    watch = Watch(opts.code_map, sys.path, ours=[__file__, os.path.abspath(__file__), read_bytes.__code__.co_filename])
    watch.read |= {p for p in watch.paths if opts.attention_backend and p.endswith("attention_registry.py")}
    watch.install()
    with contextlib.redirect_stdout(sys.stderr):  # what an imported module prints is not the report
        results = import_each(modules)
    imported = time.monotonic()
    # The serving path: what importing it loaded, and the files whose imports failed on the way.
    serving = loaded_files(roots) - before
    serving |= {os.path.realpath(r["importer"]) for r in results if r.get("importer")}
    with contextlib.redirect_stdout(sys.stderr):  # the server's checks, on what is loaded now (not the path's)
        helped = server_help(opts.help_timeout, watch) if opts.server_help else None
        server = {"server_help": helped} if helped is not None else {}
        if opts.argv:
            server["serving_argv"] = parse_argv([json.loads(a) for a in opts.argv])
    # Kept only where every check this process answers for ran here (a --help run alone is not watched).
    maps = {p: {**m, "serving": p in serving} for p, m in watch.maps(read_bytes).items()} \
        if watch.complete and (helped is not None or not opts.server_help) else {}
    files = sorted({os.path.realpath(f) for f in tree_files(sites)} | serving)
    scanned = scan(files, serving, known, beside())
    return {**server, "modules": results, "architectures": architectures, "unknown_architectures": unknown_archs,
            "unknown_attention_backends": unknown_backends, "serving_files": len(serving), "sites": sites,
            **scanned, "code_maps": maps, "record_digests": _listed(opts.record_digest),
            "seconds_imports": round(imported - start, 2),
            "seconds_scan": round(time.monotonic() - imported, 2)}


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The report is written and closed: leave without tearing down what the serving path loaded (unloading torch
    # and SGLang took 4.5 s of a 16.6 s import run at load 6), as the forked --help child leaves.
    os._exit(code)
