"""`invoke seed-base --stack NAME`: make the stack's seeded base (config.baseseed) for each of its platforms and
load it into the engine, or say why the bytes made here are not the pinned ones; `check_seeded_base` is the
build's check that the engine's base is the pinned root file system for the platform being built.

A base already there with the pinned layer and platform is left alone (provision.sh runs this every time).
Nothing is loaded unless the root file system made is the pinned one: a machine that cannot reproduce the
base builds nothing on it.
"""

from __future__ import annotations

import hashlib
import platform as host
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import docker
import docker.errors

from ..adapters.docker import docker_client, engine_image
from ..adapters.mmdebstrap import mmdebstrap_missing, run_mmdebstrap
from ..config.baseseed import (
    BaseSeed,
    docker_archive,
    image_config,
    manifest_digest,
    mmdebstrap_argv,
    parse_dpkg_status,
)
from ..config.platforms import ARCH_OF_PLATFORM, MACHINE
from ..config.schema import Stack
from ..core.errors import BuildError, ConfigError, one_line

CHUNK = 1 << 20


@dataclass(frozen=True)
class Seeded:
    platform: str
    image: str
    rootfs: str
    image_id: str
    seconds: float
    emulated: bool
    already: bool


def seed_problem(client: docker.DockerClient, stack: Stack) -> str | None:
    """Why `stack` (one platform of it) cannot build on its seeded base, or None: the engine's image of that name
    must be the pinned root file system, for that platform."""
    if stack.base_seed is None:
        return None
    platform = stack.platforms[0]
    want = stack.base_seed.rootfs[platform]
    whole = stack.whole or stack
    try:
        attrs = engine_image(client, stack.base_image).attrs
    except docker.errors.ImageNotFound:
        return (f"base_image {stack.base_image} is not on this engine: run invoke seed-base --stack {whole.name} "
                f"(it makes the pinned root file system {want})")
    layers = list((attrs.get("RootFS") or {}).get("Layers") or [])
    arch = attrs.get("Architecture", "")
    if arch != ARCH_OF_PLATFORM[platform]:
        return f"base_image {stack.base_image} is a linux/{arch} image, the build is for {platform}"
    if layers != [want]:
        return (f"base_image {stack.base_image} is not the pinned root file system (its layers: "
                f"{' '.join(layers) or 'none'}; base_seed.rootfs pins {want}): run invoke seed-base --stack "
                f"{whole.name}")
    return None


def check_seeded_base(client: docker.DockerClient, stack: Stack) -> None:
    if problem := seed_problem(client, stack):
        raise BuildError(f"stack '{stack.name}': {problem}")


def seed_stack(stack: Stack, *, platform: str | None = None, docker_host: str | None = None) -> list[Seeded]:
    """`invoke seed-base`: the stack's seeded base made and loaded for `platform` (default: each of its platforms)."""
    if stack.base_seed is None:
        raise ConfigError("the stack has no base_seed: its base comes from a registry (pull it by digest)",
                          stack=stack.name, key="base_seed")
    platforms = [stack.for_platform(platform).platforms[0]] if platform else list(stack.platforms)
    if mmdebstrap_missing():
        raise ConfigError("mmdebstrap is not installed: run .ci/provision.sh (apt-get install mmdebstrap "
                          "qemu-user-static binfmt-support)", stack=stack.name)
    client = docker_client(docker_host)
    return [_seed_one(client, stack.for_platform(p), stack.base_seed, p) for p in platforms]


def _seed_one(client: docker.DockerClient, one: Stack, seed: BaseSeed, platform: str) -> Seeded:
    want = seed.rootfs[platform]
    emulated = MACHINE[platform] != host.machine()
    if seed_problem(client, one) is None:
        found = engine_image(client, one.base_image)
        return Seeded(platform, one.base_image, want, str(found.id), 0.0, emulated, True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sglstack-seed-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        failed = run_mmdebstrap(mmdebstrap_argv(seed, platform, str(tar)), epoch=seed.epoch)
        if failed is not None:
            raise BuildError(f"stack '{one.name}': {platform}: mmdebstrap failed: {one_line(failed)}"
                             f"{_binfmt_hint(platform) if emulated else ''}")
        rootfs, manifest = _digests(tar)
        if rootfs != want:
            pinned = seed.manifest.get(platform)
            why = ("the same packages, other bytes: this mmdebstrap does not reproduce the pinned one"
                   if pinned == manifest else
                   f"another package set (the mirror moved on since the pin; manifest {manifest}"
                   f"{f', pinned {pinned}' if pinned else ''})")
            raise BuildError(f"stack '{one.name}': {platform}: the root file system made here is {rootfs}, "
                             f"base_seed.rootfs pins {want}: {why}; nothing was loaded")
        config = image_config(seed, platform, rootfs)
        with tar.open("rb") as f:
            client.images.load(docker_archive(config, one.base_image, tar.stat().st_size, _chunks(f), seed.epoch))
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    return Seeded(platform, one.base_image, rootfs, image_id, round(time.monotonic() - start, 1), emulated, False)


def _chunks(f: BinaryIO) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk


def _digests(tar: Path) -> tuple[str, str]:
    """The tar's sha256 (the layer's diff id) and its package manifest's."""
    digest = hashlib.sha256()
    with tar.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    with tarfile.open(tar) as archive:
        member = archive.extractfile("./var/lib/dpkg/status")
        status = member.read().decode("utf-8", "replace") if member else ""
    return "sha256:" + digest.hexdigest(), manifest_digest(parse_dpkg_status(status))


def _binfmt_hint(platform: str) -> str:
    return (f" (a {platform} root file system runs its maintainer scripts under QEMU: .ci/provision.sh installs "
            f"qemu-user-static and registers its binfmt_misc handler)")

