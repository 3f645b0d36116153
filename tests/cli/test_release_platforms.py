"""A stack of several platforms is released as one index: `build --push` of one platform smoke-tests and
attests it but moves no release tag (its plan says so), its smoke host must be of the platform built (checked
before the build), and `publish --digest` promotes only a digest that serves every platform of the stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.attest.errors import BadInput
from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.plan import BuildSettings
from sglstack.lock.trust import lock_for_build
from sglstack.pipeline.flow import check_release_inputs, describe_plan
from sglstack.publish.release import ReleaseResult
from sglstack.publish.tags import ReleaseTags

REPO = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO / "stacks.yaml")


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm64"])
def test_the_plan_of_one_platform_of_several_promotes_nothing(platform):
    whole = MATRIX.get("pypi-cu130-gb")
    stack = whole.for_platform(platform)
    lock = lock_for_build(REPO / "stacks.yaml", stack)
    lines = describe_plan(stack, BuildSettings(lock=lock), push=True, registry="127.0.0.1:5000/s/sglang")
    assert lines[-1] == (f"promote: none for {platform} alone: the stack (linux/amd64 linux/arm64) is released as "
                         "one index (invoke publish-index, then invoke publish --digest INDEX)")
    single = MATRIX.get("pypi-cu130")
    lines = describe_plan(single, BuildSettings(lock=lock_for_build(REPO / "stacks.yaml", single)), push=True,
                          registry="127.0.0.1:5000/s/sglang")
    assert lines[-1].startswith("promote: 127.0.0.1:5000/s/sglang:0.5.23-pypi-cu130-") and "none" not in lines[-1]


def test_a_platform_that_passed_and_awaits_its_index_exits_0():
    tags = ReleaseTags(candidate="c", immutable="i", moving=("m",))
    assert ReleaseResult("sha256:" + "a" * 64, tags, published=False, smoke_report=None, awaits_index=True
                         ).exit_code == 0
    assert ReleaseResult("sha256:" + "a" * 64, tags, published=False, smoke_report=None).exit_code == 1  # failed


@pytest.mark.docker
def test_an_arm64_release_smoked_on_this_x86_engine_is_refused_before_the_build(tmp_path, monkeypatch):
    """The smoke would refuse the arm64 image on this host (it would run emulated): found before an hour of
    emulated build, with the way out (an arm64 node's engine for the smoke)."""
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)  # the stack's own model-cache mount, as a user has it
    monkeypatch.setenv("HOME", str(home))
    stack = MATRIX.get("pypi-cu130-gb").for_platform("linux/arm64")
    with pytest.raises(BadInput) as err:
        check_release_inputs(stack, push=True, target=None, key=None, unsigned=True, smoke_opts=[], registry=None,
                             docker_host=None)
    assert str(err.value) == ("stack 'pypi-cu130-gb': --push smoke-tests the linux/arm64 image on the local Docker "
                              "host, which is linux/amd64: give --smoke-opt docker_host=<a linux/arm64 node's "
                              "engine>")
    proc = run_invoke("build", "--stack", "pypi-cu130-gb", "--platform", "linux/arm64", "--push", "--unsigned",
                      "--dry-run", cwd=tmp_path, env={"HOME": str(home)}, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"error: {err.value}"


def test_a_platform_without_its_lock_is_refused_before_any_work(tmp_path):
    """Without its lock the arm64 build would resolve in the build (a wrong tag falls back silently to an older
    pure-Python SGLang or a placeholder package), and the platforms' agreement would never be checked."""
    import shutil

    (tmp_path / "locks").mkdir()
    shutil.copy(REPO / "stacks.yaml", tmp_path / "stacks.yaml")
    shutil.copy(REPO / "locks" / "pypi-cu130-gb.txt", tmp_path / "locks")
    shutil.copy(REPO / "locks" / "pypi-cu130.txt", tmp_path / "locks")
    proc = run_invoke("build", "--stacks-file", str(tmp_path / "stacks.yaml"), "--stack", "pypi-cu130-gb",
                      "--platform", "linux/arm64", "--dry-run", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: stack 'pypi-cu130-gb': no lock ({tmp_path / 'locks' / 'pypi-cu130-gb.linux-arm64.txt'}): a stack of "
        "several platforms builds each from its own lock; run invoke lock --stack pypi-cu130-gb")
    amd = run_invoke("build", "--stacks-file", str(tmp_path / "stacks.yaml"), "--stack", "pypi-cu130-gb",
                     "--platform", "linux/amd64", "--dry-run", cwd=tmp_path, timeout=120)
    assert amd.returncode == 0, amd.stdout + amd.stderr  # its own lock is there


def test_platforms_whose_locks_disagree_are_refused_where_each_is_built(tmp_path):
    """The agreement `stacks --check` checks, checked by the build too (a CI job may never run `stacks --check`):
    an arm64 lock that fell back to sgl-deep-gemm's placeholder never ships."""
    import dataclasses
    import shutil

    from sglstack.lockfile.text import read_lock, render_lock

    (tmp_path / "locks").mkdir()
    shutil.copy(REPO / "stacks.yaml", tmp_path / "stacks.yaml")
    for name in ("pypi-cu130-gb.txt", "pypi-cu130.txt"):
        shutil.copy(REPO / "locks" / name, tmp_path / "locks")
    arm = read_lock(REPO / "locks" / "pypi-cu130-gb.linux-arm64.txt")
    amd_version = read_lock(REPO / "locks" / "pypi-cu130-gb.txt").get("sgl-deep-gemm").version
    fallen = tuple(dataclasses.replace(p, version="0.0.1rc1") if p.name == "sgl-deep-gemm" else p
                   for p in arm.packages)
    (tmp_path / "locks" / "pypi-cu130-gb.linux-arm64.txt").write_text(
        render_lock(dataclasses.replace(arm, packages=fallen), stacks_file="stacks.yaml"))
    for platform in ("linux/amd64", "linux/arm64"):
        proc = run_invoke("build", "--stacks-file", str(tmp_path / "stacks.yaml"), "--stack", "pypi-cu130-gb",
                          "--platform", platform, "--dry-run", cwd=tmp_path, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == (
            "error: stack 'pypi-cu130-gb': the platforms resolve 1 package(s) to different versions: sgl-deep-gemm "
            f"{amd_version} on linux/amd64, 0.0.1rc1 on linux/arm64 (a release without a wheel for one platform makes "
            "the resolver fall back to an older one): pin versions every platform has wheels for")


def test_the_wheels_stage_of_a_stack_of_several_platforms_is_a_target(tmp_path):
    """`--target wheels` (the stage that unpacks a platform's locked wheels, what one debugs when an arm64 wheel
    is missing) was refused as "not a stage": the check rendered the Dockerfile without the lock that adds it.
    Its build is checked as it is made (every file against the lock's hashes), so nothing runs in it after."""
    from sglstack.imagebuild.verify import verified_facts

    proc = run_invoke("build", "--stack", "pypi-cu130-gb", "--platform", "linux/arm64", "--target", "wheels",
                      "--dry-run", cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--target wheels" in proc.stdout
    typo = run_invoke("build", "--stack", "pypi-cu130-gb", "--target", "wheel", "--dry-run", cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert (typo.returncode, typo.stderr.strip()) == (2, "error: stack 'pypi-cu130-gb': --target 'wheel' is not a "
                                                         "stage of its Dockerfile (stages: sglang-src, wheels, "
                                                         "runtime); did you mean 'wheels'?")
    assert verified_facts(None, "img", MATRIX.get("pypi-cu130-gb"), "wheels") == ([], None)  # type: ignore[arg-type]


@pytest.mark.parametrize("served,refused", [(("linux/amd64",), True), (("linux/amd64", "linux/arm64"), False),
                                            (None, False)])
def test_a_registry_base_that_does_not_serve_the_platform_built_is_refused_before_the_build(monkeypatch, served,
                                                                                            refused):
    """A stack of two platforms on a registry base pinned by the amd64 manifest's digest: BuildKit took it for the
    arm64 build too, which ran x86 binaries and failed its shared-library check after the whole build, blaming
    "a wheel of another platform". The base's platforms are read from its registry first (an index, or one image's
    config); a base that cannot be read (None: not known there) is left to BuildKit."""
    from sglstack.pipeline import flow

    base = "registry.example/team/debian@sha256:" + "1" * 64
    whole = MATRIX.get("pypi-cu130-gb").model_copy(update={"base_seed": None, "base_image": base})
    asked: list[str] = []
    monkeypatch.setattr(flow, "reference_platforms", lambda ref: asked.append(ref) or served)
    stack = whole.for_platform("linux/arm64")
    if refused:
        with pytest.raises(BadInput) as err:
            flow._require_base_serves(stack)
        assert str(err.value) == (f"stack 'pypi-cu130-gb': base image {base} is for linux/amd64, not linux/arm64: pin "
                                  "the digest of an index that lists every platform of the stack")
        assert err.value.exit_code == 2
    else:
        flow._require_base_serves(stack)
    assert asked == [base]
    asked.clear()
    flow._require_base_serves(MATRIX.get("pypi-cu130-gb").for_platform("linux/arm64"))  # a seeded base: local
    assert asked == []
