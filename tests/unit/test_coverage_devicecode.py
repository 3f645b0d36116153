"""The device code of a wheel or of installed files (`coverage.devicecode`), against a stand-in cuobjdump that
answers from each file's bytes: which members are listed, what a listing becomes, the per-wheel cache."""

from __future__ import annotations

import hashlib
import json
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sglstack.adapters.cuobjdump import Cuobjdump, DeviceCode, ListingCache, sha256_file
from sglstack.coverage.devicecode import (
    _extract,
    _site_path,
    coverage_cache_dir,
    inspect_files,
    inspect_wheel,
)
from sglstack.coverage.rules import DeviceObject, PackageObjects

CODES = {b"kernel": DeviceCode(("sm_90a",), ("sm_90",), 3), b"lib": DeviceCode(("sm_80", "sm_90"), (), 2),
         b"host only": DeviceCode()}


@dataclass(frozen=True)
class FakeCuobjdump(Cuobjdump):
    """Lists a file by its bytes (CODES); every file it lists is recorded."""

    listed: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def list(self, path: Path) -> DeviceCode:
        data = path.read_bytes()
        with self.lock:
            self.listed.append(data)
        return CODES[data]


class Broken(FakeCuobjdump):
    def list(self, path: Path) -> DeviceCode:
        raise AssertionError("a cached wheel is not listed again")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tool(release: str = "V13.2.86") -> FakeCuobjdump:
    return FakeCuobjdump(Path("cuobjdump"), release)


LOADER = "# sgl_kernel's loader \xe9\n"
MEMBERS = {
    "sgl_kernel/sm90/common_ops.abi3.so": b"kernel",
    "sgl_kernel/sm100/common_ops.abi3.so": b"kernel",  # the same bytes: listed once
    "sgl_kernel/load_utils.py": LOADER.encode() + b"\xff",
    "sgl_kernel/__init__.py": b"",
    "sgl_kernel/libstatic.a": b"lib",  # a link-time input: not listed
    "sgl_kernel-0.3.21.data/platlib/deep_gemm/libdg.so.1.2": b"lib",
    "sgl_kernel-0.3.21.data/purelib/pure/kernels.cubin": b"host only",
    "sgl_kernel-0.3.21.data/scripts/tool.so": b"lib",  # not under site-packages
    "sgl_kernel-0.3.21.data/headers/x.fatbin": b"lib",
    "sgl_kernel-0.3.21.dist-info/METADATA": b"Name: sgl-kernel\n",
}

def wheel(folder: Path, members: dict[str, bytes] = MEMBERS, dirs: tuple[str, ...] = ("sgl_kernel/sub.so/",)) -> Path:
    path = folder / "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name in dirs:
            zf.writestr(zipfile.ZipInfo(name), b"")
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def expected(source: str) -> PackageObjects:
    return PackageObjects("sgl-kernel", "0.3.21", source, (
        DeviceObject("deep_gemm/libdg.so.1.2", _sha(b"lib"), ("sm_80", "sm_90"), (), 2),
        DeviceObject("pure/kernels.cubin", _sha(b"host only"), (), (), 0),
        DeviceObject("sgl_kernel/sm100/common_ops.abi3.so", _sha(b"kernel"), ("sm_90a",), ("sm_90",), 3),
        DeviceObject("sgl_kernel/sm90/common_ops.abi3.so", _sha(b"kernel"), ("sm_90a",), ("sm_90",), 3),
    ), {"sgl_kernel/load_utils.py": LOADER + "\ufffd"})


@pytest.mark.parametrize(("member", "site"), [
    ("sgl_kernel/x.so", "sgl_kernel/x.so"),
    ("pkg-1.data/platlib/lib/x.so", "lib/x.so"),
    ("pkg-1.data/purelib/a/b/x.cubin", "a/b/x.cubin"),
    ("pkg-1.data/scripts/x.so", None),
    ("pkg-1.data/data/share/x.so", None),
    ("pkg-1.data/platlib/", None),
    ("pkg-1.data/platlib", None),
    ("pkg-1.data", None),
    ("pkg.dist-info/platlib/x.so", "pkg.dist-info/platlib/x.so"),
    ("x.so", "x.so"),
])
def test_a_wheel_member_s_path_under_site_packages(member, site):
    assert _site_path(member) == site


