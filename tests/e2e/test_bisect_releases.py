"""Release bisects: real SGLang releases from PyPI, in version order, through the patch paths.

The build side is real (each release's wheel, the Kimi K2.5 patch applied, already upstream, or out of
range); the image is built FROM the CPU double, which serves at a speed set per installed release.
"""

from __future__ import annotations

import contextlib
import json
import textwrap

import docker.errors
import pytest
from clirun import run_invoke

from sglstack.adapters.wheels import available_versions
from sglstack.bisect.releases import ReleaseRangeError, releases_between

PYPI_LIKE = ["0.5.11", "0.5.10.post1", "0.5.10", "0.5.10rc0", "0.5.9", "0.5.8.post1", "0.5.8", "not-a-version"]


def test_releases_between_in_version_order():
    assert releases_between(PYPI_LIKE, "0.5.8", "0.5.10") == ["0.5.8", "0.5.8.post1", "0.5.9", "0.5.10"]
    assert releases_between(PYPI_LIKE, "0.5.9", "0.5.11") == ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11"]
    # a pre-release is in the range only when an endpoint is one
    assert releases_between(PYPI_LIKE, "0.5.9", "0.5.10rc0") == ["0.5.9", "0.5.10rc0"]
    with pytest.raises(ReleaseRangeError, match="must be older"):
        releases_between(PYPI_LIKE, "0.5.10", "0.5.9")
    with pytest.raises(ReleaseRangeError, match=r"0\.5\.12 is not on the package index"):
        releases_between(PYPI_LIKE, "0.5.9", "0.5.12")


def test_the_package_index_lists_sglang_releases():
    versions = available_versions("sglang")
    assert {"0.5.9", "0.5.10"} <= set(versions)
    assert releases_between(versions, "0.5.9", "0.5.10") == ["0.5.9", "0.5.10"]


def release_matrix(tmp_path, base_image: str) -> str:
    path = tmp_path / "stacks.yaml"
    path.write_text(textwrap.dedent(f"""
        stacks:
          rel:
            base_image: {base_image}
            python: "3.11"
            sglang: {{version: 0.5.11, install_deps: false}}
            patches: [kimi-k25-eagle3]
            publish: {{repository: 127.0.0.1:1/sglstack-test/bisect-releases}}
            serving:
              model: test-org/tiny-model
              tp: 1
              gpus: 0
              startup_timeout_s: 60
              shm_size: 256m
              env:
                # Half the speed from 0.5.10.post1 on, in requests of about half a second: a step no
                # loaded machine's scheduling noise can hide (a 10% step at 300 tok/s once drowned in it).
                SGLANG_DOUBLE_TOKENS_PER_S: "100"
                SGLANG_DOUBLE_TOKENS_PER_S_BY_VERSION: "0.5.10.post1=50,0.5.11=50"
            smoke:
              max_new_tokens: 48
              concurrency: 1
              num_prompts: 3
        """))
    return str(path)


def test_an_out_of_range_good_release_is_a_skip_decided_before_any_build(tmp_path, sglang_double_image):
    matrix = release_matrix(tmp_path, sglang_double_image)
    proc = run_invoke("bisect", "--stack", "rel", "--stacks-file", matrix, "--good", "0.5.8", "--bad", "0.5.10",
                      "--gpus", "0", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the good endpoint 0.5.8 cannot be tested" in proc.stdout and "out of range" in proc.stdout
    assert "building target" not in proc.stdout
    report = json.loads((tmp_path / "build" / "rel" / "bisect" / "report.json").read_text())
    assert report["status"] == "undecided" and report["builds"] == 0
    assert report["steps"][0]["verdict"] == "skip" and "applies_to" in report["steps"][0]["skip"]


@pytest.mark.docker
@pytest.mark.slow
# Real builds of several releases (76 s on a loaded CI machine): above the 2400 s its own `invoke bisect`
# is given, so that limit's message is the one a stuck bisect shows.
@pytest.mark.timeout(2700)
def test_bisect_of_real_releases_through_the_patch_paths(tmp_path, sglang_double_image, ca_bundle, docker_cli,
                                                          docker_client):
    matrix = release_matrix(tmp_path, sglang_double_image)
    proc = run_invoke("bisect", "--stack", "rel", "--stacks-file", matrix, "--good", "0.5.9", "--bad", "0.5.11",
                      "--gpus", "0", "--ca-bundle", str(ca_bundle), "--docker-cli", docker_cli, cwd=tmp_path,
                      timeout=2400)
    report_path = tmp_path / "build" / "rel" / "bisect" / "report.json"
    try:
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        assert "first bad release: 0.5.10.post1" in proc.stdout
        report = json.loads(report_path.read_text())
        assert report["mode"] == "release" and report["first_bad"] == "0.5.10.post1"
        assert report["last_good"] == "0.5.10" and report["refs_in_range"] == 3
        steps = {s["ref"]: s for s in report["steps"]}
        for version, status in (("0.5.9", "applied"), ("0.5.10", "already-upstream"),
                                ("0.5.10.post1", "already-upstream")):
            image = docker_client.images.get(steps[version]["tag"])
            assert image.labels["io.sglstack.pin.sglang"] == version
            assert image.labels["io.sglstack.patch.kimi-k25-eagle3"].startswith(status), (version, image.labels)
    finally:
        if report_path.exists():
            for step in json.loads(report_path.read_text())["steps"]:
                with contextlib.suppress(docker.errors.APIError):
                    if step.get("tag"):
                        docker_client.images.remove(step["tag"], force=True)
