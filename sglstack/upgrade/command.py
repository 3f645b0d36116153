"""`invoke upgrade`: the shell around the planner. Every input is checked before any long work; then the
release's wheel and METADATA, the patch engine, the resolver, the lock, coverage and SGLang's own parser
run, each through the project's engine for it; the report is printed and written under
build/NEW/upgrade/; `--write` replaces the stacks file and writes locks/NEW.txt last, together.

`--write` edits exactly one stack: it holds the matrix's file lock for the whole run (a second `upgrade
--write` of the file is refused at once), refuses before any work a stack others inherit, and writes
nothing if any other stack would load differently afterwards (stacksfile.py copies what a YAML anchor
shares rather than edit it for all). Every output path is checked before the work: no directory, no
input of the upgrade (the stacks file, a lock), a folder that can be written.

Nothing half-done is left: both files are written whole beside their real ones (through a link to
the stacks file, each keeping its mode) before either is renamed into place, the temporary files are
removed whatever stops the run, and a failed second rename puts the first file back.
"""

from __future__ import annotations

import contextlib
import os
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.version import Version

from ..adapters.wheels import WheelFetchError, available_versions, wheel_metadata
from ..config.matrix import descendants, load_matrix, stack_name_problem
from ..config.schema import Matrix, Stack
from ..core.errors import ConfigError, SglstackError, shown
from ..core.folderlock import file_lock
from ..core.jsonreport import dumps
from ..core.progress import progress
from ..core.records import UPGRADE_DIR, build_root, require_writable, stack_dir, write_output
from ..core.replacing import staged
from ..core.safefiles import check_inside
from ..core.versions import version_problem
from ..lock.conflicts import check_stack_pins
from ..lock.flow import LockError
from ..lockfile.model import Lock
from ..lockfile.text import render_lock
from ..serving import LAUNCH, ServingError, serving_argv, serving_spec
from . import locks as platform_locks
from . import plan as planner
from .argv import check_argv, release_flags
from .engines import (
    coverage_document,
    known_base_glibc,
    patch_statuses,
    platform_wheel,
    sglang_host_wheel,
    torch_family,
)
from .locks import ResolveAll, ResolveOne, lock_paths, report_lock_name, resolve_lock, resolve_locks, write_upgrade
from .releases import ReleasePins, release_pins
from .renames import EnvFacts, stack_renames, wheel_env
from .report import to_json, to_markdown
from .speculative import last_sweep_report, sweep_advice
from .stacksfile import check_editable, edited, read_text

EXIT_BAD_INPUT = 2


class UpgradeInputError(ConfigError):
    """Bad input to `invoke upgrade` (exit 2, apart from a `review` verdict's 1)."""

    exit_code = EXIT_BAD_INPUT


# ---- the default engines: engines.py ----------------------------------------------------------------

@dataclass
class Engines:
    """The outside world, one callable each (tests pass doubles for the slow ones)."""

    available: Callable[[str], list[str]] = available_versions
    sglang_wheel: Callable[[str], Path] = sglang_host_wheel
    platform_wheel: Callable[[Stack, str], Path | None] = platform_wheel
    patches: Callable[[str, Stack], dict[str, tuple[str, str]]] = patch_statuses
    family: Callable[[Stack, ReleasePins, str], dict[str, str]] = torch_family
    base_glibc: Callable[[Stack], str | None] = known_base_glibc
    resolve: ResolveOne = resolve_lock
    resolve_platforms: ResolveAll = resolve_locks  # a stack of several platforms: every platform's lock
    coverage: Callable[[Stack], dict[str, Any] | None] = coverage_document
    argv: Callable[[Path, list[str], Callable[[str], str]], dict[str, Any]] = check_argv
    sweep_report: Callable[[Stack], tuple[dict[str, Any] | None, str]] = last_sweep_report
    flags: Callable[[Path, Callable[[str], str]], dict[str, Any]] = release_flags
    env: Callable[[Path], EnvFacts] = wheel_env


# ---- the command -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Inputs:
    stacks_file: Path
    matrix: Matrix
    stack: Stack
    version: str
    new_name: str
    write: bool
    source: bytes | None = None  # the stacks file as read: `--write` replaces only this very text


