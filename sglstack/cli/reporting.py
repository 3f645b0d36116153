"""`--json` and `--json-out PATH` checked once for every reporting task, before it starts any work.

The convention and the writer are `sglstack.core.jsonreport`'s; this is the refusal of a path the report
cannot go to (bad input, exit 2): a folder, a missing folder, one of the checkout's inputs (the stacks
file, a lock, a patch: `lock.outputs`), or a place that cannot be written (probed).
"""

from __future__ import annotations

from pathlib import Path

from ..config.defaults import default_stacks_file
from ..core.jsonreport import STDOUT, JsonReport
from ..core.options import BadOption, ReportOptions
from ..core.records import require_writable
from ..core.safefiles import OutputNotWritable
from ..lock.outputs import json_path_problem


def json_report(o: ReportOptions, task: str) -> JsonReport:
    """Where `task`'s report goes as JSON; a path it cannot go to is refused now, in one line."""
    if o.json_out is None or o.json_out == STDOUT:
        return JsonReport(stdout=o.json or o.json_out == STDOUT)
    stacks_file = getattr(o, "stacks_file", None) or default_stacks_file()
    problem = json_path_problem(o.json_out, Path(stacks_file), f"`invoke {task}`", option="--json-out")
    if problem:
        raise BadOption(f"{task}: {problem}")
    path = Path(o.json_out).expanduser()
    try:
        require_writable(path, what="--json-out", create=False)
    except OutputNotWritable as exc:
        raise BadOption(f"{task}: {exc}") from None
    return JsonReport(stdout=o.json, path=path)
