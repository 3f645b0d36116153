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

from packaging.requirements import Requirement
from packaging.version import Version

from ..adapters.cuobjdump import CuobjdumpError
from ..adapters.uv import ResolveRequest, ResolverError, compile_requirements
from ..adapters.wheels import WheelFetchError, available_versions, fetch_binary_wheel, fetch_wheel, wheel_metadata
from ..config.matrix import descendants, load_matrix, stack_name_problem
from ..config.schema import Matrix, Stack
from ..core.errors import ConfigError, SglstackError, shown
from ..core.folderlock import file_lock
from ..core.jsonreport import dumps
from ..core.progress import progress
from ..core.records import UPGRADE_DIR, build_root, require_writable, stack_dir, write_output
from ..core.replacing import replace_together, sibling_mode, staged
from ..core.safefiles import check_inside, make_folder
from ..core.versions import version_problem
from ..coverage.wheels import check_wheels, pip_platform_tags, ubuntu_glibc_minor, wheel_dir
from ..diff.compare import lock_snapshot, snapshot_diff
from ..lock.conflicts import check_stack_pins
from ..lock.flow import LockError, resolve_stack
from ..lock.plan import base_image_glibc, python_platform
from ..lockfile.model import Lock, lock_path
from ..lockfile.text import read_lock, render_lock
from ..patches.host import check_version
from ..serving import LAUNCH, ServingError, serving_argv, serving_spec
from . import plan as planner
from .argv import check_argv, release_flags
from .releases import ReleasePins, release_pins
from .renames import EnvFacts, stack_renames, wheel_env
from .report import to_json, to_markdown
from .speculative import last_sweep_report, sweep_advice
from .stacksfile import check_editable, edited, read_text

EXIT_BAD_INPUT = 2


class UpgradeInputError(ConfigError):
    """Bad input to `invoke upgrade` (exit 2, apart from a `review` verdict's 1)."""

    exit_code = EXIT_BAD_INPUT


# ---- the default engines ---------------------------------------------------------------------------

def sglang_host_wheel(version: str) -> Path:
    """SGLang `version`'s wheel for this machine's Python: its METADATA, patches and parser are read from it."""
    return fetch_wheel("sglang", version)


def platform_wheel(stack: Stack, version: str) -> Path | None:
    """SGLang `version`'s wheel for the stack's Python and first platform, on its base image's glibc."""
    platform = stack.platforms[0]
    try:
        return fetch_binary_wheel(f"sglang=={version}", dest=wheel_dir(stack, platform), python_version=stack.python,
                                  platform_tags=pip_platform_tags(platform, stack.base_image, stack.glibc))
    except WheelFetchError:
        return None


def patch_statuses(version: str, stack: Stack) -> dict[str, tuple[str, str]]:
    """Each patch of the stack judged against `version` by the patch engine: (status, detail)."""
    out = {}
    for row in check_version(version, stack.patches, policy=stack.patch_policy.on_upstream):
        status = (planner.UPSTREAM if row.outcome == "already upstream" else
                  planner.APPLIES if row.ok else planner.DRIFTED)
        out[row.patch] = (status, row.detail if row.ok else f"{row.outcome}: {row.detail}")
    return out


def torch_family(stack: Stack, target: ReleasePins, glibc: str) -> dict[str, str]:
    """The versions of torch's family the resolver picks with the release's torch (public versions)."""
    if not stack.torch or not target.torch:
        return {}
    names = [Requirement(p).name for p in stack.torch.packages]
    reqs = (f"torch=={target.torch}",
            *(f"{n}=={target.exact[n.lower()]}" if n.lower() in target.exact else n for n in names))
    request = ResolveRequest(reqs, stack.python, python_platform(stack.platforms[0], glibc))
    try:
        resolution = compile_requirements(request)
    except ResolverError:
        return {}  # the planner says which member has no version, and the lock names the conflict
    return {p.name: p.version for p in resolution.packages if p.name in {"torch", *(n.lower() for n in names)}}


