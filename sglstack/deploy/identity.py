"""The identity a release signature must name to be a stack's release now: its name, the config hash `invoke build`
gives it from the matrix and its lock as they are, and its SGLang release. One home for the three checks that bind
a signature to a stack: `deploy --verify-key`, `render --verify-key` and `verify-image --stack`. It lives in deploy,
the lowest part that may use render (the config hash), lock (the lock the build takes) and attest (`BuildIdentity`)."""

from __future__ import annotations

from pathlib import Path

from ..attest.provenance import BuildIdentity
from ..config.defaults import default_stacks_file
from ..config.schema import Stack
from ..lock.trust import lock_for_build
from ..render.dockerfile import released_config_hash


def release_identity(stack: Stack, stacks_file: str | Path | None = None) -> BuildIdentity:
    """What a signature must name to be `stack`'s release now (its lock read beside `stacks_file`)."""
    lock = lock_for_build(stacks_file or default_stacks_file(), stack)
    return BuildIdentity.of_stack(stack, released_config_hash(stack, lock))
