# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""A large kernel cache through the real distribution registry (2.8), streamed: packed, attached, fetched and
restored with the memory they take measured (tracemalloc) against the layer's size; and the restore attacked as a
user who may be handed anything: a layer cut short or longer than its manifest says, a size over the limit, a
Ctrl-C in the middle of the download, a cache made for another image under this image's tag. Each is one line,
the server starts cold, and the node's store keeps nothing of it (no partial blob, no temp file)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from registry_fixtures import plain_registry  # noqa: F401 - fixture
from waits import sigint_once_written

from sglstack.attest import kernelcache as akc
from sglstack.attest.kernelcache import attach_kernel_cache, cache_tag, fetch_kernel_cache
from sglstack.config.imageref import Repository
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import RegistryError
from sglstack.deploy.kernelcache import deployment_key, restore_for_compose, smoke_store
from sglstack.kernelcache import CacheKey, KernelCacheError, LayoutStore, NodeGpu, cache_files
from sglstack.kernelcache import layout as kernel_layout
from sglstack.registry.client import OCI_MANIFEST, RegistryClient, compute_digest
from sglstack.render.compose import ComposeOptions, deploy_spec

MIB = 1024 * 1024
LARGE_MIB = 64
STACK = "cpu-test"


def push_image(client: RegistryClient, repo: str) -> str:
    """A small image manifest of its own (a config and one layer), pushed by the client: its digest."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "nonce": secrets.token_hex(8)}).encode()
    layer = secrets.token_bytes(64)
    client.put_blob(repo, config)
    client.put_blob(repo, layer)
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": compute_digest(config), "size": len(config)},
                       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                   "digest": compute_digest(layer), "size": len(layer)}]}).encode()
    return client.put_manifest(repo, "image-" + secrets.token_hex(4), body, OCI_MANIFEST)


@pytest.fixture(scope="module")
def spec(repo_root):
    stack = load_matrix(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml").get(STACK)
    return deploy_spec(stack, ComposeOptions(kernel_cache=True))


@pytest.fixture(scope="module")
def large(plain_registry, spec, tmp_path_factory) -> dict[str, Any]:
    """A 64 MiB cache of random bytes (incompressible: the layer is as large), packed and attached to an image,
    with the memory each step took."""
    tmp = tmp_path_factory.mktemp("kc-large")
    client = RegistryClient.from_environment(plain_registry.host)
    repo = Repository(plain_registry.host, f"sglstack-test/kc-stream-{secrets.token_hex(3)}")
    digest = push_image(client, repo.path)
    key = deployment_key(spec, digest, NodeGpu())
    folder = tmp / "cache"
    (folder / "deep_gemm").mkdir(parents=True)
    sums = {}
    for n in range(LARGE_MIB // 8):
        h = hashlib.sha256()
        with open(folder / "deep_gemm" / f"kernel-{n}.cubin", "wb") as fh:
            for _ in range(8):
                chunk = os.urandom(MIB)
                h.update(chunk)
                fh.write(chunk)
        sums[f"deep_gemm/kernel-{n}.cubin"] = h.hexdigest()
    store = LayoutStore(tmp / "smoke-store")
    packed, pack_peak = peak_of(lambda: store.put(key, folder))
    line, attach_peak = peak_of(lambda: attach_kernel_cache(client, repo.path, digest, store, packed.manifest_digest,
                                                            None))
    return {"client": client, "repo": repo, "digest": digest, "key": key, "sums": sums, "packed": packed,
            "store": store, "peaks": {"pack": pack_peak, "attach": attach_peak}, "line": line, "tmp": tmp}


def peak_of(step: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        return step(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def file_sums(folder: Path) -> dict[str, str]:
    out = {}
    for rel in cache_files(folder):
        h = hashlib.sha256()
        with open(folder / rel, "rb") as fh:
            while chunk := fh.read(MIB):
                h.update(chunk)
        out[rel] = h.hexdigest()
    return out


def left_in(store: LayoutStore) -> list[str]:
    """Every file the store holds (a temp file or a partial blob would be one)."""
    if not store.path.exists():
        return []
    return sorted(str(p.relative_to(store.path)) for p in store.path.rglob("*") if not p.is_dir())


def registry_blob(registry, digest: str) -> Path:
    hexpart = digest.removeprefix("sha256:")
    return registry.workdir / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexpart[:2] / hexpart / \
        "data"


def test_a_64_mib_layer_is_packed_attached_fetched_and_restored_in_bounded_memory(large, tmp_path):
    client, repo, digest, key = large["client"], large["repo"], large["digest"], large["key"]
    size = large["packed"].layer_size
    assert size > LARGE_MIB * MIB  # random bytes do not compress: the layer is the cache's size
    assert large["line"].startswith("attached kernel cache sha256:") and f"{size} bytes" in large["line"]
    # The registry holds exactly the layer, under the tag scheme's name.
    manifest = client.get_manifest(repo.path, cache_tag(digest, key)).json()
    assert manifest["layers"][0] == {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                     "digest": manifest["layers"][0]["digest"], "size": size}
    assert client.blob_size(repo.path, manifest["layers"][0]["digest"]) == size

    node = LayoutStore(tmp_path / "node-store")
    said, fetch_peak = peak_of(lambda: fetch_kernel_cache(client, repo.path, digest, key, node, None))
    assert said.endswith(f"(key {key.digest()[:19]} matched)")
    done, restore_peak = peak_of(lambda: node.restore(key, tmp_path / "restored", tmp_path))
    assert done.matched and done.files == LARGE_MIB // 8
    assert file_sums(tmp_path / "restored") == large["sums"]
    peaks = {**large["peaks"], "fetch": fetch_peak, "restore": restore_peak}
    # Each step holds a few MiB at most (1 MiB reads, gzip's window, the HTTP buffers), not the layer: 1/8 of it
    # is already far above what streaming takes and far below a layer held whole (1x, 2.6x before).
    assert max(peaks.values()) < size / 8, {k: v // 1024 for k, v in peaks.items()}
    # Packing the same cache again gives the same layer (reproducible gzip): attaching it again sends nothing.
    again = LayoutStore(tmp_path / "again").put(key, large["tmp"] / "cache")
    assert again.layer_size == size
    assert json.loads(LayoutStore(tmp_path / "again").read_blob(again.manifest_digest))["layers"] == manifest["layers"]
    assert client.push_blob_file(repo.path, large["store"].blob_path(manifest["layers"][0]["digest"]),
                                 manifest["layers"][0]["digest"], size) is False


def test_ctrl_c_in_the_middle_of_the_download_leaves_nothing_in_the_store(large, tmp_path, monkeypatch):
    client, repo, digest, key = large["client"], large["repo"], large["digest"], large["key"]
    node = LayoutStore(tmp_path / "node-store")
    with pytest.raises(KeyboardInterrupt), sigint_once_written(monkeypatch, kernel_layout, MIB):
        fetch_kernel_cache(client, repo.path, digest, key, node, None)  # DID NOT RAISE: it ended unseen
    assert left_in(node) == [] or left_in(node) == ["oci-layout"], left_in(node)
    # The next try starts clean and restores.
    fetch_kernel_cache(client, repo.path, digest, key, node, None)
    assert node.restore(key, tmp_path / "restored", tmp_path).matched


def test_a_layer_cut_short_in_the_registry_is_refused_and_deploy_starts_cold(large, plain_registry, spec, tmp_path):
    client, repo, digest, key = large["client"], large["repo"], large["digest"], large["key"]
    layer = large["packed"]
    layer_digest = json.loads(large["store"].read_blob(layer.manifest_digest))["layers"][0]["digest"]
    blob = registry_blob(plain_registry, layer_digest)
    original_size = blob.stat().st_size
    with open(blob, "r+b") as fh:
        kept_tail = (fh.seek(original_size // 2), fh.read())[1]
        fh.truncate(original_size // 2)
    try:
        node = LayoutStore(tmp_path / "node-store")
        with pytest.raises(RegistryError) as info:
            fetch_kernel_cache(client, repo.path, digest, key, node, None)
        assert str(info.value) == (f"registry {repo.registry}: blob {repo.path}@{layer_digest} is "
                                   f"{original_size // 2} bytes, not the {original_size} its manifest declares")
        assert left_in(node) in ([], ["oci-layout"])
        # Through deploy's path: one line, the volume's folder emptied, nothing kept in the store.
        out = tmp_path / "deploy" / STACK
        said: list[str] = []
        line = restore_for_compose(tmp_path / "deploy", STACK, out, spec, repo.ref(digest), digest, local=True,
                                   verify_key=None, say=said.append)
        assert line == f"kernel cache: not fetched ({info.value}); starting cold" and said == [line]
        assert cache_files(out / "kernel-cache-restored") == {}
        assert left_in(smoke_store(tmp_path / "deploy", STACK)) in ([], ["oci-layout"])
    finally:
        with open(blob, "ab") as fh:
            fh.write(kept_tail)
    assert blob.stat().st_size == original_size


def _retagged(large, tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> tuple[LayoutStore, Any]:
    """The large artifact's manifest changed by `change` and put under a key of its own (another TP size), so
    the tag is this test's; (node store, that key)."""
    client, repo, digest = large["client"], large["repo"], large["digest"]
    key = replace(large["key"], tp_size=secrets.randbelow(10_000) + 100)
    body = json.loads(client.get_manifest(repo.path, cache_tag(digest, large["key"])).body)
    client.put_blob(repo.path, key.canonical())
    body["config"] = {**body["config"], "digest": compute_digest(key.canonical()), "size": len(key.canonical())}
    change(body)
    client.put_manifest(repo.path, cache_tag(digest, key), json.dumps(body).encode(), OCI_MANIFEST)
    return LayoutStore(tmp_path / "node-store"), key


