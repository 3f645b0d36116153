# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""The kernel-cache artifact in a real registry (distribution 2.8: no referrers API, so the tag scheme), attached
to an image the Docker engine pushed there: signed, fetched back by exactly the deployment's key, refused when
the key differs, the signature is missing or forged, or a blob was changed in the registry's storage; and the
path `invoke deploy --kernel-cache` (compose) restores through, `restore_for_compose`, end to end."""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from registry_fixtures import plain_registry, tiny_image  # noqa: F401 - fixtures

from sglstack.attest.kernelcache import attach_kernel_cache, cache_tag, fetch_kernel_cache
from sglstack.attest.signing import key_id
from sglstack.config.imageref import Repository
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import RegistryError
from sglstack.deploy.kernelcache import deployment_key, k8s_caches, restore_for_compose, smoke_store
from sglstack.kernelcache import ARTIFACT_TYPE, KernelCacheError, LayoutStore, NodeGpu, cache_files
from sglstack.publish import push_candidate
from sglstack.registry.client import OCI_MANIFEST, RegistryClient, compute_digest
from sglstack.render.compose import ComposeOptions, deploy_spec

pytestmark = pytest.mark.docker
STACK = "cpu-test"


@pytest.fixture(scope="module")
def pushed(plain_registry, tiny_image, docker_client):
    """(client, repository, digest) of a small image the engine pushed to the real registry."""
    repo = Repository(plain_registry.host, f"sglstack-test/kcache-{secrets.token_hex(3)}")
    client = RegistryClient.from_environment(repo.registry)
    digest = push_candidate(docker_client, tiny_image, repo, "cand", client)
    return client, repo, digest


@pytest.fixture(scope="module")
def spec(repo_root):
    stack = load_matrix(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml").get(STACK)
    return deploy_spec(stack, ComposeOptions(kernel_cache=True))


def signer(folder: Path) -> tuple[Ed25519PrivateKey, Path]:
    key = Ed25519PrivateKey.generate()
    public = folder / f"{key_id(key.public_key())[:8]}.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, public


def packed(tmp_path: Path, key) -> tuple[LayoutStore, str, bytes]:
    """A smoke's store holding one artifact of `key`; its cache holds a file unique to this test (so its
    layer blob is the test's own in the registry's shared blob store)."""
    folder = tmp_path / "made"
    (folder / "triton" / "k").mkdir(parents=True)
    content = b"kernel-" + secrets.token_hex(8).encode()
    (folder / "triton" / "k" / "a.cubin").write_bytes(content)
    store = LayoutStore(tmp_path / "smoke-store")
    return store, store.put(key, folder).manifest_digest, content


def test_attached_by_tag_signed_and_fetched_by_exactly_the_deployments_key(pushed, spec, tmp_path):
    client, repo, digest = pushed
    key = deployment_key(spec, digest, NodeGpu())
    store, artifact, content = packed(tmp_path, key)
    release, _ = signer(tmp_path)
    line = attach_kernel_cache(client, repo.path, digest, store, artifact, release)
    assert line.endswith(f"to {repo.path}@{digest[:19]}; signed by key {key_id(release.public_key())[:16]}")
    # distribution 2.8 has no referrers API: the artifact and its signature are found by their tags.
    assert client.referrers(repo.path, digest) is None
    tag = cache_tag(digest, key)
    assert {tag, tag + ".sig"} <= set(client.list_tags(repo.path))
    stored = client.get_manifest(repo.path, tag)
    manifest = stored.json()
    assert (stored.media_type, manifest["artifactType"]) == (OCI_MANIFEST, ARTIFACT_TYPE)
    assert manifest["subject"]["digest"] == digest  # the registry kept the subject as it was sent
    assert json.loads(client.get_blob(repo.path, manifest["config"]["digest"])) == key.to_dict()

    node = LayoutStore(tmp_path / "node-store")
    said = fetch_kernel_cache(client, repo.path, digest, key, node, release.public_key())
    assert said == (f"kernel cache {stored.digest[:19]} fetched from {repo.path} (key {key.digest()[:19]} "
                    "matched)")
    restored = node.restore(key, tmp_path / "restored", tmp_path)
    assert restored.matched and restored.manifest_digest == stored.digest
    assert (tmp_path / "restored" / "triton" / "k" / "a.cubin").read_bytes() == content


@pytest.mark.parametrize(("field", "value"), [("compute_capability", "10.0"), ("driver_major", "590"),
                                              ("serving_hash", "sha256:" + "0" * 64)])
def test_a_key_differing_in_one_field_fetches_nothing_in_one_line(pushed, spec, tmp_path, field, value):
    client, repo, digest = pushed
    key = deployment_key(spec, digest, NodeGpu())
    store, artifact, _ = packed(tmp_path, key)
    attach_kernel_cache(client, repo.path, digest, store, artifact, None)
    node = LayoutStore(tmp_path / "node-store")
    with pytest.raises(KernelCacheError) as info:
        fetch_kernel_cache(client, repo.path, digest, replace(key, **{field: value}), node, None)
    said = str(info.value)
    assert said.startswith(f"kernel cache: key differs in {field}: this start has '{value[:20]}")
    assert said.endswith("; starting cold") and "\n" not in said
    assert not (tmp_path / "node-store").exists()  # nothing fetched


def test_an_unsigned_a_foreign_signed_or_a_swapped_artifact_is_refused(pushed, spec, tmp_path):
    client, repo, digest = pushed
    key = deployment_key(spec, digest, NodeGpu())
    (tmp_path / "keys").mkdir()
    release, _ = signer(tmp_path / "keys")
    other, _ = signer(tmp_path / "keys")
    node = LayoutStore(tmp_path / "node-store")
    refused = rf"^kernel cache sha256:\w{{12}}: not signed for {digest[:19]} by key \w{{16}}; starting cold$"

    # Each case has its own key (another TP size), so its tags are its own in the shared repository.
    for n, (signing, case) in enumerate([(None, "unsigned"), (other, "another key's"), (release, "swapped")]):
        case_key = replace(key, tp_size=10 + n)
        store, artifact, _ = packed(tmp_path / case.replace(" ", "-").replace("'", ""), case_key)
        attach_kernel_cache(client, repo.path, digest, store, artifact, signing)
        if case == "swapped":
            # Someone with push rights moves the artifact's tag to a cache of their own with the same key:
            # the release's signature names the artifact it signed, by digest, so this one is refused.
            folder = tmp_path / "evil"
            (folder / "triton").mkdir(parents=True)
            (folder / "triton" / "a.cubin").write_bytes(b"not the kernel that was signed")
            evil = LayoutStore(tmp_path / "evil-store")
            forged = evil.read_blob(evil.put(case_key, folder).manifest_digest)
            body = json.loads(forged)
            body["subject"] = client.get_manifest(repo.path, cache_tag(digest, case_key)).json()["subject"]
            client.put_blob(repo.path, evil.read_blob(body["layers"][0]["digest"]))
            forged = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
            client.put_manifest(repo.path, cache_tag(digest, case_key), forged, OCI_MANIFEST)
            assert client.manifest_digest(repo.path, cache_tag(digest, case_key)) == compute_digest(forged)
        with pytest.raises(KernelCacheError, match=refused):
            fetch_kernel_cache(client, repo.path, digest, case_key, node, release.public_key())
        assert not (tmp_path / "node-store").exists(), case


def registry_blob(registry, digest: str) -> Path:
    hexpart = digest.removeprefix("sha256:")
    return registry.workdir / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexpart[:2] / hexpart / \
        "data"


def test_a_layer_changed_in_the_registrys_storage_is_refused_by_its_digest(pushed, spec, plain_registry,
                                                                             tmp_path):
    client, repo, digest = pushed
    key = deployment_key(spec, digest, NodeGpu())  # the deployment's: its tag now names this test's artifact
    store, artifact, _ = packed(tmp_path, key)
    attach_kernel_cache(client, repo.path, digest, store, artifact, None)
    layer = json.loads(store.read_blob(artifact))["layers"][0]["digest"]
    blob = registry_blob(plain_registry, layer)
    original = blob.read_bytes()
    changed = bytearray(original)
    changed[len(changed) // 2] ^= 0xFF  # same size: the registry serves it under the old digest as it is
    blob.write_bytes(bytes(changed))
    try:
        node = LayoutStore(tmp_path / "node-store")
        with pytest.raises(RegistryError) as info:
            fetch_kernel_cache(client, repo.path, digest, key, node, None)
        assert str(info.value) == (f"registry {repo.registry}: blob {repo.path}@{layer} content does not match "
                                   "its digest")
        assert not (tmp_path / "node-store" / "index.json").exists()
        # Through deploy's path: one line, an empty folder for the volume, and nothing kept in the store.
        out = tmp_path / "deploy" / STACK
        line = restore_for_compose(tmp_path / "deploy", STACK, out, spec, repo.ref(digest), digest, local=True,
                                   verify_key=None, say=lambda _line: None)
        assert line == (f"kernel cache: not fetched (registry {repo.registry}: blob {repo.path}@{layer} content "
                        "does not match its digest); starting cold")
        assert cache_files(out / "kernel-cache-restored") == {}
        assert list(smoke_store(tmp_path / "deploy", STACK).artifacts()) == []
    finally:
        blob.write_bytes(original)


def test_deploy_restores_the_attached_cache_through_the_registry_and_then_from_its_store(pushed, spec, tmp_path):
    """`restore_for_compose` (what deploy_compose calls before `up`): nothing in this machine's store, so the
    artifact is fetched from the image's registry by exactly the deployment's key, signed by --verify-key's
    key, kept in the store, and unpacked where the compose file's init service copies from."""
    client, repo, digest = pushed
    key = deployment_key(spec, digest, NodeGpu())
    (tmp_path / "keys").mkdir()
    release, public = signer(tmp_path / "keys")
    other, other_public = signer(tmp_path / "keys")
    smoke = tmp_path / "smoke"  # the machine the smoke ran on: another build root
    store, artifact, content = packed(smoke, key)
    attach_kernel_cache(client, repo.path, digest, store, artifact, release)

    build_root, out = tmp_path / "deploy", tmp_path / "deploy" / STACK
    image_ref = repo.ref(digest)
    said: list[str] = []
    line = restore_for_compose(build_root, STACK, out, spec, image_ref, digest, local=True,
                               verify_key=str(other_public), say=said.append)
    assert line.startswith("kernel cache sha256:") and line.endswith(
        f"not signed for {digest[:19]} by key {key_id(other.public_key())[:16]}; starting cold")
    assert cache_files(out / "kernel-cache-restored") == {}

    line = restore_for_compose(build_root, STACK, out, spec, image_ref, digest, local=True, verify_key=str(public),
                               say=said.append)
    fetched = client.manifest_digest(repo.path, cache_tag(digest, key))
    assert line == (f"kernel cache: restored 1 files from {fetched[:19]} (key {key.digest()[:19]} matched) "
                    f"(kernel cache {fetched[:19]} fetched from {repo.path})")
    assert said[-1] == line
    assert (out / "kernel-cache-restored" / "triton" / "k" / "a.cubin").read_bytes() == content
    # Kept in this machine's store: the next deploy restores without the registry.
    assert [d for d, _, _ in smoke_store(build_root, STACK).artifacts()] == [fetched]
    line = restore_for_compose(build_root, STACK, out, spec, "unreachable.invalid/x@" + digest, digest, local=True,
                               verify_key=str(public), say=said.append)
    assert line == f"kernel cache: restored 1 files from {fetched[:19]} (key {key.digest()[:19]} matched)"


