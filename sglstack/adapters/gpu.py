"""This machine's GPU as a kernel cache is keyed by it: name, compute capability and driver major version,
from `nvidia-smi` (a node with no nvidia-smi, or no GPU, has "none" for each: the CPU double's)."""

from __future__ import annotations

import shutil
import subprocess

from ..core.credentials import tool_environment

QUERY = ("nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader")


def gpu_facts(timeout_s: float = 30.0, visible: str | None = None) -> tuple[str, str, str]:
    """(name, compute capability, driver major) of the GPU a server started with CUDA_VISIBLE_DEVICES=`visible`
    runs on first (None: not set, GPU 0); "none" each without nvidia-smi or a GPU; "unknown" each when it did
    not answer (a key with it matches nothing). nvidia-smi itself ignores CUDA_VISIBLE_DEVICES (NVML lists
    every GPU), so the first GPU it names is asked for by `--id` (an index, a UUID or a PCI bus id)."""
    tool = shutil.which(QUERY[0])
    first = None if visible is None else visible.split(",")[0].strip()
    if tool is None or first == "" or (first or "").startswith("-"):  # "" or "-1": CUDA sees no GPU
        return "none", "none", "none"
    try:
        which = [f"--id={first}"] if first else []
        out = subprocess.run([tool, *QUERY[1:], *which], capture_output=True, text=True, timeout=timeout_s, check=False,
                             env=tool_environment())
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", "unknown", "unknown"
    return parse_gpu_line(out.stdout if out.returncode == 0 else "")


def parse_gpu_line(text: str) -> tuple[str, str, str]:
    """The first line of `nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return "unknown", "unknown", "unknown"
    parts = [p.strip() for p in lines[0].split(",")]
    if len(parts) != 3 or not all(parts):
        return "unknown", "unknown", "unknown"
    name, capability, driver = parts
    return name, capability, driver.split(".")[0]
