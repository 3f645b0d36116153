"""The verify step's costly checks, run only where the image changed: the in-image checks (shared libraries,
the server's --help and argv, the JIT toolchain), each CUDA distribution's files against its RECORD, and the
kernel coverage computed from those RECORDs' hashes (listings cached by sha256, so per wheel, once).

`verifyplan` decides (pure) from the layers what runs again; this module reads the layers, runs what it must,
takes the rest from the store of passes, judges everything as a full verify would, stores the new passes, and
says for each check whether it ran or was reused, and why (the build record's `verification`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..adapters.docker import engine_image
from ..adapters.layers import image_layer_files, small_layer_contents
from ..adapters.wheels import cache_root
from ..config.schema import Stack
from ..core.clock import utc_timestamp
from ..core.errors import ImageCheckFailed
from ..core.records import append_jsonl, read_jsonl_lenient
from ..coverage.image import BuildCoverage, judged_coverage, site_dirs
from ..coverage.installed import (
    RECORDCHECK,
    ImagePackages,
    check_records,
    coverage_from_records,
    read_installed,
    record_problems,
)
from .checkparts import JIT, SERVER, SHARED_LIBRARIES, run_parts_keeping
from .importclosure import import_closure_option
from .verify import judged_image_checks, serving_argvs
from .verifyplan import ELF, FILE, LINK, CheckSpec, Decision, LayerFiles, Pass, Scope, by_content, merged, plan

STORE_VERSION = 1
# Which keys of imagecheck.py's report each part answers for. A key not named here (a check added later) is
# kept with the server part, whose scope is every file, or else with the shared libraries.
_REPORT_KEYS = {SHARED_LIBRARIES: ("shared_libraries", "python"),
                SERVER: ("server_help", "serving_argv", "import_closure"),
                JIT: ("jit_toolchain",)}


def part_results(report: Mapping[str, Any], parts: Sequence[str]) -> dict[str, dict[str, Any]]:
    """imagecheck.py's report split into what each of `parts` (those that ran) stores for its reuse."""
    known = {k for keys in _REPORT_KEYS.values() for k in keys}
    home = SERVER if SERVER in parts else SHARED_LIBRARIES
    return {part: {k: v for k, v in report.items()
                   if k in _REPORT_KEYS[part] or (part == home and k not in known)} for part in parts}
INSTALLED_FILES = "installed_files:"


def passes_path() -> Any:
    return cache_root() / "verify" / f"passes-v{STORE_VERSION}.jsonl"


def _pass(row: Any) -> Pass:
    return Pass(str(row["check"]), str(row["fingerprint"]), str(row["image_id"]), tuple(row["layers"]),
                str(row["verified_at"]), dict(row.get("result") or {}))


def load_passes() -> list[Pass]:
    rows, _bad = read_jsonl_lenient(passes_path(), _pass)  # a bad line only loses a reuse: that check runs
    return rows


@dataclass(frozen=True)
class Verified:
    checks: dict[str, Any] | None
    coverage: BuildCoverage
    verification: dict[str, Any]


def image_check_specs(stack: Stack, env: Sequence[str], site: str, sglang_version: str | None) -> list[CheckSpec]:
    """The three parts of imagecheck.py, each with what it reads."""
    tools = "/opt/sglstack/tools"
    common = {"env": sorted(env), "python": stack.python}
    # What the image never reads at run time: the patches' sources (applied at build time), sglstack's own
    # manifests, and the tools' bytecode (Python checks it against the tools' sources, which stay in scope).
    build_only = ("/opt/sglstack/patches", "/opt/sglstack/patches.json", "/opt/sglstack/installed.json",
                  "/opt/sglstack/stack.json")
    specs = [CheckSpec(SHARED_LIBRARIES, {**common, "policy": stack.shared_libraries.model_dump(mode="json")},
                       Scope(kinds=frozenset({ELF, LINK}), under=("/etc", tools), name_part=".so",
                             bytecode_under=(tools,)))]
    if stack.sglang.install_deps:
        specs.append(CheckSpec(SERVER, {**common, "argvs": serving_argvs(stack),
                                         "import_closure": import_closure_option(stack)},
                               Scope(everything=True, outside=build_only, bytecode_under=(tools,))))
    if stack.cuda and stack.cuda_arch_list:
        # nvcc, g++ and the CUDA headers compile it: nothing of SGLang's own files or of the patches.
        sglang = (f"{site}/sglang", f"{site}/sglang-{sglang_version}.dist-info") if sglang_version else ()
        specs.append(CheckSpec(JIT, {**common, "archs": list(stack.cuda_arch_list), "cuda": stack.cuda},
                               Scope(everything=True, outside=(*sglang, *build_only), bytecode_under=(tools,))))
    return specs


