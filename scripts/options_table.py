"""Write docs/options.md, the table of every task's options, from sglstack/cli/optionnames.py and the tasks.

Run from anywhere: `python3 scripts/options_table.py`. tests/cli/test_option_names.py fails when the page
is out of date.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.cli.optionnames import option_uses, options_table  # noqa: E402
from sglstack.core.safefiles import write_text  # noqa: E402


def main() -> int:
    spec = importlib.util.spec_from_file_location("sglstack_tasks", REPO / "tasks.py")
    assert spec and spec.loader
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    write_text(REPO / "docs", REPO / "docs" / "options.md", options_table(option_uses(tasks.ns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
