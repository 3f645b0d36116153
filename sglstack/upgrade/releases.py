"""The SGLang releases newer than a stack's pin, and the torch, kernel package and FlashInfer each requires.

Pure, apart from `releases_command`: the index is asked once (`wheels.available_versions`, the pip
configuration's index), each release's METADATA comes from the index's metadata file (PEP 658,
`adapters.index`), else from its wheel in the cache (`wheels.fetch_wheel`, as `invoke stacks --check` reads
it), and the release order is the bisect's (`releases_between`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..adapters.index import IndexMetadata, index_settings
from ..adapters.wheels import available_versions, fetch_wheel, wheel_metadata
from ..bisect.releases import releases_between
from ..config.schema import Stack
from ..core.progress import progress
from ..lock.conflicts import applicable_requirements

# SGLang's kernel package under each name it has had: `sgl-kernel` to 0.3.x, `sglang-kernel` from 0.4
# (SGLang 0.5.10 on). A release requires exactly one of them; the stack names the one it installs.
KERNEL_PACKAGES = ("sglang-kernel", "sgl-kernel")
TORCH_FAMILY = ("torch", "torchvision", "torchaudio")
FLASHINFER = "flashinfer-python"


@dataclass(frozen=True)
class ReleasePins:
    """What one SGLang release requires of the pieces a stack pins (None: it does not require it)."""

    sglang: str
    torch: str | None
    kernel_package: str | None
    kernel: str | None
    flashinfer: str | None
    requires_python: str | None
    exact: dict[str, str]  # every `name==version` requirement that applies on the stack's target

    def summary(self) -> dict[str, str | None]:
        return {"sglang": self.sglang, "torch": self.torch, "kernel_package": self.kernel_package,
                "kernel": self.kernel, "flashinfer": self.flashinfer, "requires_python": self.requires_python}


def _exact(req: Requirement) -> str | None:
    specs = list(req.specifier)
    return specs[0].version if len(specs) == 1 and specs[0].operator in ("==", "===") else None


def release_pins(version: str, metadata: dict[str, list[str]], python: str, platforms: Sequence[str]) -> ReleasePins:
    """Pure: the pins SGLang `version`'s METADATA asks for on the stack's Python and platforms."""
    exact: dict[str, str] = {}
    for _line, req in applicable_requirements(tuple(metadata.get("Requires-Dist", [])), python, tuple(platforms)):
        pinned = _exact(req)
        if pinned is not None:
            exact[str(canonicalize_name(req.name))] = pinned
    kernel = next((k for k in KERNEL_PACKAGES if k in exact), None)
    requires_python = next(iter(metadata.get("Requires-Python", [])), None)
    return ReleasePins(sglang=version, torch=exact.get("torch"), kernel_package=kernel,
                       kernel=exact.get(kernel) if kernel else None, flashinfer=exact.get(FLASHINFER),
                       requires_python=requires_python, exact=exact)


def newer_releases(available: Sequence[str], pinned: str) -> list[str]:
    """Every release on the index after `pinned`, oldest first (the bisect's order and its pre-release rule)."""
    stable = [v for v in available if not _is_pre(v)]
    if not stable:
        return []
    newest = max(stable, key=_key)
    if _key(newest) <= _key(pinned):
        return []
    return releases_between([*available, pinned], pinned, newest)[1:]


def release_metadata(source: IndexMetadata, name: str, version: str) -> dict[str, list[str]]:
    """A release's METADATA: its metadata file on the index (PEP 658, a few kB), else its whole wheel."""
    fetched = source.metadata(name, version)
    return fetched.metadata if fetched is not None else wheel_metadata(fetch_wheel(name, version))


def _key(version: str) -> Version:
    return Version(version)


def _is_pre(version: str) -> bool:
    try:
        return Version(version).is_prerelease
    except InvalidVersion:
        return True


# ---- each stack's newer releases -----------------------------------------------------------------

@dataclass(frozen=True)
class StackReleases:
    stack: str
    pinned: str | None
    releases: tuple[ReleasePins, ...]


def stack_releases(stack: Stack, available: Sequence[str],
                   metadata_of: Callable[[str], dict[str, list[str]]]) -> StackReleases:
    if stack.sglang.version is None:
        return StackReleases(stack.name, None, ())
    newer = newer_releases(available, stack.sglang.version)
    return StackReleases(stack.name, stack.sglang.version,
                         tuple(release_pins(v, metadata_of(v), stack.python, stack.platforms) for v in newer))


def releases_of(stacks: Sequence[Stack]) -> list[StackReleases]:
    """Each stack's releases on the index newer than its pin, with what each requires (one index read)."""
    with progress("releases: the index") as steps:
        available = available_versions("sglang")
        source = IndexMetadata(index_settings())
        pinned = [s.sglang.version for s in stacks if s.sglang.version is not None]
        steps.add_total(len({v for p in pinned for v in newer_releases(available, p)}))
        metadata: dict[str, dict[str, list[str]]] = {}

        def metadata_of(version: str) -> dict[str, list[str]]:
            if version not in metadata:
                steps.working_on(f"sglang {version}")
                metadata[version] = release_metadata(source, "sglang", version)
                steps.advance()
            return metadata[version]

        return [stack_releases(s, available, metadata_of) for s in stacks]

