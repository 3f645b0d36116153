"""Render every stack of the matrix and lint each Dockerfile with hadolint.

`python3 scripts/lint_dockerfiles.py [STACKS_FILE...]` is the tool; the test suite lints every rendered
stack through `sglstack.adapters.hadolint` (tests/cli/test_render.py), so CI runs hadolint once, inside pytest.
It lives here, not in render: render is pure text and runs no outside tool.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.adapters.hadolint import hadolint_problems  # noqa: E402
from sglstack.config.matrix import DEFAULT_STACKS_FILE, load_matrix  # noqa: E402
from sglstack.render.dockerfile import render_dockerfile  # noqa: E402


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
