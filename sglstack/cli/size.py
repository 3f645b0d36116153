"""`invoke size --stack NAME [--image REF] [--json]`: the size report of a stack's image, and its budget.

The image is the one the stack's last build recorded (`build/NAME/record.json`), or `--image`. Exit 0,
1 when the image is over the stack's `size.max_gb` (with what grew since the recorded build), 2 for bad input.
The measure is `sglstack.size.stack`'s; this module holds the options and prints the report.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config.imageref import not_an_image
from ..core.jsonreport import NO_JSON
from ..core.options import ReportOptions, docker_host_option, option, stacks_file_option
from .cmdoptions import stack_option
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport


@dataclass(frozen=True)
class SizeOptions(ReportOptions):
    stack: str = stack_option()
    stacks_file: str = stacks_file_option()
    image: str | None = option("the image to measure (default: the one the stack's last build recorded)",
                               check=not_an_image)
    docker_host: str | None = docker_host_option("Docker engine URL the image is on (default: DOCKER_HOST / local "
                                                 "socket)")


@command(SizeOptions)
def size(o: SizeOptions, as_json: JsonReport) -> int:
    """The image's size by layer, its 20 largest packages, files present twice; exit 1 over size.max_gb."""
    return size_command(o.stacks_file, o.stack, image=o.image, as_json=as_json, docker_host=o.docker_host)


def size_command(stacks_file: str, stack_name: str, *, image: str | None = None, as_json: JsonReport = NO_JSON,
                 docker_host: str | None = None) -> int:
    # at call time: the Docker SDK, rich and the matrix would slow `invoke --list`
    from ..config.matrix import load_matrix
    from ..core.console import console as make_console
    from ..core.console import printable_lines
    from ..core.errors import one_line
    from ..size.report import report_text
    from ..size.stack import measure_stack

    stack = load_matrix(stacks_file).get(stack_name)
    measured = measure_stack(stack, image, docker_host)
    report, verdict = measured.report, measured.verdict
    as_json.emit(measured.data)
    if not as_json.stdout:
        console = make_console()
        console.print(printable_lines(report_text(report)), markup=False, highlight=False, soft_wrap=True)
        if measured.max_gb and verdict is None:
            console.print(f"within the size budget: {report.bytes / 1e9:.3f} GB <= size.max_gb {measured.max_gb:g}",
                          markup=False, highlight=False)
        elif verdict is not None:
            console.print(printable_lines(verdict.table), markup=False, highlight=False, soft_wrap=True)
        if stack.size and not measured.copies:
            console.print("each CUDA library once, beside the copies size.library_copies declares",
                          markup=False, highlight=False)
    for problem in measured.problems:
        print(f"error: {one_line(problem)}", file=sys.stderr)
    return 1 if measured.problems else 0