def test_a_manifest_that_declares_fewer_bytes_than_its_layer_is_refused(large, tmp_path):
    client, repo, digest = large["client"], large["repo"], large["digest"]
    size = large["packed"].layer_size

    def shrink(body: dict[str, Any]) -> None:
        body["layers"][0]["size"] = size - 1

    node, key = _retagged(large, tmp_path, shrink)
    with pytest.raises(RegistryError, match=rf"is {size} bytes, not the {size - 1} its manifest declares$"):
        fetch_kernel_cache(client, repo.path, digest, key, node, None)
    assert left_in(node) in ([], ["oci-layout"])


def test_a_layer_declared_over_the_limit_is_refused_before_any_download(large, tmp_path, monkeypatch):
    client, repo, digest = large["client"], large["repo"], large["digest"]
    node, key = _retagged(large, tmp_path, lambda body: None)
    monkeypatch.setattr(akc, "MAX_CACHE_BYTES", large["packed"].layer_size - 1)
    asked: list[str] = []
    monkeypatch.setattr(client, "fetch_blob_to", lambda *a, **k: asked.append("GET"))  # must not be reached
    with pytest.raises(KernelCacheError) as info:
        fetch_kernel_cache(client, repo.path, digest, key, node, None)
    assert str(info.value).endswith(f"its layer is declared {large['packed'].layer_size} bytes, over the "
                                    f"{large['packed'].layer_size - 1}-byte limit; starting cold")
    assert asked == [] and left_in(node) == []


