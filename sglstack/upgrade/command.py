"""`invoke upgrade`: the shell around the planner. Every input is checked before any long work; then the
release's wheel and METADATA, the patch engine, the resolver, the lock, coverage and SGLang's own parser
run, each through the project's engine for it; the report is printed and written under
build/NEW/upgrade/; `--write` replaces the stacks file and writes locks/NEW.txt last, together.

`--write` edits exactly one stack: it holds the matrix's file lock for the whole run (a second `upgrade
--write` of the file is refused at once), refuses before any work a stack others inherit, and writes
nothing if any other stack would load differently afterwards (stacksfile.py copies what a YAML anchor
shares rather than edit it for all). Every output path is checked before the work: no directory, no
input of the upgrade (the stacks file, a lock), a folder that can be written.

Nothing half-done is left: both files are written whole beside their real ones (through a link to
the stacks file, each keeping its mode) before either is renamed into place, the temporary files are
removed whatever stops the run, and a failed second rename puts the first file back.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.folderlock import file_lock
from ..core.jsonreport import dumps
from ..core.progress import progress
from ..core.records import UPGRADE_DIR, stack_dir, write_output
from ..lockfile.text import render_lock
from . import plan as planner
from .inputs import check_inputs, unchanged_since_read
from .locks import lock_paths, report_lock_name, write_upgrade
from .planning import plan_upgrade_locks
from .report import to_json, to_markdown
from .world import Engines


@dataclass(frozen=True)
class UpgradeOutcome:
    """What an upgrade found and left: the plan, its report (written under `out_dir`), and the files `--write`
    replaced: the stacks file and each platform's lock (None: nothing written)."""

    plan: planner.Plan
    markdown: str
    document: dict[str, Any]
    out_dir: Path
    written: tuple[Path, ...] | None


def upgrade_stack(stacks_file: str, stack_name: str, version: str, *, as_name: str | None = None,
                  write: bool = False, engines: Engines | None = None) -> UpgradeOutcome:
    """Plan the move of a stack to an SGLang release, write its report under build/NEW/upgrade/, and with
    `write` replace the stacks file and write locks/NEW.txt, and each further platform's lock (only when the
    entry would pass the check, and every platform's lock resolves)."""
    engines = engines or Engines()
    # no file (or not one): nothing to lock, and check_inputs says what is wrong with it
    locked = write and Path(stacks_file).is_file()
    with file_lock(Path(stacks_file), "upgrade --write") if locked else contextlib.nullcontext():
        return _upgrade(stacks_file, stack_name, version, as_name, write, engines)


def _upgrade(stacks_file: str, stack_name: str, version: str, as_name: str | None, write: bool,
             engines: Engines) -> UpgradeOutcome:
    inputs = check_inputs(stacks_file, stack_name, version, as_name, write, engines.available)
    start = time.monotonic()
    phases: list[tuple[str, float]] = []  # (what started, when): the report says where the time went

    with progress(f"upgrade {stack_name}") as steps:
        def phase(message: str) -> None:
            phases.append((message, time.monotonic()))
            steps.working_on(message)

        plan, text, locks = plan_upgrade_locks(inputs, engines, progress=phase)
    lock = next(iter(locks.values()), None)
    ends = [t for _, t in phases[1:]] + [time.monotonic()]
    seconds_per_phase = {m: round(end - t, 1) for (m, t), end in zip(phases, ends, strict=True)}
    writable = lock is not None and not plan.conflicts and not plan.guesses
    if inputs.write and plan.guesses:
        plan = replace(plan, notes=(*plan.notes, f"--write: nothing written: {', '.join(plan.guesses)} would be "
                                                 f"written as a guess ({stacks_file} is unchanged)"))
    elif inputs.write and not writable:
        plan = replace(plan, notes=(*plan.notes, f"--write: nothing written: the new entry would not pass "
                                                 f"`invoke stacks --check` ({stacks_file} is unchanged)"))
    out_dir = stack_dir(plan.new_stack) / UPGRADE_DIR
    if not inputs.write:
        for platform, x in locks.items():
            write_output(out_dir / report_lock_name(inputs.stack.for_platform(platform).lock_platform), render_lock(x))
    markdown = to_markdown(plan)
    write_output(out_dir / "report.md", markdown)
    document = {**to_json(plan), "seconds": round(time.monotonic() - start, 1), "phases_s": seconds_per_phase}
    write_output(out_dir / "report.json", dumps(document))
    written = None
    if inputs.write and writable and lock is not None:
        unchanged_since_read(inputs)
        paths = lock_paths(inputs.stacks_file, inputs.stack, plan.new_stack)
        (first, _), *others = [(paths[p], x) for p, x in locks.items()]
        written = (inputs.stacks_file, first, *(path for path, _ in others))
        write_upgrade(inputs.stacks_file, text, first, lock, others)
    return UpgradeOutcome(plan, markdown, document, out_dir, written)
