"""NVIDIA's CUDA 13 toolchain as PyPI wheels (nvcc, its front end and NVVM, CCCL, the runtime's headers), laid
out as an image's venv holds them (`site-packages/nvidia/cu13`): the JIT toolchain check runs against them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# CUDA 13.0's set, as `cuda-toolkit[nvcc,cccl]==13.0.3` pins it (the stacks' cuda-jit layers).
MATCHED = ("nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-crt==13.0.88", "nvidia-nvvm==13.0.88",
           "nvidia-cuda-cccl==13.0.85", "nvidia-cuda-runtime==13.0.96")
# What `pypi-cu130` resolved before its cuda-jit layer: humming-kernels' unpinned nvcc and CCCL, at their newest,
# beside torch's CUDA 13.0 runtime headers.
NEWER_COMPILER = ("nvidia-cuda-nvcc==13.5.37", "nvidia-cuda-crt==13.5.37", "nvidia-nvvm==13.5.37",
                  "nvidia-cuda-cccl==13.3.5.0.6", "nvidia-cuda-runtime==13.0.96")


def install_toolkit(target: Path, requirements: tuple[str, ...]) -> Path:
    """pip installs the wheels into `target` (as a venv's site-packages) and returns their CUDA home."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
               "--target", str(target), *requirements]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900,
                          env={**os.environ, "PIP_NO_INPUT": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    home = target / "nvidia" / "cu13"
    assert (home / "bin" / "nvcc").is_file(), f"no nvcc under {home}"
    return home


@pytest.fixture(scope="session")
def cuda_wheel_toolkits(tmp_path_factory) -> dict[str, Path]:
    """{'matched': CUDA home, 'newer_compiler': CUDA home}, each fresh (the layout step writes into it)."""
    root = tmp_path_factory.mktemp("cuda-wheels")
    return {"matched": install_toolkit(root / "matched", MATCHED),
            "newer_compiler": install_toolkit(root / "newer", NEWER_COMPILER)}
