"""Compare a stack's pins with the pinned SGLang's own requirements (its wheel METADATA).

A pin that contradicts SGLang is allowed only when the stack declares it as an override; an override
that no longer matches SGLang's requirement is stale and also fails, so overrides retire visibly.
Whether an override's `replaces` is a given requirement is decided by `wheelkit.requirement_key`, the
function the build stage applies overrides with, so this check and the build agree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..adapters.wheels import fetch_wheel, wheel_metadata
from ..config.platforms import MACHINE
from ..config.schema import Matrix, Stack
from ..core.errors import ConfigError
from ..inimage.incontainer.wheelkit import requirement_key
from ..lockfile.current import missing_message, missing_platform_lock, stale_message
from ..lockfile.model import Lock, disagreement_text, platform_disagreements
from .flow import LockError, resolve_for_base
from .plan import LockUnreachable
from .trust import StaleLock, lock_differences, lock_for_build, platform_locks


@dataclass(frozen=True)
class Finding:
    stack: str
    # "conflict" | "stale-override" | "stale-lock" | "bad-lock" | "override" | "no-lock" | "resolved" | "skipped"
    # | "incomplete"
    kind: str
    message: str

    @property
    def is_failure(self) -> bool:
        return self.kind in ("conflict", "stale-override", "stale-lock", "bad-lock")

    @property
    def is_incomplete(self) -> bool:
        """A check that could not run whole (the resolver could not reach a layer): not a pass either."""
        return self.kind == "incomplete"


def target_environment(python: str, platform: str) -> dict[str, str]:
    """The marker environment of the image: its Python on Linux, on `platform`."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    # The image's CPython is not this one: every version key is the stack's (`python_full_version` at .0:
    # a stack names its Python as X.Y); only the kernel keys (platform_release, _version) stay the host's.
    env.update(python_version=python, python_full_version=f"{python}.0", implementation_version=f"{python}.0",
               sys_platform="linux", platform_system="Linux", os_name="posix", platform_machine=MACHINE[platform],
               implementation_name="cpython", platform_python_implementation="CPython", extra="")
    return env


@functools.lru_cache(maxsize=64)
def applicable_requirements(requires_dist: tuple[str, ...], python: str, platforms: tuple[str, ...]) -> tuple[
        tuple[str, Requirement], ...]:
    """(line, parsed) for the Requires-Dist lines a plain install applies on one of `platforms`.

    Stacks of a matrix share SGLang versions and targets, so this runs once per combination, not per
    stack (a long matrix would otherwise re-parse and re-evaluate every marker for each stack).
    """
    envs = [target_environment(python, p) for p in platforms]
    out = []
    for line in requires_dist:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate(env) for env in envs):
            out.append((line, req))
    return tuple(out)


# The names SGLang's kernel package has had (sgl-kernel to 0.3.x, sglang-kernel from 0.4). A release that
# renames it again adds its name here; `invoke stacks --check` then tells each stack which one to pin.
KERNEL_PACKAGE_NAMES = ("sgl-kernel", "sglang-kernel")


def required_kernel_package(requires_dist: list[str]) -> str | None:
    """The kernel package an SGLang release requires, by its METADATA (None: it requires none)."""
    for line in requires_dist:
        name = canonicalize_name(Requirement(line).name)
        if name in KERNEL_PACKAGE_NAMES and Requirement(line).marker is None:
            return name
    return None


def check_stack_pins(stack: Stack, requires_dist: list[str], sglang_label: str) -> list[Finding]:
    """Pure: findings for one stack against SGLang's Requires-Dist lines."""
    findings: list[Finding] = []
    wanted = required_kernel_package(requires_dist)
    if stack.kernel_package and wanted and wanted != stack.kernel_package:
        findings.append(Finding(stack.name, "conflict",
                                f"pins the kernel package {stack.kernel_package}, but sglang {sglang_label} requires "
                                f"{wanted}: set sgl_kernel.package: {wanted} (and its version)"))
    pins = stack.pins()
    overrides = {requirement_key(o.replaces): o for o in stack.overrides}
    used: set[tuple[str, str]] = set()
    for line, req in applicable_requirements(tuple(requires_dist), stack.python, stack.platforms):
        name = canonicalize_name(req.name)
        if name == "sglang" or name not in pins:
            continue
        pinned = pins[name]
        key = requirement_key(line)
        if key in overrides:
            used.add(key)
            override = overrides[key]
            override_pin = Requirement(override.pin)  # `==X` (the matrix refuses ranges): admits X if a pre-release
            if canonicalize_name(override_pin.name) != name or not override_pin.specifier.contains(pinned):
                findings.append(Finding(stack.name, "conflict",
                                        f"override '{override.pin}' disagrees with the stack's pin {name}=={pinned}"))
            else:
                findings.append(Finding(stack.name, "override",
                                        f"{name}=={pinned} overrides sglang {sglang_label}'s '{line}': "
                                        f"{override.reason}"))
            continue
        if not req.specifier.contains(pinned, prereleases=True):
            findings.append(Finding(
                stack.name, "conflict",
                f"pins {name}=={pinned} but sglang {sglang_label} requires '{req.name}{req.specifier}': "
                f"declare it under 'overrides' (replaces: {req.name}{req.specifier}) or change the pin"))
    for key, override in overrides.items():
        if key not in used:
            findings.append(Finding(stack.name, "stale-override",
                                    f"override replaces '{override.replaces}', which sglang {sglang_label} "
                                    f"does not require: remove or update it"))
    return findings


