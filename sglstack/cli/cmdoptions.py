"""The options several tasks share, each declared once (as pip's `cmdoptions`): a task's dataclass names the
group (`stack: str = stack_option()`), so one help text cannot drift from its twin in another task.
`--stacks-file`, `--docker-host` and `-o/--output` are `sglstack.core.options`'; this module holds the rest.
Standard library and invoke only at import, like every module here: invoke imports it for every call.
"""

from __future__ import annotations

from typing import Any

from ..core.options import option, repeatable, required

STACK_HELP = "stack name from the matrix"


def stack_option(help: str = STACK_HELP) -> Any:
    """--stack NAME, required."""
    return required(help)


def only_stack_option(help: str = "only this stack (default: all)") -> Any:
    """--stack NAME, optional: the task covers every stack without it (or, as `help` says, what it does then)."""
    return option(help)


def stacks_option(help: str) -> Any:
    """--stack NAME, repeatable: the task covers every stack without it."""
    return repeatable(help)


# ---- signing and verifying (build --push, publish, publish-index; sbom, verify-image, render, deploy) -----

def signing_key_option(help: str) -> Any:
    """--signing-key PEM: the ed25519 private key (a path or the PEM; also SGLSTACK_SIGNING_KEY)."""
    return option(help)


def verify_key_option(help: str) -> Any:
    """--verify-key PUB: the ed25519 public key (PEM) a signature must verify against."""
    return option(help)


# ---- the registry and the release's smoke (build --push, publish, publish-index, registry.cleanup, bisect) ---

REGISTRY_HELP = "registry host or repository (default: the stack's publish.repository)"


def registry_option(help: str = REGISTRY_HELP) -> Any:
    return option(help)


def smoke_opt_option(help: str) -> Any:
    """--smoke-opt KEY=VALUE, repeatable: an option of the smoke the task runs."""
    return repeatable(help)


def ca_bundle_option() -> Any:
    return option("extra CA bundle passed as a BuildKit secret (also SGLSTACK_CA_BUNDLE)")


def docker_cli_option() -> Any:
    return option("BuildKit-capable docker client binary (also SGLSTACK_DOCKER_CLI)")


def skip_preflight_option() -> Any:
    return option("do not run `invoke preflight` on the GPU node first", False, kind=bool)


# ---- what the smoke's servers serve (smoke, bisect) -----------------------------------------------------

def model_option() -> Any:
    return option("target model path or HF repo")


def tp_option(kind: type = str) -> Any:
    return option("tensor parallel size", kind=kind)


def max_new_tokens_option(kind: type = str) -> Any:
    return option("tokens generated per request", kind=kind)


# ---- Kubernetes (render, deploy) ----------------------------------------------------------------------

def context_option() -> Any:
    return option("k8s: the kubectl context (default: the current one)")


def host_network_option() -> Any:
    return option("k8s: pods use the node's network (NCCL over the host's NICs)", False, kind=bool)


def rdma_option() -> Any:
    return option("k8s: an RDMA device-plugin resource per pod, RESOURCE[=COUNT] (e.g. rdma/ib)")
