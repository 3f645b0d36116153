"""A base image made here rather than pulled: Debian's own packages, put together so that every machine makes
the same bytes, pinned by the digest of those bytes rather than by an image id only the seeding machine has.

`mmdebstrap` writes the root file system as one tar: with `SOURCE_DATE_EPOCH` set and the same packages it is
bit for bit the same tar on any machine (Debian's reproducible-builds promise for mmdebstrap), and `docker
import` makes that tar the image's one layer, so the layer's diff id *is* the tar's sha256. The image id is
not pinned: it also hashes the import's time. A foreign platform's root file system is made through QEMU
(binfmt_misc, `.ci/provision.sh`): its maintainer scripts run under emulation, nothing else does.

A mirror that moved on (a Debian point release) gives another tar: the seed refuses it and says whether the
package set moved (the manifest digest differs) or only the bytes did, instead of building on a base nobody
else can make.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from typing import Literal

from pydantic import Field, model_validator

from ..core.clock import utc_timestamp
from .fields import KeyedValueError
from .platforms import ARCH_OF_PLATFORM
from .strict import StrictModel

Digest = str
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
# What the image does not need from each package (Debian's slim images leave out the same): kept in one
# place, because a change here changes every seeded digest.
PATH_EXCLUDES = ("/usr/share/man/*", "/usr/share/locale/*", "/usr/share/doc/*", "/usr/share/info/*")
PATH_INCLUDES = ("/usr/share/doc/*/copyright",)


class BaseSeed(StrictModel):
    """How the stack's base is made (`invoke seed-base`) and what it must come out as, per platform."""

    suite: Literal["bookworm"] = "bookworm"
    mirror: str = Field(default="http://deb.debian.org/debian", pattern=r"^https?://[A-Za-z0-9.:/_-]+$")
    # SOURCE_DATE_EPOCH: every file's time in the tar, so the bytes do not depend on when it was made.
    epoch: int = Field(default=1735689600, ge=0)
    # sha256 of the root file system tar (= the image's one layer diff id) per platform.
    rootfs: Mapping[str, Digest] = Field(min_length=1)
    # sha256 of its package manifest (`name=version arch` lines, sorted), per platform: what the tar holds,
    # comparable when the bytes are not (the seed says which of the two moved).
    manifest: Mapping[str, Digest] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _digests(self) -> BaseSeed:
        for key in ("rootfs", "manifest"):
            for platform, digest in getattr(self, key).items():
                if platform not in ARCH_OF_PLATFORM:
                    raise KeyedValueError((key, platform), f"'{platform}' is not a platform "
                                                           f"({', '.join(ARCH_OF_PLATFORM)})")
                if not re.fullmatch(DIGEST_PATTERN, digest):
                    raise KeyedValueError((key, platform), f"'{digest}' is not a sha256:<64 hex> digest")
        return self


def seeded_tag(base_image: str, platform: str) -> str:
    """The local name of a seeded base for one platform: the engine keeps one image per name, so each
    platform's base has its own (`sglstack/base:debian12-slim` -> `sglstack/base:debian12-slim-arm64`)."""
    return f"{base_image}-{ARCH_OF_PLATFORM[platform]}"


def mmdebstrap_argv(seed: BaseSeed, platform: str, out_tar: str) -> list[str]:
    """The one command that makes the root file system of `platform` (run with SOURCE_DATE_EPOCH=seed.epoch)."""
    argv = ["mmdebstrap", "--variant=minbase", f"--arch={ARCH_OF_PLATFORM[platform]}", "--mode=root",
            "--format=tar", "--quiet"]
    argv += [f"--dpkgopt=path-exclude={p}" for p in PATH_EXCLUDES]
    argv += [f"--dpkgopt=path-include={p}" for p in PATH_INCLUDES]
    return [*argv, seed.suite, out_tar, f"deb {seed.mirror} {seed.suite} main"]


def parse_dpkg_status(text: str) -> dict[str, str]:
    """`name:arch` -> version of every installed package in a dpkg status file."""
    out: dict[str, str] = {}
    for para in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in para.splitlines() if ": " in line and not line[0].isspace())
        if fields.get("Package") and "installed" in fields.get("Status", "").split():
            out[f"{fields['Package']}:{fields.get('Architecture', '')}"] = fields.get("Version", "")
    return out


def manifest_digest(packages: Mapping[str, str]) -> Digest:
    text = "".join(f"{name}={version}\n" for name, version in sorted(packages.items()))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()



def image_config(seed: BaseSeed, platform: str, rootfs: Digest) -> bytes:
    """The image's config, every field fixed by the seed: its sha256 (the image id) is the same on every
    machine that makes the same root file system (`docker import` would stamp the time of the import)."""
    arch = ARCH_OF_PLATFORM[platform]
    created = utc_timestamp(dt.datetime.fromtimestamp(seed.epoch, dt.UTC))
    config = {"architecture": arch, "os": "linux", **({"variant": "v8"} if arch == "arm64" else {}),
              "config": {"Cmd": ["bash"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
              "created": created,
              "history": [{"created": created, "created_by": f"mmdebstrap --variant=minbase {seed.suite} (sglstack "
                                                            f"seed-base)"}],
              "rootfs": {"type": "layers", "diff_ids": [rootfs]}}
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def docker_archive(config: bytes, tag: str, layer_size: int, layer_chunks: Iterable[bytes],
                   mtime: int) -> Iterator[bytes]:
    """`docker load`'s input (a docker-archive tar: config, manifest, the one layer), as a stream: the root
    file system is read once, never copied to disk again."""
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = f"{hashlib.sha256(config).hexdigest()}/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]).encode()

    def header(name: str, size: int) -> bytes:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, mtime, 0o644
        return info.tobuf(format=tarfile.USTAR_FORMAT)

    def pad(size: int) -> bytes:
        return b"\0" * (-size % tarfile.BLOCKSIZE)

    for name, data in ((config_name, config), ("manifest.json", manifest)):
        yield header(name, len(data)) + data + pad(len(data))
    yield header(layer_name, layer_size)
    sent = 0
    for chunk in layer_chunks:
        sent += len(chunk)
        yield chunk
    if sent != layer_size:
        raise ValueError(f"the root file system changed while it was loaded ({sent} of {layer_size} bytes)")
    yield pad(layer_size) + b"\0" * (2 * tarfile.BLOCKSIZE)