def sglang_requires_dist(version: str) -> list[str]:
    """The Requires-Dist lines of SGLang `version`'s wheel (the shell: a pip download, cached)."""
    return wheel_metadata(fetch_wheel("sglang", version)).get("Requires-Dist", [])


def check_matrix(matrix: Matrix, requires_dist: Callable[[str], list[str]] = sglang_requires_dist) -> list[Finding]:
    findings: list[Finding] = []
    requires_of: dict[str, list[str]] = {}  # per SGLang version: stacks often share one
    for stack in matrix.stacks.values():
        version = stack.sglang.version
        if version is None:
            findings.append(Finding(stack.name, "skipped",
                                    "SGLang from git: its requirements are checked in the build (wheelkit)"))
            continue
        if version not in requires_of:
            requires_of[version] = requires_dist(version)
        findings += check_stack_pins(stack, requires_of[version], version)
    return findings


def lock_findings(matrix: Matrix, stacks_file: str) -> list[Finding]:
    """Each stack's lock of each platform against its entry: a stale lock fails, a missing one is a notice (it
    fails for a stack of several platforms, whose build refuses it);
    the platforms' locks must agree on every package both install (`platform_disagreements`)."""
    findings: list[Finding] = []
    for stack in matrix.stacks.values():
        refused = functools.partial(_lock_refused, findings, stack.name, len(stack.platforms) > 1)
        if differ := platform_disagreements(platform_locks(stacks_file, stack, refused)):
            findings.append(Finding(stack.name, "conflict", disagreement_text(differ)))
    return findings


def _lock_refused(findings: list[Finding], name: str, several: bool, path: Path, exc: ConfigError | None) -> None:
    if exc is None:  # a stack of several platforms builds each from its own lock: its build refuses a missing one
        findings.append(Finding(name, "bad-lock", missing_platform_lock(name, path)) if several
                        else Finding(name, "no-lock", missing_message(name, path)))
    elif isinstance(exc, StaleLock):
        findings.append(Finding(name, "stale-lock", stale_message(name, path)))
    else:  # unreadable or edited by hand: a lock the build would refuse
        findings.append(Finding(name, "bad-lock", f"{path}: {exc.reason}"))


def trusted_locks(matrix: Matrix, stacks_file: str) -> dict[str, Lock]:
    """The locks the build would take, by stack (the others are `lock_findings`' to report)."""
    out = {}
    for stack in matrix.stacks.values():
        try:
            lock = lock_for_build(stacks_file, stack)
        except ConfigError:
            continue
        if lock is not None:
            out[stack.name] = lock
    return out


def resolve_findings(matrix: Matrix, resolve: Callable[..., Lock] = resolve_for_base,
                     locks: Mapping[str, Lock] | None = None) -> list[Finding]:
    """`--resolve`: the real resolver on everything each image installs (what METADATA alone can't see); a
    stack with a lock is resolved from it (as `invoke lock` does, its pins kept), and must come out the same."""
    findings = []
    for stack in matrix.stacks.values():
        previous = (locks or {}).get(stack.name)
        try:
            lock = resolve(stack, previous=previous) if previous else resolve(stack)
        except LockError as exc:  # out of reach is not a conflict: nothing was decided about the pins
            kind = "incomplete" if isinstance(exc, LockUnreachable) else "conflict"
            findings.append(Finding(stack.name, kind, str(exc).removeprefix(f"stack '{stack.name}': ")))
            continue
        findings += [Finding(stack.name, "incomplete", f"resolver: layer {u}") for u in lock.unresolved]
        findings.append(Finding(stack.name, "resolved", f"the resolver found a consistent set of "
                                                        f"{len(lock.packages)} packages"))
        if previous is None:
            continue
        if {u.layer for u in lock.unresolved} != {u.layer for u in previous.unresolved}:
            findings.append(Finding(stack.name, "incomplete", "the lock was not compared: the resolver reached other "
                                                           "layers than when it was written"))
        elif differences := lock_differences(previous, lock):
            findings.append(Finding(stack.name, "bad-lock", f"not what invoke lock resolves now: "
                                                            f"{'; '.join(differences)}: run invoke lock --stack "
                                                            f"{stack.name}"))
    return findings
