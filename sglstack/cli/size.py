"""`invoke size --stack NAME [--platform P] [--image REF] [--json]`: the size report of a stack's image, and its budget.

The image is the one the stack's last build recorded (`build/NAME/record.json`; each platform's, build/NAME.OS-ARCH
past the first, for a stack of several), or `--image`. Exit 0, 1 when an image is over the stack's `size.max_gb`
(with what grew since the recorded build) or a platform has no recorded build, 2 for bad input.
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
    from ..config.schema import Stack
    from ..core.jsonreport import JsonReport
    from ..size.stack import StackSize


@dataclass(frozen=True)
class SizeOptions(ReportOptions):
    stack: str = stack_option()
    stacks_file: str = stacks_file_option()
    image: str | None = option("the image to measure (default: the one the stack's last build recorded)",
                               check=not_an_image)
    docker_host: str | None = docker_host_option("Docker engine URL the image is on (default: DOCKER_HOST / local "
                                                 "socket)")
    platform: str | None = option("the stack's platform to measure (default: each platform's recorded image)")


@command(SizeOptions)
def size(o: SizeOptions, as_json: JsonReport) -> int:
    """The image's size by layer, its 20 largest packages, files present twice; exit 1 over size.max_gb."""
    return size_command(o.stacks_file, o.stack, image=o.image, as_json=as_json, docker_host=o.docker_host,
                        platform=o.platform)


def size_command(stacks_file: str, stack_name: str, *, image: str | None = None, as_json: JsonReport = NO_JSON,
                 docker_host: str | None = None, platform: str | None = None) -> int:
    # at call time: the Docker SDK, rich and the matrix would slow `invoke --list`
    from ..config.matrix import load_matrix
    from ..core.errors import one_line
    from ..size.stack import measure_platforms

    stack = load_matrix(stacks_file).get(stack_name)
    if platform is not None:  # one of the stack's, refused in one line before any engine is asked
        stack.for_platform(platform)
    measured, missing = measure_platforms(stack, image, docker_host, platform)
    several = len(measured) + len(missing) > 1
    as_json.emit({"stack": stack.name, "platforms": [m.data for m in measured], "not_measured": missing}
                 if several else measured[0].data)
    if not as_json.stdout:
        for one in measured:
            _print_measure(stack, one, heading=several)
    problems = [*(p for m in measured for p in m.problems), *missing]
    for problem in problems:
        print(f"error: {one_line(problem)}", file=sys.stderr)
    return 1 if problems else 0


def _print_measure(stack: Stack, measured: StackSize, *, heading: bool) -> None:
    """One platform's report (under its name, where the stack has several), its budget and its copies."""
    # at call time: rich would slow `invoke --list`
    from ..core.console import console as make_console
    from ..core.console import printable_lines
    from ..size.report import report_text

    report, verdict = measured.report, measured.verdict
    console = make_console()
    if heading:
        console.print(f"platform {measured.data['platform']}:", markup=False, highlight=False)
    console.print(printable_lines(report_text(report)), markup=False, highlight=False, soft_wrap=True)
    if measured.max_gb and verdict is None:
        console.print(f"within the size budget: {report.bytes / 1e9:.3f} GB <= size.max_gb {measured.max_gb:g}",
                      markup=False, highlight=False)
    elif verdict is not None:
        console.print(printable_lines(verdict.table), markup=False, highlight=False, soft_wrap=True)
    if stack.size and not measured.copies:
        console.print("each CUDA library once, beside the copies size.library_copies declares",
                      markup=False, highlight=False)
