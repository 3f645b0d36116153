"""`invoke test`: the fast tier (tests/unit and tests/cli, in parallel with pytest-xdist) or, with --all,
every tier as CI runs it (`bash .ci/run`): the Docker, registry and PyPI tests one after another on one
worker, the fast tier on another beside them.

The tiers are folders, the marks come from the fixtures a test uses (tests/conftest.py): the fast tier also
deselects by mark, so a test in unit/ or cli/ that asks for the engine or PyPI still stays out of it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError
from ..core.options import TaskOptions, option
from .options import command

# The checkout the tests belong to (they are not installed with the package).
REPO = Path(__file__).resolve().parents[2]
FAST_TIER = "not docker and not network and not slow"
FAST_PATHS = ("tests/unit", "tests/cli")
# The fast tier's Hypothesis profile (registered by tests/conftest.py): a third of the examples each property
# test names (tests/lib/hypothesis_budget.py); every tier, as CI runs them, draws them all.
FAST_HYPOTHESIS_PROFILE = "sglstack-fast"
# pytest's "no tests collected": a broken suite here, not a pass (as scripts/test.sh says).
NO_TESTS_COLLECTED = 5


# Every tier (CI, scripts/test.sh): the engine's tests in two ordered xdist groups (tests/conftest.py: the
# bisect ones, and the rest), one per worker from the start, the fast tier's files filling in beside them
# (--no-loadscope-reorder: in the tests' order, which puts the two engine groups first; xdist's own order,
# most tests first, queued the few long bisect tests behind the whole fast tier).
ALL_TIERS_XDIST = ("-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder")


def fast_tier_workers(cpus: int) -> int:
    """xdist workers for the fast tier: more than the cores, since much of its time is waiting on the servers,
    children and files its tests start (2 cores, quiet: 2 workers 184 s, 4 131 s, 6 116 s, the same ~200 s of
    CPU each), but not so many that each worker's collection (~4 s of CPU) outweighs what overlaps."""
    return min(3 * max(cpus, 1), max(cpus, 1) + 4)


def pytest_argv(*, all_tiers: bool, extra: tuple[str, ...], workers: int | None = None) -> list[str]:
    """The pytest command line: every tier (CI), or the fast tier on `workers` xdist processes (by default
    `fast_tier_workers` of this machine's cores; a `-n` in `extra` comes later and wins)."""
    if workers is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = fast_tier_workers(cores)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if all_tiers:
        argv += ALL_TIERS_XDIST
    else:
        # loadfile: a module's tests share one worker, so module-scoped fixtures are built once.
        argv += ["-n", str(workers), "--dist", "loadfile", "-m", FAST_TIER,
                 f"--hypothesis-profile={FAST_HYPOTHESIS_PROFILE}", *FAST_PATHS]
    return argv + list(extra)


def run_tests(*, all_tiers: bool, extra: tuple[str, ...], repo: Path = REPO) -> int:
    """Run the tests in a child pytest from the checkout's root and return its exit code."""
    if not (repo / "tests").is_dir() or not (repo / "pyproject.toml").is_file():
        # the installed `sglstack` has no tests: pytest would collect nothing where the package is installed
        raise ConfigError(f"test: the tests come with a checkout of sglstack, not the installed package "
                          f"({repo} has none)")
    code = subprocess.run(pytest_argv(all_tiers=all_tiers, extra=extra), cwd=repo, check=False).returncode
    return 1 if code == NO_TESTS_COLLECTED else code


@dataclass(frozen=True)
class TierOptions(TaskOptions):
    all: bool = option("every tier (Docker, registries, builds, PyPI) as CI runs it", False, kind=bool)
    pytest: str = option('more pytest arguments, one string (e.g. "-k render -x")', "")


@command(TierOptions, name="test")
def test_(o: TierOptions) -> int:
    """The fast tier (tests/unit, tests/cli: no Docker, no network) in parallel; --all: everything."""
    return run_tests(all_tiers=o.all, extra=tuple(shlex.split(o.pytest or "")))
