"""Deploy's bad input, light to import: the face's deploy options name it as their error (exit 2)."""

from __future__ import annotations

from ..core.errors import DeployError, did_you_mean

TARGETS = ("compose", "k8s")  # where a stack is deployed: `--on`


class DeployOptionError(DeployError):
    """A deploy option's value is not a number (or too long to be one): bad input, exit 2."""

    exit_code = 2


def target_of(target: str) -> str:
    """`--on`'s value: one of TARGETS."""
    if target not in TARGETS:
        raise DeployOptionError(f"--on '{target}': not one of {', '.join(TARGETS)}{did_you_mean(target, TARGETS)}")
    return target


def check_tail(tail: int | None) -> None:
    """`invoke logs --tail N`: at least one line."""
    if tail is not None and tail < 1:
        raise DeployOptionError(f"--tail {tail}: must be at least 1 line")
