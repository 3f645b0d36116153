"""Report what is really installed in an image, as JSON on stdout (stdlib only, torch optional).

Run once, by the runtime stage's last RUN step, after every install (`> /opt/sglstack/installed.json`):
`invoke build` reads that file back from the image and compares the stack's pins with what the image
contains, rather than with what the Dockerfile asked for; `pip check`'s findings go with it.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import json
import os
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


TORCH_FACTS = ("import json, torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
               "'git': torch.version.git_version}))")
# /proc/cpuinfo names the CPU with these on each machine; under user-mode QEMU it is the build machine's file.
CPUINFO_MARK = {"aarch64": "CPU implementer", "x86_64": "vendor_id"}


def emulated(machine: str, cpuinfo: str) -> bool:
    """True when this process runs under user-mode emulation: the kernel's /proc/cpuinfo is another machine's."""
    mark = CPUINFO_MARK.get(machine)
    return mark is not None and mark not in cpuinfo


def version_file_facts(torch_dir: str) -> dict:
    """torch/version.py's constants, read without importing torch (it is a file of plain assignments)."""
    names: dict = {}
    with open(os.path.join(torch_dir, "version.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names[target.id] = node.value.value
    return {"version": names.get("__version__"), "cuda": names.get("cuda"), "git": names.get("git_version")}


def torch_info() -> dict | None:
    """torch's version and CUDA, from importing it in a child process (an import that crashes is a finding, not
    a reason to stop). Under user-mode QEMU, PyTorch's CPU detection reads the build machine's /proc/cpuinfo and
    can die of a signal: there the facts come from torch/version.py and the crash is said (`import_crash`); the
    import is checked again by the build's verification, which gives the container the target's /proc/cpuinfo."""
    spec = importlib.util.find_spec("torch")  # optional: CPU test images have no torch
    if spec is None or not spec.submodule_search_locations:
        return None
    proc = subprocess.run([sys.executable, "-c", TORCH_FACTS], capture_output=True, text=True, check=False,
                          timeout=3600)
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        cpuinfo = f.read()
    if proc.returncode < 0 and emulated(platform.machine(), cpuinfo):
        crash = f"signal {-proc.returncode} under user-mode emulation ({why})"
        return {**version_file_facts(next(iter(spec.submodule_search_locations))), "import_crash": crash}
    return {"import_error": why}


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
