"""What a stack's lock resolves: its install layers as the resolver sees them, the platform tag (manylinux from
the base image's glibc), and a git-sourced SGLang's tree at its commit."""

from __future__ import annotations

import contextlib
import re
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker.errors
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..adapters.docker import docker_client, image_exists, read_image_files
from ..adapters.git import GitSource, GitSourceError
from ..config.platforms import MACHINE
from ..config.schema import Stack
from ..core.errors import DockerUnavailable, SglstackError

# The glibc baseline a lock resolves for when neither the stack (`glibc:`) nor its base image says more:
# manylinux_2_28 wheels run on Ubuntu 24.04 (2.39) and Debian 12 (2.36) bases alike. A stack whose base
# has a newer glibc resolves for that one (SGLang 0.5.23 ships manylinux_2_34 wheels only).
MANYLINUX = "2_28"




SGLANG_REQUIREMENTS = "sglang-requirements"


SGLANG = "sglang"


class LockError(SglstackError):
    """The stack cannot be locked (the message names the stack and the reason)."""


class LockUnreachable(LockError):
    """The stack could not be locked because an index or URL its whole resolution needs could not be reached:
    nothing was decided about its pins (`stacks --check --resolve` says incomplete, not conflict)."""


@dataclass(frozen=True)
class PlannedLayer:
    """One install layer of the image as the resolver sees it."""

    name: str
    requirements: tuple[str, ...]
    index_url: str | None = None
    exclusive_index: bool = False  # the build installs it from this index only (pip --index-url)
    no_deps: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(canonicalize_name(Requirement(r).name) for r in self.requirements)


@dataclass(frozen=True)
class GitTree:
    """A git-sourced SGLang's package folder at its commit, exported the way the build exports it."""

    path: Path  # a temporary folder: uv reads the pyproject there; it never reaches the lock
    commit: str  # full sha
    version: str  # `[project] version` of that pyproject

    @property
    def reason(self) -> str:
        """Why the lock has no hash for SGLang itself: the image builds the wheel from this commit."""
        return f"built in the image from git commit {self.commit}"


@contextlib.contextmanager
def git_tree(stack: Stack) -> Iterator[GitTree | None]:
    """The stack's git source at its commit, exported for the resolver while the block runs (None for PyPI)."""
    git = stack.sglang.git
    if git is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="sglstack-lock-") as tmp:
        dest = Path(tmp) / "sglang-src"
        try:
            GitSource(git.repo, logins=stack.credentials).export(git.ref, git.subdirectory, dest)
        except GitSourceError as exc:
            raise LockError(f"stack '{stack.name}': {exc}") from None
        yield GitTree(dest, git.ref, _static_version(stack, dest / "pyproject.toml"))


def _static_version(stack: Stack, pyproject: Path) -> str:
    where = f"stack '{stack.name}': sglang.git {pyproject.parent.name}/pyproject.toml at {stack.sglang.git.ref[:12]}"  # type: ignore[union-attr]
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LockError(f"{where}: cannot read it ({exc})") from None
    version = project.get("version")
    if not isinstance(version, str) or not version:
        raise LockError(f"{where}: no static [project] version (the lock pins the version the image installs)")
    return version


def sglang_requirement(stack: Stack, tree: GitTree | None = None) -> str:
    """SGLang as one requirement: the PyPI release, or the exported tree of its git commit."""
    if stack.sglang.version:
        return f"sglang=={stack.sglang.version}"
    if tree is None:
        raise LockError(f"stack '{stack.name}': a git-sourced SGLang is resolved from its exported tree")
    return f"sglang @ {tree.path.resolve().as_uri()}"


def plan_layers(stack: Stack, platform: str, tree: GitTree | None = None) -> tuple[PlannedLayer, ...]:
    """The image's pip layers, in install order, with the names render gives them (`tree`: a git SGLang's)."""
    layers: list[PlannedLayer] = []
    if stack.torch:
        layers.append(PlannedLayer("torch", stack.torch.requirements(), stack.torch.index_url, True))
    if stack.sgl_kernel:
        pin = stack.sgl_kernel
        if url := pin.url_for(platform):
            layers.append(PlannedLayer(pin.package, (f"{pin.package} @ {url}",), no_deps=True))
        else:
            layers.append(PlannedLayer(pin.package, (f"{pin.package}=={pin.version}",), pin.index_url, True))
    if stack.flashinfer:
        fi = stack.flashinfer
        layers.append(PlannedLayer("flashinfer", fi.requirements(), fi.index_url, False))
    extras = [PlannedLayer(x.name, x.requirements, x.index_url, True, x.no_deps) for x in stack.extra_layers]
    after = {x.name for x in stack.extra_layers if x.after_sglang}
    layers += [x for x in extras if x.name not in after]
    if stack.sglang.install_deps:
        layers.append(PlannedLayer(SGLANG_REQUIREMENTS, (sglang_requirement(stack, tree),)))
    layers += [x for x in extras if x.name in after]
    layers.append(PlannedLayer(SGLANG, (sglang_requirement(stack, tree),), no_deps=not stack.sglang.install_deps))
    return tuple(layers)


def root_names(stack: Stack) -> frozenset[str]:
    """The packages the stack's layers ask for themselves: every other entry of its lock is there because one
    of these requires it. Names only, so a git SGLang's tree is not exported for them (a stand-in path)."""
    tree = GitTree(Path("sglang-src"), stack.sglang.git.ref, "") if stack.sglang.git else None
    return frozenset(name for platform in stack.platforms for layer in plan_layers(stack, platform, tree)
                     for name in layer.names)


def python_platform(platform: str, glibc: str | None = None) -> str:
    """uv's target for `platform` on a base image with `glibc` ("2.36"; None: the 2.28 baseline)."""
    tag = glibc.replace(".", "_") if glibc else MANYLINUX
    return f"{MACHINE[platform]}-manylinux_{tag}"


# Where glibc lives in the base images stacks use (Debian/Ubuntu multiarch, whose triplet starts with the
# platform's machine name, then RHEL-likes' lib64).
LIBC_PATHS = {platform: (f"/usr/lib/{machine}-linux-gnu/libc.so.6", f"/lib/{machine}-linux-gnu/libc.so.6",
                         "/usr/lib64/libc.so.6") for platform, machine in MACHINE.items()}


_GLIBC_BANNER = re.compile(rb"GNU C Library [^\n]*? release version (\d+\.\d+)")


def glibc_version(libc: bytes) -> str | None:
    """'2.36' from the bytes of libc.so.6 (its banner: '... stable release version 2.36.'), else None."""
    m = _GLIBC_BANNER.search(libc)
    return m.group(1).decode() if m else None


def base_image_glibc(stack: Stack, docker_host: str | None = None) -> str | None:
    """The glibc of the stack's base image when the engine has it (read, never run, never pulled); else None."""
    try:
        client = docker_client(docker_host)
        if not image_exists(client, stack.base_image):
            return None
        files = read_image_files(client, stack.base_image, list(LIBC_PATHS[stack.platforms[0]]))
    except (DockerUnavailable, docker.errors.DockerException):
        return None
    return next((v for data in files.values() if (v := glibc_version(data))), None)
