"""Where a smoke run writes (its report, history and each process server's log), checked writable before the
first server starts, not found unwritable after an hour of measuring."""

from __future__ import annotations

from pathlib import Path

from ..config.schema import Stack
from ..core.errors import SmokeInputError
from ..core.records import require_writable
from ..core.safefiles import OutputNotWritable, containing_root, refuse_link
from . import history as hist
from .plan import SmokeOptions
from .sweep import extra_settings


def report_path_for(options: SmokeOptions, stack: Stack | None) -> Path:
    """--report, else BUILD_ROOT/<stack>/smoke-report.json."""
    if options.report:
        return Path(options.report)
    return hist.smoke_folder(options.build_dir, stack.name if stack else None) / "smoke-report.json"


def check_outputs(options: SmokeOptions, stack: Stack | None) -> tuple[Path, Path | None]:
    """The report and history paths, each checked writable now (one line naming the path if not)."""
    report_path = report_path_for(options, stack)
    try:  # probed, not made: a smoke that stops before its report (a failed pull) leaves no empty folder
        require_writable(report_path, what="smoke report (--report)" if options.report else "smoke report",
                         create=False)
        for sibling in (report_path.with_suffix(".md"), report_path.with_suffix(".png")):
            require_writable(sibling, what="smoke report", create=False)
    except OutputNotWritable as exc:
        if options.report:  # a --report the user named that cannot be written is bad input
            raise SmokeInputError(str(exc)) from None
        raise
    history_file = None if options.no_history else hist.history_path(options.build_dir, stack.name if stack else None)
    if history_file is not None:
        require_writable(history_file, what="smoke history (under the build folder)", create=False)
    if options.runner == "process":  # each server's output, opened once the server starts
        for kind in [*options.kinds, *(f"eagle3.{s.file_part}" for s in extra_settings(options))]:
            refuse_link(log_root(report_path, options), server_log_path(report_path, kind))
    return report_path, history_file


def log_root(report_path: Path, options: SmokeOptions) -> Path:
    """The folder no link may lead out of on the way to a server's log: the build folder, or the report's
    own folder (a `--report` elsewhere)."""
    return containing_root(report_path.parent, Path(options.build_dir))


def server_log_path(report_path: Path, kind: str) -> Path:
    """report.json -> report.baseline.log: the process runner keeps each server's output beside the report."""
    return report_path.with_suffix(f".{kind}.log")
