"""Kernel caches in a registry: the smoke's artifact attached to the tested image digest beside its SBOM and
signature, signed the same way (ed25519 DSSE, the release's key), and fetched back by deploy.

The artifact is `kernelcache.layout`'s manifest with the image manifest as its `subject`: its config is the key,
its layer the cache. The signature is a DSSE envelope whose payload (`signing.signed_payload`) names the image
digest and the cache artifact's manifest by digest and size (so the key and the layer, which the manifest names
by digest, are covered), attached as its own artifact beside it. A registry without the referrers API gets tags
instead: `sha256-<image hex>.kcache-<key hex16>` and `....sig`, one per key, so caches of two GPUs coexist.

Fetching takes only the artifact whose key is exactly the deployment's; with a public key it must be signed
by it for this image. Anything else restores nothing and says why in one line: the server starts cold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..core import labels as lb
from ..core.errors import RegistryError, one_line
from ..core.inputs import loads
from ..core.progress import Steps, progress
from ..kernelcache import ARTIFACT_TYPE, CacheKey, KernelCacheError, LayoutStore, artifact_manifest, mismatch_line
from ..kernelcache.layout import MAX_CACHE_BYTES, MAX_MANIFEST_BYTES
from ..registry.client import OCI_MANIFEST, ManifestNotFound, RegistryClient, compute_digest
from ..registry.session import RegistryAuthError
from .errors import NotVerified
from .signing import (
    Attached,
    key_id,
    load_public_key,
    open_envelope,
    sign_envelope,
    signed_attestations,
    signed_payload,
)
from .store import EMPTY_BLOB, EMPTY_DIGEST, EMPTY_MEDIA_TYPE, KIND_ANNOTATION

SIGNATURE_ARTIFACT_TYPE = "application/vnd.sglstack.kernel-cache.signature.v1+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
KIND = "kernel-cache"
CACHE_ANNOTATION = lb.KERNEL_CACHE_ARTIFACT_ANNOTATION


def cache_tag(image_digest: str, key: CacheKey) -> str:
    """The tag-scheme name of an image's kernel cache for `key`."""
    return f"sha256-{image_digest.removeprefix('sha256:')}.kcache-{key.digest().removeprefix('sha256:')[:16]}"


def _signature_manifest(envelope_digest: str, size: int, image: dict[str, object], cache_digest: str) -> bytes:
    body = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": SIGNATURE_ARTIFACT_TYPE,
            "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_BLOB)},
            "layers": [{"mediaType": DSSE_MEDIA_TYPE, "digest": envelope_digest, "size": size}],
            "subject": image,
            "annotations": {KIND_ANNOTATION: "kernel-cache-signature", CACHE_ANNOTATION: cache_digest}}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def attach_kernel_cache(client: RegistryClient, repo: str, image_digest: str, store: LayoutStore, artifact: str,
                        key: Ed25519PrivateKey | None) -> str:
    """Push the store's `artifact` (a manifest digest) as a kernel cache of `image_digest`, signed with `key`
    (None: unsigned, said in the line returned). Its key must name this image."""
    manifest = loads(store.read_blob(artifact))
    cache_key = CacheKey.from_dict(loads(store.read_blob(manifest["config"]["digest"])))
    if cache_key.image != image_digest:
        raise KernelCacheError(f"kernel cache {artifact[:19]} was made for {cache_key.image[:19]}, not "
                               f"{image_digest[:19]}")
    layer_digest, size = store.layer_of(artifact, manifest)
    if size > MAX_CACHE_BYTES:
        raise KernelCacheError(f"kernel cache {artifact[:19]}: its layer is {size} bytes, over the "
                               f"{MAX_CACHE_BYTES}-byte limit; not attached")
    layer_path = store.layer_file(layer_digest, size)
    image = client.get_manifest(repo, image_digest)
    subject = {"mediaType": image.media_type, "digest": image.digest, "size": len(image.body)}
    client.put_blob(repo, cache_key.canonical())
    with progress(f"kernel cache {layer_digest[:19]}: upload (MiB)", total=_mib(size)) as steps:
        # streamed; the registry checks its digest
        client.push_blob_file(repo, layer_path, layer_digest, size, progress=_bar(steps))
    files = int(manifest.get("annotations", {}).get(lb.KERNEL_CACHE_FILES_ANNOTATION, "0"))
    body = artifact_manifest(cache_key, layer_digest, size, files, subject)
    digest, indexed = client.put_artifact(repo, compute_digest(body), body, OCI_MANIFEST)
    tag = cache_tag(image_digest, cache_key)
    if not indexed:
        client.put_artifact(repo, tag, body, OCI_MANIFEST)
    signed = "UNSIGNED"
    if key is not None:
        envelope = sign_envelope(key, signed_payload(image_digest, [Attached(KIND, ARTIFACT_TYPE, digest, len(body))]))
        client.put_blob(repo, EMPTY_BLOB)
        client.put_blob(repo, envelope)
        sig = _signature_manifest(compute_digest(envelope), len(envelope), subject, digest)
        _, sig_indexed = client.put_artifact(repo, compute_digest(sig), sig, OCI_MANIFEST)
        if not sig_indexed:
            client.put_artifact(repo, tag + ".sig", sig, OCI_MANIFEST)
        signed = f"signed by key {key_id(key.public_key())[:16]}"
    return (f"attached kernel cache {digest[:19]} ({files} files, {size} bytes; key {cache_key.digest()[:19]}: "
            f"{cache_key.gpu_name}, CC {cache_key.compute_capability}, tp {cache_key.tp_size}) to "
            f"{repo}@{image_digest[:19]}; {signed}")