def test_k8s_hands_the_init_container_each_gpus_signed_cache_of_this_deployment_and_no_other(pushed, spec,
                                                                                              tmp_path):
    """`k8s_caches` (what `deploy --on k8s --kernel-cache` renders from): the node's GPU is not known here, so
    every artifact whose key differs only in the GPU's fields is a candidate; another serving argv is not, and
    with --verify-key only those signed by that key for this image are."""
    client, repo, digest = pushed
    key = deployment_key(spec, digest, NodeGpu())
    (tmp_path / "keys").mkdir()
    release, public = signer(tmp_path / "keys")
    _, other_public = signer(tmp_path / "keys")
    gpus = {"h200": NodeGpu("NVIDIA H200", "9.0", "580"), "b200": NodeGpu("NVIDIA B200", "10.0", "580")}
    for name, gpu in gpus.items():
        gpu_key = replace(key, gpu_name=gpu.name, compute_capability=gpu.compute_capability,
                          driver_major=gpu.driver_major)
        store, artifact, _ = packed(tmp_path / name, gpu_key)
        attach_kernel_cache(client, repo.path, digest, store, artifact, release)
    argv_key = replace(key, gpu_name="NVIDIA H200", serving_hash="sha256:" + "1" * 64)  # signed, another argv
    store, artifact, _ = packed(tmp_path / "argv", argv_key)
    attach_kernel_cache(client, repo.path, digest, store, artifact, release)
    a100 = replace(key, gpu_name="NVIDIA A100", compute_capability="8.0")
    store, artifact, _ = packed(tmp_path / "unsigned", a100)
    attach_kernel_cache(client, repo.path, digest, store, artifact, None)

    said: list[str] = []
    found = k8s_caches(spec, repo.ref(digest), str(public), said.append)
    assert found.blobs_url == f"http://{repo.registry}/v2/{repo.path}/blobs/"
    # Only this key signed these two (the other tests' artifacts in the repository have other signers): not
    # the H200 one of another argv, not the unsigned A100 one.
    assert sorted(c["gpu_name"] for c in found.candidates) == ["NVIDIA B200", "NVIDIA H200"]
    by_gpu = {c["gpu_name"]: c for c in found.candidates}
    assert by_gpu["NVIDIA B200"]["compute_capability"] == "10.0"
    for cand in found.candidates:  # each layer is there to download by digest, and is the artifact's own
        manifest = client.get_manifest(repo.path, cand["artifact"]).json()
        assert manifest["layers"][0]["digest"] == cand["layer"] and client.blob_exists(repo.path, cand["layer"])
        key_found = json.loads(client.get_blob(repo.path, manifest["config"]["digest"]))
        assert key_found["serving_hash"] == key.serving_hash
    assert said[-1].startswith(f"kernel cache: {len(found.candidates)} artifact(s) of {digest[:19]} match")
    assert k8s_caches(spec, repo.ref(digest), str(other_public), said.append).candidates == ()
    assert said[-1].startswith(f"kernel cache: 0 artifact(s) of {digest[:19]} match this deployment (GPUs: none)")
    assert {c["gpu_name"] for c in k8s_caches(spec, repo.ref(digest), None, said.append).candidates} >= {
        "NVIDIA H200", "NVIDIA B200", "NVIDIA A100"}
