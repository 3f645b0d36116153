"""The kernel-cache artifact in a registry: attached to the tested digest with the image as its subject, signed
with the release's key, and fetched back by exactly the deployment's key (signed by the trusted key, when one
is given); a differing key or a missing signature is one line, and nothing is fetched. Both the referrers API
and the tag scheme (a registry without it) are covered, against an in-memory registry."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from memory_registry import MemoryRegistry

from sglstack.attest.kernelcache import attach_kernel_cache, cache_tag, fetch_kernel_cache
from sglstack.attest.signing import key_id
from sglstack.core.errors import RegistryError
from sglstack.kernelcache import KernelCacheError, LayoutStore, NodeGpu, cache_files, cache_key
from sglstack.registry.client import OCI_MANIFEST, compute_digest

IMAGE = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
IMAGE_DIGEST = compute_digest(IMAGE)


def memory_registry(referrers_api: bool) -> MemoryRegistry:
    """The shared stand-in, holding the image the caches are of."""
    registry = MemoryRegistry(referrers_api=referrers_api)
    registry.put_manifest("r", IMAGE_DIGEST, IMAGE, OCI_MANIFEST)
    return registry


def make_key(**changes):
    key = cache_key(image=IMAGE_DIGEST, gpu=NodeGpu("NVIDIA H200", "9.0", "580"),
                    argv=["python3", "-m", "sglang.launch_server", "--model-path", "m"], env={}, model="m",
                    draft_model=None, tp_size=1, cache_root="/root/.cache/sglstack-kernels")
    return replace(key, **changes)


@pytest.fixture
def packed(tmp_path):
    folder = tmp_path / "cache"
    (folder / "triton" / "k").mkdir(parents=True)
    (folder / "triton" / "k" / "a.cubin").write_bytes(b"kernel")
    store = LayoutStore(tmp_path / "store")
    return store, store.put(make_key(), folder).manifest_digest


@pytest.mark.parametrize("referrers_api", [True, False], ids=["referrers-api", "tag-scheme"])
def test_attached_signed_and_fetched_by_exactly_the_deployments_key(tmp_path, packed, referrers_api):
    store, artifact = packed
    registry = memory_registry(referrers_api)
    signer = Ed25519PrivateKey.generate()
    line = attach_kernel_cache(registry, "r", IMAGE_DIGEST, store, artifact, signer)
    layer = json.loads(store.read_blob(artifact))["layers"][0]
    attached = [d for d, (_, body) in registry.manifests.items() if json.loads(body).get("config", {}).get("mediaType")
                == "application/vnd.sglstack.kernel-cache.key.v1+json"]
    assert line == (f"attached kernel cache {attached[0][:19]} (1 files, {layer['size']} bytes; key "
                    f"{make_key().digest()[:19]}: NVIDIA H200, CC 9.0, tp 1) to r@{IMAGE_DIGEST[:19]}; signed by key "
                    f"{key_id(signer.public_key())[:16]}")
    if not referrers_api:
        assert cache_tag(IMAGE_DIGEST, make_key()) in registry.tags
        assert cache_tag(IMAGE_DIGEST, make_key()) + ".sig" in registry.tags
    local = LayoutStore(tmp_path / "node-store")
    said = fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), local, signer.public_key())
    assert said.endswith(f"(key {make_key().digest()[:19]} matched)")
    restored = local.restore(make_key(), tmp_path / "restored", tmp_path)
    assert restored.matched and cache_files(tmp_path / "restored") == {"triton/k/a.cubin": 6}
    # The artifact's subject is the image: promotion by tag carries it along.
    manifest = json.loads(registry.manifests[restored.manifest_digest][1])
    assert manifest["subject"]["digest"] == IMAGE_DIGEST


def test_another_key_or_another_signer_fetches_nothing_in_one_line(tmp_path, packed):
    store, artifact = packed
    registry = memory_registry(True)
    signer = Ed25519PrivateKey.generate()
    attach_kernel_cache(registry, "r", IMAGE_DIGEST, store, artifact, signer)
    local = LayoutStore(tmp_path / "node-store")
    with pytest.raises(KernelCacheError) as info:
        fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(compute_capability="10.0", gpu_name="NVIDIA B200"),
                           local, None)
    assert str(info.value) == ("kernel cache: key differs in gpu_name: this start has 'NVIDIA B200', the artifact "
                               "'NVIDIA H200' (and 1 more: compute_capability); starting cold")
    other = Ed25519PrivateKey.generate()
    with pytest.raises(KernelCacheError, match=r"^kernel cache sha256:\w+: not signed for sha256:\w+ by key \w+; "
                                               r"starting cold$"):
        fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), local, other.public_key())
    assert not (tmp_path / "node-store" / "index.json").exists()
    with pytest.raises(KernelCacheError, match=r"^kernel cache: none attached to r@sha256:\w+; starting cold$"):
        fetch_kernel_cache(memory_registry(True), "r", IMAGE_DIGEST, make_key(), local, None)


def test_a_cache_made_for_another_image_is_not_attached(tmp_path, packed):
    store, artifact = packed
    registry = memory_registry(True)
    other = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [], "x": 1}).encode()
    registry.manifests[compute_digest(other)] = (OCI_MANIFEST, other)
    with pytest.raises(KernelCacheError, match="was made for"):
        attach_kernel_cache(registry, "r", compute_digest(other), store, artifact, None)


def test_a_release_attaches_what_its_smoke_packed_and_says_when_it_cannot(tmp_path, packed):
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from sglstack.config.imageref import Repository
    from sglstack.publish.release import _attach_kernel_caches

    store, artifact = packed
    registry = memory_registry(True)
    out = io.StringIO()
    report = {"kernel_cache": {"store": str(store.path), "packed": {"eagle3": {"artifact": artifact}}}}
    stack = SimpleNamespace(name="tiny")
    _attach_kernel_caches(Console(file=out, width=400), registry, Repository("r.example", "r"), stack, IMAGE_DIGEST,
                          report, Ed25519PrivateKey.generate())
    said = out.getvalue().strip()
    assert said.startswith("tiny: eagle3: attached kernel cache sha256:") and "signed by key" in said
    out.truncate(0)
    out.seek(0)
    broken = {"kernel_cache": {"store": str(tmp_path / "gone"), "packed": {"eagle3": {"artifact": artifact}}}}
    _attach_kernel_caches(Console(file=out, width=400), registry, Repository("r.example", "r"), stack, IMAGE_DIGEST,
                          broken, None)
    assert out.getvalue().strip().startswith("tiny: eagle3: kernel cache of eagle3 not attached (")
    assert out.getvalue().strip().endswith("); deployments start cold")


def test_the_tag_scheme_names_are_tags_every_registry_takes():
    import re

    # The distribution spec's tag grammar: at most 128 characters (distribution 2.8 stores them in the e2e test).
    tag = cache_tag(IMAGE_DIGEST, make_key())
    for name in (tag, tag + ".sig"):
        assert re.fullmatch(r"[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}", name), name
    assert tag.startswith(f"sha256-{IMAGE_DIGEST.removeprefix('sha256:')}.kcache-")
    assert cache_tag(IMAGE_DIGEST, make_key(tp_size=2)) != tag  # one tag per key: two GPUs' caches coexist


def test_a_registry_that_wants_credentials_is_said_not_read_as_no_cache(tmp_path):
    from sglstack.registry.session import RegistryAuthError

    class Private(MemoryRegistry):
        """distribution 2.x with auth: the referrers route is 404 before any auth; the tag list is a 401."""

        def list_tags(self, repo):
            raise RegistryAuthError("registry r.example: authentication required and no credentials found")

    registry = Private()
    registry.put_manifest("r", IMAGE_DIGEST, IMAGE, OCI_MANIFEST)  # the image the caches are of
    with pytest.raises(RegistryAuthError, match="authentication required"):
        fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), LayoutStore(tmp_path / "s"), None)


def _blobs_left(store: LayoutStore) -> list[str]:
    return sorted(p.name for p in store.blobs.iterdir()) if store.blobs.exists() else []


def test_a_layer_that_does_not_hash_to_its_digest_leaves_no_temp_file_and_no_blob(tmp_path, packed):
    store, artifact = packed
    registry = memory_registry(True)
    attach_kernel_cache(registry, "r", IMAGE_DIGEST, store, artifact, None)
    layer = json.loads(store.read_blob(artifact))["layers"][0]["digest"]
    registry.blobs[layer] = registry.blobs[layer][:-1] + b"!"  # same size, other bytes: written, then refused
    local = LayoutStore(tmp_path / "node-store")
    with pytest.raises(RegistryError, match=r"content does not match its digest$"):
        fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), local, None)
    assert _blobs_left(local) == [] and not (local.path / "index.json").exists()


def test_a_signal_after_the_layer_was_fetched_takes_it_out_again(tmp_path, packed, monkeypatch):
    """Ctrl-C between the layer's rename and the index entry: the store holds the whole artifact or nothing new."""
    store, artifact = packed
    registry = memory_registry(True)
    attach_kernel_cache(registry, "r", IMAGE_DIGEST, store, artifact, None)
    local = LayoutStore(tmp_path / "node-store")

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(LayoutStore, "_list", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), local, None)
    layer = json.loads(store.read_blob(artifact))["layers"][0]["digest"]
    assert layer.removeprefix("sha256:") not in _blobs_left(local)
    assert all(not name.endswith(".tmp") for name in _blobs_left(local))
    monkeypatch.undo()
    fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), local, None)
    assert local.restore(make_key(), tmp_path / "restored", tmp_path).matched


