"""`invoke coverage --stack NAME`: fetch the stack's CUDA wheels for its python and platform, list their
device code with cuobjdump, print one row per extension and one column per capability, apply the policy.

No Docker and no GPU. Exit codes: 0 every required capability is covered; 1 a required capability is
missing (the line names the extension and the capability); 2 bad input (stacks file, stack, options);
3 nothing required is missing in what was checked, but a wheel could not be fetched here (incomplete).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..adapters.cuobjdump import Cuobjdump, CuobjdumpError, ListingCache, cuobjdump
from ..adapters.wheels import WheelFetchError, WheelUnreachable, cache_dir, fetch_binary_wheel
from ..config.matrix import load_matrix
from ..config.schema import Stack
from ..core.console import console as make_console
from ..core.errors import ConfigError, SglstackError
from ..lock.file import lock_path, read_lock
from .devicecode import inspect_wheel
from .report import CoverageReport, PackageStatus, build_report
from .rules import MISSING, NATIVE, PackageObjects, WheelSource, capabilities_of, device_code_wheels

EXIT_OK, EXIT_MISSING, EXIT_BAD_INPUT, EXIT_INCOMPLETE = 0, 1, 2, 3

# glibc of the base image's Ubuntu (the CUDA images name it in their tag): the newest manylinux tag it runs.
UBUNTU_GLIBC = {"24.04": 39, "22.04": 35, "20.04": 31}
DEFAULT_GLIBC_MINOR = 39


class CoverageInputError(ConfigError):
    """Bad input to `invoke coverage` (exit 2, distinct from a missing capability)."""

    exit_code = EXIT_BAD_INPUT


class CoverageIncomplete(SglstackError):
    """The check could not run to its end (cuobjdump could not be installed or could not read a file)."""

    exit_code = EXIT_INCOMPLETE


def pip_platform_tags(platform: str, base_image: str, glibc: str | None = None) -> tuple[str, ...]:
    """linux/amd64 on an Ubuntu 24.04 base -> manylinux_2_39_x86_64 ... manylinux_2_17_x86_64, manylinux2014.

    pip 23's --platform takes exact tags only, so every manylinux tag the image's glibc accepts is listed.
    The stack's declared `glibc` wins over what the base image's name suggests.
    """
    machine = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[platform]
    m = re.search(r"ubuntu(\d+\.\d+)", base_image)
    newest = UBUNTU_GLIBC.get(m.group(1), DEFAULT_GLIBC_MINOR) if m else DEFAULT_GLIBC_MINOR
    if glibc:
        newest = int(glibc.split(".")[1])
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(newest, 16, -1)]
    return (*tags, f"manylinux2014_{machine}")


def wheel_dir(stack: Stack, platform: str) -> Path:
    """Wheels for another interpreter and platform live apart from the ones for this machine."""
    return cache_dir() / f"cp{stack.python.replace('.', '')}-{platform.replace('/', '-')}"


def fetch_source(source: WheelSource, stack: Stack, platform: str) -> Path:
    return fetch_binary_wheel(source.requirement, dest=wheel_dir(stack, platform), python_version=stack.python,
                              platform_tags=pip_platform_tags(platform, stack.base_image, stack.glibc),
                              index_url=source.index_url, extra_index=source.extra_index, logins=stack.credentials)


def check_wheels(stack: Stack, platform: str, *, progress: Callable[[str], None] = lambda _m: None,
                 jobs: int | None = None, versions: Mapping[str, str] | None = None) -> CoverageReport:
    """The report for one platform of a stack, from its wheels (each fetched once into the cache);
    `versions` ({name: version}, the lock's) pins the stack's `coverage.packages`."""
    caps = capabilities_of(stack.cuda_arch_list)
    statuses: list[PackageStatus] = []
    packages: list[PackageObjects] = []
    tool: Cuobjdump | None = None
    listings: ListingCache | None = None
    unreachable: dict[str, str] = {}  # an index or URL found unreachable once is not probed again
    for source in device_code_wheels(stack, platform, versions):
        if not source.version:
            statuses.append(PackageStatus(source.package, "", "lock", False,
                                          f"{source.package} has no version in the stack's lock (invoke lock)"))
            continue
        where = source.index_url or source.requirement
        if where in unreachable:
            statuses.append(PackageStatus(source.package, source.version, where, False, unreachable[where]))
            continue
        progress(f"fetching {source.label}")
        try:
            wheel = fetch_source(source, stack, platform)
        except WheelFetchError as exc:
            if isinstance(exc, WheelUnreachable):
                unreachable[where] = str(exc)
            statuses.append(PackageStatus(source.package, source.version, where, False, str(exc)))
            continue
        if tool is None:
            tool = cuobjdump()
            listings = ListingCache(tool.release)
        progress(f"listing the device code of {wheel.name}")
        packages.append(inspect_wheel(wheel, source.package, source.version, tool, cache=listings, jobs=jobs))
        statuses.append(PackageStatus(source.package, source.version, wheel.name, True))
    return build_report(stack.name, platform, caps, stack.coverage, packages, statuses)


_STYLE = {NATIVE: "green", "ptx": "yellow", MISSING: "bold red"}


def render_report(report: CoverageReport, console: Console) -> None:
    table = Table(title=f"kernel coverage: stack {report.stack} ({report.platform}), require {report.require}")
    table.add_column("package")
    table.add_column("extension", overflow="fold")
    for cap in report.capabilities:
        table.add_column(cap, justify="center")
    waived = {(name, cap) for name, cap, _, _ in report.waived}
    for row in report.rows:
        cells = []
        for cap in report.capabilities:
            value = row.cells[cap]
            text = f"[{_STYLE[value]}]{value}[/]"
            cells.append(f"{text} (excepted)" if (row.name, cap) in waived else text)
        table.add_row(row.package, row.name, *cells)
    console.print(table)
    for line in unchecked_lines(report):
        console.print(f"[yellow]not checked[/] {line}", highlight=False)
    for name, cap, value, reason in report.waived:
        console.print(f"[dim]excepted[/] {name} on {cap}: {value} ({reason})", highlight=False)
    for note in (*report.stale_exceptions, *report.notes):
        console.print(f"[yellow]note[/] {note}", highlight=False)
    for line in violation_lines(report):
        console.print(f"[bold red]not covered[/] {line}", highlight=False)
    verdict = {EXIT_OK: "[green]covered[/]", EXIT_MISSING: "[bold red]NOT covered[/]",
               EXIT_INCOMPLETE: "[yellow]incomplete[/]: nothing required is missing in what was checked"}
    label = report.label()
    console.print(f"coverage {verdict[report.exit_code]}" + (f"; label {label}" if label else ""), highlight=False)


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


def coverage_command(stacks_file: str, stack_name: str, *, json_path: str | None = None,
                     console: Console | None = None) -> int:
    """The task: every input checked first, then fetch, list, print, --json; returns the exit code."""
    console = console or make_console()
    try:
        stack = load_matrix(stacks_file).get(stack_name)
    except ConfigError as exc:
        raise CoverageInputError(exc.reason, file=exc.file, stack=exc.stack, key=exc.key, line=exc.line) from None
    if not stack.cuda_arch_list:
        raise CoverageInputError("cuda_arch_list is empty: there is no capability to check", stack=stack.name,
                                 key="cuda_arch_list")
    if json_path:
        writable_json_path(json_path)  # before any wheel is fetched: the report must have somewhere to go
    reports = []
    path = lock_path(stacks_file, stack.name)
    versions = {p.name: p.version for p in read_lock(path).packages} if path.is_file() else None
    try:
        for platform in stack.platforms:
            reports.append(check_wheels(stack, platform, versions=versions,
                                        progress=lambda m: console.print(f"[dim]coverage: {m}[/]")))
    except CuobjdumpError as exc:
        raise CoverageIncomplete(f"stack '{stack.name}': {exc}") from None
    for report in reports:
        render_report(report, console)
    if json_path:
        data = reports[0].to_dict() if len(reports) == 1 else {"platforms": [r.to_dict() for r in reports]}
        target = Path(json_path).expanduser()
        tmp = target.with_name(f".{target.name}.tmp")
        try:  # whole or not at all: a full disk leaves the earlier report, never half of this one
            tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
            tmp.replace(target)
        except OSError as exc:
            raise CoverageInputError(f"cannot write '{json_path}': {exc.strerror or exc}", key="--json") from None
        finally:
            tmp.unlink(missing_ok=True)
    return overall_exit(reports)


def writable_json_path(json_path: str) -> Path:
    """`--json PATH` checked by writing: a folder, a missing folder, a read-only one or file is one line.

    A probe file is created and removed in the folder (permission bits alone say nothing for root, and
    nothing of a read-only mount), and an existing report is opened for writing without truncating it.
    """
    path = Path(json_path).expanduser()
    folder = path.resolve().parent
    if path.is_dir():
        raise CoverageInputError(f"'{json_path}' is a folder, not a file to write the report to", key="--json")
    if not folder.is_dir():
        raise CoverageInputError(f"the folder of '{json_path}' does not exist", key="--json")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".sglstack-probe-"):
            pass
        if path.exists():
            with open(path, "r+b"):
                pass
    except OSError as exc:
        raise CoverageInputError(f"cannot write '{json_path}': {exc.strerror or exc}", key="--json") from None
    return path
