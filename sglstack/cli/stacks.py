"""The matrix: `invoke stacks` (`lock` and `upgrade` have their own modules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.options import ReportOptions, option, output_option, stacks_file_option
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport

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
