"""importcheck.py run as the image runs it: a script beside its siblings (their script-mode imports), in a child
interpreter (`-I`: none of the test run's paths), with `site` first on its path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "sglstack" / "inimage" / "incontainer"


def importcheck_report(site: Path, argv: list[str]) -> dict:
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); sys.path.insert(0, {str(TOOLS)!r}); "
            f"import importcheck; sys.exit(importcheck.main({argv!r}))")
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False,
                          timeout=300, cwd=site)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
