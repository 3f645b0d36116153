"""Boundaries and branches of core readers and the deploy's own judgement, a fixture on each side: a version of
exactly the longest length, JSON nested exactly the deepest allowed, a TLS failure followed by its retries'
timeouts, an arm64 image that names its default variant, a container that restarted once, and Ctrl-C while a
deployment's files are written. Planted bugs P56, P60, P62-P65 (`benchmarks/planted_bugs.py`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sglstack.config.platforms import platform_of_image
from sglstack.core.inputs import MAX_DEPTH, MalformedJSON, loads
from sglstack.core.network import DNS, TLS, network_problem
from sglstack.core.versions import MAX_VERSION_CHARS, parse_version, version_problem
from sglstack.deploy import files as deploy_files
from sglstack.deploy.health import health_verdict

# ---- versions: at most MAX_VERSION_CHARS, that many included ----------------------------------------


def _version_of(length: int) -> str:
    text = "0.5.9+" + "a" * (length - len("0.5.9+"))
    assert len(text) == length
    return text


def test_a_version_of_exactly_the_longest_length_is_read():
    assert str(parse_version(_version_of(MAX_VERSION_CHARS))).startswith("0.5.9+aaa")
    assert version_problem(_version_of(MAX_VERSION_CHARS)) is None


def test_a_version_one_character_longer_is_refused_in_one_line():
    assert version_problem(_version_of(MAX_VERSION_CHARS + 1)) == (
        f"not a version (longer than {MAX_VERSION_CHARS} characters)")


# ---- JSON: at most MAX_DEPTH levels, that many included -------------------------------------------


def test_json_nested_exactly_the_deepest_allowed_is_read():
    text = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    value = loads(text)
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []
    assert loads('{"a": ' * MAX_DEPTH + "1" + "}" * MAX_DEPTH) is not None


def test_json_one_level_deeper_is_malformed():
    with pytest.raises(MalformedJSON, match=f"nested more than {MAX_DEPTH} levels deep"):
        loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


# ---- network: the first failing line decides what went wrong --------------------------------------


def test_a_tls_failure_followed_by_retry_timeouts_is_a_tls_failure():
    lines = [
        "Collecting sglang==0.5.9",
        "ERROR: Could not fetch URL https://pypi.org/simple/sglang/: There was a problem confirming the ssl "
        "certificate: HTTPSConnectionPool(host='pypi.org', port=443): Max retries exceeded (Caused by "
        "SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed')))",
        "WARNING: Retrying (Retry(total=0)) after connection broken by 'ReadTimeoutError(\"HTTPSConnectionPool("
        "host='files.pythonhosted.org', port=443): Read timed out.\")'",
    ]
    problem = network_problem(lines)
    assert problem is not None and (problem.kind, problem.host) == (TLS, "pypi.org")


def test_a_dns_failure_before_a_timeout_is_a_dns_failure():
    lines = ["error: failed to solve: lookup registry.example on 10.0.0.53:53: no such host",
             "error: i/o timeout"]
    problem = network_problem(lines)
    assert problem is not None and (problem.kind, problem.host) == (DNS, "registry.example")


# ---- platforms: a default variant said or not is the same platform --------------------------------


@pytest.mark.parametrize(("os_name", "arch", "variant", "platform"), [
    ("linux", "arm64", "v8", "linux/arm64"),
    ("linux", "arm64", "", "linux/arm64"),
    ("linux", "amd64", "", "linux/amd64"),
    ("linux", "arm", "v7", "linux/arm/v7"),
    ("linux", "arm64", "v9", "linux/arm64/v9"),
    ("windows", "amd64", "", "windows/amd64"),
])
def test_an_image_platform_names_a_variant_only_when_it_is_not_the_default(os_name, arch, variant, platform):
    assert platform_of_image(os_name, arch, variant) == platform


# ---- deploy health: one restart is a crash ------------------------------------------------------------


@pytest.mark.parametrize(("restarts", "verdict"), [(0, "starting"), (1, "crashed"), (3, "crashed")])
def test_a_container_that_restarted_has_crashed_though_it_runs_again(restarts, verdict):
    attrs = {"State": {"Status": "running", "ExitCode": 0, "Health": {"Status": "starting"}},
             "RestartCount": restarts}
    got, detail = health_verdict(attrs)
    assert got == verdict
    if verdict == "crashed":
        assert detail == f"exited with code 0 (restarts: {restarts})"


def test_a_healthy_container_that_never_restarted_is_healthy():
    attrs = {"State": {"Status": "running", "Health": {"Status": "healthy"}}, "RestartCount": 0}
    assert health_verdict(attrs) == ("healthy", "healthy")


# ---- deploy files: Ctrl-C while they are written puts back what was there ---------------------------


@pytest.fixture
def out_dir(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "build"
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(root))
    folder = root / "tiny"
    folder.mkdir(parents=True)
    return folder


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit, OSError])
def test_a_write_stopped_part_way_puts_back_the_old_files_and_removes_the_new(out_dir, monkeypatch, stop):
    (out_dir / "docker-compose.yml").write_text("old compose\n")
    real = deploy_files.write_text

    def write_text(root, path, text, *args, **kwargs):
        if path.name == ".env.example":
            raise stop()  # Ctrl-C (or an exit, a full disk) after the compose file was replaced
        return real(root, path, text, *args, **kwargs)

    monkeypatch.setattr(deploy_files, "write_text", write_text)
    with pytest.raises(stop):
        deploy_files.write_files(out_dir, {"docker-compose.yml": "new compose\n", "k8s.yaml": "new k8s\n",
                                           ".env.example": "HF_TOKEN=\n"})
    assert (out_dir / "docker-compose.yml").read_text() == "old compose\n"
    assert sorted(os.listdir(out_dir)) == ["docker-compose.yml"]  # no new file, nothing kept beside


def test_a_whole_write_keeps_the_old_files_beside_until_discarded(out_dir):
    (out_dir / "docker-compose.yml").write_text("old compose\n")
    saved = deploy_files.write_files(out_dir, {"docker-compose.yml": "new compose\n", "k8s.yaml": "new k8s\n"})
    assert (out_dir / "docker-compose.yml").read_text() == "new compose\n"
    assert sorted(os.listdir(out_dir)) == [".docker-compose.yml.previous", "docker-compose.yml", "k8s.yaml"]
    deploy_files.restore_files(dict(saved))
    assert sorted(os.listdir(out_dir)) == ["docker-compose.yml"]
    assert (out_dir / "docker-compose.yml").read_text() == "old compose\n"
