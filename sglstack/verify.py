"""Compare what a built image really contains with what its stack pinned (pure)."""

from __future__ import annotations

import re
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .lockfile import Lock, compare_installed
from .matrix import Stack


def pin_mismatches(stack: Stack, image_info: dict[str, Any]) -> list[str]:
    """One message per pin the image does not honour; empty when the image matches its stack."""
    installed: dict[str, str] = {str(canonicalize_name(k)): v for k, v in image_info.get("distributions", {}).items()}
    problems: list[str] = []
    for name, want in sorted(stack.pins().items()):
        got = installed.get(name)
        if got is None:
            problems.append(f"{name}: pinned {want}, not installed")
        elif got != want:
            problems.append(f"{name}: pinned {want}, installed {got}")
    torch = image_info.get("torch")
    if stack.torch:
        if not torch or "version" not in torch:
            problems.append(f"torch: pinned {stack.torch.version}, but 'import torch' failed: "
                            f"{(torch or {}).get('import_error', 'not importable')}")
        else:
            if torch["version"] != stack.torch.version:
                problems.append(f"torch reports {torch['version']}, pinned {stack.torch.version}")
            if stack.cuda:
                want_cuda = ".".join(stack.cuda.split(".")[:2])
                if not torch.get("cuda"):
                    problems.append(f"torch {torch['version']} is a CPU build; the stack needs CUDA {want_cuda}")
                elif torch["cuda"] != want_cuda:
                    problems.append(f"torch was built for CUDA {torch['cuda']}, the stack needs CUDA {want_cuda}")
    return problems


def lock_mismatches(lock: Lock, image_info: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The installed set against the lock, exactly: (problems naming every missing, extra or different
    package; notices for the extras an unresolved layer's own dependencies explain)."""
    comparison = compare_installed(lock, image_info.get("distributions", {}))
    return list(comparison.problems), list(comparison.notices)


# pip check's lines (pip 23-25): "A 1.0 requires B, which is not installed." and
# "A 1.0 has requirement B==2, but you have B 3." (anything else is reported as written).
_PIP_MISSING = re.compile(r"^(?P<dist>\S+) (?P<version>\S+) requires (?P<req>.+), which is not installed\.?$")
_PIP_CONFLICT = re.compile(r"^(?P<dist>\S+) (?P<version>\S+) has requirement (?P<req>.+), "
                           r"but you have (?P<have>\S+) (?P<have_version>\S+?)\.?$")


def _requirement_name(text: str) -> str | None:
    try:
        return str(canonicalize_name(Requirement(text).name))
    except InvalidRequirement:
        return None


def pip_check_problems(stack: Stack, image_info: dict[str, Any]) -> list[str]:
    """`pip check` in the image, less the contradictions the stack declares as overrides.

    With `sglang.install_deps: false` SGLang's own requirements are not installed, on purpose.
    An override replaces a requirement wherever it occurs (as the resolver applies it), so a line whose
    requirement is an override's `replaces`, and whose installed version is the override's pin (or, for a
    missing one, which the override replaced by another package), is the declared choice, not a finding.
    """
    check = image_info.get("pip_check")
    if check is None:  # an installed.json from before pip check ran in the verify step
        return []
    if not check.get("ran"):
        return [f"pip check could not run in the image: {check.get('error', 'unknown error')}"]
    replaced = {}
    for o in stack.overrides:
        name = _requirement_name(o.replaces)
        if name:
            replaced[name] = Requirement(o.pin)
    problems = []
    for line in check.get("problems", []):
        m = _PIP_CONFLICT.match(line) or _PIP_MISSING.match(line)
        if m and not stack.sglang.install_deps and canonicalize_name(m.group("dist")) == "sglang":
            continue  # `sglang.install_deps: false`: SGLang's own requirements are left out on purpose
        name = _requirement_name(m.group("req")) if m else None
        override = replaced.get(name) if name else None
        if override is not None and m is not None:
            pin = next(iter(override.specifier)).version
            have = m.groupdict().get("have_version")
            if (have is not None and have == pin) or (have is None and canonicalize_name(override.name) != name):
                continue
        problems.append(f"pip check: {line.rstrip('.')}")
    return problems
