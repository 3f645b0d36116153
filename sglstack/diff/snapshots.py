"""What this host alone can tell about an image, as a diff snapshot: a file (a build record or a lock), a
build folder, an image the Docker engine has (its labels and the facts the build left in /opt/sglstack/),
or a bare image id a build record names. Never a registry: smoke reads its regression reference through
this, and smoke knows no registry.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..config.platforms import platform_of_image
from ..core.errors import ConfigError, DockerUnavailable
from ..core.inputs import loads, read_json, read_text
from ..core.records import RECORD_FILE, build_root
from ..lockfile.text import parse_lock
from .compare import Snapshot, image_snapshot, lock_snapshot, record_problem, record_snapshot

# The facts the build leaves in the image (see images/Dockerfile.j2), by the name diff.py reads them under.
IMAGE_FACTS = {"installed.json": "/opt/sglstack/installed.json", "patches.json": "/opt/sglstack/patches.json",
               "stack.json": "/opt/sglstack/stack.json"}
LOCK_MAGIC = "# sglstack lock"


def snapshot_from_file(path: Path, ref: str) -> Snapshot:
    if path.is_dir():
        path = path / RECORD_FILE
        if not path.is_file():
            raise ConfigError("a folder given to diff must hold a build record (record.json)", file=str(path.parent))
    # a regular file of bounded size: a FIFO would hang the diff, /dev/zero fill the memory
    text = read_text(path, what="build record or lock")
    if text.startswith(LOCK_MAGIC):
        return lock_snapshot(parse_lock(text, file=str(path)), ref)
    try:
        record = loads(text)
    except ValueError as exc:
        raise ConfigError(f"neither a build record (JSON: {exc}) nor a lock ('{LOCK_MAGIC} ...')",
                          file=str(path)) from None
    if not isinstance(record, dict) or "config_hash" not in record:
        raise ConfigError("not a build record (no 'config_hash')", file=str(path))
    problem = record_problem(record)
    if problem:
        raise ConfigError(f"not a build record diff can read: {problem[1]}", file=str(path), key=problem[0])
    return record_snapshot(record, ref)


def _engine_snapshot(ref: str, docker_host: str | None) -> Snapshot | None:
    # The Docker SDK is slow to import, and a diff of two files never needs it.
    import docker.errors

    from ..adapters.docker import docker_client, engine_image, read_image_files

    try:
        client = docker_client(docker_host)
    except DockerUnavailable:
        if docker_host:  # the engine asked for is down: say so, rather than look elsewhere and blame the name
            raise
        return None
    try:
        image = engine_image(client, ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError:
        return None
    files = read_image_files(client, image.id, list(IMAGE_FACTS.values()))
    by_name = {name: files[path] for name, path in IMAGE_FACTS.items() if path in files}
    # The engine's own size of the image (uncompressed): what `invoke diff` compares of two images.
    return dataclasses.replace(image_snapshot(ref, image.labels or {}, by_name),
                               size={"bytes": int(image.attrs.get("Size") or 0)})


def engine_image_platform(ref: str, docker_host: str | None) -> str | None:
    """The platform of the engine's image `ref` (its config's Os, Architecture and Variant); None when the engine
    has no such image or cannot be asked."""
    # at call time: the Docker SDK is slow to import, and a diff of two files never needs it
    import docker.errors

    from ..adapters.docker import docker_client, engine_image

    try:
        attrs = engine_image(docker_client(docker_host), ref).attrs
    except (DockerUnavailable, docker.errors.DockerException):
        return None
    if not attrs.get("Architecture"):
        return None
    return platform_of_image(str(attrs.get("Os") or ""), str(attrs["Architecture"]), str(attrs.get("Variant") or ""))


def _record_naming(image_id: str) -> Snapshot | None:
    """A build record under the build root whose image is `image_id` (a bare `sha256:...`)."""
    root = build_root()
    for path in sorted(root.glob("*/record*.json")):
        try:
            record = read_json(path, what="build record")
        except ConfigError:
            continue
        if isinstance(record, dict) and record.get("image_id") == image_id and record_problem(record) is None:
            return record_snapshot(record, image_id)
    return None


def local_snapshot(spec: str, *, docker_host: str | None = None) -> Snapshot | None:
    """What this host alone can tell about `spec` (a file, an engine image, a build record naming an id):
    never a registry. None when nothing here names it; `DockerUnavailable` when `docker_host` names an
    engine that is down and nothing else here answers."""
    path = Path(spec)
    if path.exists():
        return snapshot_from_file(path, spec)
    try:
        found = _engine_snapshot(spec, docker_host)
    except DockerUnavailable:  # the engine named is down: a build record may still know the id
        found = _record_naming(spec) if spec.startswith("sha256:") else None
        if found is None:
            raise
    if found is not None:
        return found
    return _record_naming(spec) if spec.startswith("sha256:") else None
