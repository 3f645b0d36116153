"""The stack's serving argv through SGLang VERSION's own server argument parser, from its wheel, no GPU.

`argv_probe.py` runs in a bare interpreter (`-I -S`: no site-packages, no PYTHONPATH, a minimal
environment) with the unpacked SGLang wheel and the real wheels of the few packages the parser itself
is built with (REAL_PACKAGES); every other import SGLang makes at module level is an inert stub. So
the flags, choices and types are the release's, and nothing of SGLang's 200 dependencies is installed.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..adapters.wheels import fetch_wheel, open_wheel
from ..core.errors import last_line
from ..core.inputs import loads

PROBE = Path(__file__).with_name("argv_probe.py")
# What the parser needs for real: `packaging` picks version branches at import time; from 0.5.2x
# ServerArgs' fields are msgspec structs that `add_cli_args_from_dataclass` walks.
REAL_PACKAGES = ("packaging", "msgspec")
# Optional back ends that are not installed on a CUDA server: left missing, SGLang's probes say "absent".
ABSENT = ("torch_npu", "habana_frameworks", "intel_extension_for_pytorch", "torch_musa", "mindspore")
PROBE_TIMEOUT_S = 120


def _unpack(wheel: Path, dest: Path, *, python_only: bool = False) -> None:
    """The wheel's files under `dest`; `python_only`: its .py files alone (SGLang's wheel is 40 MB of
    which the parser's import reads only Python source; its compiled parts would be stubbed anyway)."""
    with open_wheel(wheel) as zf:
        zf.extractall(dest, members=[n for n in zf.namelist() if not python_only or n.endswith(".py")])


def judge_probe(output: Mapping[str, Any], argv: Sequence[str]) -> dict[str, Any]:
    """Pure: the probe's JSON as the report's `argv` section; an unknown flag gets its likeliest new name."""
    flags = list(output.get("flags", []))
    unknown = {flag: (difflib.get_close_matches(flag, flags, n=1, cutoff=0.75) or [None])[0]
               for flag in output.get("unknown", [])}
    return {"checked": True, "argv": list(argv), "accepted": not unknown and not output.get("errors"),
            "unknown": unknown, "errors": list(output.get("errors", [])), "flags": len(flags)}


def check_argv(sglang_wheel: Path, argv: Sequence[str], version_of: Callable[[str], str], *,
               fetch: Callable[[str, str], Path] = fetch_wheel) -> dict[str, Any]:
    """Run the probe on `argv` (the server's arguments, without `python3 -m sglang.launch_server`)."""
    output = probe_output(sglang_wheel, argv, version_of, fetch=fetch)
    if "skipped" in output:
        return {"checked": False, "argv": list(argv), "skipped": output["skipped"]}
    return judge_probe(output, argv)


def release_flags(sglang_wheel: Path, version_of: Callable[[str], str], *,
                  fetch: Callable[[str, str], Path] = fetch_wheel) -> dict[str, Any]:
    """The release's parser: every flag and the deprecated ones (`{"skipped": why}` when it cannot load)."""
    return probe_output(sglang_wheel, [], version_of, fetch=fetch)


def probe_output(sglang_wheel: Path, argv: Sequence[str], version_of: Callable[[str], str], *,
                 fetch: Callable[[str, str], Path] = fetch_wheel) -> dict[str, Any]:
    """The probe's JSON for `argv`, or `{"skipped": why}`."""
    with tempfile.TemporaryDirectory(prefix="sglstack-argv-") as tmp:
        root, lib = Path(tmp) / "sglang", Path(tmp) / "lib"
        try:
            _unpack(sglang_wheel, root, python_only=True)
            for name in REAL_PACKAGES:
                _unpack(fetch(name, version_of(name)), lib)
        except (OSError, zipfile.BadZipFile) as exc:
            return {"skipped": f"cannot unpack the wheels: {exc}"}
        env = {"PATH": os.defpath, "HOME": tmp, "LANG": "C.UTF-8", "TMPDIR": tmp}
        cmd = [sys.executable, "-I", "-S", str(PROBE), str(root), str(lib), ",".join(ABSENT), *argv]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=PROBE_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            return {"skipped": f"the parser did not load in {PROBE_TIMEOUT_S} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        why = last_line(proc.stderr)
        return {"skipped": f"sglang's parser could not be loaded: {why}"}
    return dict(loads(lines[-1]))
