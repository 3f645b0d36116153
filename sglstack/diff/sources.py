"""What `invoke diff A B` compares: each argument turned into a snapshot (`invoke diff` prints their diff).

An argument is, in this order: a file (a build record `record.json`, or a lock `locks/NAME.txt`), a build
folder holding `record.json`, an image the Docker engine has (tag, id, or `repo@sha256:...`; its labels,
and the facts the build left in `/opt/sglstack/`, read from a created container that never starts), a
bare image id that a build record under the build root names, or an image in a registry (its config
labels, and the same facts read from its top layers through the registry API, without pulling it).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib
from typing import Any

from ..config.imageref import DOCKER_HUB, names_its_registry, not_an_image, parse_image_reference
from ..config.platforms import platform_of_image
from ..core.errors import ConfigError, DockerUnavailable, RegistryError
from ..core.inputs import loads
from ..core.records import build_root
from ..registry.client import RegistryClient
from .compare import Snapshot, image_snapshot
from .platforms import Side
from .snapshots import IMAGE_FACTS, engine_image_platform, local_snapshot

# Registry layers are read top-down looking for those facts; the serving image's last layers are small,
# and a layer this large is torch or CUDA, which holds none of them.
MAX_LAYER_BYTES = 64 * 1024 * 1024
MAX_LAYERS_READ = 12
# A layer is read as a stream (never decompressed whole): memory stays at a block plus the facts kept. A
# small gzip can expand to gigabytes (2 MB of zeros is 2 GB); past this much the rest of it is not read.
MAX_UNCOMPRESSED_BYTES = 512 * 1024 * 1024
MAX_FACT_BYTES = 16 * 1024 * 1024  # one facts file (installed.json of a full image is ~20 KB)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class _LayerTooLarge(Exception):
    pass


class _CappedReader(io.RawIOBase):
    """Reads from `inner`, counting; past `limit` bytes it stops the read (memory is the caller's block)."""

    def __init__(self, inner: Any, limit: int) -> None:
        self.inner, self.left = inner, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(min(len(buffer), self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise _LayerTooLarge
        buffer[:len(data)] = data
        return len(data)


def _facts_in_layer(blob: bytes, *, limit: int = MAX_UNCOMPRESSED_BYTES) -> dict[str, bytes]:
    """The facts files a layer holds. A layer this stdlib cannot read (zstd), or that is not a tar, or that
    expands past `limit`, gives what was found before: diff then knows the image by its labels."""
    wanted = {path.lstrip("/"): name for name, path in IMAGE_FACTS.items()}
    found: dict[str, bytes] = {}
    if blob[:4] == ZSTD_MAGIC:
        return found
    source: Any = io.BytesIO(blob)
    if blob[:2] == GZIP_MAGIC:
        source = gzip.GzipFile(fileobj=source, mode="rb")
    try:
        with tarfile.open(fileobj=io.BufferedReader(_CappedReader(source, limit)), mode="r|") as tar:
            for member in tar:
                name = member.name.lstrip("./")
                if name in wanted and member.isfile() and member.size <= MAX_FACT_BYTES:
                    handle = tar.extractfile(member)
                    if handle is not None:
                        found[wanted[name]] = handle.read()
    except (tarfile.TarError, OSError, EOFError, zlib.error, _LayerTooLarge):
        pass
    return found


def _config_labels(client: RegistryClient, repo: str, ref: str, manifest: dict[str, Any]) -> dict[str, str]:
    where = f"registry {client.registry}: {ref}"
    descriptor = manifest.get("config")
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("digest"), str):
        raise RegistryError(f"{where}: the manifest has no config descriptor (not an image manifest)")
    try:
        config = loads(client.get_blob(repo, descriptor["digest"]))
    except ValueError:
        raise RegistryError(f"{where}: the image config {descriptor['digest']} is not JSON") from None
    if not isinstance(config, dict):
        raise RegistryError(f"{where}: the image config {descriptor['digest']} is a JSON "
                            f"{type(config).__name__}, not an object")
    inner = config.get("config")
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    if not isinstance(labels, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in labels.items()}


def _layer_size(client: RegistryClient, ref: str, layer: dict[str, Any]) -> int:
    size = layer.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise RegistryError(f"registry {client.registry}: {ref}: layer {layer.get('digest')} has size {size!r}, "
                            f"not a number of bytes")
    return size


def _registry_snapshot(ref: str, child: str | None = None) -> Snapshot:
    """The image REF names in its registry (an index: its first platform's, or `child`'s: one manifest digest)."""
    if problem := not_an_image(ref):  # in the words of every other task's image check, not the matrix's
        raise ConfigError(f"'{ref}' is not a file, a local image or a build record's image, and {problem}")
    parsed = parse_image_reference(ref)
    repo = parsed.repository
    if repo.registry == DOCKER_HUB and not ref.startswith(DOCKER_HUB):
        raise ConfigError(f"'{ref}' is not a file, a local image or a build record's image; name a registry "
                          f"image with its host (host:port/path:tag or ...@sha256:...)")
    reference = parsed.digest or parsed.tag or "latest"
    client = RegistryClient.from_environment(repo.registry)
    manifest = client.get_manifest(repo.path, child or reference)
    if child is not None:
        ref = repo.ref(child)
    elif manifest.is_index:
        children = manifest.children()
        if not children:
            raise RegistryError(f"registry {repo.registry}: index {ref} lists no manifests")
        manifest = client.get_manifest(repo.path, children[0])
    data = manifest.json()
    labels = _config_labels(client, repo.path, ref, data)
    files: dict[str, bytes] = {}
    layers = data.get("layers")
    layers = [x for x in layers if isinstance(x, dict)] if isinstance(layers, list) else []
    for layer in list(reversed(layers))[:MAX_LAYERS_READ]:
        if _layer_size(client, ref, layer) > MAX_LAYER_BYTES or not isinstance(layer.get("digest"), str):
            continue
        if "zstd" in str(layer.get("mediaType", "")):
            continue  # the standard library has no zstd before Python 3.14: known by its labels alone
        for name, blob in _facts_in_layer(client.get_blob(repo.path, layer["digest"])).items():
            files.setdefault(name, blob)  # the top-most layer's copy is the one the image shows
        if len(files) == len(IMAGE_FACTS):
            break
    return image_snapshot(ref, labels, files)


def load_snapshot(spec: str, *, docker_host: str | None = None) -> Snapshot:
    """Whatever `spec` names, as a snapshot; a one-line error when it names nothing diff can read."""
    try:
        found = local_snapshot(spec, docker_host=docker_host)
    except DockerUnavailable as down:
        # The engine asked for is down: a registry image is still read through the registry API; for
        # anything else (a tag only an engine could hold) the engine being down is the answer.
        try:
            return _registry_snapshot(spec)
        except (ConfigError, RegistryError):
            raise down from None
    if found is not None:
        return found
    if spec.startswith("sha256:"):
        raise ConfigError(f"'{spec}': no local image and no build record under {build_root()} has this id; "
                          f"name a registry image as host:port/path@{spec}")
    return _registry_snapshot(spec)


def _registry_platforms(spec: str) -> tuple[bool, dict[str, str]] | None:
    """(is an index, {platform: manifest digest}) of a registry image; None when `spec` is no registry image
    this can read (`load_snapshot` then says why, in its own words). An index's unknown/unknown entries
    (buildx attestation manifests) are no platform. A registry that does not answer raises, as
    `load_snapshot` would (once: not asked again through it)."""
    if not names_its_registry(spec) or not_an_image(spec):
        return None
    try:
        parsed = parse_image_reference(spec)
        client = RegistryClient.from_environment(parsed.repository.registry)
        manifest = client.get_manifest(parsed.repository.path, parsed.digest or parsed.tag or "latest")
        if not manifest.is_index:
            config = client.image_config(parsed.repository.path, manifest.digest)
            return False, {platform_of_image(str(config.get("os") or ""), str(config.get("architecture") or ""),
                                             str(config.get("variant") or "")): manifest.digest}
        out: dict[str, str] = {}
        for entry in manifest.json().get("manifests", []):
            plat = entry.get("platform") if isinstance(entry, dict) else None
            name = platform_of_image(str(plat.get("os")), str(plat.get("architecture")), str(plat.get("variant") or "")
                                     ) if isinstance(plat, dict) else "unknown/unknown"
            if name != "unknown/unknown" and isinstance(entry.get("digest"), str):
                out.setdefault(name, entry["digest"])
        return True, out
    except ConfigError:
        return None


def load_side(spec: str, *, docker_host: str | None = None) -> Side:
    """`spec` as one side of a diff: each platform's snapshot of an index in a registry; else the one snapshot
    `load_snapshot` reads, under its platform when a registry says it (None: a local image, record or lock)."""
    down: DockerUnavailable | None = None
    try:
        found = local_snapshot(spec, docker_host=docker_host)
    except DockerUnavailable as exc:
        found, down = None, exc
    if found is not None:  # a lock's platform, a build record's, a local image's
        platform = engine_image_platform(spec, docker_host) if found.kind == "image" else found.platform
        return Side(spec, {platform: found}, index=False)
    try:
        platforms = _registry_platforms(spec)
    except RegistryError:
        if down is not None:  # as load_snapshot: with the engine down, that is the answer
            raise down from None
        raise
    if platforms is not None and platforms[0]:
        return Side(spec, {p: _registry_snapshot(spec, child) for p, child in platforms[1].items()}, index=True)
    platform = next(iter(platforms[1])) if platforms is not None else None
    return Side(spec, {platform: load_snapshot(spec, docker_host=docker_host)}, index=False)