def test_a_cache_of_another_image_is_never_used_for_this_one(large, tmp_path):
    """Under the tag this image's deployment reads: an artifact keyed for another image (its subject left as this
    image), and one keyed for this image whose subject is another image. Neither is fetched."""
    client, repo, digest = large["client"], large["repo"], large["digest"]
    other = push_image(client, repo.path)

    def keyed_for_other(body: dict[str, Any]) -> None:
        other_key = replace(CacheKey.from_dict(json.loads(client.get_blob(repo.path, body["config"]["digest"]))),
                            image=other)
        client.put_blob(repo.path, other_key.canonical())
        body["config"] = {**body["config"], "digest": compute_digest(other_key.canonical()),
                          "size": len(other_key.canonical())}

    for case, change in (("key", keyed_for_other), ("subject", lambda b: b["subject"].update(digest=other))):
        node, key = _retagged(large, tmp_path / case, change)
        with pytest.raises(KernelCacheError) as info:
            fetch_kernel_cache(client, repo.path, digest, key, node, None)
        assert "\n" not in str(info.value) and str(info.value).endswith("; starting cold"), case
        assert left_in(node) == [], case


def uploads_left(registry, repo: str) -> list[int]:
    """The sizes of the half-sent blobs distribution keeps for `repo` (each upload's `data`; a cancelled one
    leaves only its 108-byte hash state behind, which distribution's upload purging removes)."""
    folder = registry.workdir / "data" / "docker" / "registry" / "v2" / "repositories" / repo / "_uploads"
    return sorted(p.stat().st_size for p in folder.glob("*/data")) if folder.exists() else []


