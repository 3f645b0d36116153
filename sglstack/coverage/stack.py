"""A stack's kernel coverage: the checks of its input, each platform's wheels checked, the verdict's lines
and exit code (`invoke coverage` prints them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..adapters.cuobjdump import CuobjdumpError
from ..config.schema import Stack
from ..core.errors import ConfigError, SglstackError
from ..core.progress import progress
from .report import CoverageReport
from .wheels import check_wheels

EXIT_OK, EXIT_MISSING, EXIT_BAD_INPUT, EXIT_INCOMPLETE = 0, 1, 2, 3

class CoverageInputError(ConfigError):
    """Bad input to `invoke coverage` (exit 2, distinct from a missing capability)."""

    exit_code = EXIT_BAD_INPUT


class CoverageIncomplete(SglstackError):
    """The check could not run to its end (cuobjdump could not be installed or could not read a file)."""

    exit_code = EXIT_INCOMPLETE


def require_capabilities(stack: Stack) -> None:
    """A stack with no capability to check is bad input, refused before any lock or wheel is read."""
    if not stack.cuda_arch_list:
        raise CoverageInputError("cuda_arch_list is empty: there is no capability to check", stack=stack.name,
                                 key="cuda_arch_list")


def check_stack(stack: Stack, versions: Mapping[str, Mapping[str, str] | None],
                hashes: Mapping[str, Mapping[str, Sequence[str]] | None] | None = None) -> list[CoverageReport]:
    """One report per platform of the stack: its CUDA wheels at that platform's `versions` (its lock's; None:
    the stack's pins) fetched and listed; that platform's `hashes` (its lock's sha256s) find a wheel's stored
    result without fetching it."""
    require_capabilities(stack)
    reports = []
    try:
        with progress(f"coverage of {stack.name}", total=len(stack.platforms)) as steps:
            for platform in stack.platforms:
                def working_on(message: str, platform: str = platform) -> None:
                    steps.working_on(f"{platform}: {message}")

                reports.append(check_wheels(stack, platform, versions=versions.get(platform),
                                            hashes=(hashes or {}).get(platform), progress=working_on))
                steps.advance()
    except CuobjdumpError as exc:
        raise CoverageIncomplete(f"stack '{stack.name}': {exc}") from None
    return reports


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