def test_a_wheel_s_device_code_in_site_packages_order_each_distinct_file_listed_once(tmp_path, cache):
    path = wheel(tmp_path)
    cuobjdump = tool()
    assert inspect_wheel(path, "sgl-kernel", "0.3.21", cuobjdump, jobs=1) == expected(path.name)
    assert sorted(cuobjdump.listed) == [b"host only", b"kernel", b"lib"]
    stored = cache / "coverage" / "wheels" / f"{sha256_file(path)}-V13.2.86-v1.json"
    assert json.loads(stored.read_text(encoding="utf-8")) == {
        "package": "sgl-kernel", "version": "0.3.21", "source": path.name,
        "objects": [o.to_dict() for o in expected(path.name).objects],
        "loader_sources": {"sgl_kernel/load_utils.py": LOADER + "\ufffd"}}
    assert stored.read_text(encoding="utf-8") == json.dumps(json.loads(stored.read_text(encoding="utf-8")),
                                                            sort_keys=True)
    # nothing left behind: no partial entry, no unpacked member
    assert sorted(p.name for p in stored.parent.iterdir()) == [stored.name]
    assert list((cache / "coverage" / "tmp").iterdir()) == []
    assert coverage_cache_dir() == cache / "coverage"


def test_a_wheel_seen_before_is_answered_from_its_cache_entry(tmp_path):
    path = wheel(tmp_path)
    first = inspect_wheel(path, "sgl-kernel", "0.3.21", tool())
    assert inspect_wheel(path, "sgl-kernel", "0.3.21", Broken(Path("x"), "V13.2.86")) == first
    again = tool("V13.3.0")  # another cuobjdump release lists the wheel again
    assert inspect_wheel(path, "sgl-kernel", "0.3.21", again) == first and len(again.listed) == 3


@pytest.mark.parametrize("damage", ["{not json", "{}", "[]", '{"package": "p", "version": "1", "source": "s", '
                                                               '"objects": 5, "loader_sources": {}}'])
def test_a_damaged_cache_entry_is_inspected_again_and_overwritten(tmp_path, cache, damage):
    path = wheel(tmp_path)
    stored = cache / "coverage" / "wheels" / f"{sha256_file(path)}-V13.2.86-v1.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(damage, encoding="utf-8")
    cuobjdump = tool()
    assert inspect_wheel(path, "sgl-kernel", "0.3.21", cuobjdump) == expected(path.name)
    assert len(cuobjdump.listed) == 3
    assert inspect_wheel(path, "sgl-kernel", "0.3.21", Broken(Path("x"), "V13.2.86")) == expected(path.name)


def test_a_wheel_without_device_code_or_loader(tmp_path):
    path = wheel(tmp_path, {"pkg/__init__.py": b"", "pkg/data.a": b"lib"}, dirs=())
    assert inspect_wheel(path, "pkg", "1", tool()) == PackageObjects("pkg", "1", path.name, (), {})


def test_the_listing_cache_spares_files_listed_before(tmp_path):
    files = {"b/two.so": tmp_path / "2.bin", "a/one.so": tmp_path / "1.bin", "c/three.so": tmp_path / "3.bin"}
    for local, data in zip(files.values(), (b"kernel", b"lib", b"kernel"), strict=True):
        local.write_bytes(data)
    listings = ListingCache("V1", tmp_path / "listings")
    cuobjdump = tool()
    result = inspect_files(files, "p", "1", "image:/usr", cuobjdump, cache=listings, jobs=2)
    assert result == PackageObjects("p", "1", "image:/usr", (
        DeviceObject("a/one.so", _sha(b"lib"), ("sm_80", "sm_90"), (), 2),
        DeviceObject("b/two.so", _sha(b"kernel"), ("sm_90a",), ("sm_90",), 3),
        DeviceObject("c/three.so", _sha(b"kernel"), ("sm_90a",), ("sm_90",), 3)), {})
    assert sorted(cuobjdump.listed) == [b"kernel", b"lib"]
    cached = inspect_files(files, "p", "1", "image:/usr", Broken(Path("x"), "V1"),
                           cache=ListingCache("V1", tmp_path / "listings"), loader_sources={"l.py": "x"})
    assert cached == PackageObjects("p", "1", "image:/usr", result.objects, {"l.py": "x"})


@pytest.mark.parametrize("jobs", [None, 1, 3])
def test_members_are_unpacked_to_flat_files(tmp_path, jobs):
    path = wheel(tmp_path)
    targets = {"sgl_kernel/load_utils.py": tmp_path / "a", "sgl_kernel-0.3.21.data/platlib/deep_gemm/libdg.so.1.2":
               tmp_path / "b", "sgl_kernel/__init__.py": tmp_path / "c"}
    _extract(path, targets, jobs)
    assert {name: target.read_bytes() for name, target in targets.items()} == {
        name: MEMBERS[name] for name in targets}
