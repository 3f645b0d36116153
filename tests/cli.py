"""Run this checkout's `invoke` tasks as a user would: from any folder, as a separate process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_invoke(*args: str, cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 900) -> subprocess.CompletedProcess:
    """`invoke --search-root REPO ARGS...` in `cwd`, output captured; never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