def test_a_damaged_copy_in_the_node_store_is_fetched_again_not_trusted(tmp_path, packed):
    store, artifact = packed
    registry = memory_registry(True)
    attach_kernel_cache(registry, "r", IMAGE_DIGEST, store, artifact, None)
    local = LayoutStore(tmp_path / "node-store")
    fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), local, None)
    layer = json.loads(store.read_blob(artifact))["layers"][0]["digest"]
    path = local.blob_path(layer)
    path.write_bytes(b"\0" * path.stat().st_size)
    fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), local, None)
    assert path.read_bytes() == registry.blobs[layer]
    assert local.restore(make_key(), tmp_path / "restored", tmp_path).matched


def test_a_layer_file_of_another_size_than_its_manifest_is_not_attached(tmp_path, packed):
    store, artifact = packed
    layer = json.loads(store.read_blob(artifact))["layers"][0]
    with open(store.blob_path(layer["digest"]), "ab") as fh:
        fh.write(b"more")
    with pytest.raises(KernelCacheError, match=rf"layer {layer['digest'][:19]} is not a file of the {layer['size']} "
                                               "bytes its manifest declares$"):
        attach_kernel_cache(memory_registry(True), "r", IMAGE_DIGEST, store, artifact, None)


def test_the_same_cache_packs_to_the_same_layer(tmp_path, packed):
    """Reproducible gzip (no name, mtime 0 in its header): packing the same files again, later, into another store,
    gives the same digest, so a re-attach uploads nothing. A file's own time is part of the layer (ninja needs
    it): the same file touched packs to another."""
    import os
    import tarfile
    import time

    store, artifact = packed
    first = json.loads(store.read_blob(artifact))["layers"][0]
    time.sleep(0.01)
    again = LayoutStore(tmp_path / "other-store")
    second = json.loads(again.read_blob(again.put(make_key(), tmp_path / "cache").manifest_digest))["layers"][0]
    assert second == first
    header = again.blob_path(first["digest"]).read_bytes()[:10]
    assert header[3] == 0 and header[4:8] == b"\0\0\0\0"  # no FNAME flag, MTIME 0
    with tarfile.open(again.blob_path(first["digest"])) as tar:
        assert tar.getnames() == ["triton/k/a.cubin"]
    cubin = tmp_path / "cache" / "triton" / "k" / "a.cubin"
    os.utime(cubin, ns=(cubin.stat().st_mtime_ns + 1, cubin.stat().st_mtime_ns + 1))
    touched = LayoutStore(tmp_path / "touched")
    assert json.loads(touched.read_blob(touched.put(make_key(), tmp_path / "cache").manifest_digest))["layers"][0][
        "digest"] != first["digest"]


