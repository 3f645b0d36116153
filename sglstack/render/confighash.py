"""The config hash: what identifies a build, so that the same config is never built twice.

It covers the rendered Dockerfile, every file of the build context, the build args, the target and
the platform: anything that can change the image. Timestamps and paths of this machine are not in it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path


def config_hash(dockerfile_text: str, context_files: Mapping[str, bytes], *,
                build_args: Mapping[str, str] | None = None, target: str | None = None,
                platform: str | None = None) -> str:
    h = hashlib.sha256()

    def part(tag: str, data: bytes) -> None:
        h.update(tag.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)

    part("dockerfile", dockerfile_text.encode("utf-8"))
    for rel in sorted(context_files):
        part(f"file:{rel}", context_files[rel])
    for key, value in sorted((build_args or {}).items()):
        part(f"arg:{key}", value.encode())
    part("target", (target or "").encode())
    part("platform", (platform or "").encode())
    return h.hexdigest()


def read_context(context: Path, files: Iterable[Path]) -> dict[str, bytes]:
    return {p.relative_to(context).as_posix(): p.read_bytes() for p in files}
