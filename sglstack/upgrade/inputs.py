"""`invoke upgrade`'s inputs, each checked before any long work (one line each, exit 2): the stacks file and
the stack, the release, `--as`, and every place the run writes; and, before `--write` replaces the stacks file,
that nobody edited it meanwhile."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from ..adapters.wheels import WheelFetchError
from ..config.matrix import descendants, load_matrix, stack_name_problem
from ..config.schema import Matrix, Stack
from ..core.errors import ConfigError, SglstackError, shown
from ..core.records import UPGRADE_DIR, build_root, require_writable, stack_dir
from ..core.safefiles import check_inside
from ..core.versions import version_problem
from .locks import lock_paths
from .stacksfile import check_editable

EXIT_BAD_INPUT = 2


class UpgradeInputError(ConfigError):
    """Bad input to `invoke upgrade` (exit 2, apart from a `review` verdict's 1)."""

    exit_code = EXIT_BAD_INPUT


@dataclass(frozen=True)
class Inputs:
    stacks_file: Path
    matrix: Matrix
    stack: Stack
    version: str
    new_name: str
    write: bool
    source: bytes | None = None  # the stacks file as read: `--write` replaces only this very text


def check_inputs(stacks_file: str, stack_name: str, version: str, as_name: str | None, write: bool,
                 available: Callable[[str], list[str]]) -> Inputs:
    """Every bad input as one line, exit 2, before anything is fetched beyond the index's release list
    (`--json-out` is the face's: `sglstack.cli.reporting`)."""
    try:
        source = Path(stacks_file).read_bytes() if Path(stacks_file).is_file() else None
    except OSError:
        source = None  # the loader says why it cannot read it
    try:
        matrix = load_matrix(stacks_file)
        stack = matrix.get(stack_name)
    except ConfigError as exc:
        raise UpgradeInputError(exc.reason, file=exc.file, stack=exc.stack, key=exc.key, line=exc.line) from None
    if source is not None:
        try:  # the edit comes after the work: a file it cannot read is refused now
            check_editable(source.decode("utf-8"), file=str(stacks_file))
        except ConfigError as exc:
            raise UpgradeInputError(exc.reason, file=exc.file, line=exc.line) from None
    if stack.sglang.version is None:
        raise UpgradeInputError("builds SGLang from git: `invoke upgrade` moves a release pin", stack=stack_name,
                                key="sglang")
    problem = version_problem(version)
    if problem:
        raise UpgradeInputError(f"--sglang {shown(version)}: {problem}")
    if as_name is not None:
        problem = stack_name_problem(as_name)
        if problem:
            raise UpgradeInputError(f"--as {as_name}: {problem}")
        if as_name in matrix.stacks:
            raise UpgradeInputError(f"--as {as_name}: the stack already exists (choose another name, or "
                                    f"leave --as out to upgrade {stack_name} in place)", file=str(stacks_file))
    heirs = descendants(matrix, stack_name)
    if write and as_name is None and heirs:
        inherit = "inherits" if len(heirs) == 1 else "inherit"
        raise UpgradeInputError(f"--write would also change {stacks_named(heirs)}, which {inherit} it: write the "
                                "upgrade as a new stack with --as NEW instead", file=str(stacks_file), stack=stack_name)
    if Version(version) == Version(stack.sglang.version):
        raise UpgradeInputError(f"--sglang {version}: the stack already pins it", stack=stack_name, key="sglang")
    new_name = as_name or stack_name
    _check_writable(Path(stacks_file), stack, new_name, write)
    try:
        releases = available("sglang")
    except WheelFetchError as exc:
        raise UpgradeInputError(f"cannot list SGLang's releases: {exc}") from None
    if version not in releases:
        # the index's answer: a version it lists that is not one is left out, not a traceback
        listed = [v for v in releases if version_problem(v) is None]
        newest = max((v for v in listed if not Version(v).is_prerelease), key=Version, default=None)
        raise UpgradeInputError(f"--sglang {version}: no such release of sglang on the package index"
                                + (f" (newest: {newest})" if newest else ""))
    return Inputs(Path(stacks_file), matrix, stack, version, new_name, write, source)


def stacks_named(names: list[str]) -> str:
    return f"stack{'s' * (len(names) > 1)} " + ", ".join(f"'{n}'" for n in names)


def _check_writable(stacks_file: Path, stack: Stack, new_name: str, write: bool) -> None:
    """Every place the run writes can be written, before any work: the report's folder, and with
    `--write` the stacks file (the file a link leads to) and each platform's lock (a read-only checkout)."""
    out_dir = stack_dir(new_name) / UPGRADE_DIR
    check_inside(build_root(), out_dir)
    # nothing made yet: the release may still not be on the index
    require_writable(out_dir / "report.json", what="the upgrade's report", create=False)
    if not write:
        return
    require_writable(Path(os.path.realpath(stacks_file)), what="--write: the stacks file")
    for new_lock in lock_paths(stacks_file, stack, new_name).values():
        if new_lock.parent.is_dir():  # else it is made in the stacks file's folder, checked just above
            require_writable(new_lock, what="--write: the lock")


def unchanged_since_read(inputs: Inputs) -> None:
    """Refuse to replace a stacks file someone edited while the upgrade ran: their edit would be lost."""
    try:
        now = inputs.stacks_file.read_bytes()
    except OSError:
        now = None
    if inputs.source is not None and now != inputs.source:
        raise SglstackError(f"{inputs.stacks_file}: changed while the upgrade ran: nothing written (run the "
                            "upgrade again on the file as it is now)")