def known_base_glibc(stack: Stack) -> str | None:
    """The base image's glibc: declared, read from the local image, or known for an Ubuntu CUDA base."""
    if stack.glibc:
        return stack.glibc
    found = base_image_glibc(stack)
    if found:
        return found
    minor = ubuntu_glibc_minor(stack.base_image)
    return f"2.{minor}" if minor else None


def coverage_document(stack: Stack) -> dict[str, Any] | None:
    if not stack.cuda_arch_list:
        return None
    try:
        return check_wheels(stack, stack.platforms[0]).to_dict()
    except CuobjdumpError:
        return None


def resolve_lock(stack: Stack, previous: Lock | None, base_glibc: str | None) -> Lock:
    """The project's lock resolution, the earlier lock as the starting point (unrelated pins stay put)."""
    return resolve_stack(stack, previous=previous, base_glibc=base_glibc)


@dataclass
class Engines:
    """The outside world, one callable each (tests pass doubles for the slow ones)."""

    available: Callable[[str], list[str]] = available_versions
    sglang_wheel: Callable[[str], Path] = sglang_host_wheel
    platform_wheel: Callable[[Stack, str], Path | None] = platform_wheel
    patches: Callable[[str, Stack], dict[str, tuple[str, str]]] = patch_statuses
    family: Callable[[Stack, ReleasePins, str], dict[str, str]] = torch_family
    base_glibc: Callable[[Stack], str | None] = known_base_glibc
    resolve: Callable[[Stack, Lock | None, str | None], Lock] = resolve_lock
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
    _check_writable(Path(stacks_file), new_name, write)
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


def _check_writable(stacks_file: Path, new_name: str, write: bool) -> None:
    """Every place the run writes can be written, before any work: the report's folder, and with
    `--write` the stacks file (the file a link leads to) and the locks' folder (a read-only checkout)."""
    out_dir = stack_dir(new_name) / UPGRADE_DIR
    check_inside(build_root(), out_dir)
    # nothing made yet: the release may still not be on the index
    require_writable(out_dir / "report.json", what="the upgrade's report", create=False)
    if not write:
        return
    require_writable(Path(os.path.realpath(stacks_file)), what="--write: the stacks file")
    new_lock = lock_path(stacks_file, new_name)
    if new_lock.parent.is_dir():  # else it is made in the stacks file's folder, checked just above
        require_writable(new_lock, what="--write: the lock")


