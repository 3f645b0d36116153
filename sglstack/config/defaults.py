"""Where the inputs live by default: the one place the default stacks file is named.

Standard library only: the task definitions (`sglstack.cli`) read it when invoke loads `tasks.py`.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STACKS_FILE = REPO_ROOT / "stacks.yaml"
