"""The device code of a wheel or of installed files (`coverage.devicecode`), against a stand-in cuobjdump that
answers from each file's bytes: which members are listed, what a listing becomes, the per-wheel cache."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sglstack.adapters.cuobjdump import Cuobjdump, DeviceCode, ListingCache, sha256_file
from sglstack.coverage import devicecode
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
    """Lists a file by its bytes (CODES); records every file it lists and how many listings ran at once (each
    takes `pause` seconds, so that two workers would overlap)."""

    pause: float = 0.0
    listed: list[bytes] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    running: list[int] = field(default_factory=lambda: [0, 0])  # now, most at once
    lock: threading.Lock = field(default_factory=threading.Lock)

    def list(self, path: Path) -> DeviceCode:
        data = path.read_bytes()
        with self.lock:
            self.listed.append(data)
            self.paths.append(path)
            self.running[0] += 1
            self.running[1] = max(self.running)
        time.sleep(self.pause)
        with self.lock:
            self.running[0] -= 1
        return CODES[data]


class Broken(FakeCuobjdump):
    def list(self, path: Path) -> DeviceCode:
        raise AssertionError("a cached wheel is not listed again")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tool(release: str = "V13.2.86", pause: float = 0.0) -> FakeCuobjdump:
    return FakeCuobjdump(Path("cuobjdump"), release, pause)


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
    # unpacked as <n>.bin (no member name becomes a path) into a wheel-* folder of the cache's scratch folder
    assert all(p.parent.parent == cache / "coverage" / "tmp" and p.parent.name.startswith("wheel-")
               and p.name in ("0.bin", "1.bin", "2.bin", "3.bin") for p in cuobjdump.paths)
    assert len({p.parent for p in cuobjdump.paths}) == 1
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


def test_jobs_bounds_how_many_files_are_listed_at_once(tmp_path):
    path = wheel(tmp_path)
    cuobjdump = tool(pause=0.05)
    assert inspect_wheel(path, "sgl-kernel", "0.3.21", cuobjdump, jobs=1) == expected(path.name)
    assert cuobjdump.running == [0, 1]
    files = {"a.so": tmp_path / "a", "b.so": tmp_path / "b"}
    for local, data in zip(files.values(), (b"kernel", b"lib"), strict=True):
        local.write_bytes(data)
    cuobjdump = tool(pause=0.05)
    inspect_files(files, "p", "1", "s", cuobjdump, jobs=1)
    assert cuobjdump.running == [0, 1]


def test_a_wheel_s_listings_come_from_the_listing_cache_given(tmp_path):
    path = wheel(tmp_path)
    listings = ListingCache("V13.2.86", tmp_path / "listings")
    listings.add({_sha(data): code for data, code in CODES.items()})
    assert inspect_wheel(path, "sgl-kernel", "0.3.21", Broken(Path("x"), "V13.2.86"), cache=listings) == \
        expected(path.name)


def test_a_cache_entry_is_read_as_utf_8_whatever_the_locale(tmp_path, cache, ascii_locale):
    path = wheel(tmp_path)
    entry = PackageObjects("sgl-kernel", "0.3.21", "caf\u00e9.whl", (), {"sgl_kernel/load_utils.py": "\u00e9"})
    stored = cache / "coverage" / "wheels" / f"{sha256_file(path)}-V13.2.86-v1.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"package": entry.package, "version": entry.version, "source": entry.source,
                                  "objects": [], "loader_sources": dict(entry.loader_sources)}, ensure_ascii=False),
                      encoding="utf-8")
    assert inspect_wheel(path, "sgl-kernel", "0.3.21", Broken(Path("x"), "V13.2.86")) == entry


# ---- unpacking members: largest first, one open of the wheel per thread, an error stops the rest ---------

class Recorder:
    """What `_extract` did to its targets: the order it opened them, how many at once, how many times the
    wheel was open at each step; a target may fail, wait for an event, or meet the others at a barrier."""

    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        self.lock = threading.Lock()
        self.order: list[str] = []
        self.wheel_fds: list[int] = []
        self.fail: set[str] = set()
        self.hold: dict[str, threading.Event] = {}
        self.started: dict[str, threading.Event] = {}
        self.barrier: threading.Barrier | None = None
        self.pause = 0.0  # each open takes this long: two workers would overlap
        self.running = [0, 0]  # now, most at once

    def target(self, path: Path, name: str) -> Target:
        target = Target(path)
        target.recorder, target.member = self, name
        return target

    def opening(self, name: str) -> None:
        fds = sum(1 for fd in os.listdir("/proc/self/fd") if _link(fd) == str(self.wheel))
        with self.lock:
            self.order.append(name)
            self.wheel_fds.append(fds)
            self.running[0] += 1
            self.running[1] = max(self.running)
        time.sleep(self.pause)
        with self.lock:
            self.running[0] -= 1
        if name in self.started:
            self.started[name].set()
        if self.barrier is not None:
            self.barrier.wait()
        if name in self.hold:
            assert self.hold[name].wait(5)
        if name in self.fail:
            raise OSError(f"{name}: no space left")


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


class Target(type(Path())):
    recorder: Recorder
    member: str


@pytest.fixture(autouse=True)
def _recorded_writes(monkeypatch):
    """A member's file is written by safefiles: a Target notes it as it starts."""
    real = devicecode.write_with

    def write_with(root, path, fill, **kwargs):
        if isinstance(path, Target):
            path.recorder.opening(path.member)
        return real(root, path, fill, **kwargs)

    monkeypatch.setattr(devicecode, "write_with", write_with)