def check_inputs(stacks_file: str, stack_name: str, version: str, as_name: str | None, write: bool,
                 available: Callable[[str], list[str]]) -> Inputs:
    """Every bad input as one line, exit 2, before anything is fetched beyond the index's release list
    (`--json-out` is the face's: `sglstack.cli.reporting`)."""
    try:
        source = Path(stacks_file).read_bytes() if Path(stacks_file).is_file() else None
    except OSError:
        source = None  # the loader says why it cannot read it
    try:
        matrix = load_matrix(stacks_file)
        stack = matrix.get(stack_name)
    except ConfigError as exc:
        raise UpgradeInputError(exc.reason, file=exc.file, stack=exc.stack, key=exc.key, line=exc.line) from None
    if source is not None:
        try:  # the edit comes after the work: a file it cannot read is refused now
            check_editable(source.decode("utf-8"), file=str(stacks_file))
        except ConfigError as exc:
            raise UpgradeInputError(exc.reason, file=exc.file, line=exc.line) from None
    if stack.sglang.version is None:
        raise UpgradeInputError("builds SGLang from git: `invoke upgrade` moves a release pin", stack=stack_name,
                                key="sglang")
    problem = version_problem(version)
    if problem:
        raise UpgradeInputError(f"--sglang {shown(version)}: {problem}")
    if as_name is not None:
        problem = stack_name_problem(as_name)
        if problem:
            raise UpgradeInputError(f"--as {as_name}: {problem}")
        if as_name in matrix.stacks:
            raise UpgradeInputError(f"--as {as_name}: the stack already exists (choose another name, or "
                                    f"leave --as out to upgrade {stack_name} in place)", file=str(stacks_file))
    heirs = descendants(matrix, stack_name)
    if write and as_name is None and heirs:
        raise UpgradeInputError(f"--write would also change {_stacks(heirs)}, which inherit{'s' * (len(heirs) == 1)} "
                                "it: write the upgrade as a new stack with --as NEW instead", file=str(stacks_file),
                                stack=stack_name)
    if Version(version) == Version(stack.sglang.version):
        raise UpgradeInputError(f"--sglang {version}: the stack already pins it", stack=stack_name, key="sglang")
    new_name = as_name or stack_name
    _check_writable(Path(stacks_file), stack, new_name, write)
    try:
        releases = available("sglang")
    except WheelFetchError as exc:
        raise UpgradeInputError(f"cannot list SGLang's releases: {exc}") from None
    if version not in releases:
        # the index's answer: a version it lists that is not one is left out, not a traceback
        listed = [v for v in releases if version_problem(v) is None]
        newest = max((v for v in listed if not Version(v).is_prerelease), key=Version, default=None)
        raise UpgradeInputError(f"--sglang {version}: no such release of sglang on the package index"
                                + (f" (newest: {newest})" if newest else ""))
    return Inputs(Path(stacks_file), matrix, stack, version, new_name, write, source)


def _stacks(names: list[str]) -> str:
    return f"stack{'s' * (len(names) > 1)} " + ", ".join(f"'{n}'" for n in names)


def _check_writable(stacks_file: Path, stack: Stack, new_name: str, write: bool) -> None:
    """Every place the run writes can be written, before any work: the report's folder, and with
    `--write` the stacks file (the file a link leads to) and each platform's lock (a read-only checkout)."""
    out_dir = stack_dir(new_name) / UPGRADE_DIR
    check_inside(build_root(), out_dir)
    # nothing made yet: the release may still not be on the index
    require_writable(out_dir / "report.json", what="the upgrade's report", create=False)
    if not write:
        return
    require_writable(Path(os.path.realpath(stacks_file)), what="--write: the stacks file")
    for new_lock in lock_paths(stacks_file, stack, new_name).values():
        if new_lock.parent.is_dir():  # else it is made in the stacks file's folder, checked just above
            require_writable(new_lock, what="--write: the lock")


def _version_of(lock: Lock | None, target: ReleasePins, available: Callable[[str], list[str]]) -> Callable[[str], str]:
    def version_of(name: str) -> str:
        entry = lock.get(name) if lock else None
        if entry and entry.version:
            return entry.version
        if name in target.exact:
            return target.exact[name]
        return max((v for v in available(name) if not Version(v).is_prerelease), key=Version)
    return version_of


