"""Helpers for the compose/deploy tests: a small matrix whose serving flags fit the SGLang double."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from sglstack.config.matrix import load_matrix
from sglstack.config.schema import Stack
from sglstack.render import compose as cmp

TEST_MATRIX = {
    "stacks": {
        "tiny": {
            "description": "a CPU stand-in served by the SGLang double",
            "base_image": "debian:bookworm-slim",
            "sglang": {"version": "0.5.9"},
            "patches": [],
            "serving": {
                "model": "test-org/tiny-model",
                "speculative": {
                    "algorithm": "EAGLE3",
                    "draft_model": "test-org/tiny-eagle3",
                    "num_steps": 3,
                    "eagle_topk": 1,
                    "num_draft_tokens": 4,
                },
                "tp": 1,
                "gpus": 1,
                "port": 30000,
                "startup_timeout_s": 120,
                "shm_size": "256m",
                "extra_args": ["--trust-remote-code"],
                "env": {"SGLANG_DOUBLE_STARTUP_DELAY_S": "0.5"},
            },
        },
    }
}


def write_test_matrix(tmp_path: Path, name: str = "tiny") -> Path:
    """The test matrix, its one stack named `name` (a unique name gives a unique compose project)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "stacks.yaml"
    matrix = {"stacks": {name: TEST_MATRIX["stacks"]["tiny"]}}
    path.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    return path


def make_test_stack(tmp_path: Path, name: str = "tiny") -> Stack:
    return load_matrix(write_test_matrix(tmp_path, name), patches_dir=tmp_path / "no-patches").get(name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The compose render tests' (tests/unit/test_compose_render*.py): an image by digest, and a rendered file's service.
DIGEST_REF = "127.0.0.1:5000/sglstack/sglang@sha256:" + "ab" * 32


def _service(text: str) -> dict:
    return yaml.safe_load(text)["services"][cmp.SERVICE]
