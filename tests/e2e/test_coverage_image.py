# ruff: noqa: F811 - pytest fixtures imported from coverage_fixtures are parameters here
"""The same check on a built image (real dockerd + BuildKit): the installed CUDA objects are copied out of a
created-never-started container (always removed) and judged by the same rules; the build's call fails on a
missing capability like a pin mismatch and hands back the label and the table."""

from __future__ import annotations

import secrets
import subprocess

import pytest
from coverage_fixtures import FAKE_SGL_KERNEL, cuobjdump_tool, write_site_packages  # noqa: F401 - fixtures

from sglstack.adapters.docker import OWNER_LABEL
from sglstack.config.schema import Stack
from sglstack.core.labels import COVERAGE_LABEL
from sglstack.coverage.image import (
    KernelCoverageMissing,
    archive_units,
    build_coverage,
    image_coverage,
    record_files,
    site_dirs,
)

pytestmark = [pytest.mark.docker, pytest.mark.network]

CUBINS = "flashinfer_cubin/cubins/75d477a640f268ea9ad117cc596eb39245713b9e/fmha/trtllm-gen"
FAKE_FLASHINFER_CUBIN = {
    "flashinfer_cubin/__init__.py": b"",
    f"{CUBINS}/fmhaSm100fKernel_A.cubin": "sm100f.cubin",
    f"{CUBINS}/fmhaSm103aKernel_B.cubin": "sm103a.cubin",
}
WAIVE = {"require": "ptx", "exceptions": [
    {"extension": "sgl_kernel.common_ops", "capability": "10.3", "reason": "no sm_103 build yet"},
    {"extension": "sgl_kernel.flash_ops", "reason": "FA3 is Hopper-only"},
    {"extension": "flashinfer_cubin/*", "capability": "9.0", "reason": "trtllm-gen kernels are Blackwell-only"},
]}


def stack(**extra) -> Stack:
    return Stack.model_validate({
        "name": "fake", "base_image": "debian:bookworm-slim", "python": "3.12",
        "cuda_arch_list": ["9.0", "10.0", "10.3"], "sgl_kernel": {"version": "0.0.1"},
        "flashinfer": {"version": "0.0.2", "packages": ["flashinfer-python", "flashinfer-cubin"]},
        "sglang": {"version": "0.5.9"}, "serving": {"model": "m"}, **extra})


