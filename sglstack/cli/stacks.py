"""The matrix: `invoke stacks`, `lock`, `releases`, `upgrade`."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.options import TaskOptions, json_path_option, option, repeatable, required, stacks_file_option
from .options import command

STACK = "stack name from the matrix"


@dataclass(frozen=True)
class StacksOptions(TaskOptions):
    stacks_file: str = stacks_file_option("the matrix file (default: stacks.yaml)")
    check: bool = option("validate, and compare pins with SGLang's own requirements", False, kind=bool)
    resolve: bool = option("with --check: also run the real resolver (uv) and name both sides of any conflict",
                           False, kind=bool)


@command(StacksOptions)
def stacks(o: StacksOptions) -> int:
    """Print the stack matrix as a table; --check validates it and checks pin conflicts."""
    from .stacks_table import stacks_command  # at call time: pydantic and uv would slow `invoke --list`

    return stacks_command(o.stacks_file, check=o.check, resolve=o.resolve)


@dataclass(frozen=True)
class LockOptions(TaskOptions):
    stack: str = required(STACK)
    stacks_file: str = stacks_file_option()
    upgrade_package: tuple[str, ...] = repeatable("re-resolve only this package and what depends on it (repeatable)")


@command(LockOptions)
def lock(o: LockOptions) -> int:
    """Resolve everything the stack's image installs (uv, with hashes) into locks/STACK.txt."""
    from ..lock.flow import lock_command  # at call time: the resolver and the matrix are slow to import

    return lock_command(o.stacks_file, o.stack, upgrade_packages=list(o.upgrade_package))


@dataclass(frozen=True)
class ReleasesOptions(TaskOptions):
    stack: str | None = option("only this stack (default: every stack with a release pin)")
    stacks_file: str = stacks_file_option()
    json: str | None = json_path_option("also write the releases and their requirements as JSON to PATH")


@command(ReleasesOptions)
def releases(o: ReleasesOptions) -> int:
    """SGLang releases on the index newer than each stack's pin, with the torch, kernel package and FlashInfer
    each requires."""
    from ..upgrade.releases import releases_command  # at call time: packaging and the matrix

    return releases_command(o.stacks_file, stack_name=o.stack, json_path=o.json)


@dataclass(frozen=True)
class UpgradeOptions(TaskOptions):
    stack: str = required(STACK)
    sglang: str = required("the SGLang release to move to")
    as_: str | None = option("write the upgraded entry as a new stack NEW (inherits NAME; default: NAME in place)")
    write: bool = option("edit the stacks file (comments kept) and write locks/NEW.txt, when the entry would pass "
                         "`invoke stacks --check`", False, kind=bool)
    json: str | None = json_path_option("also write the report as JSON to PATH")
    stacks_file: str = stacks_file_option()


@command(UpgradeOptions)
def upgrade(o: UpgradeOptions) -> int:
    """Move a stack to an SGLang release: derived pins, overrides, patches, lock, coverage, argv; a review
    report. Exit 0 ready, 1 review, 2 bad input."""
    from ..upgrade.command import upgrade_command  # at call time: the resolver, wheels and the matrix

    return upgrade_command(o.stacks_file, o.stack, o.sglang, as_name=o.as_, write=o.write, json_path=o.json)