def record_specs(found: ImagePackages | None) -> list[CheckSpec]:
    # The program comes from this host, not the image: its own text is a parameter of the check.
    program = hashlib.sha256(RECORDCHECK.read_bytes()).hexdigest()
    return [CheckSpec(f"{INSTALLED_FILES}{p.where}", {"program": program}, Scope(paths=p.paths()))
            for p in (found.packages if found else ()) if p.found]


def verify_incrementally(client: Any, image_id: str, stack: Stack, *, installed: Mapping[str, str] | None,
                         docker_host: str | None, full: bool = False,
                         log: Callable[[str], None] = lambda _m: None) -> Verified:
    start = time.monotonic()
    attrs = engine_image(client, image_id).attrs
    env = list((attrs.get("Config") or {}).get("Env") or [])
    diff_ids = list((attrs.get("RootFS") or {}).get("Layers") or [])
    layers = image_layer_files(client, image_id, docker_host)
    files = merged([LayerFiles(d, e) for d, _, e in layers]) if layers is not None else None
    keyed = by_content(files, small_layer_contents(layers or [])) if files is not None else None
    folders = {d: folder for d, folder, _ in layers or ()}
    site = site_dirs(env, stack.python)[0]
    image_specs = image_check_specs(stack, env, site, (installed or {}).get("sglang"))
    passes = load_passes()
    decisions = {d.check: d for d in plan(image_specs, diff_ids, keyed, passes, full=full)}
    stored = {p.fingerprint: p.result for p in passes}
    seconds: dict[str, float] = {"plan": round(time.monotonic() - start, 2)}
    new_passes: list[tuple[Decision, dict[str, Any]]] = []
    notes: list[dict[str, Any]] = []  # what ran or was reused inside a check (the import closure's facts)

    # The in-image checks (the longest part) start first, in a container of their own; meanwhile the CUDA
    # distributions' RECORDs are read, their files hashed and their objects listed: neither reads what the other
    # writes, and a failure of either fails the verify once both have ended.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sglstack-imagecheck") as pool:
        image_decisions = dict(decisions)  # the image checks' own, while this thread adds the RECORDs'
        image_checks = pool.submit(_image_checks, client, image_id, stack, image_specs, image_decisions, stored,
                                   new_passes, seconds, notes, full=full, layout=(diff_ids, keyed, passes))
        found = read_installed(client, image_id, stack, installed)
        specs = [*image_specs, *record_specs(found)]
        decisions.update({d.check: d for d in plan(specs[len(image_specs):], diff_ids, keyed, passes, full=full)})
        coverage = _records_and_coverage(client, image_id, stack, found, decisions, new_passes, seconds, log,
                                         local=_LocalSiteFiles(files, folders, site))
        checks = image_checks.result()
    decisions.update(image_decisions)
    _store(new_passes, str(attrs.get("Id") or image_id), diff_ids)  # the image id, not the build's held tag
    return Verified(checks, coverage, {
        "full": full, "layers_listed": files is not None, "seconds": seconds,
        "checks": [decisions[s.name].to_dict() for s in specs] + notes})


