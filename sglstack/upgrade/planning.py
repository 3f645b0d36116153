"""`invoke upgrade`'s plan: the release's METADATA, patches, wheels, torch's family, the new entry and its
locks, coverage before and after, the serving argv through the release's own parser and what it renames, each
asked of the engines (`world.Engines`), then judged by the pure planner (`plan`). Nothing is written here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from packaging.version import Version

from ..adapters.wheels import wheel_metadata
from ..lock.conflicts import check_stack_pins
from ..lockfile.model import Lock
from ..serving import LAUNCH, ServingError, serving_argv, serving_spec
from . import plan as planner
from .edit import edit_one_stack
from .inputs import Inputs
from .locks import upgrade_locks
from .releases import ReleasePins, release_pins
from .renames import release_renames
from .speculative import sweep_advice
from .world import Engines


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
    text, notes, new_stack = edit_one_stack(inputs, {**derivation.edits, **speculative["edits"]})
    conflicts = tuple(f.message for f in check_stack_pins(new_stack, requires, version) if f.kind == "conflict")
    progress("resolving the new lock")
    locks, lock_error, closures = upgrade_locks(inputs.stacks_file, inputs.stack, new_stack, write=inputs.write,
                                                base_glibc=base_glibc, resolve=engines.resolve,
                                                resolve_all=engines.resolve_platforms)
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
    renames = release_renames(stack, new_stack, wheel, list(argv_result.get("argv") or []), engines,
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