@dataclass(frozen=True)
class Found:
    manifest_digest: str
    key: CacheKey
    manifest: dict[str, object]
    body: bytes


def find_kernel_caches(client: RegistryClient, repo: str, image_digest: str) -> Iterator[Found]:
    """Each readable kernel-cache artifact of the image: by the referrers API, and by the tag scheme."""
    digests: list[str] = []
    for desc in client.referrers(repo, image_digest) or []:
        if desc.get("artifactType") == ARTIFACT_TYPE and isinstance(desc.get("digest"), str):
            digests.append(desc["digest"])
    prefix = f"sha256-{image_digest.removeprefix('sha256:')}.kcache-"
    try:
        tags = [t for t in client.list_tags(repo) if t.startswith(prefix) and not t.endswith(".sig")]
    except RegistryAuthError:
        # No credentials, or refused: said as such, not read as "no cache attached". (distribution 2.x
        # answers the referrers route 404 before it asks for credentials: this is where a 401 shows.)
        raise
    except RegistryError:
        tags = []
    for tag in tags:
        if (digest := client.manifest_digest(repo, tag)) is not None:
            digests.append(digest)
    for digest in dict.fromkeys(digests):
        try:
            found = client.get_manifest(repo, digest)
            manifest = found.json()
            subject = manifest.get("subject")
            if isinstance(subject, dict) and subject.get("digest") != image_digest:
                continue  # a cache of another image under this one's tag: never used for this one
            config = client.get_blob(repo, manifest["config"]["digest"], max_bytes=MAX_MANIFEST_BYTES)
            yield Found(found.digest, CacheKey.from_dict(loads(config)), manifest, found.body)
        except (RegistryError, ManifestNotFound, KeyError, TypeError, ValueError):
            continue  # not ours, or unreadable: it restores nothing


def _signed_by(client: RegistryClient, repo: str, image_digest: str, found: Found, public: Ed25519PublicKey) -> bool:
    """Whether a signature by `public` names this image and exactly this cache artifact."""
    candidates: list[str] = [d["digest"] for d in client.referrers(repo, image_digest) or []
                             if d.get("artifactType") == SIGNATURE_ARTIFACT_TYPE and isinstance(d.get("digest"), str)]
    tag = cache_tag(image_digest, found.key) + ".sig"
    if (by_tag := client.manifest_digest(repo, tag)) is not None:
        candidates.append(by_tag)
    for digest in dict.fromkeys(candidates):
        try:
            manifest = client.get_manifest(repo, digest).json()
            layer = manifest["layers"][0]
            payload = open_envelope(client.get_blob(repo, layer["digest"], max_bytes=MAX_MANIFEST_BYTES), public)
            signed_image, attached = signed_attestations(payload)
        except (RegistryError, ManifestNotFound, NotVerified, KeyError, TypeError, IndexError):
            continue
        if signed_image == image_digest and any(a.kind == KIND and a.digest == found.manifest_digest
                                                and a.size == len(found.body) for a in attached):
            return True
    return False


