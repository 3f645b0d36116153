"""BuildKit client detection, build command lines and progress parsing (no engine needed)."""

from __future__ import annotations

import os

import pytest
from buildkit_fixtures import fake_cli

from sglstack.adapters.buildkit import Builder, BuildRequest, ProgressParser, build_argv, build_env, detect_builder
from sglstack.core.errors import DockerUnavailable


@pytest.fixture
def isolated_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("SGLSTACK_DOCKER_CLI", raising=False)
    monkeypatch.setattr("sglstack.adapters.buildkit._FALLBACK_CLIS", ())
    return tmp_path


def test_buildx_is_preferred(isolated_path, monkeypatch):
    old = fake_cli(isolated_path / "a", "20.10.24", buildx=False)
    new = fake_cli(isolated_path / "b", "28.2.2", buildx=True)
    monkeypatch.setenv("PATH", f"{old.parent}{os.pathsep}{new.parent}")
    builder = detect_builder()
    assert builder.kind == "buildx" and builder.cli == str(new)


def test_classic_cli_when_no_buildx(isolated_path, monkeypatch):
    new = fake_cli(isolated_path / "a", "28.2.2", buildx=False)
    old = fake_cli(isolated_path / "b", "20.10.24+dfsg1", buildx=False)
    monkeypatch.setenv("PATH", f"{new.parent}{os.pathsep}{old.parent}")
    builder = detect_builder()
    assert builder.kind == "classic" and builder.cli == str(old)
    assert build_env(builder, None) == {"DOCKER_BUILDKIT": "1"}


def test_clear_error_when_nothing_can_run_buildkit(isolated_path, monkeypatch):
    new = fake_cli(isolated_path / "a", "28.2.2", buildx=False)
    monkeypatch.setenv("PATH", str(new.parent))
    with pytest.raises(DockerUnavailable) as info:
        detect_builder()
    message = str(info.value)
    assert "28.2.2" in message and "buildx" in message and "--docker-cli" in message and "\n" not in message


def test_configured_client_is_used_alone(isolated_path, monkeypatch):
    fake_cli(isolated_path / "a", "28.2.2", buildx=True)
    old = fake_cli(isolated_path / "b", "20.10.24", buildx=False)
    monkeypatch.setenv("PATH", str(isolated_path / "a"))
    monkeypatch.setenv("SGLSTACK_DOCKER_CLI", str(old))
    assert detect_builder().cli == str(old)
    assert detect_builder(str(old)).kind == "classic"


def test_configured_client_missing(isolated_path):
    with pytest.raises(DockerUnavailable, match="not found"):
        detect_builder("/nonexistent/docker")


def test_argv_has_no_tag_and_passes_secrets_by_file(tmp_path):
    req = BuildRequest(
        dockerfile=tmp_path / "Dockerfile",
        context=tmp_path / "ctx",
        target="sglang-src",
        no_cache=True,
        labels={"b": "2", "a": "1"},
        secrets={"ca_bundle": tmp_path / "ca.pem"},
    )
    classic = build_argv(Builder("classic", "/usr/bin/docker", "20.10"), req, tmp_path / "iid")
    assert classic[:2] == ["/usr/bin/docker", "build"]
    assert "-t" not in classic and "--tag" not in classic
    assert classic[classic.index("--target") : classic.index("--target") + 2] == ["--target", "sglang-src"]
    assert "--no-cache" in classic
    assert f"id=ca_bundle,src={tmp_path / 'ca.pem'}" in classic
    assert classic.index("a=1") < classic.index("b=2")
    buildx = build_argv(Builder("buildx", "docker", "28"), req, tmp_path / "iid")
    assert buildx[:4] == ["docker", "buildx", "build", "--load"]


def test_progress_parser_finds_the_failing_step():
    log = """#1 [internal] load build definition from Dockerfile
#1 DONE 0.1s
#7 [sglang-src 6/9] RUN --mount=type=secret,id=ca_bundle,required=false python3 -m patchkit apply x
#7 0.512 applying kimi-k25-eagle3
#7 0.601 patch 'kimi-k25-eagle3': sglang/srt/models/kimi_k25.py: class X: not found
#7 ERROR: process "/bin/bash -o pipefail -c python3 -m patchkit apply x" did not complete successfully: exit code: 1
failed to solve with frontend dockerfile.v0: failed to solve: exit code: 1
"""
    parser = ProgressParser()
    for i, line in enumerate(log.splitlines()):
        parser.feed(line, float(i))
    assert parser.steps[1].result == "DONE 0.1s"
    assert parser.failed_step == 7
    summary = parser.failure_summary()
    assert "[sglang-src 6/9] RUN python3 -m patchkit apply x" in summary
    assert "class X: not found" in summary
    assert "failed to solve" in summary
