"""The kernel-cache parts of a Kubernetes pod: an emptyDir the server's caches live in, and an init container
(the serving image, `python3 -c` of `inimage/incontainer/kernelcache_init.py`) that fills it on the node from
the artifact whose key matches that node's GPU, or leaves it empty (a cold start, said in its log).

A private registry: with `--image-pull-secret NAME` the pod pulls with Secret NAME (type
kubernetes.io/dockerconfigjson), and the init container reads the artifact with the same credentials: the
Secret's `.dockerconfigjson` mounted read-only as `config.json` in DOCKER_CONFIG's folder. The manifest names
the Secret only; no credential is ever in it. The Secret is optional to the volume: a pod whose Secret is
missing still starts (the init container says it has no credentials, and the server starts cold)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.resources import TOOLS_DIR
from ..serving.caches import CONTAINER_CACHE_ROOT

VOLUME = "kernel-cache"
INIT_CONTAINER = "kernel-cache-init"
INIT_SCRIPT = TOOLS_DIR / "kernelcache_init.py"
PULL_SECRET_VOLUME = "kernel-cache-pull-secret"
DOCKER_CONFIG_DIR = "/run/sglstack/docker-config"
DOCKER_CONFIG_KEY = ".dockerconfigjson"  # the key of a kubernetes.io/dockerconfigjson Secret


@dataclass(frozen=True)
class CacheCandidates:
    """What the deploy found for the init container to choose from on the node (none: it starts cold)."""

    blobs_url: str = ""
    candidates: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def cache_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod volume, the server container's mount of it)."""
    return {"name": VOLUME, "emptyDir": {}}, {"name": VOLUME, "mountPath": CONTAINER_CACHE_ROOT}


def pull_secret_volume(secret: str) -> dict[str, Any]:
    """The pod volume of the image pull Secret's Docker config (the init container's only)."""
    return {"name": PULL_SECRET_VOLUME, "secret": {"secretName": secret, "optional": True,
                                                   "items": [{"key": DOCKER_CONFIG_KEY, "path": "config.json"}]}}


def init_container(image_ref: str, found: CacheCandidates, limits: Mapping[str, Any],
                   pull_secret: str | None = None) -> dict[str, Any]:
    """The init container: it asks for the server's GPUs (nvidia-smi must see what the server will), and reads
    the registry with `pull_secret`'s credentials when given (its volume is `pull_secret_volume`)."""
    env = [{"name": "SGLSTACK_KC_DIR", "value": "/cache"},
           {"name": "SGLSTACK_KC_BLOBS", "value": found.blobs_url},
           {"name": "SGLSTACK_KC_CANDIDATES", "value": json.dumps(list(found.candidates), sort_keys=True)}]
    mounts: list[dict[str, Any]] = [{"name": VOLUME, "mountPath": "/cache"}]
    if pull_secret is not None:
        env.append({"name": "DOCKER_CONFIG", "value": DOCKER_CONFIG_DIR})
        mounts.append({"name": PULL_SECRET_VOLUME, "mountPath": DOCKER_CONFIG_DIR, "readOnly": True})
    return {"name": INIT_CONTAINER, "image": image_ref, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-c", INIT_SCRIPT.read_text()], "env": env,
            "resources": {"limits": dict(limits)} if limits else {},
            "volumeMounts": mounts}