SIZES = {"m/a": b"a" * 10, "m/b": b"b" * 30, "m/c": b"c" * 20}
linux_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")


@linux_proc
def test_members_are_unpacked_largest_first_each_thread_opening_the_wheel_once(tmp_path):
    path = wheel(tmp_path, SIZES, dirs=())
    recorder = Recorder(path)
    recorder.pause = 0.02
    targets = {name: recorder.target(tmp_path / name.replace("/", "-"), name) for name in SIZES}
    _extract(path, targets, 1)
    assert recorder.order == ["m/b", "m/c", "m/a"]
    assert recorder.wheel_fds == [1, 1, 1] and recorder.running == [0, 1]
    assert {name: target.read_bytes() for name, target in targets.items()} == SIZES


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: one worker")
def test_without_jobs_members_are_unpacked_on_every_core(tmp_path):
    path = wheel(tmp_path, SIZES, dirs=())
    recorder = Recorder(path)
    recorder.barrier = threading.Barrier(2, timeout=5)  # both wait for the other: a lone worker breaks it
    _extract(path, {name: recorder.target(tmp_path / name[-1], name) for name in ("m/a", "m/b")}, None)
    assert sorted(recorder.order) == ["m/a", "m/b"]


def _waiting_in_shutdown(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or 0)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "shutdown" in names and "join" in names


def test_an_error_waits_for_the_member_being_unpacked(tmp_path):
    """Two workers: m/c is under way when m/b fails; the error comes once m/c is written and the wheel closed."""
    path = wheel(tmp_path, SIZES, dirs=())
    recorder = Recorder(path)
    recorder.fail = {"m/b"}
    recorder.started["m/c"] = threading.Event()
    recorder.hold["m/b"] = recorder.started["m/c"]  # m/b fails only once m/c is being unpacked
    recorder.hold["m/c"] = threading.Event()
    targets = {name: recorder.target(tmp_path / name[-1], name) for name in SIZES}
    raised: list[BaseException] = []

    def run() -> None:
        try:
            _extract(path, targets, 2)
        except OSError as exc:
            raised.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        deadline = time.monotonic() + 5
        while not _waiting_in_shutdown(worker):
            assert worker.is_alive() and time.monotonic() < deadline, "did not wait for the member under way"
            time.sleep(0.005)
    finally:
        recorder.hold["m/c"].set()
        worker.join(5)
    assert [str(e) for e in raised] == ["m/b: no space left"]
    assert targets["m/c"].read_bytes() == SIZES["m/c"]


def test_a_name_the_wheel_lacks_is_the_zip_s_own_error(tmp_path):
    path = wheel(tmp_path, SIZES, dirs=())
    with pytest.raises(KeyError, match="There is no item named 'm/z' in the archive"):
        _extract(path, {"m/z": tmp_path / "z"}, 1)
