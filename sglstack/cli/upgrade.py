"""A stack's next SGLang: `invoke releases` and `invoke upgrade` (options, and what each prints)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.jsonreport import NO_JSON
from ..core.options import ReportOptions, option, required, stacks_file_option
from .cmdoptions import only_stack_option, stack_option
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport
    from ..upgrade.world import Engines


@dataclass(frozen=True)
class ReleasesOptions(ReportOptions):
    stack: str | None = only_stack_option("only this stack (default: every stack with a release pin)")
    stacks_file: str = stacks_file_option()


@command(ReleasesOptions)
def releases(o: ReleasesOptions, as_json: JsonReport) -> int:
    """SGLang releases on the index newer than each stack's pin, with the torch, kernel package and FlashInfer
    each requires."""
    return releases_command(o.stacks_file, stack_name=o.stack, as_json=as_json)


def releases_command(stacks_file: str, *, stack_name: str | None = None, as_json: JsonReport = NO_JSON) -> int:
    """Each stack's newer releases, a table per stack and the JSON report (`--json-out` checked by the face)."""
    # at call time: packaging, rich and the matrix would slow `invoke --list`
    from ..config.matrix import load_matrix
    from ..core.console import console as make_console
    from ..core.console import report_table
    from ..upgrade.releases import releases_of

    matrix = load_matrix(stacks_file)
    results = releases_of([matrix.get(stack_name)] if stack_name else list(matrix.stacks.values()))
    console = make_console()
    for result in results:
        if result.pinned is None:
            console.print(f"{result.stack}: SGLang from git: no release to compare with")
            continue
        table = report_table(("sglang", "torch", "kernel package", "flashinfer-python", "python"),
                             title=f"{result.stack}: releases newer than sglang {result.pinned}")
        for r in result.releases:
            table.add_row(r.sglang, r.torch or "-", f"{r.kernel_package}=={r.kernel}" if r.kernel else "-",
                          r.flashinfer or "-", r.requires_python or "-")
        console.print(table if result.releases else f"{result.stack}: sglang {result.pinned} is the newest release")
    as_json.emit({r.stack: {"pinned": r.pinned, "releases": [{**x.summary(), "requires": x.exact} for x in r.releases]}
                  for r in results})
    return 0


@dataclass(frozen=True)
class UpgradeOptions(ReportOptions):
    stack: str = stack_option()
    sglang: str = required("the SGLang release to move to")
    as_: str | None = option("write the upgraded entry as a new stack NEW (inherits NAME; default: NAME in place)")
    write: bool = option("edit the stacks file (comments kept) and write locks/NEW.txt, when the entry would pass "
                         "`invoke stacks --check`", False, kind=bool)
    stacks_file: str = stacks_file_option()


@command(UpgradeOptions)
def upgrade(o: UpgradeOptions, as_json: JsonReport) -> int:
    """Move a stack to an SGLang release: derived pins, overrides, patches, lock, coverage, argv; a review
    report. Exit 0 ready, 1 review, 2 bad input."""
    return upgrade_command(o.stacks_file, o.stack, o.sglang, as_name=o.as_, write=o.write, as_json=as_json)


def upgrade_command(stacks_file: str, stack_name: str, version: str, *, as_name: str | None = None,
                    write: bool = False, as_json: JsonReport = NO_JSON, engines: Engines | None = None) -> int:
    """The upgrade's report printed (and its JSON), what `--write` wrote; the plan's exit code."""
    # at call time: the resolver, wheels and the matrix would slow `invoke --list`
    from ..core.console import console as make_console
    from ..core.console import print_markdown
    from ..upgrade.command import upgrade_stack

    outcome = upgrade_stack(stacks_file, stack_name, version, as_name=as_name, write=write, engines=engines)
    plan = outcome.plan
    as_json.emit(outcome.document)
    console = make_console()
    print_markdown(console, outcome.markdown)
    *files, last = outcome.written or ("",)
    written = f"; wrote {', '.join(str(f) for f in files)} and {last}" if outcome.written else ""
    console.print(f"upgrade {plan.stack} -> sglang {version}: [bold]{plan.verdict}[/] in "
                  f"{outcome.document['seconds']} s; report {outcome.out_dir / 'report.md'}{written}", highlight=False)
    if write and plan.guesses:
        print(f"error: --write: nothing written: the new pin(s) of {', '.join(plan.guesses)} are guesses (see the "
              f"report); {stacks_file} is unchanged", file=sys.stderr)
    return plan.exit_code
