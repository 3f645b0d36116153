"""The outside world `invoke upgrade` asks, one callable each: the defaults are the project's engines
(`engines`, `locks`, `argv`, `renames`, `speculative`); tests pass doubles for the slow ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..adapters.wheels import available_versions
from ..config.schema import Stack
from .argv import check_argv, release_flags
from .engines import (
    coverage_document,
    known_base_glibc,
    patch_statuses,
    platform_wheel,
    sglang_host_wheel,
    torch_family,
)
from .locks import ResolveAll, ResolveOne, resolve_lock, resolve_locks
from .releases import ReleasePins
from .renames import EnvFacts, wheel_env
from .speculative import last_sweep_report


@dataclass
class Engines:
    """The outside world, one callable each (tests pass doubles for the slow ones)."""

    available: Callable[[str], list[str]] = available_versions
    sglang_wheel: Callable[[str], Path] = sglang_host_wheel
    platform_wheel: Callable[[Stack, str], Path | None] = platform_wheel
    patches: Callable[[str, Stack], dict[str, tuple[str, str]]] = patch_statuses
    family: Callable[[Stack, ReleasePins, str], dict[str, str]] = torch_family
    base_glibc: Callable[[Stack], str | None] = known_base_glibc
    resolve: ResolveOne = resolve_lock
    resolve_platforms: ResolveAll = resolve_locks  # a stack of several platforms: every platform's lock
    coverage: Callable[[Stack], dict[str, Any] | None] = coverage_document
    argv: Callable[[Path, list[str], Callable[[str], str]], dict[str, Any]] = check_argv
    sweep_report: Callable[[Stack], tuple[dict[str, Any] | None, str]] = last_sweep_report
    flags: Callable[[Path, Callable[[str], str]], dict[str, Any]] = release_flags
    env: Callable[[Path], EnvFacts] = wheel_env
