"""Invoke tasks: the collection of `sglstack.cli`, where each task parses its options and calls one function.

`invoke --list` shows every task; `invoke TASK -h` its options. Bad input to invoke's parser (an unknown task
or option, a flag without its value) is a refusal like any other: one `error:` line, exit 2 (`sglstack.cli.program`).
The same collection is the installed `sglstack` command (`sglstack.cli.main`), which works from any folder.
"""

from __future__ import annotations

from sglstack.cli.collection import task_collection
from sglstack.cli.program import adopt_running_program

adopt_running_program()

ns = task_collection()
