"""`invoke upgrade`'s default engines: the outside world the planner asks (the release's wheels, the patch
engine, the resolver of torch's family, the base image's glibc, kernel coverage), one function each; tests
pass doubles for them through `world.Engines`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from ..adapters.cuobjdump import CuobjdumpError
from ..adapters.uv import ResolveRequest, ResolverError, compile_requirements
from ..adapters.wheels import WheelFetchError, fetch_binary_wheel, fetch_wheel
from ..config.schema import Stack
from ..coverage.wheels import check_wheels, pip_platform_tags, ubuntu_glibc_minor, wheel_dir
from ..lock.plan import base_image_glibc, python_platform
from ..patches.host import check_version
from . import plan as planner
from .releases import ReleasePins


def sglang_host_wheel(version: str) -> Path:
    """SGLang `version`'s wheel for this machine's Python: its METADATA, patches and parser are read from it."""
    return fetch_wheel("sglang", version)


def platform_wheel(stack: Stack, version: str) -> Path | None:
    """SGLang `version`'s wheel for the stack's Python and (first) platform, on its base image's glibc."""
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
