"""The kernel-cache parts of a Kubernetes pod: an emptyDir the server's caches live in, and an init container
(the serving image, `python3 -c` of `inimage/incontainer/kernelcache_init.py`) that fills it on the node from
the artifact whose key matches that node's GPU, or leaves it empty (a cold start, said in its log)."""

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


@dataclass(frozen=True)
class CacheCandidates:
    """What the deploy found for the init container to choose from on the node (none: it starts cold)."""

    blobs_url: str = ""
    candidates: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def cache_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod volume, the server container's mount of it)."""
    return {"name": VOLUME, "emptyDir": {}}, {"name": VOLUME, "mountPath": CONTAINER_CACHE_ROOT}


def init_container(image_ref: str, found: CacheCandidates, limits: Mapping[str, Any]) -> dict[str, Any]:
    """The init container: it asks for the server's GPUs (nvidia-smi must see what the server will)."""
    env = [{"name": "SGLSTACK_KC_DIR", "value": "/cache"},
           {"name": "SGLSTACK_KC_BLOBS", "value": found.blobs_url},
           {"name": "SGLSTACK_KC_CANDIDATES", "value": json.dumps(list(found.candidates), sort_keys=True)}]
    return {"name": INIT_CONTAINER, "image": image_ref, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-c", INIT_SCRIPT.read_text()], "env": env,
            "resources": {"limits": dict(limits)} if limits else {},
            "volumeMounts": [{"name": VOLUME, "mountPath": "/cache"}]}
