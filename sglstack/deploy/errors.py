"""Deploy's bad input, light to import: the face's deploy options name it as their error (exit 2)."""

from __future__ import annotations

from ..core.errors import DeployError

TARGETS = ("compose", "k8s")  # where a stack is deployed: `--on`


class DeployOptionError(DeployError):
    """A deploy option's value is not a number (or too long to be one): bad input, exit 2."""

    exit_code = 2