def plan_upgrade(inputs: Inputs, engines: Engines, *, progress: Callable[[str], None] = lambda _m: None
                 ) -> tuple[planner.Plan, str, Lock | None]:
    """The plan, the upgraded stacks file's text and the new lock of the first platform (nothing written yet)."""
    plan, text, locks = plan_upgrade_locks(inputs, engines, progress=progress)
    return plan, text, next(iter(locks.values()), None)


def plan_upgrade_locks(inputs: Inputs, engines: Engines, *, progress: Callable[[str], None] = lambda _m: None
                       ) -> tuple[planner.Plan, str, dict[str, Lock]]:
    """The plan, the upgraded stacks file's text and every platform's new lock, the first platform's first
    (none: the lock does not resolve; nothing written yet)."""
    stack, version = inputs.stack, inputs.version
    progress(f"reading sglang {version}'s METADATA")
    wheel = engines.sglang_wheel(version)
    metadata = wheel_metadata(wheel)
    requires = metadata.get("Requires-Dist", [])
    target = release_pins(version, metadata, stack.python, stack.platforms)
    progress("judging the patches")
    patches = engines.patches(version, stack) if stack.patches else {}
    base_glibc = engines.base_glibc(stack)
    progress(f"finding sglang {version}'s wheel for Python {stack.python}")
    pw = engines.platform_wheel(stack, version)
    further = stack.platforms[1:]  # a stack of several platforms: the release must have each one's wheel
    further_wheels: dict[str, str | None] = {
        p: (w.name if (w := engines.platform_wheel(stack.for_platform(p), version)) else None) for p in further}
    progress("resolving torch's family")
    family = engines.family(stack, target, base_glibc or planner.BASELINE_GLIBC)
    derivation = planner.derive(stack, target, requires, family=family, wheel_filename=pw.name if pw else None,
                                base_glibc=base_glibc, patch_status={k: v[0] for k, v in patches.items()})
    # The last smoke sweep's recommended speculative setting: shown, and part of what --write writes.
    speculative = sweep_advice(stack, *engines.sweep_report(stack))
    text, notes, new_stack = _edit_one_stack(inputs, {**derivation.edits, **speculative["edits"]})
    conflicts = tuple(f.message for f in check_stack_pins(new_stack, requires, version) if f.kind == "conflict")
    progress("resolving the new lock")
    locks, lock_error, closures = _new_locks(inputs, new_stack, base_glibc, engines)
    new_lock = locks.get(new_stack.platforms[0])
    progress("kernel coverage before and after")
    before_cov, after_cov = engines.coverage(stack), engines.coverage(new_stack)
    coverage = _coverage(before_cov, after_cov)
    platform_coverage: dict[str, dict[str, Any]] = {p: _coverage(engines.coverage(stack.for_platform(p)),
                                      engines.coverage(new_stack.for_platform(p))) for p in further}
    progress(f"the serving argv through sglang {version}'s parser")
    try:
        argv = serving_argv(serving_spec(new_stack))[len(LAUNCH):]
        argv_result = engines.argv(wheel, argv, _version_of(new_lock, target, engines.available))
    except ServingError as exc:
        argv_result = {"checked": False, "argv": [], "skipped": str(exc)}
    progress(f"what sglang {version} renames of the flags and environment the stack sets")
    renames = _renames(stack, new_stack, wheel, list(argv_result.get("argv") or []), engines,
                       _version_of(new_lock, target, engines.available))
    guesses = planner.guessed_pins(stack.pins(), new_stack.pins(), new_lock, lock_error)
    reasons = (planner.review_reasons(derivation, conflicts, coverage, argv_result, lock_error, guesses,
                                      platform_coverage)
               + tuple(planner.missing_wheel_reasons(version, stack.python, further_wheels)) + renames)
    plan = planner.Plan(
        stack=stack.name, new_stack=new_stack.name, from_version=stack.sglang.version or "", to_version=version,
        pins_before=stack.pins(), pins=new_stack.pins(), derivation=derivation,
        patches={k: v[0] for k, v in patches.items()}, patch_details={k: v[1] for k, v in patches.items()},
        conflicts=conflicts, closure=closures.pop(new_stack.platforms[0], {}), platform_closures=closures,
        platform_coverage=platform_coverage,
        coverage=coverage, argv=argv_result,
        lock_error=lock_error, bisect_command=planner.bisect_invocation(new_stack.name, stack.sglang.version or "",
                                                                     version),
        reasons=reasons, notes=notes, guesses=guesses, speculative=speculative)
    return plan, text, locks


