"""A synthetic SGLang history, built in the test: a local git repository of an installable `sglang`.

Each commit is the CPU SGLang double (tests/doubles/sglang-double) as a real package under `python/`
(pyproject.toml, setuptools), with its decode speed baked into the source, and the real
`sglang/srt/models/kimi_k25.py` of the 0.5.9 wheel so that the real Kimi K2.5 patch applies to it.
One commit slows the server down; another may rename the patched class, so the patch cannot apply.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
import zipfile
from collections.abc import Sequence
from pathlib import Path

from sglstack.adapters.wheels import fetch_wheel

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "sglang-double" / "sglang"
SPEED_DEFAULT = '_env_float("SGLANG_DOUBLE_TOKENS_PER_S", 1500.0)'
KIMI = "sglang/srt/models/kimi_k25.py"
KIMI_CLASS = "class KimiK25ForConditionalGeneration("

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sglang"
version = "{version}"
description = "synthetic SGLang history for sglstack's bisect tests (the CPU double)"
requires-python = ">=3.10"

[tool.setuptools.packages.find]
include = ["sglang*"]
"""


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "synthetic", "GIT_AUTHOR_EMAIL": "synthetic@example.invalid",
           "GIT_COMMITTER_NAME": "synthetic", "GIT_COMMITTER_EMAIL": "synthetic@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def real_kimi_source() -> str:
    with zipfile.ZipFile(fetch_wheel("sglang", "0.5.9")) as whl:
        return whl.read(KIMI).decode("utf-8")


def write_tree(repo: Path, speed: float, note: str, *, version: str, kimi: str | None) -> None:
    pkg = repo / "python"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(DOUBLE, pkg / "sglang", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    server = pkg / "sglang" / "srt" / "entrypoints" / "http_server.py"
    text = server.read_text()
    assert SPEED_DEFAULT in text, "the double's speed default moved: update bisect_fixtures"
    server.write_text(text.replace(SPEED_DEFAULT, f'_env_float("SGLANG_DOUBLE_TOKENS_PER_S", {speed!r})'))
    (pkg / "sglang" / "__init__.py").write_text(
        f'"""Synthetic SGLang (the CPU double)."""\n\n__version__ = "{version}"\n')
    if kimi is not None:
        (pkg / "sglang" / "srt" / "models").mkdir(parents=True, exist_ok=True)
        (pkg / "sglang" / "srt" / "models" / "__init__.py").write_text("")
        (pkg / KIMI).write_text(kimi)
    (pkg / "pyproject.toml").write_text(PYPROJECT.format(version=version))
    (repo / "CHANGES.md").write_text(f"# Changes\n\n{note}\n")


def make_history(repo: Path, speeds: Sequence[float], *, patch_breaks: Sequence[int] = (), version: str = "0.5.9",
                 with_kimi: bool = True, salt: str = "") -> list[str]:
    """`repo` with len(speeds) commits on `main`; commit i serves at speeds[i] tok/s. Returns the shas.

    Commits in `patch_breaks` rename the class the Kimi K2.5 patch targets (it cannot apply there).
    A `salt` makes every commit (and so every image config) unique to one test run.
    """
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    kimi = real_kimi_source() if with_kimi else None
    shas = []
    for i, speed in enumerate(speeds):
        source = kimi
        if kimi is not None and i in patch_breaks:
            source = kimi.replace(KIMI_CLASS, "class KimiK25Renamed(").replace(
                "EntryClass = [KimiK25ForConditionalGeneration]", "EntryClass = [KimiK25Renamed]")
        write_tree(repo, speed, f"commit {i}: {speed} tok/s {salt}".rstrip(), version=version, kimi=source)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}: serve at {speed:g} tok/s")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def stack_yaml(repo_ref: str, ref: str, *, patches: Sequence[str] = ("kimi-k25-eagle3",), extra: str = "",
               max_new_tokens: int = 24) -> str:
    """A CPU stack building SGLang from `repo_ref` at `ref` on debian:bookworm-slim, served as the double."""
    patch_list = ", ".join(patches)
    return textwrap.dedent(f"""
        stacks:
          synth:
            description: synthetic SGLang history (the CPU double as an installable package)
            base_image: debian:bookworm-slim
            src_image: debian:bookworm-slim
            python: "3.11"
            sglang:
              git: {{repo: "{repo_ref}", ref: "{ref}", subdirectory: python}}
              install_deps: false
            patches: [{patch_list}]
            publish: {{repository: 127.0.0.1:1/sglstack-test/bisect}}
            serving:
              model: test-org/tiny-model
              tp: 1
              gpus: 0
              startup_timeout_s: 60
              shm_size: 256m
            smoke:
              max_new_tokens: {max_new_tokens}
              concurrency: 1
              num_prompts: 3
        """) + extra