def _closure(old: Lock | None, new: Lock | None, where: str) -> dict[str, Any]:
    if new is None:
        return {}
    if old is None:
        return {"before_count": None, "after_count": len(new.packages), "packages": [], "lock_path": where,
                "counts": {}, "note": "no earlier lock to compare with"}
    diff = snapshot_diff(lock_snapshot(old, "before"), lock_snapshot(new, "after"))
    rows = [{"name": c.name, "before": c.before, "after": c.after, "kind": c.kind} for c in diff.packages]
    counts = {k: sum(1 for r in rows if r["kind"] == k) for k in ("added", "removed", "changed")}
    return {"before_count": len(old.packages), "after_count": len(new.packages), "packages": rows,
            "counts": counts, "lock_path": where}


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
    """The plan, the upgraded stacks file's text and the new lock (nothing written yet)."""
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
    progress("resolving torch's family")
    family = engines.family(stack, target, base_glibc or planner.BASELINE_GLIBC)
    derivation = planner.derive(stack, target, requires, family=family, wheel_filename=pw.name if pw else None,
                                base_glibc=base_glibc, patch_status={k: v[0] for k, v in patches.items()})
    # The last smoke sweep's recommended speculative setting: shown, and part of what --write writes.
    speculative = sweep_advice(stack, *engines.sweep_report(stack))
    text, notes, new_stack = _edit_one_stack(inputs, {**derivation.edits, **speculative["edits"]})
    conflicts = tuple(f.message for f in check_stack_pins(new_stack, requires, version) if f.kind == "conflict")
    old_lock_file = lock_path(inputs.stacks_file, stack.name)
    old_lock = read_lock(old_lock_file) if old_lock_file.is_file() else None
    progress("resolving the new lock")
    lock_error, new_lock = None, None
    try:
        new_lock = engines.resolve(new_stack, old_lock, base_glibc)
    except LockError as exc:
        lock_error = str(exc).removeprefix(f"stack '{new_stack.name}': ")
    where = str(lock_path(inputs.stacks_file, new_stack.name)) if inputs.write else \
        str(stack_dir(new_stack.name) / UPGRADE_DIR / "lock.txt")
    progress("kernel coverage before and after")
    before_cov, after_cov = engines.coverage(stack), engines.coverage(new_stack)
    coverage = planner.coverage_change(before_cov, after_cov)
    if not coverage["checked"]:
        coverage["why"] = "the stack lists no cuda_arch_list, or cuobjdump is not available"
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
    reasons = planner.review_reasons(derivation, conflicts, coverage, argv_result, lock_error, guesses) + renames
    plan = planner.Plan(
        stack=stack.name, new_stack=new_stack.name, from_version=stack.sglang.version or "", to_version=version,
        pins_before=stack.pins(), pins=new_stack.pins(), derivation=derivation,
        patches={k: v[0] for k, v in patches.items()}, patch_details={k: v[1] for k, v in patches.items()},
        conflicts=conflicts, closure=_closure(old_lock, new_lock, where), coverage=coverage, argv=argv_result,
        lock_error=lock_error, bisect_command=planner.bisect_invocation(new_stack.name, stack.sglang.version or "",
                                                                     version),
        reasons=reasons, notes=notes, guesses=guesses, speculative=speculative)
    return plan, text, new_lock


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


def write_upgrade(stacks_file: Path, text: str, lock_file: Path, lock: Lock) -> None:
    """The lock, then the stacks file, together (`replace_together`: both written whole first; if the
    second rename fails the first is undone, so the pair never disagrees). The stacks file is replaced
    through a link to it (the link stays) and keeps its mode; a new lock takes its siblings' mode."""
    target = Path(os.path.realpath(stacks_file))
    make_folder(lock_file.parent, lock_file.parent)
    replace_together([(lock_file, render_lock(lock, stacks_file=stacks_file.name).encode("utf-8"),
                       sibling_mode(lock_file, "*.txt")),
                      (target, text.encode("utf-8"), sibling_mode(target, target.name))])


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
    """What an upgrade found and left: the plan, its report (written under `out_dir`), and the two files
    `--write` replaced (None: nothing written)."""

    plan: planner.Plan
    markdown: str
    document: dict[str, Any]
    out_dir: Path
    written: tuple[Path, Path] | None


def upgrade_stack(stacks_file: str, stack_name: str, version: str, *, as_name: str | None = None,
                  write: bool = False, engines: Engines | None = None) -> UpgradeOutcome:
    """Plan the move of a stack to an SGLang release, write its report under build/NEW/upgrade/, and with
    `write` replace the stacks file and write locks/NEW.txt (only when the entry would pass the check)."""
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

        plan, text, lock = plan_upgrade(inputs, engines, progress=phase)
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
    if lock is not None and not inputs.write:
        write_output(out_dir / "lock.txt", render_lock(lock))
    markdown = to_markdown(plan)
    write_output(out_dir / "report.md", markdown)
    document = {**to_json(plan), "seconds": round(time.monotonic() - start, 1), "phases_s": seconds_per_phase}
    write_output(out_dir / "report.json", dumps(document))
    written = None
    if inputs.write and writable and lock is not None:
        _unchanged_since_read(inputs)
        written = (inputs.stacks_file, lock_path(inputs.stacks_file, plan.new_stack))
        write_upgrade(inputs.stacks_file, text, written[1], lock)
    return UpgradeOutcome(plan, markdown, document, out_dir, written)
