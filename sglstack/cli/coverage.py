"""`invoke coverage --stack NAME`: fetch the stack's CUDA wheels for its python and platform, list their
device code with cuobjdump, print one row per extension and one column per capability, apply the policy.

No Docker and no GPU. Exit codes: 0 every required capability is covered; 1 a required capability is
missing (the line names the extension and the capability); 2 bad input (stacks file, stack, options);
3 nothing required is missing in what was checked, but a wheel could not be fetched here (incomplete).
"""

from __future__ import annotations

from rich.console import Console

from ..adapters.cuobjdump import CuobjdumpError
from ..config.matrix import load_matrix
from ..core.console import console as make_console
from ..core.console import plain, report_table
from ..core.errors import ConfigError, SglstackError
from ..core.jsonreport import NO_JSON, JsonReport
from ..core.progress import progress
from ..coverage.report import CoverageReport
from ..coverage.rules import (
    MISSING,
    NATIVE,
)
from ..coverage.wheels import check_wheels
from ..lock.trust import lock_for_build

EXIT_OK, EXIT_MISSING, EXIT_BAD_INPUT, EXIT_INCOMPLETE = 0, 1, 2, 3

class CoverageInputError(ConfigError):
    """Bad input to `invoke coverage` (exit 2, distinct from a missing capability)."""

    exit_code = EXIT_BAD_INPUT


class CoverageIncomplete(SglstackError):
    """The check could not run to its end (cuobjdump could not be installed or could not read a file)."""

    exit_code = EXIT_INCOMPLETE


_STYLE = {NATIVE: "green", "ptx": "yellow", MISSING: "bold red"}


def render_report(report: CoverageReport, console: Console) -> None:
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


def violation_lines(report: CoverageReport) -> list[str]:
    """One line per extension: the capabilities it leaves below the stack's `coverage.require`."""
    by_row: dict[str, list[str]] = {}
    for v in report.violations:
        by_row.setdefault(v.extension, []).append(f"{v.capability} ({v.cell})")
    return [f"stack '{report.stack}': {name} gives no {report.require} code on {', '.join(caps)}"
            for name, caps in by_row.items()]


def unchecked_lines(report: CoverageReport) -> list[str]:
    """One line per reason a package was not checked (torch, torchvision, torchaudio share their index)."""
    by_reason: dict[str, list[str]] = {}
    for status in report.packages:
        if not status.checked:
            by_reason.setdefault(status.reason, []).append(f"{status.package} {status.version}")
    return [f"{', '.join(names)}: {reason}" for reason, names in by_reason.items()]


def overall_exit(reports: list[CoverageReport]) -> int:
    codes = {r.exit_code for r in reports}
    return EXIT_MISSING if EXIT_MISSING in codes else EXIT_INCOMPLETE if EXIT_INCOMPLETE in codes else EXIT_OK


def coverage_command(stacks_file: str, stack_name: str, *, as_json: JsonReport = NO_JSON,
                     console: Console | None = None) -> int:
    """The task: every input checked first (`--json-out` by the face), then fetch, list, print, the JSON
    report; returns the exit code."""
    console = console or make_console()
    try:
        stack = load_matrix(stacks_file).get(stack_name)
    except ConfigError as exc:
        raise CoverageInputError(exc.reason, file=exc.file, stack=exc.stack, key=exc.key, line=exc.line) from None
    if not stack.cuda_arch_list:
        raise CoverageInputError("cuda_arch_list is empty: there is no capability to check", stack=stack.name,
                                 key="cuda_arch_list")
    reports = []
    # The versions the build installs: the build's own check of the lock (stale, edited, another stack's: one line).
    lock = lock_for_build(stacks_file, stack)
    versions = {p.name: p.version for p in lock.packages} if lock else None
    hashes = {p.name: p.hashes for p in lock.packages} if lock else None
    try:
        with progress(f"coverage of {stack.name}", total=len(stack.platforms)) as steps:
            for platform in stack.platforms:
                def working_on(message: str, platform: str = platform) -> None:
                    steps.working_on(f"{platform}: {message}")

                reports.append(check_wheels(stack, platform, versions=versions, hashes=hashes,
                                            progress=working_on))
                steps.advance()
    except CuobjdumpError as exc:
        raise CoverageIncomplete(f"stack '{stack.name}': {exc}") from None
    for report in reports:
        render_report(report, console)
    as_json.emit(reports[0].to_dict() if len(reports) == 1 else {"platforms": [r.to_dict() for r in reports]})
    return overall_exit(reports)
