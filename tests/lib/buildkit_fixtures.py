"""A fake docker CLI that answers `version` (and `buildx version` or not): for the BuildKit detection tests."""

from __future__ import annotations

import stat
from pathlib import Path


def fake_cli(folder: Path, version: str, *, buildx: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "docker"
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = version ]; then echo "{version}"; exit 0; fi\n'
        f'if [ "$1" = buildx ] && [ "$2" = version ]; then {"echo buildx v0.12; exit 0" if buildx else "exit 1"}; fi\n'
        "exit 1\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path