def fetch_kernel_cache(client: RegistryClient, repo: str, image_digest: str, want: CacheKey, store: LayoutStore,
                       public: Ed25519PublicKey | None) -> str:
    """Copy the image's kernel cache of exactly `want` into the local `store` (restored from there); the
    returned line says what was found. Raises KernelCacheError (one line) when none can be used."""
    nearest: tuple[int, Found] | None = None
    for found in find_kernel_caches(client, repo, image_digest):
        differences = want.differences(found.key)
        if differences:
            if nearest is None or len(differences) < nearest[0]:
                nearest = (len(differences), found)
            continue
        if public is not None and not _signed_by(client, repo, image_digest, found, public):
            raise KernelCacheError(f"kernel cache {found.manifest_digest[:19]}: not signed for {image_digest[:19]} "
                                   f"by key {key_id(public)[:16]}; starting cold")
        _import(client, repo, found, store)
        return f"kernel cache {found.manifest_digest[:19]} fetched from {repo} (key {want.digest()[:19]} matched)"
    if nearest is None:
        raise KernelCacheError(f"kernel cache: none attached to {repo}@{image_digest[:19]}; starting cold")
    raise KernelCacheError(one_line(mismatch_line(want, nearest[1].key)))


def _import(client: RegistryClient, repo: str, found: Found, store: LayoutStore) -> None:
    """Stream the artifact's layer into `store` (its declared size checked against the limit before the
    request, its digest before it is kept), then its key and manifest; a failure or a signal after the
    layer was fetched takes it out again, so the store holds the whole artifact or nothing new."""
    layer_digest, size = store.layer_of(found.manifest_digest, found.manifest)
    if size > MAX_CACHE_BYTES:
        raise KernelCacheError(f"kernel cache {found.manifest_digest[:19]}: its layer is declared {size} bytes, "
                               f"over the {MAX_CACHE_BYTES}-byte limit; starting cold")
    with progress(f"kernel cache {layer_digest[:19]}: download (MiB)", total=_mib(size)) as steps:
        fetched = store.fetch_layer(layer_digest, size, lambda fh: client.fetch_blob_to(
            repo, layer_digest, size, fh, limit=MAX_CACHE_BYTES, progress=_bar(steps)))
    try:
        store.import_artifact(found.key, found.body)
    except BaseException:
        if fetched:
            store.remove_blob(layer_digest)
        raise


def _mib(size: int) -> int:
    return max(1, -(-size // (1024 * 1024)))


def _bar(steps: Steps) -> Callable[[int], None]:
    """A transfer's bytes so far as whole MiB on the progress bar (nothing drawn when stderr is not a terminal)."""
    shown = [0]

    def moved(done: int) -> None:
        now = done // (1024 * 1024)
        if now > shown[0]:
            steps.advance(now - shown[0])
            shown[0] = now
    return moved


def fetch_from_registry(registry: str, repo: str, image_digest: str, want: CacheKey, store: LayoutStore,
                        verify_key: str | None) -> str:
    """`fetch_kernel_cache` from `registry` (credentials as every registry call finds them), trusting only
    signatures by the public key file `verify_key` when one is given."""
    public = load_public_key(verify_key) if verify_key else None
    return fetch_kernel_cache(RegistryClient.from_environment(registry), repo, image_digest, want, store, public)


GPU_FIELDS = ("gpu_name", "compute_capability", "driver_major")


def node_candidates(registry: str, repo: str, image_digest: str, want: CacheKey, verify_key: str | None
                    ) -> tuple[str, list[dict[str, object]]]:
    """For a deployment whose nodes' GPU only the nodes know (Kubernetes): the blob URL of the repository and
    each kernel cache of the image whose key is `want` in every field but the GPU's (signed by `verify_key`'s
    key when given), as the init container picks among them (`inimage/incontainer/kernelcache_init.py`)."""
    public = load_public_key(verify_key) if verify_key else None
    client = RegistryClient.from_environment(registry)
    out: list[dict[str, object]] = []
    for found in find_kernel_caches(client, repo, image_digest):
        if set(want.differences(found.key)) - set(GPU_FIELDS):
            continue
        if public is not None and not _signed_by(client, repo, image_digest, found, public):
            continue
        layer = found.manifest["layers"][0]  # type: ignore[index]
        out.append({"artifact": found.manifest_digest, "layer": layer["digest"], "size": layer["size"],
                    **{f: getattr(found.key, f) for f in GPU_FIELDS}})
    return f"{client.scheme}://{client.api_host}/v2/{repo}/blobs/", out
