"""The preflight gate: the stack's requirements -> checks on this node or in the image on a Docker host.

`run_preflight` is what `invoke preflight` prints, and what `smoke` and `deploy` call before they spend
many minutes loading a model; `require_ready` raises when the node fails.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from ..config.schema import Stack
from ..core.errors import ConfigError
from ..core.progress import progress
from ..inimage.preflight.checks import FAIL, Requirements, parse_size
from ..inimage.preflight.node import NodeReport, inspect_node
from .errors import PreflightFailed, PreflightUnavailable
from .remote import run_in_image

DEFAULT_SIZES = "1M,64M,1G"


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(parse_size(s) for s in text.split(",") if s.strip())
    except ValueError as exc:
        raise ConfigError(str(exc), key="--sizes") from None
    if not sizes or any(s < 4 for s in sizes):
        raise ConfigError(f"'{text}' needs one or more sizes of at least 4 bytes", key="--sizes")
    return sizes


def requirements_for(stack: Stack, sizes: Sequence[int] | None = None) -> Requirements:
    return Requirements(
        stack=stack.name,
        cuda=stack.cuda,
        tp=stack.serving.tp,
        arch_list=stack.cuda_arch_list,
        shm_bytes=parse_size(stack.serving.shm_size),
        sizes=tuple(sizes) if sizes else parse_sizes(DEFAULT_SIZES),
    )


def run_preflight(
    stack: Stack,
    *,
    docker_host: str | None = None,
    image: str | None = None,
    sizes: Sequence[int] | None = None,
    console: Console | None = None,
) -> NodeReport:
    """Run every check for `stack` here, or inside `image` on `docker_host` when an image is given."""
    req = requirements_for(stack, sizes)
    if image:
        return run_in_image(docker_host, image, req, shm_size=stack.serving.shm_size)
    if docker_host:
        raise ConfigError(
            "--docker-host needs --image: the checks run inside the stack image there", stack=stack.name, key="--image"
        )
    if console is None:
        return inspect_node(req, progress=lambda _m: None)
    with progress("preflight") as steps:
        return inspect_node(req, progress=steps.working_on)


def require_ready(stack: Stack, **kwargs) -> NodeReport:
    """`run_preflight`, raising unless the node passes (warnings pass): for smoke and deploy.

    The error names the first failing check, so that a stopped run says which check stopped it.
    """
    report = run_preflight(stack, **kwargs)
    failed = [c for c in report.checks if c.status == FAIL]
    if report.fatal:
        check = f"check '{failed[0].name}' failed: " if failed else ""
        raise PreflightUnavailable(f"preflight for stack '{stack.name}': {check}{report.fatal}")
    if failed:
        first = failed[0]
        raise PreflightFailed(
            f"preflight for stack '{stack.name}': check '{first.name}' failed: {first.value} "
            f"(needs {first.threshold}){f'; {len(failed) - 1} more failed' if len(failed) > 1 else ''}"
        )
    return report
