"""A k8s deployment's image against the cluster's nodes: the pods land on nodes of the stack's platforms (their
node affinity), so the image must serve every platform such a node of the cluster has."""

from __future__ import annotations

from ..adapters.kubectl import Kubectl
from ..config.schema import Stack
from ..core.errors import DeployError, SglstackError
from ..publish import check_node_platform, reference_platforms
from .deployment import Say


def check_nodes(kubectl: Kubectl, stack: Stack, ref: str, say: Say) -> None:
    """Before anything is applied (a deploy or a rollback): an image no node can run never reaches the cluster."""
    nodes = kubectl.node_platforms()
    if isinstance(nodes, str):
        say(f"platform: the nodes of {kubectl.context} cannot be listed ({nodes}): not checked against {ref}")
        return
    check_node_platform(stack.name, ref, f"every node of {kubectl.context}", nodes, say)
    reachable = [p for p in stack.platforms if p in nodes]
    if not reachable:  # the pods' node affinity is the stack's platforms: none of them, nowhere to run
        raise DeployError(f"stack '{stack.name}': its pods run only on {' '.join(stack.platforms)} nodes (the stack's "
                          f"platforms), and every node of {kubectl.context} is {' '.join(nodes)}: nothing could be "
                          "scheduled (nothing was pulled or changed)")
    if len(reachable) < 2:
        return  # the one platform the pods may land on is the image's (checked above)
    try:  # a mixed cluster: every platform the pods may land on must be served
        served = reference_platforms(ref) or tuple(reachable)
    except SglstackError:
        return  # said by the check above
    if missing := [p for p in reachable if p not in served]:
        raise DeployError(f"stack '{stack.name}': {ref} is for {' '.join(served)}, and {kubectl.context} has "
                          f"{' '.join(missing)} nodes the pods may land on (the stack is {' '.join(stack.platforms)}): "
                          "the image cannot run there (nothing was pulled or changed)")
