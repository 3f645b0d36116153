"""The platforms a stack builds for, and what each is called elsewhere: one home for the map that the locker,
coverage and the resolver each need, so adding a platform (or fixing a name) is one edit, not five."""

from __future__ import annotations

# `uname -m` on the platform: Python's platform_machine marker, manylinux tags, sgl-kernel URLs' {arch}.
MACHINE: dict[str, str] = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
# Docker's image `Architecture` field -> the platform.
PLATFORM_OF_ARCH: dict[str, str] = {"amd64": "linux/amd64", "arm64": "linux/arm64"}
ARCH_OF_PLATFORM: dict[str, str] = {p: a for a, p in PLATFORM_OF_ARCH.items()}
# The ELF e_machine of the platform's shared objects (EM_X86_64, EM_AARCH64).
ELF_MACHINE: dict[str, int] = {"linux/amd64": 62, "linux/arm64": 183}
# `uname -m` (an engine's `Architecture`, a node's) -> the platform.
PLATFORM_OF_MACHINE: dict[str, str] = {machine: platform for platform, machine in MACHINE.items()}
PLATFORMS: tuple[str, ...] = tuple(MACHINE)


def unpacks_wheels(platforms: tuple[str, ...]) -> bool:
    """A stack built for more than amd64 unpacks its locked parts on the build machine (`pip download
    --only-binary=:all:` for the target, every platform alike): it installs wheels only, so its locks take wheels
    only (a source distribution would pass the lock and fail the build). An amd64-only stack installs with pip."""
    return tuple(platforms) != ("linux/amd64",)


# The variant an architecture has when none is named (Docker and the OCI spec: arm64 is v8): said or not, the same.
DEFAULT_VARIANT: dict[str, str] = {"arm64": "v8"}


def platform_of_image(os_name: str, architecture: str, variant: str = "") -> str:
    """An image config's (or an index entry's) os, architecture and variant (`linux`, `arm64`, `v8`) as a platform
    (`linux/arm64`); a variant other than the architecture's default is kept (`linux/arm/v7`)."""
    os_name = os_name or "linux"
    if variant and variant != DEFAULT_VARIANT.get(architecture):
        return f"{os_name}/{architecture}/{variant}"
    if os_name != "linux":  # a windows/amd64 child of an index is not a linux/amd64 image
        return f"{os_name}/{architecture}"
    return PLATFORM_OF_ARCH.get(architecture, f"linux/{architecture}")


def platform_of_machine(os_type: str, machine: str) -> str:
    """A host's OS type and `uname -m` (`linux`, `aarch64`) as a platform (`linux/arm64`)."""
    return PLATFORM_OF_MACHINE.get(machine, f"{os_type or 'linux'}/{machine}")


def meant_platform(given: str) -> str | None:
    """The platform a near-miss spelling means (`arm64`, `aarch64`, `linux/aarch64`, `linux/arm64/v8`, `x86_64`):
    for a "did you mean" only, never taken in its place (one spelling everywhere: the lock's, the index's)."""
    parts = [x for x in given.strip().lower().replace("_", "-").split("/") if x]
    if parts and parts[0] == "linux":
        parts = parts[1:]
    arch = {"x86-64": "amd64", "x64": "amd64", "aarch64": "arm64", "arm64v8": "arm64"}.get(parts[0], parts[0]) \
        if parts else ""
    variant = parts[1] if len(parts) == 2 else ""
    if len(parts) > 2 or arch not in PLATFORM_OF_ARCH or variant not in ("", DEFAULT_VARIANT.get(arch, "")):
        return None
    found = PLATFORM_OF_ARCH[arch]
    return found if found != given else None