@pytest.fixture(scope="module")
def cuda_image(tmp_path_factory, docker_cli, docker_client):
    """debian:bookworm-slim with the fake sgl-kernel and flashinfer-cubin installed in /opt/venv."""
    ctx = tmp_path_factory.mktemp("coverage-image")
    site = ctx / "site"
    write_site_packages(site, "sgl-kernel", "0.0.1", FAKE_SGL_KERNEL)
    write_site_packages(site, "flashinfer-cubin", "0.0.2", FAKE_FLASHINFER_CUBIN)
    (ctx / "Dockerfile").write_text("FROM debian:bookworm-slim\nENV VIRTUAL_ENV=/opt/venv\n"
                                    "COPY site/ /opt/venv/lib/python3.12/site-packages/\n")
    tag = f"sglstack-test/coverage:{secrets.token_hex(4)}"
    proc = subprocess.run([docker_cli, "build", "-q", "-t", tag, str(ctx)], env={"DOCKER_BUILDKIT": "1",
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    yield tag
    docker_client.images.remove(tag, force=True)


def _coverage_containers(client) -> set[str]:
    return {c.id for c in client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}=sglstack-coverage"})}


def test_the_image_gets_the_same_cells_as_its_wheels_and_leaves_no_container(cuda_image, docker_client,
                                                                               cuobjdump_tool, monkeypatch):
    monkeypatch.setenv("SGLSTACK_CUOBJDUMP", str(cuobjdump_tool.binary))
    before = _coverage_containers(docker_client)
    report = image_coverage(docker_client, cuda_image, stack())
    assert _coverage_containers(docker_client) == before
    assert report is not None and report.complete
    rows = {r.name: dict(r.cells) for r in report.rows}
    assert rows["sgl_kernel.common_ops"] == {"9.0": "native", "10.0": "native", "10.3": "missing"}
    assert rows["sgl_kernel.flash_ops"] == {"9.0": "native", "10.0": "missing", "10.3": "missing"}
    assert rows["lib/mscclpp.so"] == {"9.0": "ptx", "10.0": "ptx", "10.3": "ptx"}
    assert rows["flashinfer_cubin/fmha/trtllm-gen"] == {"9.0": "missing", "10.0": "native", "10.3": "native"}
    assert {p.source for p in report.packages} == {
        "/opt/venv/lib/python3.12/site-packages/sgl_kernel-0.0.1.dist-info",
        "/opt/venv/lib/python3.12/site-packages/flashinfer_cubin-0.0.2.dist-info"}
    assert report.notes == ()  # the loader source was copied out and read


def test_the_build_call_fails_like_a_pin_mismatch_naming_extension_and_capability(cuda_image, docker_client,
                                                                                  cuobjdump_tool, monkeypatch):
    monkeypatch.setenv("SGLSTACK_CUOBJDUMP", str(cuobjdump_tool.binary))
    with pytest.raises(KernelCoverageMissing, match=r"sgl_kernel\.common_ops on 10\.3: missing \(requires native\)"):
        build_coverage(docker_client, cuda_image, stack())
    result = build_coverage(docker_client, cuda_image, stack(coverage=WAIVE))
    assert result.labels == {COVERAGE_LABEL: "9.0:ptx,10.0:ptx,10.3:ptx"}
    assert result.record is not None and result.record["exit_code"] == 0
    assert {w["extension"] for w in result.record["waived"]} >= {"sgl_kernel.common_ops", "sgl_kernel.flash_ops"}


def test_a_pinned_cuda_package_absent_from_the_image_stops_the_build(cuda_image, docker_client, cuobjdump_tool,
                                                                     monkeypatch):
    monkeypatch.setenv("SGLSTACK_CUOBJDUMP", str(cuobjdump_tool.binary))
    with pytest.raises(KernelCoverageMissing, match=r"cannot be checked: no torch-2\.9\.1\.dist-info"):
        build_coverage(docker_client, cuda_image, stack(coverage=WAIVE, torch={"version": "2.9.1"}))


def test_cpu_stacks_and_other_targets_skip_the_check(cuda_image, docker_client):
    cpu = Stack.model_validate({"name": "cpu", "base_image": "debian:bookworm-slim", "sglang": {"version": "0.5.9"},
                                "serving": {"model": "m"}})
    assert build_coverage(docker_client, cuda_image, cpu).labels == {}
    assert build_coverage(docker_client, cuda_image, stack(), serving_image=False).record is None


def test_copy_units_take_whole_folders_only_where_little_else_lives():
    files = {"sgl_kernel/a.so": 100, "sgl_kernel/b.py": 10, "torch/lib/libtorch_cuda.so": 10**9,
             "torch/lib/libc10.so": 10**6, "torch/_C.cpython-312-x86_64-linux-gnu.so": 10**5,
             "torch/big_python_tree.py": 10**9, "_top.so": 5, "top.py": 5}
    wanted = {"sgl_kernel/a.so", "torch/lib/libtorch_cuda.so", "torch/lib/libc10.so",
              "torch/_C.cpython-312-x86_64-linux-gnu.so", "_top.so"}
    assert archive_units(files, wanted) == ["_top.so", "sgl_kernel", "torch/_C.cpython-312-x86_64-linux-gnu.so",
                                            "torch/lib"]


def test_record_and_site_paths():
    text = "sgl_kernel/a.so,sha256=x,12\n../../bin/tool,sha256=y,3\nsgl_kernel-1.dist-info/RECORD,,\n"
    assert record_files(text) == {"sgl_kernel/a.so": 12, "sgl_kernel-1.dist-info/RECORD": 0}
    assert site_dirs(["PATH=/x", "VIRTUAL_ENV=/opt/venv"], "3.12")[0] == "/opt/venv/lib/python3.12/site-packages"
