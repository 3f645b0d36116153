"""The names a stack's name becomes in each outside system, in one place (pure, standard library only).

Docker keeps a valid stack name as it is (`sglstack/<name>`), but Compose and Kubernetes allow fewer
characters and shorter names, so several stack names become one there: `cpu.test` and `cpu-test` are
one compose project, and `cpu-test`, `cpu.test`, `cpu_test` and `cpu__test` one LeaderWorkerSet (and so
are two long names that share the prefix the LWS name keeps). Two such stacks would deploy over, and
undeploy, each other. The matrix refuses them together (`collisions`), and the deploy paths, which find
things by these names, also check that what they find carries the exact stack name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

LOCAL_REPOSITORY = "sglstack"  # local images are `sglstack/<stack>:<config hash>`
PREFIX = "sglstack-"
# The LWS name is a DNS label whose pods are NAME-GROUP-INDEX and whose Service is NAME-api: 40 leaves
# room for both within 63.
K8S_NAME_MAX = 40


def local_image(stack_name: str) -> str:
    """The stack's local image repository (a valid stack name is a valid path component as it is)."""
    return f"{LOCAL_REPOSITORY}/{stack_name}"


def compose_project(stack_name: str) -> str:
    """The compose project of a stack: compose keeps only [a-z0-9_-], so '.' (and anything else) is '-'."""
    return PREFIX + "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in stack_name.lower())


def k8s_object_name(stack_name: str) -> str:
    """The LeaderWorkerSet's name (a DNS-1035 label): every run of other characters one '-', truncated."""
    text = "".join(ch if ch.isalnum() else "-" for ch in stack_name.lower()).strip("-")
    return (PREFIX + re.sub("-+", "-", text))[:K8S_NAME_MAX].rstrip("-")


def k8s_service_name(stack_name: str) -> str:
    # Not the LWS name: the controller creates a headless Service of that name for the pods' hostnames.
    return k8s_object_name(stack_name) + "-api"


# (what the name is, the rule): every rule under which two stacks must not meet.
CONSUMERS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("local image", local_image),
    ("compose project", compose_project),
    ("Kubernetes LeaderWorkerSet name", k8s_object_name),
)


def collisions(stack_names: Iterable[str]) -> list[tuple[str, str, str, str]]:
    """(later stack, earlier stack, what the name is, the shared name) for every stack whose name some
    consumer makes the same as an earlier stack's (each later stack once, its first collision)."""
    owners: dict[tuple[str, str], str] = {}
    out: list[tuple[str, str, str, str]] = []
    for name in stack_names:
        hit = None
        for what, rule in CONSUMERS:
            key = (what, rule(name))
            if hit is None and key in owners and owners[key] != name:
                hit = (name, owners[key], what, key[1])
            owners.setdefault(key, name)
        if hit:
            out.append(hit)
    return out
