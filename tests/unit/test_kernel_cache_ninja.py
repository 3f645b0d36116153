"""A restored kernel cache as FlashInfer's JIT sees it: through ninja (the PyPI `ninja` wheel, the tool
FlashInfer runs). Ninja keeps each output's build time in its deps log and rebuilds an output whose time on
disk is newer ("stored deps info out of date"). On the H100 every warm start recompiled FlashInfer's norm module
with nvcc for that reason (about 30 s) while adding no file; a restore that keeps each file's time to the
nanosecond leaves ninja nothing to do."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import ninja
import pytest

import sglstack.kernelcache.files as files
from sglstack.kernelcache.files import cache_state, pack, rewritten_files, unpack

NINJA = os.path.join(ninja.BIN_DIR, "ninja")
# A compile step with a gcc-style depfile, as FlashInfer's build.ninja has for each `.cu` (nvcc -MD -MF).
BUILD = """rule cc
  command = cp $in $out && printf '%s: %s\\n' $out $in > $out.d
  depfile = $out.d
  deps = gcc
build norm.so: cc {source}
"""


def ninja_explain(folder: Path) -> str:
    done = subprocess.run([NINJA, "-C", str(folder), "-n", "-d", "explain"], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout + done.stderr


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path]:
    """A JIT's cache folder after a cold build, its source installed (older) outside the cache."""
    source = tmp_path / "site-packages" / "flashinfer" / "csrc" / "norm.cu"
    source.parent.mkdir(parents=True)
    source.write_text("// kernel source\n")
    os.utime(source, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    cache = tmp_path / "cache"
    ops = cache / "flashinfer" / "cached_ops" / "norm"
    ops.mkdir(parents=True)
    (ops / "build.ninja").write_text(BUILD.format(source=source))
    subprocess.run([NINJA, "-C", str(ops)], capture_output=True, check=True, timeout=60)
    assert "no work to do" in ninja_explain(ops)
    return cache, ops.relative_to(cache)


def packed_layer(folder: Path) -> bytes:
    out = io.BytesIO()
    pack(folder, out)
    return out.getvalue()


def test_a_restored_cache_is_up_to_date_for_ninja(tmp_path, built):
    cache, ops = built
    before = cache_state(cache)
    layer = packed_layer(cache)
    unpack(tmp_path, cache, lambda: io.BytesIO(layer), max_bytes=1 << 20)
    assert cache_state(cache) == before  # every size and time to the ns
    assert "no work to do" in ninja_explain(cache / ops)


def test_a_restore_stamped_with_the_restore_time_makes_ninja_rebuild_and_is_seen(tmp_path, built, monkeypatch):
    cache, ops = built
    layer = packed_layer(cache)
    monkeypatch.setattr(files, "_packed_mtime_ns", lambda _member: None)  # what the restore did before
    unpack(tmp_path, cache, lambda: io.BytesIO(layer), max_bytes=1 << 20)
    before = cache_state(cache)  # as the warm start sees the folder when its server starts
    explained = ninja_explain(cache / ops)
    assert "stored deps info out of date" in explained and "no work to do" not in explained
    # The rebuild writes norm.so again: the same files, one rewritten, which the no-compile gate counts.
    subprocess.run([NINJA, "-C", str(cache / ops)], capture_output=True, check=True, timeout=60)
    after = cache_state(cache)
    assert set(after) == set(before)
    assert rewritten_files(before, after) == [f"{ops.as_posix()}/norm.so"]


def test_a_layer_packed_without_times_still_restores(tmp_path):
    """Layers packed before the times were kept (mtime 0, no PAX record) restore as before: restore time."""
    cache = tmp_path / "cache"
    (cache / "triton").mkdir(parents=True)
    (cache / "triton" / "k.cubin").write_bytes(b"x")
    layer = io.BytesIO()
    import tarfile
    with tarfile.open(fileobj=layer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("triton/k.cubin")
        info.size, info.mtime = 1, 0
        tar.addfile(info, io.BytesIO(b"x"))
    data = layer.getvalue()
    target = tmp_path / "restored"
    assert unpack(tmp_path, target, lambda: io.BytesIO(data), max_bytes=1 << 20) == 1
    assert (target / "triton" / "k.cubin").stat().st_mtime > 1_000_000_000


@pytest.mark.parametrize("raw", ["", "abc", "1.2.3", "-5", "1.1234567890", "12.x"])
def test_a_time_record_that_is_not_one_is_ignored(raw):
    import tarfile
    member = tarfile.TarInfo("a")
    member.pax_headers = {"mtime": raw} if raw else {}
    assert files._packed_mtime_ns(member) is None


@pytest.mark.parametrize(("raw", "ns"), [("1700000000.123456789", 1_700_000_000_123_456_789),
                                          ("1700000000.5", 1_700_000_000_500_000_000),
                                          ("1700000000", 1_700_000_000_000_000_000)])
def test_a_time_record_is_read_exactly(raw, ns):
    import tarfile
    member = tarfile.TarInfo("a")
    member.pax_headers = {"mtime": raw}
    assert files._packed_mtime_ns(member) == ns


@pytest.mark.parametrize("raw", ["", "abc", "1.2.3", "-5", "1.1234567890", "12.x", "1700000000.123456789",
                                 "1700000000.5", "1700000000"])
def test_the_k8s_init_container_reads_a_time_record_as_the_host_does(raw):
    """The init container runs in the image with the standard library only, so it keeps its own copy of the
    parser: held to the host's here."""
    import importlib.util
    import tarfile

    from sglstack.render.k8s_cache import INIT_SCRIPT

    spec = importlib.util.spec_from_file_location("kernelcache_init", INIT_SCRIPT)
    assert spec is not None and spec.loader is not None
    init = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(init)
    member = tarfile.TarInfo("a")
    member.pax_headers = {"mtime": raw} if raw else {}
    assert init.packed_mtime_ns(raw) == files._packed_mtime_ns(member)
