"""`invoke coverage` of a stack whose wheels were listed before: the result stored under a sha256 the lock
names is taken without fetching or hashing any wheel, only for a file pip would install for the stack's Python
and platform; anything else is fetched as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglstack.adapters.cuobjdump import Cuobjdump
from sglstack.adapters.wheels import WheelFetchError
from sglstack.config.schema import Stack
from sglstack.coverage import wheels
from sglstack.coverage.devicecode import WHEEL_CACHE_VERSION, _to_json, coverage_cache_dir
from sglstack.coverage.rules import DeviceObject, PackageObjects

RELEASE = "V13.2.86"
DIGEST = "ab" * 32


def stack() -> Stack:
    return Stack.model_validate({
        "name": "s", "base_image": "debian:bookworm-slim", "python": "3.11", "glibc": "2.36",
        "cuda_arch_list": ["9.0"], "sgl_kernel": {"version": "0.0.1"}, "sglang": {"version": "0.5.9"},
        "serving": {"model": "m"}})


def _store(tmp_path: Path, wheel_name: str) -> None:
    result = PackageObjects("sgl-kernel", "0.0.1", wheel_name,
                            (DeviceObject("sgl_kernel/common_ops.abi3.so", "cd" * 32, ("sm_90a",), (), 1),))
    path = coverage_cache_dir() / "wheels" / f"{DIGEST}-{RELEASE}-v{WHEEL_CACHE_VERSION}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_to_json(result)))


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path))
    monkeypatch.setattr(wheels, "cuobjdump", lambda: Cuobjdump(Path("/nonexistent/cuobjdump"), RELEASE))
    fetched: list[str] = []

    def fetch(source, s, platform):
        fetched.append(source.requirement)
        raise WheelFetchError("offline in this test")

    monkeypatch.setattr(wheels, "fetch_source", fetch)
    return fetched


def test_a_result_stored_under_a_locked_sha256_is_taken_without_any_wheel(world, tmp_path):
    _store(tmp_path, "sgl_kernel-0.0.1-cp310-abi3-manylinux2014_x86_64.whl")
    report = wheels.check_wheels(stack(), "linux/amd64", versions={"sgl-kernel": "0.0.1"},
                                 hashes={"sgl-kernel": ("sha256:" + "00" * 32, "sha256:" + DIGEST)})
    assert world == []
    assert [(p.package, p.source, p.checked) for p in report.packages] == [
        ("sgl-kernel", "sgl_kernel-0.0.1-cp310-abi3-manylinux2014_x86_64.whl", True)]
    assert [dict(r.cells) for r in report.rows] == [{"9.0": "native"}]


@pytest.mark.parametrize("wheel_name", [
    "sgl_kernel-0.0.1-cp310-abi3-manylinux2014_aarch64.whl",  # another machine
    "sgl_kernel-0.0.1-cp312-cp312-manylinux2014_x86_64.whl",  # another Python
    "sgl_kernel-0.0.1-cp310-abi3-manylinux_2_39_x86_64.whl",  # newer than the stack's glibc 2.36
])
def test_a_stored_result_of_a_wheel_pip_would_not_install_here_is_not_taken(world, tmp_path, wheel_name):
    _store(tmp_path, wheel_name)
    report = wheels.check_wheels(stack(), "linux/amd64", versions={"sgl-kernel": "0.0.1"},
                                 hashes={"sgl-kernel": ("sha256:" + DIGEST,)})
    assert world == ["sgl-kernel==0.0.1"]
    assert [(p.package, p.checked, p.reason) for p in report.packages] == [
        ("sgl-kernel", False, "offline in this test")]


def test_without_the_lock_s_hashes_the_wheel_is_fetched(world, tmp_path):
    _store(tmp_path, "sgl_kernel-0.0.1-cp310-abi3-manylinux2014_x86_64.whl")
    wheels.check_wheels(stack(), "linux/amd64", versions={"sgl-kernel": "0.0.1"})
    assert world == ["sgl-kernel==0.0.1"]