def _coverage(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    change = planner.coverage_change(before, after)
    if not change["checked"]:
        change["why"] = "the stack lists no cuda_arch_list, or cuobjdump is not available"
    return change


def _new_locks(inputs: Inputs, new_stack: Stack, base_glibc: str | None, engines: Engines
               ) -> tuple[dict[str, Lock], str | None, dict[str, dict[str, Any]]]:
    """Every platform's new lock from its earlier one, why they do not resolve (or agree), and what each
    changes (by platform: the first platform's is the report's closure, each further one's its own section)."""
    old = platform_locks.previous_locks(inputs.stacks_file, inputs.stack)
    try:
        locks = platform_locks.new_locks(new_stack, old, base_glibc, engines.resolve, engines.resolve_platforms)
    except LockError as exc:
        return {}, str(exc).removeprefix(f"stack '{new_stack.name}': "), {}
    if inputs.write:
        where = {p: str(x) for p, x in lock_paths(inputs.stacks_file, new_stack).items()}
    else:
        out = stack_dir(new_stack.name) / UPGRADE_DIR
        where = {p: str(out / report_lock_name(new_stack.for_platform(p).lock_platform)) for p in locks}
    return locks, None, {p: platform_locks.closure(old.get(p), x, where[p]) for p, x in locks.items()}


def _renames(stack: Stack, new_stack: Stack, wheel: Path, argv: list[str], engines: Engines,
             version_of: Callable[[str], str]) -> tuple[str, ...]:
    """What the new release renames of the flags and env the stack sets, from both releases' parsers and sources."""
    try:
        old_wheel = engines.sglang_wheel(stack.sglang.version or "")
        old_flags, new_flags = engines.flags(old_wheel, version_of), engines.flags(wheel, version_of)
        old_env, new_env = engines.env(old_wheel), engines.env(wheel)
    except (WheelFetchError, OSError, zipfile.BadZipFile) as exc:
        return (f"renamed flags and environment not checked: sglang {stack.sglang.version}'s wheel: {exc}",)
    return tuple(stack_renames(argv, new_stack.serving.env, old_flags, new_flags, old_env, new_env,
                               new_stack.sglang.version or ""))


def _edit_one_stack(inputs: Inputs, edits: dict[str, Any]) -> tuple[str, tuple[str, ...], Stack]:
    """The stacks file's text with the edits, its notes, and the new stack as the loader reads it; with
    `--write`, refused if any other stack would load differently (whatever the editor did: the last guard)."""
    file, stack = str(inputs.stacks_file), inputs.stack
    edit = edited(read_text(inputs.stacks_file, file), file=file, stack=stack.name, edits=edits,
                  as_name=None if inputs.new_name == stack.name else inputs.new_name)
    new_matrix = _upgraded_matrix(inputs.stacks_file, edit.text, inputs.new_name)
    moved = [n for n, s in inputs.matrix.stacks.items()
             if n != inputs.new_name and (n not in new_matrix.stacks or new_matrix.stacks[n] != s)]
    if moved and inputs.write:
        raise UpgradeInputError(f"--write would also change {_stacks(moved)}: nothing written (write the upgrade "
                                "as a new stack with --as NEW)", file=file, stack=stack.name)
    notes = (f"--write would be refused: the edit also changes {_stacks(moved)} (write the upgrade as a new stack "
             "with --as NEW)",) if moved else ()
    return edit.text, (*edit.notes, *notes), new_matrix.get(inputs.new_name)


def _load_upgraded(stacks_file: Path, text: str, name: str) -> Stack:
    """The upgraded entry as the matrix loader reads it (see `_upgraded_matrix`)."""
    return _upgraded_matrix(stacks_file, text, name).get(name)


def _upgraded_matrix(stacks_file: Path, text: str, name: str) -> Matrix:
    """The upgraded matrix as the loader reads it, from a temporary file beside the real one (its
    `locks/` and relative paths are the same; a full disk is one line, and leaves no file)."""
    with staged(stacks_file, text.encode("utf-8"), mode=0o600) as tmp:
        try:
            matrix = load_matrix(tmp)
            matrix.get(name)
            return matrix
        except ConfigError as exc:
            raise SglstackError(f"the upgraded entry of stack '{name}' does not validate ({exc.reason}); "
                                f"{stacks_file} is unchanged") from None


def _unchanged_since_read(inputs: Inputs) -> None:
    """Refuse to replace a stacks file someone edited while the upgrade ran: their edit would be lost."""
    try:
        now = inputs.stacks_file.read_bytes()
    except OSError:
        now = None
    if inputs.source is not None and now != inputs.source:
        raise SglstackError(f"{inputs.stacks_file}: changed while the upgrade ran: nothing written (run the "
                            "upgrade again on the file as it is now)")


@dataclass(frozen=True)
class UpgradeOutcome:
    """What an upgrade found and left: the plan, its report (written under `out_dir`), and the files `--write`
    replaced: the stacks file and each platform's lock (None: nothing written)."""

    plan: planner.Plan
    markdown: str
    document: dict[str, Any]
    out_dir: Path
    written: tuple[Path, ...] | None


def upgrade_stack(stacks_file: str, stack_name: str, version: str, *, as_name: str | None = None,
                  write: bool = False, engines: Engines | None = None) -> UpgradeOutcome:
    """Plan the move of a stack to an SGLang release, write its report under build/NEW/upgrade/, and with
    `write` replace the stacks file and write locks/NEW.txt, and each further platform's lock (only when the
    entry would pass the check, and every platform's lock resolves)."""
    engines = engines or Engines()
    # no file (or not one): nothing to lock, and check_inputs says what is wrong with it
    locked = write and Path(stacks_file).is_file()
    with file_lock(Path(stacks_file), "upgrade --write") if locked else contextlib.nullcontext():
        return _upgrade(stacks_file, stack_name, version, as_name, write, engines)


def _upgrade(stacks_file: str, stack_name: str, version: str, as_name: str | None, write: bool,
             engines: Engines) -> UpgradeOutcome:
    inputs = check_inputs(stacks_file, stack_name, version, as_name, write, engines.available)
    start = time.monotonic()
    phases: list[tuple[str, float]] = []  # (what started, when): the report says where the time went

    with progress(f"upgrade {stack_name}") as steps:
        def phase(message: str) -> None:
            phases.append((message, time.monotonic()))
            steps.working_on(message)

        plan, text, locks = plan_upgrade_locks(inputs, engines, progress=phase)
    lock = next(iter(locks.values()), None)
    ends = [t for _, t in phases[1:]] + [time.monotonic()]
    seconds_per_phase = {m: round(end - t, 1) for (m, t), end in zip(phases, ends, strict=True)}
    writable = lock is not None and not plan.conflicts and not plan.guesses
    if inputs.write and plan.guesses:
        plan = replace(plan, notes=(*plan.notes, f"--write: nothing written: {', '.join(plan.guesses)} would be "
                                                 f"written as a guess ({stacks_file} is unchanged)"))
    elif inputs.write and not writable:
        plan = replace(plan, notes=(*plan.notes, f"--write: nothing written: the new entry would not pass "
                                                 f"`invoke stacks --check` ({stacks_file} is unchanged)"))
    out_dir = stack_dir(plan.new_stack) / UPGRADE_DIR
    if not inputs.write:
        for platform, x in locks.items():
            write_output(out_dir / report_lock_name(inputs.stack.for_platform(platform).lock_platform), render_lock(x))
    markdown = to_markdown(plan)
    write_output(out_dir / "report.md", markdown)
    document = {**to_json(plan), "seconds": round(time.monotonic() - start, 1), "phases_s": seconds_per_phase}
    write_output(out_dir / "report.json", dumps(document))
    written = None
    if inputs.write and writable and lock is not None:
        _unchanged_since_read(inputs)
        paths = lock_paths(inputs.stacks_file, inputs.stack, plan.new_stack)
        (first, _), *others = [(paths[p], x) for p, x in locks.items()]
        written = (inputs.stacks_file, first, *(path for path, _ in others))
        write_upgrade(inputs.stacks_file, text, first, lock, others)
    return UpgradeOutcome(plan, markdown, document, out_dir, written)
