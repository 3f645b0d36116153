# ruff: noqa: F811 - pytest fixtures imported from coverage_fixtures are parameters here
"""The compiled fixtures (one per rule, tests/data/coverage/make_fixtures.sh) through NVIDIA's real cuobjdump
give the cells NVIDIA's rules say; listings are cached by sha256 and listed in parallel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from coverage_fixtures import FAKE_SGL_KERNEL, FIXTURES, cuobjdump_tool, make_wheel  # noqa: F401 - fixtures

from sglstack.adapters.cuobjdump import Cuobjdump, CuobjdumpError, ListingCache, list_files
from sglstack.coverage.devicecode import inspect_wheel
from sglstack.coverage.rules import MISSING, NATIVE, PTX, Capability, DeviceObject, capabilities_of, cell, extensions

pytestmark = pytest.mark.network  # the cuobjdump wheel comes from PyPI (once per machine)

CAPS = ("8.0", "8.6", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
N, P, M = NATIVE, PTX, MISSING

# fixture -> (what cuobjdump lists, the cell on each capability of CAPS)
EXPECTED = {
    "sm80.so": ((("sm_80",), ()), (N, N, M, M, M, M, M, M)),
    "sm80_compute80.so": ((("sm_80",), ("sm_80",)), (N, N, P, P, P, P, P, P)),
    "sm90a.so": ((("sm_90a",), ()), (M, M, N, M, M, M, M, M)),
    "compute90.so": (((), ("sm_90",)), (M, M, P, P, P, P, P, P)),
    "sm100a_compute100a.so": ((("sm_100a",), ("sm_100a",)), (M, M, M, N, M, M, M, M)),
    # cuobjdump names family SASS "sm_100" (it runs exactly where plain sm_100 does); the PTX keeps its f
    "sm100f_compute100f.so": ((("sm_100",), ("sm_100f",)), (M, M, M, N, N, M, M, M)),
    "sm100f.cubin": ((("sm_100",), ()), (M, M, M, N, N, M, M, M)),
    "sm103a.cubin": ((("sm_103a",), ()), (M, M, M, M, N, M, M, M)),
    "sm120a.cubin": ((("sm_120a",), ()), (M, M, M, M, M, M, N, M)),
    "host_only.so": (((), ()), (M, M, M, M, M, M, M, M)),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_cells_through_the_real_cuobjdump(cuobjdump_tool, name):
    (sass, ptx), cells = EXPECTED[name]
    code = cuobjdump_tool.list(FIXTURES / name)
    assert (code.sass, code.ptx) == (sass, ptx)
    obj = DeviceObject(name, "x", code.sass, code.ptx, code.images)
    assert tuple(cell(obj.targets, Capability.parse(c)) for c in CAPS) == cells


def test_the_pinned_cuobjdump_runs_here(cuobjdump_tool):
    assert cuobjdump_tool.release.startswith("V13.") and os.access(cuobjdump_tool.binary, os.X_OK)


def test_an_unreadable_file_is_one_error_naming_it(cuobjdump_tool, tmp_path):
    bad = tmp_path / "broken.so"
    bad.write_bytes(b"\x7fELF\x02\x01\x01")
    with pytest.raises(CuobjdumpError, match=r"broken\.so"):
        cuobjdump_tool.list(bad)


def test_listings_are_cached_by_sha256_and_identical_files_listed_once(cuobjdump_tool, tmp_path):
    copy = tmp_path / "copy-of-sm90a.so"
    copy.write_bytes((FIXTURES / "sm90a.so").read_bytes())
    paths = [FIXTURES / "sm90a.so", copy, FIXTURES / "compute90.so", FIXTURES / "host_only.so"]
    cache = ListingCache(cuobjdump_tool.release, root=tmp_path / "cache")
    first = list_files(paths, cuobjdump_tool, cache=cache, jobs=4)
    assert first[copy] == first[FIXTURES / "sm90a.so"]
    rows = (tmp_path / "cache" / f"cuobjdump-{cuobjdump_tool.release}.jsonl").read_text().splitlines()
    assert len(rows) == 3  # the copy has the same sha256: one listing
    # A second run never calls cuobjdump: a tool that cannot run proves it.
    gone = Cuobjdump(Path("/nonexistent/cuobjdump"), cuobjdump_tool.release)
    again = list_files(paths, gone, cache=ListingCache(cuobjdump_tool.release, root=tmp_path / "cache"))
    assert again == first


def test_a_wheel_is_inspected_once_and_its_rows_follow_sgl_kernels_loader(cuobjdump_tool, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    wheel = make_wheel(tmp_path, "sgl-kernel", "0.0.1", FAKE_SGL_KERNEL)
    caps = capabilities_of(["9.0", "10.0", "10.3"])
    objects = inspect_wheel(wheel, "sgl-kernel", "0.0.1", cuobjdump_tool)
    rows = {r.name: r for r in extensions(objects, caps)}
    assert dict(rows["sgl_kernel.common_ops"].cells) == {"9.0": N, "10.0": N, "10.3": M}
    assert dict(rows["sgl_kernel.flash_ops"].cells) == {"9.0": N, "10.0": M, "10.3": M}
    assert dict(rows["lib/mscclpp.so"].cells) == {"9.0": P, "10.0": P, "10.3": P}
    assert rows["lib/mscclpp.so"].aliases == ("lib/mscclpp.so.0",)
    assert "deep_gemm.deep_gemm_cpp" not in rows and objects.loader_sources["sgl_kernel/load_utils.py"]
    gone = Cuobjdump(Path("/nonexistent/cuobjdump"), cuobjdump_tool.release)
    assert inspect_wheel(wheel, "sgl-kernel", "0.0.1", gone) == objects  # cached by the wheel's sha256
