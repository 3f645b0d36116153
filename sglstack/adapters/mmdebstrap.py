"""The mmdebstrap adapter: make a Debian root file system as one tar (config.baseseed says with what)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from ..core.credentials import tool_environment

SEED_TIMEOUT_S = 1800  # an emulated root file system takes minutes on a loaded machine


def mmdebstrap_missing() -> bool:
    return shutil.which("mmdebstrap") is None


def run_mmdebstrap(argv: Sequence[str], *, epoch: int) -> str | None:
    """Run `argv` (mmdebstrap ...) with SOURCE_DATE_EPOCH=`epoch`; None on success, else its last line."""
    env = tool_environment({"SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C.UTF-8"})
    try:
        done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=SEED_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        return f"no result within {SEED_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    last = (done.stderr or done.stdout).strip().splitlines()
    return last[-1] if last else f"exit {done.returncode}"
