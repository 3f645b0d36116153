"""The kernel-cache artifact: its key, its on-disk OCI layout store, and a restore that uses an artifact only
when its key is exactly the start's (else one line naming the differing field, and nothing restored)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from waits import sigint_once_written

from sglstack.kernelcache import (
    ARTIFACT_TYPE,
    CacheKey,
    KernelCacheError,
    LayoutStore,
    NodeGpu,
    cache_environment,
    cache_files,
    cache_key,
    mismatch_line,
)
from sglstack.kernelcache import layout as kernel_layout
from sglstack.kernelcache.key import serving_hash

ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8",
        "--host", "0.0.0.0", "--port", "30000", "--revision", "abc123", "--ep-size", "8"]
H200 = NodeGpu("NVIDIA H200", "9.0", "580")


def key(**changes) -> CacheKey:
    made = cache_key(image="sha256:" + "1" * 64, gpu=H200, argv=ARGV, env={"A": "1"}, model="moonshotai/Kimi-K2.5",
                     draft_model=None, tp_size=8, cache_root="/root/.cache/sglstack-kernels")
    return replace(made, **changes)


def fill(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def test_the_key_reads_revisions_and_ep_off_the_argv_and_hashes_what_compiles():
    k = key()
    assert (k.model_revision, k.ep_size, k.tp_size, k.draft_revision) == ("abc123", 8, 8, None)
    # Where it listens, where the cache is, and the interpreter's path change no kernel.
    moved = ["/venv/bin/python3", *ARGV[1:7], "--host=127.0.0.1", "--port", "41234", *ARGV[11:]]
    env = {"A": "1", **cache_environment("/elsewhere")}
    assert serving_hash(moved, env) == serving_hash(ARGV, {"A": "1"})
    assert serving_hash(ARGV, {"A": "2"}) != serving_hash(ARGV, {"A": "1"})
    assert serving_hash([*ARGV, "--attention-backend", "triton"], {"A": "1"}) != serving_hash(ARGV, {"A": "1"})
    # A secret's value is never hashed: the key cannot be brute-forced for it, and a new token keeps the cache.
    assert serving_hash([*ARGV, "--api-key", "s3cr3t-1"], {"HF_TOKEN": "a"}) == \
        serving_hash([*ARGV, "--api-key", "s3cr3t-2"], {"HF_TOKEN": "b"})


def test_every_cache_variable_points_under_the_one_folder():
    env = cache_environment("/c")
    assert env["TRITON_CACHE_DIR"] == "/c/triton" and env["XDG_CACHE_HOME"] == "/c/xdg"
    assert env["SGLANG_DG_CACHE_DIR"] == env["DG_JIT_CACHE_DIR"] == "/c/deep_gemm"
    assert {"TORCHINDUCTOR_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR", "CUDA_CACHE_PATH",
            "SGLANG_CACHE_DIR"} <= set(env)


def test_the_mismatch_line_names_the_first_differing_field():
    other = key(gpu_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", tp_size=4)
    assert mismatch_line(key(), other) == (
        "kernel cache: key differs in gpu_name: this start has 'NVIDIA H200', the artifact 'NVIDIA H100 80GB HBM3' "
        "(and 1 more: tp_size); starting cold")
    # nvidia-smi that did not answer is no match, even for an artifact made the same way.
    assert key(gpu_name="unknown").differences(key(gpu_name="unknown")) == ["gpu_name"]


def test_the_store_packs_and_restores_the_artifact_of_exactly_this_key(tmp_path):
    cache = tmp_path / "cache"
    fill(cache, {"triton/ab/k.cubin": b"x" * 10, "flashinfer/.cache/flashinfer/op.so": b"y" * 5})
    store = LayoutStore(tmp_path / "store")
    packed = store.put(key(), cache)
    assert (packed.files, json.loads((tmp_path / "store" / "oci-layout").read_text())) == (
        2, {"imageLayoutVersion": "1.0.0"})
    index = json.loads((tmp_path / "store" / "index.json").read_text())
    assert [m["artifactType"] for m in index["manifests"]] == [ARTIFACT_TYPE]
    manifest = json.loads(store.read_blob(packed.manifest_digest))
    assert json.loads(store.read_blob(manifest["config"]["digest"])) == key().to_dict()
    # Packing the same key again replaces its entry: one per key.
    store.put(key(), cache)
    assert len(json.loads((tmp_path / "store" / "index.json").read_text())["manifests"]) == 1

    restored = tmp_path / "restored"
    fill(restored, {"stale.bin": b"old"})
    done = store.restore(key(), restored, tmp_path)
    assert done.matched and done.files == 2 and done.manifest_digest == packed.manifest_digest
    assert done.line == (f"kernel cache: restored 2 files from {packed.manifest_digest[:19]} "
                         f"(key {key().digest()[:19]} matched)")
    assert cache_files(restored) == {"flashinfer/.cache/flashinfer/op.so": 5, "triton/ab/k.cubin": 10}


def test_no_exact_key_restores_nothing_and_says_which_field_differs(tmp_path):
    cache = tmp_path / "cache"
    fill(cache, {"triton/k.cubin": b"x"})
    store = LayoutStore(tmp_path / "store")
    assert store.restore(key(), tmp_path / "r", tmp_path).line == \
        f"kernel cache: no artifact in {tmp_path / 'store'}; starting cold"
    store.put(key(driver_major="570"), cache)
    store.put(key(driver_major="570", compute_capability="10.0", gpu_name="NVIDIA B200"), cache)
    target = tmp_path / "r"
    fill(target, {"mine": b"1"})
    done = store.restore(key(), target, tmp_path)
    assert not done.matched and done.key_differences == ("driver_major",)  # the nearest of the two
    assert done.line == ("kernel cache: key differs in driver_major: this start has '580', the artifact '570'; "
                         "starting cold")
    assert cache_files(target) == {"mine": 1}  # nothing restored, nothing removed


def _tar(members: list[tarfile.TarInfo], data: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return buf.getvalue()


@pytest.mark.parametrize("member", ["../escape", "/etc/passwd", "link"])
def test_a_layer_that_would_write_outside_or_a_link_is_refused_and_the_folder_is_kept(tmp_path, member):
    info = tarfile.TarInfo(member)
    if member == "link":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
    else:
        info.size = 1
    store = LayoutStore(tmp_path / "store")
    cache = tmp_path / "cache"
    fill(cache, {"a": b"1"})
    packed = store.put(key(), cache)
    manifest = json.loads(store.read_blob(packed.manifest_digest))
    layer = store.blob_path(manifest["layers"][0]["digest"])
    bad = _tar([info], b"x")
    layer.write_bytes(bad)  # the blob no longer hashes to its digest: refused before it is read
    with pytest.raises(KernelCacheError, match="do not hash to its digest"):
        store.restore(key(), tmp_path / "r", tmp_path)
    from sglstack.kernelcache.files import unpack
    target = tmp_path / "r"
    fill(target, {"kept": b"1"})
    with pytest.raises(KernelCacheError, match="not restored"):
        unpack(tmp_path, target, lambda: io.BytesIO(bad), max_bytes=1 << 20)
    assert cache_files(target) == {"kept": 1}
    assert not (tmp_path / "escape").exists()


def test_a_layer_that_is_not_a_gzip_tar_is_one_line(tmp_path):
    from sglstack.kernelcache.files import unpack
    with pytest.raises(KernelCacheError, match=r"^kernel cache layer: not a gzip tar"):
        unpack(tmp_path, tmp_path / "r", lambda: io.BytesIO(gzip.compress(b"not a tar") + b"junk"), max_bytes=1 << 20)


def test_a_store_index_that_is_not_one_is_one_line(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "index.json").write_text("{not json")
    with pytest.raises(KernelCacheError, match=r"^kernel cache store .*index\.json: not an OCI image index"):
        LayoutStore(tmp_path / "store").restore(key(), tmp_path / "r", tmp_path)


@pytest.mark.parametrize("layers", [[], [{}], [{"digest": 5, "size": 1}], [{"digest": "sha256:" + "0" * 64,
                                                                            "size": "many"}], "layer"],
                         ids=["none", "empty", "digest-number", "size-text", "not-a-list"])
def test_an_artifact_whose_manifest_names_no_usable_layer_is_one_line_not_restored(tmp_path, layers):
    """A manifest that hashes to its name (imported from a registry, or written by hand) with its key's config and
    no usable layer: a KernelCacheError line (the warm start and deploy start cold on it), never an IndexError,
    KeyError or ValueError traceback."""
    store = LayoutStore(tmp_path / "store")
    cache = tmp_path / "cache"
    fill(cache, {"a": b"1"})
    packed = store.put(key(), cache)
    manifest = json.loads(store.read_blob(packed.manifest_digest))
    manifest["layers"] = layers
    store.import_artifact(key(), json.dumps(manifest).encode(), b"")
    target = tmp_path / "r"
    fill(target, {"kept": b"1"})
    with pytest.raises(KernelCacheError) as err:
        store.restore(key(), target, tmp_path)
    assert str(err.value).startswith(f"kernel cache store {tmp_path / 'store'}: artifact sha256:")
    assert str(err.value).endswith(": its manifest names no layer to restore; not restored")
    assert cache_files(target) == {"kept": 1}


def _member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 1, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size if kind == tarfile.REGTYPE else 0, linkname
    return info


@pytest.mark.parametrize("bad", [
    _member("hard", tarfile.LNKTYPE, linkname="/etc/passwd"),
    _member("hard-inside", tarfile.LNKTYPE, linkname="ok"),
    _member("fifo", tarfile.FIFOTYPE),
    _member("tty", tarfile.CHRTYPE),
    _member("disk", tarfile.BLKTYPE),
    _member("a/./../../x"),
    _member("deep/../../../x"),
], ids=["hardlink-out", "hardlink-in", "fifo", "char-device", "block-device", "dot-dot-after-dot", "dot-dot-deep"])
def test_any_member_but_a_file_or_folder_inside_is_refused_after_good_ones_and_nothing_is_restored(tmp_path, bad):
    """The bad member comes after a good file: what was unpacked before it is thrown away with the new folder."""
    from sglstack.kernelcache.files import unpack

    layer = _tar([_member("ok"), bad], b"x")
    target = tmp_path / "root" / "r"
    fill(target, {"kept": b"1"})
    with pytest.raises(KernelCacheError, match=r"^kernel cache layer: .*; not restored$"):
        unpack(tmp_path / "root", target, lambda: io.BytesIO(layer), max_bytes=1 << 20)
    assert cache_files(target) == {"kept": 1}
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["r"]  # no half-filled folder beside it
    assert not (tmp_path / "x").exists()


def test_a_layer_that_unpacks_to_more_than_the_limit_is_refused_as_it_unpacks(tmp_path):
    """A small layer of zeros that would unpack past the limit (a gzip bomb) stops at the limit, not the disk."""
    from sglstack.kernelcache.files import unpack

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for n in range(3):
            info = _member(f"zeros-{n}", size=4 << 20)
            tar.addfile(info, io.BytesIO(b"\0" * (4 << 20)))
    assert len(buf.getvalue()) < 64 << 10
    target = tmp_path / "root" / "r"
    fill(target, {"kept": b"1"})
    with pytest.raises(KernelCacheError, match=r"more than 10485760 bytes unpacked; not restored$"):
        unpack(tmp_path / "root", target, lambda: io.BytesIO(buf.getvalue()), max_bytes=10 << 20)
    assert cache_files(target) == {"kept": 1}
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["r"]


def test_ctrl_c_while_packing_leaves_no_temp_file_and_no_artifact(tmp_path, monkeypatch):
    """A real SIGINT once the layer's temp file holds a MiB: the store keeps nothing of the half-packed layer."""
    import os

    cache = tmp_path / "cache"
    fill(cache, {f"k{n}.cubin": os.urandom(4 << 20) for n in range(4)})  # incompressible: about 16 MiB to write
    store = LayoutStore(tmp_path / "store")
    with pytest.raises(KeyboardInterrupt), sigint_once_written(monkeypatch, kernel_layout, 1 << 20):
        store.put(key(), cache)  # DID NOT RAISE: packed before the watcher saw its temp file
    assert [p.name for p in store.blobs.iterdir()] == []
    assert not (store.path / "index.json").exists()
    assert store.restore(key(), tmp_path / "r", tmp_path).line.endswith("starting cold")
