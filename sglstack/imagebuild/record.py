"""What a build writes beside its image: the build record (whole or not at all), the SBOM, and the lock facts
it stamps as labels."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ..adapters.docker import engine_image
from ..config.schema import Stack
from ..core import labels as lb
from ..core.errors import ConfigError
from ..core.inputs import loads, read_bytes
from ..core.jsonreport import write_json
from ..core.labels import PATCH_LABEL_PREFIX
from ..core.records import RECORD_FILE, build_root
from ..core.safefiles import containing_root, write_bytes
from ..inventory.model import Inventory
from ..inventory.sbom import SBOM_FILE, sbom_document
from ..lockfile.model import Lock, lock_content_sha256
from .verify import (
    FINAL_TARGET,
)


def record_path_for(out_dir: Path, target: str) -> Path:
    return out_dir / (RECORD_FILE if target == FINAL_TARGET else f"record-{target}.json")


def record_for_reused_image(client: docker.DockerClient, stack: Stack, image_id: str, tag: str, config_hash: str,
                            target: str, out_dir: Path, source: str | None = None) -> Path:
    """Keep the build record of a reused image; write one from its labels when this folder has none."""
    path = record_path_for(out_dir, target)
    if path.exists():
        try:  # bounded, never from a FIFO put in its place; a record that does not read is written anew
            if loads(read_bytes(path, what="build record")).get("config_hash") == config_hash:
                return path
        except (ConfigError, ValueError, AttributeError):
            pass
    labels = engine_image(client, image_id).labels or {}
    write_record(path, {
        "stack": stack.name, "platform": stack.platforms[0], "target": target, "image_id": image_id, "tag": tag,
        "config_hash": config_hash,
        "reused": source or "local image", "pins": stack.pins(),
        "patches": {k.removeprefix(PATCH_LABEL_PREFIX): v for k, v in labels.items()
                    if k.startswith(PATCH_LABEL_PREFIX)},
        "labels": labels,
    })
    return path


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write the record whole or not at all (a temp file next to it, then an atomic rename)."""
    write_json(path, record)


def write_sbom(out_dir: Path, inventory: Inventory, *, tag: str, image_id: str, built_at: dt.datetime,
               lock: Lock | None) -> dict[str, Any]:
    """Write `sbom.cdx.json` beside the record (whole or not at all); what the record says of it."""
    body = sbom_document(inventory, image_name=tag, image_id=image_id, created=built_at, lock=lock)
    path = out_dir / SBOM_FILE
    write_bytes(containing_root(out_dir, build_root()), path, body)
    return {"path": str(path), "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body),
            "python": len(inventory.python), "debian": len(inventory.debian),
            "compared_with_lock": lock is not None}


def lock_labels(lock: Lock | None, base_digest: str | None) -> dict[str, str]:
    labels = {lb.BASE_DIGEST_LABEL: base_digest} if base_digest else {}
    if lock is not None:
        labels[lb.LOCK_LABEL] = lock_content_sha256(lock)
    return labels


def lock_record(lock: Lock | None, notes: list[str]) -> dict[str, Any] | None:
    if lock is None:
        return None
    return {"stack_sha256": lock.stack_sha256, "content_sha256": lock_content_sha256(lock),
            "resolved_at": lock.resolved_at, "packages": len(lock.packages), "hashed": lock.hashed_count,
            "unresolved": [str(u) for u in lock.unresolved], "notices": notes}


def lock_summary(lock: Lock | None) -> str:
    if lock is None:
        return "none: not reproducible to the last package"
    return f"{len(lock.packages)} packages, {lock.hashed_count} hash-checked, resolved {lock.resolved_at}"
