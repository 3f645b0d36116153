"""A local SGLang repository built through BuildKit (split from tests/unit/test_gitsource.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bisect_fixtures import make_history, stack_yaml

from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.flow import build_stack
from sglstack.imagebuild.plan import BuildSettings


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.docker
def test_a_local_repository_builds_through_buildkit(tmp_path, cache, docker_cli, ca_bundle, docker_client):
    """The src stage builds SGLang's wheel from the tree git exported from a local path: no archive URL."""
    repo_path = tmp_path / "sglang"
    shas = make_history(repo_path, [300.0, 270.0])
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(stack_yaml(f"file://{repo_path}", shas[1]))
    stack = load_matrix(matrix).get("synth")
    result = build_stack(stack, BuildSettings(target="sglang-src", ca_bundle=str(ca_bundle), docker_cli=docker_cli,
                                             out_dir=tmp_path / "out", show_progress=False))
    try:
        out = docker_client.containers.run(result.image_id, ["bash", "-c", "ls /src/dist; cat /out/patches.json"],
                                           entrypoint=[], remove=True).decode()
    finally:
        docker_client.images.remove(result.tag, force=True)  # this test's own image
    assert "sglang-0.5.9-py3-none-any.whl" in out
    assert '"status": "applied"' in out
