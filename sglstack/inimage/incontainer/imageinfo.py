"""Report what is really installed in an image, as JSON on stdout (stdlib only, torch optional).

Run once, by the runtime stage's last RUN step, after every install (`> /opt/sglstack/installed.json`):
`invoke build` reads that file back from the image and compares the stack's pins with what the image
contains, rather than with what the Dockerfile asked for; `pip check`'s findings go with it.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import platform
import subprocess
import sys

from wheelkit import canonical  # its sibling in the image's tools folder (on sys.path as the script's dir)


def distributions() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name:
            out[canonical(name)] = dist.version
    return dict(sorted(out.items()))


def torch_info() -> dict | None:
    try:
        import torch  # optional: CPU test images have no torch
    except Exception as exc:  # an import that crashes is a finding, not a reason to stop
        return {"import_error": f"{type(exc).__name__}: {exc}"} if "No module named" not in str(exc) else None
    return {"version": torch.__version__, "cuda": torch.version.cuda, "git": torch.version.git_version}


def pip_check() -> dict:
    """`pip check` of this environment: every installed package's requirements satisfied by what is installed.

    Its lines are kept as pip wrote them; the host decides which are findings (a stack's declared override
    contradicts SGLang's own pin on purpose). pip missing from the environment is said so, not skipped.
    """
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
                              capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ran": False, "error": f"{type(exc).__name__}: {exc}"}
    lines = [x.strip() for x in proc.stdout.splitlines() if x.strip()]
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not lines):
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"ran": False, "error": tail}
    return {"ran": True, "problems": [] if proc.returncode == 0 else lines}


def main() -> int:
    info = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "executable": sys.executable,
        "distributions": distributions(),
        "torch": torch_info(),
        "pip_check": pip_check(),
    }
    json.dump(info, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
