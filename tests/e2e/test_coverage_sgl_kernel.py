# ruff: noqa: F811 - pytest fixtures imported from coverage_fixtures are parameters here
"""The real PyPI `sgl-kernel==0.3.21` wheel of the cu129 stack (535 MB, fetched once per machine into the
sglstack cache, for the stack's python 3.12 and linux/amd64): what each GPU of the stack really loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from coverage_fixtures import cuobjdump_tool  # noqa: F401 - fixtures

from sglstack.adapters.cuobjdump import ListingCache
from sglstack.config.matrix import load_matrix
from sglstack.coverage.devicecode import inspect_wheel
from sglstack.coverage.rules import capabilities_of, device_code_wheels, extensions, loader_notes
from sglstack.coverage.wheels import fetch_source

pytestmark = pytest.mark.network

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cu129_sgl_kernel(cuobjdump_tool):
    stack = load_matrix(REPO / "stacks.yaml").get("cu129")
    source = next(s for s in device_code_wheels(stack, "linux/amd64")
                  if s.package == "sgl-kernel")
    wheel = fetch_source(source, stack, "linux/amd64")
    objects = inspect_wheel(wheel, "sgl-kernel", source.version, cuobjdump_tool,
                            cache=ListingCache(cuobjdump_tool.release))
    return stack, wheel, objects


def test_the_wheel_is_the_stacks_platform_not_this_machines(cu129_sgl_kernel):
    _, wheel, _ = cu129_sgl_kernel
    assert wheel.name == "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl"
    assert wheel.parent.name == "cp312-linux-amd64" and wheel.stat().st_size > 500_000_000


def test_the_loader_of_the_real_wheel_is_the_one_modelled(cu129_sgl_kernel):
    _, _, objects = cu129_sgl_kernel
    assert "def _load_architecture_specific_ops" in objects.loader_sources["sgl_kernel/load_utils.py"]
    assert loader_notes(objects) == []


def test_what_each_gpu_of_cu129_loads(cu129_sgl_kernel):
    stack, _, objects = cu129_sgl_kernel
    # cu129 leaves 10.3 out of its cuda_arch_list because of what this test shows; ask for it anyway.
    assert "10.3" not in stack.cuda_arch_list
    wanted = capabilities_of([*stack.cuda_arch_list, "10.3"])
    rows = {r.name: r for r in extensions(objects, wanted)}
    common = rows["sgl_kernel.common_ops"]
    # H100/H200 load the sm90 build, everything else the sm100 build; that one has sm_100a and sm_120a SASS
    # and no PTX, so a B300 (10.3) gets no kernel image at all.
    assert dict(common.cells) == {"9.0": "native", "10.0": "native", "10.3": "missing", "12.0": "native"}
    assert common.detail["9.0"].startswith("sgl_kernel/sm90/common_ops.abi3.so: sm_90")
    assert common.detail["10.0"] == "sgl_kernel/sm100/common_ops.abi3.so: sm_100a"
    assert common.detail["12.0"] == "sgl_kernel/sm100/common_ops.abi3.so: sm_120a"
    assert dict(rows["sgl_kernel.flash_ops"].cells) == {"9.0": "native", "10.0": "missing", "10.3": "missing",
                                                        "12.0": "missing"}
    assert dict(rows["sgl_kernel.flashmla_ops"].cells) == {"9.0": "native", "10.0": "native", "10.3": "missing",
                                                           "12.0": "missing"}
    # mscclpp carries sm_80/sm_90 SASS and their PTX: Blackwell JIT-compiles it
    assert dict(rows["lib/mscclpp.so"].cells) == {"9.0": "native", "10.0": "ptx", "10.3": "ptx", "12.0": "ptx"}
    assert set(rows["lib/mscclpp.so"].aliases) == {"lib/mscclpp.so.0", "lib/mscclpp.so.0.6.0"}
    # DeepGEMM's extension is host code only: its kernels are compiled at run time
    deep_gemm = next(o for o in objects.objects if o.path == "deep_gemm/deep_gemm_cpp.abi3.so")
    assert not deep_gemm.has_device_code and "deep_gemm.deep_gemm_cpp" not in rows
    assert not any(o.path.endswith(".a") for o in objects.objects)  # static archives are not loaded
