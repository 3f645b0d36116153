"""Compare what a built image really contains with what its stack pinned (pure)."""

from __future__ import annotations

from typing import Any

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
