"""`invoke coverage --stack NAME`: fetch the stack's CUDA wheels for its python and platform, list their
device code with cuobjdump, print one row per extension and one column per capability, apply the policy.

No Docker and no GPU. Exit codes: 0 every required capability is covered; 1 a required capability is
missing (the line names the extension and the capability); 2 bad input (stacks file, stack, options);
3 nothing required is missing in what was checked, but a wheel could not be fetched here (incomplete).
The check is `sglstack.coverage.stack`'s; this module holds the options and prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.jsonreport import NO_JSON
from ..core.options import ReportOptions, stacks_file_option
from .cmdoptions import stack_option
from .options import command

if TYPE_CHECKING:
    from rich.console import Console

    from ..core.jsonreport import JsonReport
    from ..coverage.report import CoverageReport


@dataclass(frozen=True)
class CoverageOptions(ReportOptions):
    stack: str = stack_option()
    stacks_file: str = stacks_file_option()


@command(CoverageOptions)
def coverage(o: CoverageOptions, as_json: JsonReport) -> int:
    """Which kernels each GPU of cuda_arch_list gets from the stack's wheels (cuobjdump; no Docker, no GPU).

    Exit 0 covered, 1 a required capability missing, 2 bad input, 3 incomplete (a wheel out of reach)."""
    return coverage_command(o.stacks_file, o.stack, as_json=as_json)


def coverage_command(stacks_file: str, stack_name: str, *, as_json: JsonReport = NO_JSON,
                     console: Console | None = None) -> int:
    """Every input checked first (`--json-out` by the face), then fetch, list, print, the JSON report;
    returns the exit code."""
    # at call time: rich, the matrix and the wheel tools would slow `invoke --list`
    from ..config.matrix import load_matrix
    from ..core.console import console as make_console
    from ..core.errors import ConfigError
    from ..coverage.stack import CoverageInputError, check_stack, overall_exit, require_capabilities
    from ..lock.trust import lock_for_build

    console = console or make_console()
    try:
        stack = load_matrix(stacks_file).get(stack_name)
    except ConfigError as exc:
        raise CoverageInputError(exc.reason, file=exc.file, stack=exc.stack, key=exc.key, line=exc.line) from None
    require_capabilities(stack)
    # The versions each platform's build installs: the build's own check of that platform's lock (stale, edited,
    # another stack's or platform's: one line), every lock before any wheel is fetched.
    locks = {p: lock_for_build(stacks_file, stack.for_platform(p)) for p in stack.platforms}
    reports = check_stack(stack, {p: {x.name: x.version for x in lock.packages} if lock else None
                                  for p, lock in locks.items()},
                          {p: {x.name: x.hashes for x in lock.packages} if lock else None for p, lock in locks.items()})
    for report in reports:
        render_report(report, console)
    as_json.emit(reports[0].to_dict() if len(reports) == 1 else {"platforms": [r.to_dict() for r in reports]})
    return overall_exit(reports)


_STYLE = {"native": "green", "ptx": "yellow", "missing": "bold red"}  # coverage.rules' cells


def render_report(report: CoverageReport, console: Console) -> None:
    # at call time: rich would slow `invoke --list`
    from ..core.console import plain, report_table
    from ..coverage.stack import EXIT_INCOMPLETE, EXIT_MISSING, EXIT_OK, unchecked_lines, violation_lines

    table = report_table(("package", "extension"), title=f"kernel coverage: stack {report.stack} "
                         f"({plain(report.platform)}), require {plain(report.require)}")
    for cap in report.capabilities:
        table.add_column(cap, justify="center", overflow="fold")
    waived = {(name, cap) for name, cap, _, _ in report.waived}
    for row in report.rows:
        cells = []
        for cap in report.capabilities:
            value = row.cells[cap]
            text = f"[{_STYLE[value]}]{value}[/]"
            cells.append(f"{text} (excepted)" if (row.name, cap) in waived else text)
        table.add_row(plain(row.package), plain(row.name), *cells)
    console.print(table)
    for line in unchecked_lines(report):
        console.print(f"[yellow]not checked[/] {plain(line)}", highlight=False)
    for name, cap, value, reason in report.waived:
        console.print(f"[dim]excepted[/] {plain(name)} on {plain(cap)}: {plain(value)} ({plain(reason)})",
                      highlight=False)
    for note in (*report.stale_exceptions, *report.notes):
        console.print(f"[yellow]note[/] {plain(note)}", highlight=False)
    for line in violation_lines(report):
        console.print(f"[bold red]not covered[/] {plain(line)}", highlight=False)
    verdict = {EXIT_OK: "[green]covered[/]", EXIT_MISSING: "[bold red]NOT covered[/]",
               EXIT_INCOMPLETE: "[yellow]incomplete[/]: nothing required is missing in what was checked"}
    label = report.label()
    console.print(f"coverage {verdict[report.exit_code]}" + (f"; label {plain(label)}" if label else ""),
                  highlight=False)
