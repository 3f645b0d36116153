"""What every deploy task checks before it changes anything: the image verified against the key (bound to the
stack's release), the stack deployed at all, and the stack's lock held (one deploy, rollback or undeploy of a
stack at a time, and none while it builds or bisects)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..adapters.docker import docker_client
from ..attest.verify import verified_line, verified_reference
from ..config.schema import Stack
from ..core.errors import DeployError
from ..core.folderlock import folder_lock
from ..core.records import build_root as default_build_root
from ..core.records import stack_dir
from .deployment import Deployment, Say
from .health import project_containers
from .identity import release_identity


def verified_ref(ref: str, verify_key: str | None, say: Say, *, stack: Stack, stacks_file: str | None) -> str:
    """With --verify-key: the image by the digest that verified (a tag is not trusted twice), signed for this
    stack, its config hash as the matrix gives it now and its SGLang release; or a one-line refusal before
    anything changes. Without it: `ref` as it is."""
    if not verify_key:
        return ref
    verified, result = verified_reference(ref, verify_key, expect=release_identity(stack, stacks_file))
    say(verified_line(ref, result) + " with its SBOM and provenance")
    return verified


class NotDeployed(DeployError):
    """logs, undeploy or rollback of a stack with nothing deployed: a check that ran (exit 1)."""


def require_deployed(dep: Deployment) -> None:
    """logs, undeploy and rollback act on a deployment: with no container of the stack's compose project
    on the engine (running or stopped) they say so in one line, not in compose's words ("Couldn't find env
    file") nor with a "removed" of nothing."""
    if not project_containers(docker_client(dep.docker_host), dep.project_name):
        raise NotDeployed(f"stack '{dep.stack.name}' is not deployed (compose project {dep.project_name} has no "
                          "container on the engine)")


# Two deploys of one stack would replace each other's containers and interleave their records. The second is
# refused with one line, after its options were checked (bad input writes nothing, not even the lock).
def stack_lock(build_root: Path | None, stack: str, task: str) -> contextlib.AbstractContextManager[None]:
    if not stack or Path(stack).name != stack or stack in (".", ".."):
        return contextlib.nullcontext()  # not a stack name: the matrix says so, in its own one line
    root = build_root or default_build_root()
    return folder_lock(stack_dir(stack, root), task, root=root, stack=stack)
