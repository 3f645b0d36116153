"""`invoke diff A B`, the shell: turn each argument into a snapshot, then print the pure diff.

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
from typing import Any

from .diff import Snapshot, diff_to_json, image_snapshot, print_diff, snapshot_diff
from .errors import ConfigError, RegistryError
from .localsnapshots import IMAGE_FACTS, local_snapshot
from .records import build_root
from .registry import RegistryClient
from .tags import DOCKER_HUB, parse_image_reference
from .ui import console as make_console

# Registry layers are read top-down looking for those facts; the serving image's last layers are small,
# and a layer this large is torch or CUDA, which holds none of them.
MAX_LAYER_BYTES = 64 * 1024 * 1024
MAX_LAYERS_READ = 12


def _facts_in_layer(blob: bytes) -> dict[str, bytes]:
    wanted = {path.lstrip("/"): name for name, path in IMAGE_FACTS.items()}
    found: dict[str, bytes] = {}
    data = gzip.decompress(blob) if blob[:2] == b"\x1f\x8b" else blob
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            name = member.name.lstrip("./")
            if name in wanted and member.isfile():
                handle = tar.extractfile(member)
                if handle is not None:
                    found[wanted[name]] = handle.read()
    return found


def _registry_snapshot(ref: str) -> Snapshot:
    parsed = parse_image_reference(ref)
    repo = parsed.repository
    if repo.registry == DOCKER_HUB and not ref.startswith(DOCKER_HUB):
        raise ConfigError(f"'{ref}' is not a file, a local image or a build record's image; name a registry "
                          f"image with its host (host:port/path:tag or ...@sha256:...)")
    reference = parsed.digest or parsed.tag or "latest"
    client = RegistryClient.from_environment(repo.registry)
    manifest = client.get_manifest(repo.path, reference)
    if manifest.is_index:
        children = manifest.children()
        if not children:
            raise RegistryError(f"registry {repo.registry}: index {ref} lists no manifests")
        manifest = client.get_manifest(repo.path, children[0])
    config = json.loads(client.get_blob(repo.path, manifest.blobs()[0]))
    labels = (config.get("config") or {}).get("Labels") or {}
    files: dict[str, bytes] = {}
    layers: list[dict[str, Any]] = manifest.json().get("layers", [])
    for layer in list(reversed(layers))[:MAX_LAYERS_READ]:
        if int(layer.get("size", 0)) > MAX_LAYER_BYTES:
            continue
        for name, data in _facts_in_layer(client.get_blob(repo.path, layer["digest"])).items():
            files.setdefault(name, data)  # the top-most layer's copy is the one the image shows
        if len(files) == len(IMAGE_FACTS):
            break
    return image_snapshot(ref, labels, files)


def load_snapshot(spec: str, *, docker_host: str | None = None) -> Snapshot:
    """Whatever `spec` names, as a snapshot; a one-line error when it names nothing diff can read."""
    found = local_snapshot(spec, docker_host=docker_host)
    if found is not None:
        return found
    if spec.startswith("sha256:"):
        raise ConfigError(f"'{spec}': no local image and no build record under {build_root()} has this id; "
                          f"name a registry image as host:port/path@{spec}")
    return _registry_snapshot(spec)


def diff_command(a: str, b: str, *, as_json: bool = False, docker_host: str | None = None) -> int:
    """Print what changed from A to B (a table, or JSON); exit 0 either way: a difference is an answer."""
    diff = snapshot_diff(load_snapshot(a, docker_host=docker_host), load_snapshot(b, docker_host=docker_host))
    if as_json:
        print(json.dumps(diff_to_json(diff), indent=2, sort_keys=True))
        return 0
    print_diff(diff, make_console())
    return 0