class _LocalSiteFiles(Mapping[str, Any]):
    """{image path: file here} of each regular file under `site` that its layer keeps on this machine, made on
    lookup: a serving image has some 100,000 files, and coverage asks for the few hundred objects it lists."""

    def __init__(self, files: Mapping[str, tuple[str, str]] | None, folders: Mapping[str, Any], site: str) -> None:
        self._files, self._folders, self._prefix = files or {}, folders, site + "/"

    def __getitem__(self, path: str) -> Any:
        kind, diff_id = self._files[path]
        if kind not in (FILE, ELF) or not path.startswith(self._prefix):
            raise KeyError(path)
        return self._folders[diff_id] / path.lstrip("/")

    def __iter__(self) -> Iterator[str]:
        return (p for p, (kind, _) in self._files.items() if kind in (FILE, ELF) and p.startswith(self._prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _records_and_coverage(client: Any, image_id: str, stack: Stack, found: ImagePackages | None,
                          decisions: dict[str, Decision], new_passes: list[tuple[Decision, dict[str, Any]]],
                          seconds: dict[str, float], log: Callable[[str], None], *,
                          local: Mapping[str, Any]) -> BuildCoverage:
    """Each CUDA distribution's files against its RECORD (where that must run), then the coverage from those
    RECORDs: only once every file is known to be its RECORD's, so RECORD's sha256 may key each listing."""
    if found is None:
        return BuildCoverage({}, None)
    todo = [p for p in found.packages if p.found and decisions[f"{INSTALLED_FILES}{p.where}"].run]
    if todo:
        start = time.monotonic()
        log(f"checking the installed files of {len(todo)} CUDA distribution(s) against their RECORD")
        results = check_records(client, image_id, todo)
        seconds["installed_files"] = round(time.monotonic() - start, 2)
        problems = [line for p in todo for line in record_problems(p.where, results.get(p.where, {}))]
        if problems:
            raise ImageCheckFailed(f"stack '{stack.name}': the image's CUDA files are not what their RECORD "
                                   f"names: {'; '.join(problems)}")
        for p in todo:
            r = results[p.where]
            new_passes.append((decisions[f"{INSTALLED_FILES}{p.where}"],
                               {"files": r.get("files"), "bytes": r.get("bytes")}))
    start = time.monotonic()
    # A regular file is read where its layer keeps it on this machine; a link, or no listing, is copied out.
    listed = coverage_from_records(client, image_id, stack, found, local=local)
    coverage = judged_coverage(stack, listed.report, objects={"listing_cached": listed.cached, "listed": listed.listed})
    seconds["coverage"] = round(time.monotonic() - start, 2)
    return coverage


def _image_checks(client: Any, image_id: str, stack: Stack, specs: Sequence[CheckSpec], decisions: dict[str, Decision],
                  stored: Mapping[str, Mapping[str, Any]], new_passes: list[tuple[Decision, dict[str, Any]]],
                  seconds: dict[str, float], notes: list[dict[str, Any]], *, full: bool,
                  layout: tuple[Sequence[str], Mapping[str, tuple[str, str]] | None, Sequence[Pass]]) -> dict[str, Any]:
    """imagecheck.py with the parts that must run; the others' stored results; judged as one report. The server
    part may keep a pass's outcome where only bodies its import never ran changed (`checkparts`): its decision
    in `decisions` is then replaced."""
    run = {s.name for s in specs if decisions[s.name].run}
    fresh: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    if run:
        fresh, kept = run_parts_keeping(client, image_id, stack, specs, decisions, layout, seconds, notes, full=full)
    report: dict[str, Any] = {}
    for spec in specs:
        if spec.name not in run:
            report.update(stored[decisions[spec.name].fingerprint])
    report.update(fresh)
    checks = judged_image_checks(stack, report)
    for part, result in part_results(fresh, [s.name for s in specs if s.name in run]).items():
        new_passes.append((decisions[part], {**result, **(kept if part == SERVER else {})}))
    return checks


def _store(new_passes: Sequence[tuple[Decision, dict[str, Any]]], image_id: str, diff_ids: Sequence[str]) -> None:
    when = utc_timestamp()
    append_jsonl(passes_path(), ({"check": d.check, "fingerprint": d.fingerprint, "image_id": image_id,
                                  "layers": list(diff_ids), "verified_at": when, "result": result}
                                 for d, result in new_passes))
