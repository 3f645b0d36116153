"""The lock flow tests' matrix (tests/unit/test_lock_flow*.py): one stack, `tiny`, with every kind of layer,
resolved against the scripted resolver (`uv_double`), and a git SGLang's stack entry."""

from __future__ import annotations

from pathlib import Path

from sglstack.config.matrix import load_matrix
from sglstack.config.schema import Stack
from sglstack.lock import flow

HASH_B = "sha256:" + "b" * 64
KERNEL_INDEX = "https://kernels.example/simple"
STACKS = f"""
defaults:
  serving: {{model: org/model}}
stacks:
  tiny:
    base_image: debian:bookworm-slim
    glibc: "2.36"
    python: "3.11"
    sgl_kernel: {{package: sglang-kernel, version: "0.4.10", index_url: "{KERNEL_INDEX}"}}
    extra_layers:
      - {{name: jit, requirements: ["nvcc-tool==13.0.88"], no_deps: true}}
      - {{name: late, requirements: ["six==1.16.0"], after_sglang: true}}
    sglang: {{version: "0.5.23"}}
    overrides:
      - {{replaces: "requests==2.0", pin: "requests==2.32.5", reason: "a newer requests"}}
"""


REAL_LOCK_STACK = flow.lock_stack


GIT_STACK = {"name": "g", "base_image": "debian:bookworm-slim", "serving": {"model": "m"},
             "sglang": {"git": {"repo": "https://github.com/sgl-project/sglang", "ref": "ab" * 20}}}


def write_stacks(tmp_path: Path) -> Path:
    """The matrix file (the tests' `stacks` fixture)."""
    path = tmp_path / "stacks.yaml"
    path.write_text(STACKS)
    return path


def tiny_stack(stacks: Path) -> Stack:
    """Its one stack (the tests' `tiny` fixture)."""
    return load_matrix(stacks).get("tiny")