def test_an_upload_interrupted_after_its_first_chunk_is_cancelled_in_the_registry(plain_registry, tmp_path):
    client = RegistryClient.from_environment(plain_registry.host)
    repo = f"sglstack-test/kc-cancel-{secrets.token_hex(3)}"
    data = os.urandom(4 * MIB)
    (tmp_path / "layer").write_bytes(data)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    def interrupt(done: int) -> None:
        assert uploads_left(plain_registry, repo) == [MIB]  # the registry holds the first chunk now
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        client.push_blob_file(repo, tmp_path / "layer", digest, len(data), chunk_bytes=MIB, progress=interrupt)
    assert uploads_left(plain_registry, repo) == [] and client.blob_size(repo, digest) is None
    assert client.push_blob_file(repo, tmp_path / "layer", digest, len(data), chunk_bytes=MIB) is True
    assert client.blob_size(repo, digest) == len(data) and uploads_left(plain_registry, repo) == []


def test_a_chunk_whose_connection_drops_is_sent_again_from_its_start(plain_registry, tmp_path):
    """The proxy reads the second PATCH and closes without an answer: the retry rewinds the chunk (not the file)
    and the registry, which checks the digest, gets the blob whole."""
    from faultproxy import Fault, FaultProxy

    proxy = FaultProxy(plain_registry.port)
    try:
        fault = proxy.add(Fault("PATCH", r"/blobs/uploads/", "close", nth=2, times=1))
        client = RegistryClient(proxy.host, sleep=lambda _s: None)
        repo = f"sglstack-test/kc-retry-{secrets.token_hex(3)}"
        data = os.urandom(3 * MIB + 5)
        (tmp_path / "layer").write_bytes(data)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        assert client.push_blob_file(repo, tmp_path / "layer", digest, len(data), chunk_bytes=MIB) is True
        assert fault.injected == 1
        assert [m for m, _, _ in proxy.log].count("PATCH") == 5  # four chunks, the second one twice
        out = tmp_path / "back"
        with open(out, "wb") as fh:
            client.fetch_blob_to(repo, digest, len(data), fh, limit=len(data))
        assert out.read_bytes() == data
    finally:
        proxy.close()


def test_the_whole_file_in_one_streamed_put_is_taken_too(plain_registry, tmp_path):
    """`chunk_bytes=0` (what a registry without chunked uploads gets): one PUT whose body is read from the file."""
    client = RegistryClient.from_environment(plain_registry.host)
    repo = f"sglstack-test/kc-put-{secrets.token_hex(3)}"
    data = os.urandom(8 * MIB + 3)
    (tmp_path / "layer").write_bytes(data)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    sent, peak = peak_of(lambda: client.push_blob_file(repo, tmp_path / "layer", digest, len(data), chunk_bytes=0))
    assert sent is True and client.blob_size(repo, digest) == len(data) and peak < 2 * MIB
    # A wrong digest, chunked: refused by the registry, and the upload cancelled (its last state is current).
    # (In one PUT distribution 2.8 keeps the refused bytes: the DELETE's upload state predates them, so it is
    # refused "resumed at wrong offset", and only the registry's upload purging removes them.)
    with pytest.raises(RegistryError, match=r"HTTP 400 DIGEST_INVALID"):
        client.push_blob_file(repo, tmp_path / "layer", "sha256:" + "0" * 64, len(data), chunk_bytes=4 * MIB)
    assert uploads_left(plain_registry, repo) == []
