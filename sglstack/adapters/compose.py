"""The compose adapter: the only place that runs `docker compose` (v2) or `docker-compose` (v1), for one project."""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..core.credentials import tool_environment
from ..core.errors import DeployError, DockerUnavailable, last_line


@dataclass(frozen=True)
class ComposeCLI:
    """One compose implementation: `argv` prefix and a label saying which it is."""

    argv: tuple[str, ...]
    version: str
    major: int

    @property
    def label(self) -> str:
        name = " ".join(Path(self.argv[0]).name if i == 0 else a for i, a in enumerate(self.argv))
        return f"{name} {self.version} (v{self.major})"

    def run(
        self,
        project: str,
        files: Iterable[Path],
        args: list[str],
        *,
        docker_host: str | None = None,
        cwd: Path | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        argv = [*self.argv, "-p", project]
        for f in files:
            argv += ["-f", str(f)]
        env = tool_environment()
        if docker_host:
            env["DOCKER_HOST"] = docker_host
        try:
            return subprocess.run(
                [*argv, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise DeployError(f"project {project}: `{shlex.join([*argv, *args])}` ran past {timeout:.0f} s") from None


def _version_of(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True, timeout=30, check=False,
                              env=tool_environment())
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.strip()
    return out.removeprefix("v") if proc.returncode == 0 and out else None


def detect_compose(preferred: str | None = None) -> ComposeCLI:
    """`docker compose` (v2, a plugin of the docker CLI) when present, else `docker-compose` (v1).

    `preferred` (or SGLSTACK_COMPOSE), e.g. "docker-compose" or "/usr/bin/docker compose", skips the search.
    """
    return _detect_compose(preferred or os.environ.get("SGLSTACK_COMPOSE"), os.environ.get("PATH", ""))


@functools.lru_cache(maxsize=8)
def _detect_compose(preferred: str | None, path: str) -> ComposeCLI:
    # Cached per (choice, PATH): each compose v1 start costs about a second.
    candidates: list[list[str]] = []
    if preferred:
        candidates.append(shlex.split(preferred))
    else:
        if docker_bin := shutil.which("docker"):
            candidates.append([docker_bin, "compose"])
        if v1 := shutil.which("docker-compose"):
            candidates.append([v1])
    for argv in candidates:
        version = _version_of(argv)
        if version:
            major = int(version.split(".")[0]) if version[:1].isdigit() else 2
            return ComposeCLI(argv=tuple(argv), version=version, major=major)
    tried = ", ".join(shlex.join(c) for c in candidates) or "docker compose, docker-compose (not on PATH)"
    raise DockerUnavailable(f"no compose CLI found (tried {tried}); install the compose plugin or docker-compose")


def error_line(text: str) -> str:
    """The line of compose's output that says what went wrong (it ends with a generic summary)."""
    errors = [line.strip() for line in text.splitlines() if "error" in line.lower() and ":" in line]
    if not errors:
        return last_line(text)
    return re.sub(r"^ERROR: (for \S+\s+)?", "", errors[-1])[:300]
