"""Releases and the registry: `invoke publish`, `registry.up`, `registry.down`, `registry.cleanup`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..core.options import TaskOptions, option, repeatable, required, stacks_file_option
from .cmdoptions import only_stack_option, registry_option, signing_key_option, stack_option
from .options import command


@dataclass(frozen=True)
class PublishOptions(TaskOptions):
    stack: str = stack_option()
    digest: str = required("the smoke-tested manifest digest (sha256:..., or REPO@sha256:... of the stack's "
                           "repository) to promote, or an older one to roll back to")
    stacks_file: str = stacks_file_option()
    registry: str | None = registry_option()
    config_hash: str | None = option("config hash of the image, when no publish record or label has it")
    smoke_report: str | None = option("path of the smoke report that passed this digest (kept in the record)")
    force: bool = option("re-point the tags even when they already point to this digest", False, kind=bool)
    signing_key: str | None = signing_key_option("the ed25519 private key (PEM) the release is signed with: a digest "
                                                 "this key has not signed gets its attached SBOM and provenance "
                                                 "signed before any tag moves (also SGLSTACK_SIGNING_KEY)")
    unsigned: bool = option("promote without a signature (the only way to promote without a key)", False, kind=bool)


@command(PublishOptions)
def publish(o: PublishOptions) -> int:
    """Promote a tested digest to the stack's release tags, or roll the moving tags back to it; signed with
    --signing-key (or SGLSTACK_SIGNING_KEY), or explicitly --unsigned."""
    # at call time: the registry client, cryptography and the matrix are slow to import
    from ..attest.signing import KEY_ENV, load_signing_key
    from ..config.matrix import load_matrix
    from ..publish.digest import publish_digest, signed_or_unsigned

    stack = load_matrix(o.stacks_file).get(o.stack)  # bad input, in the order build reads it: matrix, then key
    signed_or_unsigned(o.stack, bool(o.signing_key or os.environ.get(KEY_ENV)), o.unsigned)
    signing_key = None if o.unsigned else load_signing_key(o.signing_key)  # before the registry is asked anything
    return publish_digest(stack, o.digest, key=signing_key, unsigned=o.unsigned, registry=o.registry,
                          config_hash=o.config_hash, force=o.force, smoke_report=o.smoke_report)


@dataclass(frozen=True)
class PublishIndexOptions(TaskOptions):
    stack: str = stack_option("stack name from the matrix (one of several platforms)")
    tag: str = required("the tag to write the index under (a candidate tag: promote it with publish --digest)")
    platform_digest: tuple[str, ...] = repeatable("PLATFORM=sha256:... of each platform's pushed image "
                                                  "(repeatable, one per platform of the stack)")
    stacks_file: str = stacks_file_option()
    registry: str | None = registry_option()
    signing_key: str | None = signing_key_option("the ed25519 private key (PEM) the index and each platform's "
                                                 "manifest are signed with before the tag is written: a platform this "
                                                 "key already signed is verified, not signed again (also "
                                                 "SGLSTACK_SIGNING_KEY)")
    unsigned: bool = option("write the index without a signature (the only way without a key)", False, kind=bool)


@command(PublishIndexOptions, name="publish-index")
def publish_index(o: PublishIndexOptions) -> int:
    """Write one index of the stack's per-platform images (each checked to be its platform) under --tag; the
    index and each platform signed with --signing-key (or SGLSTACK_SIGNING_KEY) first, or explicitly --unsigned."""
    # at call time: the registry client, cryptography and the matrix are slow to import
    from ..attest.signing import KEY_ENV, load_signing_key
    from ..config.matrix import load_matrix
    from ..publish.digest import signed_or_unsigned
    from ..publish.index import publish_index as write_index

    stack = load_matrix(o.stacks_file).get(o.stack)
    signed_or_unsigned(o.stack, bool(o.signing_key or os.environ.get(KEY_ENV)), o.unsigned, index=True)
    signing_key = None if o.unsigned else load_signing_key(o.signing_key)  # before the registry is asked anything
    made = write_index(stack, list(o.platform_digest), tag=o.tag, registry=o.registry, key=signing_key)
    for line in made.signed:
        print(f"  signed: {line}")
    print(f"{stack.name}: index {made.ref} ({' '.join(made.platforms)}) under tag {made.tag}: smoke it where the "
          f"node matches, then invoke publish --stack {stack.name} --digest {made.digest}")
    return 0


@dataclass(frozen=True)
class RegistryUpOptions(TaskOptions):
    port: int | None = option("loopback port (default 5000)", kind=int)


@command(RegistryUpOptions, name="up")
def registry_up(o: RegistryUpOptions) -> None:
    """Start the local registry on 127.0.0.1:PORT (registry:2 container, else docker-registry binary)."""
    from ..registry.local import registry_up as up  # at call time: the Docker SDK is slow to import

    print(up(port=o.port))


@dataclass(frozen=True)
class RegistryDownOptions(TaskOptions):
    pass


@command(RegistryDownOptions, name="down")
def registry_down(o: RegistryDownOptions) -> None:
    """Stop the local registry; its data stays for the next `registry.up`."""
    from ..registry.local import registry_down as down  # at call time: the Docker SDK is slow to import

    print(down())


@dataclass(frozen=True)
class CleanupOptions(TaskOptions):
    stack: str | None = only_stack_option()
    stacks_file: str = stacks_file_option()
    registry: str | None = registry_option("registry host or repository (default: each stack's repository)")
    older_than_days: str | None = option("remove candidates older than this (default 7)")
    dry_run: bool = option("list what would be removed", False, kind=bool)


@command(CleanupOptions, name="cleanup")
def registry_cleanup(o: CleanupOptions) -> int:
    """Remove old candidate tags (and the manifests of candidates that were never released)."""
    # at call time: the registry client and the matrix are slow to import
    from ..config.matrix import load_matrix
    from ..core.console import console, plain
    from ..publish.cleanup import cleanup_candidates, parse_days

    days = parse_days(o.older_than_days)
    matrix = load_matrix(o.stacks_file)
    stacks = [matrix.get(o.stack)] if o.stack else [matrix.get(n) for n in matrix.names()]
    removed = cleanup_candidates(stacks, registry=o.registry, older_than_days=days, dry_run=o.dry_run)
    out = console()
    verb = "would remove" if o.dry_run else "removed"
    for ref in removed:
        out.print(f"{verb} {plain(ref)}")  # a tag the registry listed
    out.print(f"{len(removed)} candidate(s) {verb}")
    return 0
