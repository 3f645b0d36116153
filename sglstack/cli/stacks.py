"""The matrix: `invoke stacks`, `lock`, `releases`, `upgrade`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.options import ReportOptions, option, output_option, repeatable, required, stacks_file_option
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport

STACK = "stack name from the matrix"


@dataclass(frozen=True)
class StacksOptions(ReportOptions):
    stacks_file: str = stacks_file_option("the matrix file (default: stacks.yaml)")
    check: bool = option("validate, and compare pins with SGLang's own requirements", False, kind=bool)
    resolve: bool = option("with --check: also run the real resolver (uv) and name both sides of any conflict",
                           False, kind=bool)
    output: str | None = output_option()


@command(StacksOptions)
def stacks(o: StacksOptions, as_json: JsonReport) -> int:
    """Print the stack matrix as a table; --check validates it and checks pin conflicts."""
    from .stacks_table import stacks_command  # at call time: pydantic and uv would slow `invoke --list`

    return stacks_command(o.stacks_file, check=o.check, resolve=o.resolve, as_json=as_json,
                          wide=o.output == "wide")


@dataclass(frozen=True)
class LockOptions(ReportOptions):
    stack: str = required(STACK)
    stacks_file: str = stacks_file_option()
    upgrade_package: tuple[str, ...] = repeatable("re-resolve only this package and what depends on it (repeatable)")


@command(LockOptions)
def lock(o: LockOptions, as_json: JsonReport) -> int:
    """Resolve everything the stack's image installs (uv, with hashes) into locks/STACK.txt."""
    from ..lock.flow import lock_command  # at call time: the resolver and the matrix are slow to import

    return lock_command(o.stacks_file, o.stack, upgrade_packages=list(o.upgrade_package), as_json=as_json)


@dataclass(frozen=True)
class ReleasesOptions(ReportOptions):
    stack: str | None = option("only this stack (default: every stack with a release pin)")
    stacks_file: str = stacks_file_option()


@command(ReleasesOptions)
def releases(o: ReleasesOptions, as_json: JsonReport) -> int:
    """SGLang releases on the index newer than each stack's pin, with the torch, kernel package and FlashInfer
    each requires."""
    from ..upgrade.releases import releases_command  # at call time: packaging and the matrix

    return releases_command(o.stacks_file, stack_name=o.stack, as_json=as_json)


@dataclass(frozen=True)
class UpgradeOptions(ReportOptions):
    stack: str = required(STACK)
    sglang: str = required("the SGLang release to move to")
    as_: str | None = option("write the upgraded entry as a new stack NEW (inherits NAME; default: NAME in place)")
    write: bool = option("edit the stacks file (comments kept) and write locks/NEW.txt, when the entry would pass "
                         "`invoke stacks --check`", False, kind=bool)
    stacks_file: str = stacks_file_option()


@command(UpgradeOptions)
def upgrade(o: UpgradeOptions, as_json: JsonReport) -> int:
    """Move a stack to an SGLang release: derived pins, overrides, patches, lock, coverage, argv; a review
    report. Exit 0 ready, 1 review, 2 bad input."""
    from ..upgrade.command import upgrade_command  # at call time: the resolver, wheels and the matrix

    return upgrade_command(o.stacks_file, o.stack, o.sglang, as_name=o.as_, write=o.write, as_json=as_json)
