"""When a lock is current for its stack entry, and what an image installed against it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..config.schema import DEFAULT_KERNEL_PACKAGE, Stack
from .model import RESOLUTION_KEYS, VENV_BOOTSTRAP, Lock


def stack_input_hash(stack: Stack) -> str:
    """sha256 of the stack's resolution inputs (RESOLUTION_KEYS; an override's reason is prose, not input).
    One platform of a stack (`Stack.for_platform`) has the whole stack's: each platform's lock is of that entry."""
    stack = stack.whole or stack
    data = stack.model_dump(mode="json", include=set(RESOLUTION_KEYS))
    # Keys added to the schema later count only when set, so the locks written before them stay current.
    if data.get("glibc") is None:
        data.pop("glibc", None)
        # Without a declared glibc the platform tag is read from the base image (plan.base_image_glibc):
        # then the base image is an input of the resolution too.
        data["base_image"] = stack.base_image
        if stack.base_image_id:
            data["base_image_id"] = stack.base_image_id
    if data.get("sgl_kernel") and data["sgl_kernel"].get("package") == DEFAULT_KERNEL_PACKAGE:
        del data["sgl_kernel"]["package"]
    data["overrides"] = [{"replaces": o["replaces"], "pin": o["pin"]} for o in data["overrides"]]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def is_current(lock: Lock, stack: Stack) -> bool:
    return (lock.stack == stack.name and lock.stack_sha256 == stack_input_hash(stack)
            and not source_mismatches(lock, stack))


def source_mismatches(lock: Lock, stack: Stack) -> list[str]:
    """Where SGLang comes from, lock against stack: a git commit is the whole identity of a git source."""
    git = stack.sglang.git
    if git is None:
        return [] if lock.sglang_commit is None else [
            f"sglang: locked git commit {lock.sglang_commit}, the stack installs sglang=={stack.sglang.version}"]
    if lock.sglang_commit != git.ref:
        return [f"sglang: locked {f'git commit {lock.sglang_commit}' if lock.sglang_commit else 'a PyPI release'}, "
                f"the stack builds git commit {git.ref}"]
    return []


def stale_message(stack_name: str, path: Path) -> str:
    """The one line a stale lock fails `stacks --check` and `build` with."""
    return f"{path} is older than the stack entry it locks: run invoke lock --stack {stack_name}"


def missing_message(stack_name: str, path: Path) -> str:
    return (f"no lock ({path}): the image is not reproducible to the last package; "
            f"run invoke lock --stack {stack_name}")


def missing_platform_lock(stack_name: str, path: Path) -> str:
    """A stack of several platforms without one platform's lock: refused where it is built and by `stacks --check`
    (without it a platform would resolve in the build, where a wrong tag falls back silently)."""
    return (f"no lock ({path}): a stack of several platforms builds each from its own lock; "
            f"run invoke lock --stack {stack_name}")


# ---- the installed set against the lock --------------------------------------------------------------


@dataclass(frozen=True)
class InstalledComparison:
    problems: tuple[str, ...]  # missing, different, or (for a complete lock) extra packages
    notices: tuple[str, ...]  # extras that an unresolved layer's own dependencies explain

    @property
    def ok(self) -> bool:
        return not self.problems


def same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def compare_installed(lock: Lock, distributions: Mapping[str, str]) -> InstalledComparison:
    """What an image has installed ({name: version}) against the lock, every difference by name."""
    installed: dict[str, str] = {str(canonicalize_name(k)): v for k, v in distributions.items()}
    problems: list[str] = []
    for p in lock.packages:
        got = installed.get(p.name)
        if got is None:
            problems.append(f"{p.name}=={p.version} is in the lock but not installed")
        elif p.version and not same_version(got, p.version):
            problems.append(f"{p.name}: locked {p.version}, installed {got}")
    extras = sorted(set(installed) - set(lock.pins) - VENV_BOOTSTRAP)
    notices: list[str] = []
    if extras:
        listed = ", ".join(f"{n}=={installed[n]}" for n in extras)
        if lock.floating:
            layers = ", ".join(u.layer for u in lock.unresolved if u.with_dependencies)
            notices.append(f"not in the lock (dependencies of the unresolved {layers} layer): {listed}")
        else:
            problems.append(f"installed but not in the lock: {listed}")
    return InstalledComparison(tuple(problems), tuple(notices))