@pytest.mark.parametrize("layer", [{"digest": "sha256:../../../etc/passwd", "size": 1},
                                   {"digest": "md5:" + "0" * 32, "size": 1}, {"size": 1},
                                   {"digest": "sha256:" + "0" * 64, "size": -1}],
                         ids=["path-in-digest", "not-sha256", "no-digest", "negative-size"])
def test_a_registry_manifest_naming_no_usable_layer_fetches_nothing_in_one_line(tmp_path, packed, layer):
    store, artifact = packed
    registry = memory_registry(True)
    attach_kernel_cache(registry, "r", IMAGE_DIGEST, store, artifact, None)
    digest = next(d for d, (_, body) in registry.manifests.items() if "layers" in json.loads(body)
                  and json.loads(body)["layers"] and d != IMAGE_DIGEST)
    body = json.loads(registry.manifests[digest][1])
    body["layers"] = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer}]
    del registry.manifests[digest]
    registry.put_manifest("r", compute_digest(json.dumps(body).encode()), json.dumps(body).encode(), OCI_MANIFEST)
    local = LayoutStore(tmp_path / "node-store")
    with pytest.raises(KernelCacheError) as info:
        fetch_kernel_cache(registry, "r", IMAGE_DIGEST, make_key(), local, None)
    assert str(info.value).endswith("its manifest names no layer to restore; not restored")
    assert not (tmp_path / "node-store").exists() and not (tmp_path / "etc").exists()


def test_a_transfer_moves_its_progress_bar_by_whole_mib():
    from sglstack.attest.kernelcache import _bar, _mib

    class Steps:
        def __init__(self) -> None:
            self.advanced: list[int] = []

        def advance(self, steps: int = 1) -> None:
            self.advanced.append(steps)

    steps = Steps()
    moved = _bar(steps)  # type: ignore[arg-type]
    for done in (1000, 1 << 20, (1 << 20) + 5, 5 << 20, (5 << 20) + 1):
        moved(done)
    assert steps.advanced == [1, 4] and sum(steps.advanced) == 5
    assert (_mib(0), _mib(1), _mib(1 << 20), _mib((1 << 20) + 1)) == (1, 1, 1, 2)
