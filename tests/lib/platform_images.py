"""One-file images of a given platform, loaded into the engine as the seed loads its base (no emulation, no
BuildKit): what the two-architecture tests push, index and deploy. `labels` are the image config's, e.g. what a
build of a stack stamps (`build_labels`)."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import tarfile
from collections.abc import Mapping

from sglstack.config.baseseed import BaseSeed, docker_archive, image_config
from sglstack.core.labels import CONFIG_HASH_LABEL, STACK_LABEL, VERIFIED_LABEL


def build_labels(stack: str, platform: str) -> dict[str, str]:
    """The labels a verified build of `stack` for `platform` carries (its config hash covers the platform)."""
    return {STACK_LABEL: stack, CONFIG_HASH_LABEL: hashlib.sha256(f"{stack} {platform}".encode()).hexdigest(),
            VERIFIED_LABEL: "true"}


def one_file_image(docker_client, platform: str, tag: str, labels: Mapping[str, str] | None = None) -> None:
    """A one-file image of `platform` (its config's os/architecture/variant), tagged `tag` on the engine."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        data = f"{platform} {secrets.token_hex(8)}\n".encode()
        info = tarfile.TarInfo("./platform")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    rootfs = buf.getvalue()
    digest = "sha256:" + hashlib.sha256(rootfs).hexdigest()
    config = image_config(BaseSeed(rootfs={platform: digest}), platform, digest)
    if labels:
        doc = json.loads(config)
        doc["config"]["Labels"] = dict(labels)
        config = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    docker_client.images.load(b"".join(docker_archive(config, tag, len(rootfs), [rootfs], 0)))
