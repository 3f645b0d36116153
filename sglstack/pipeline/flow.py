"""`invoke build [--push]`: the one place Build and Publish meet, so it is a part above both.

Build knows no registry and no smoke; Publish never builds. The pipeline renders the plan of a dry run,
builds (reusing a verified candidate a registry already has), and with `--push` hands the verified image
to Publish's release (candidate push, smoke by digest, promotion).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..adapters.buildkit import detect_builder
from ..adapters.docker import is_local_docker_host
from ..attest.errors import BadInput
from ..attest.release import AttestPlan
from ..attest.signing import load_signing_key
from ..config.imageref import names_its_registry
from ..config.platforms import platform_of_machine
from ..config.schema import Stack
from ..core.clock import utc_today
from ..core.errors import BuildError, RegistryError, SglstackError
from ..core.labels import CONFIG_HASH_LABEL, VERIFIED_LABEL
from ..core.records import stack_lock
from ..imagebuild.flow import FINAL_TARGET, build_stack, check_build_folder, describe_build
from ..imagebuild.plan import BuildSettings, check_target, resolve_ca_bundle
from ..lock.trust import lock_for_build, platform_locks
from ..lockfile.current import missing_message, missing_platform_lock
from ..lockfile.model import disagreement_text, lock_path, platform_disagreements
from ..publish import reference_platforms, release, release_smoke_options, target_repository
from ..publish.platforms import IndexNotItsPlatforms
from ..publish.tags import release_tags
from ..registry.client import RegistryClient
from ..serving import check_mount_sources, require_draft_fits, serving_argv, serving_spec


def candidate_in_registry(stack: Stack, config_hash: str, registry: str | None) -> str | None:
    """The candidate of this config in the target registry, as `repo@sha256:...`, if it is there and
    was verified. A registry that cannot be reached is not an error here: the build simply goes ahead."""
    try:
        repo = target_repository(stack, registry)
        candidate = release_tags(stack, config_hash, utc_today()).candidate
        client = RegistryClient.from_environment(repo.registry, attempts=1, timeout_s=3.0)
        found = client.manifest_digest(repo.path, candidate)
        if not found:
            return None
        labels = (client.image_config(repo.path, found).get("config") or {}).get("Labels") or {}
    except (RegistryError, requests.RequestException, OSError):
        return None
    if labels.get(CONFIG_HASH_LABEL) == config_hash and labels.get(VERIFIED_LABEL) == "true":
        return repo.ref(found)
    return None


def describe_plan(stack: Stack, options: BuildSettings, *, push: bool, registry: str | None,
                  signed: bool = True) -> list[str]:
    """What `invoke build [--push]` would do: the build, then what a release would push, serve and tag."""
    lines, config_hash = describe_build(stack, options)
    if options.effective_target != FINAL_TARGET:
        lines.append(f"push:         no (only the '{FINAL_TARGET}' target is released)")
        return lines
    # Without --push nothing leaves this machine, but the plan still shows what a release would do.
    when = "" if push else " (with --push)"
    tags = release_tags(stack, config_hash, utc_today())
    repo = registry or stack.publish.repository
    if not push:
        lines.append("push:         no (add --push to release: candidate push, smoke by digest, promote)")
    lines.append(f"push{when}: {repo}:{tags.candidate} (candidate)")
    spec = serving_spec(stack)
    for kind, server in (("baseline", spec.baseline()), ("eagle3", spec.with_speculation())):
        lines.append(f"smoke {kind}{when}: {shlex.join(serving_argv(server))}")
    signature = "ed25519 signature" if signed else "no signature (--unsigned)"
    lines.append(f"attest{when}: SBOM (CycloneDX), provenance (in-toto SLSA v1), {signature} -> "
                 f"{repo}@<tested digest> (referrers API or sha256-<hex>.<kind> tags)")
    platforms = stack.whole_platforms
    if len(platforms) > 1:  # released as one index of every platform, not as this platform's image
        lines.append(f"promote{when}: none for {stack.platforms[0]} alone: the stack ({' '.join(platforms)}) is "
                     "released as one index (invoke publish-index, then invoke publish --digest INDEX)")
    else:
        lines.append(f"promote{when}: {', '.join(f'{repo}:{t}' for t in tags.release)} -> the tested digest")
    return lines


def check_release_inputs(stack: Stack, *, push: bool, target: str | None, key: str | None, unsigned: bool,
                         smoke_opts: list[str], registry: str | None,
                         docker_host: str | None) -> Ed25519PrivateKey | None:
    """What `--push` needs that can be checked before the build (bad input, exit 2), for the dry run as
    for the real one: the target, the signing key (read, held in memory only), the registry's name and
    every `--smoke-opt` as the release smoke will read it. Returns the signing key (None: unsigned)."""
    name = stack.name
    if not push:
        for flag, given in (("--smoke-opt", smoke_opts), ("--signing-key", key), ("--unsigned", unsigned)):
            if given:
                raise BadInput(f"stack '{name}': {flag} is for a release: add --push, or drop {flag}")
        return None
    if target and target != FINAL_TARGET:
        raise BadInput(f"stack '{name}': --push releases the serving image; drop --target {target}")
    if key and unsigned:
        raise BadInput(f"stack '{name}': give --signing-key or --unsigned, not both")
    signing_key = None if unsigned else load_signing_key(key)
    target_repository(stack, registry)
    smoke = release_smoke_options(stack, smoke_opts, docker_host=docker_host)
    if smoke.runner != "process":
        # As the release smoke checks them, but before the build: a bind source missing on this machine
        # (a typed `--smoke-opt mount=` or the stack's own) would fail the smoke after the whole build.
        check_mount_sources(smoke.serving, local=is_local_docker_host(smoke.docker_host))
    if smoke.runner != "process" and is_local_docker_host(smoke.docker_host):
        _require_smoke_host_platform(stack)
    if "eagle3" in smoke.kinds and (smoke.runner == "process" or is_local_docker_host(smoke.docker_host)):
        # A draft that cannot fit would fail the release smoke after the whole build: refused now.
        require_draft_fits(smoke.serving, container=smoke.runner != "process")
    return signing_key


def _require_platforms_agree(stacks_file: str, whole: Stack) -> None:
    """The platforms' locks pin every package both install at one version, checked where each platform is
    built (not only by `stacks --check`, which a CI job may skip): a placeholder one platform fell back to
    never ships."""
    if differ := platform_disagreements(platform_locks(stacks_file, whole)):
        raise BadInput(f"stack '{whole.name}': {disagreement_text(differ)}")


def _require_base_serves(stack: Stack) -> None:
    """A registry base of a stack of several platforms serves the platform built. Pinned by one platform's
    manifest digest, BuildKit takes it for any platform: an arm64 build ran on an amd64 base and was refused
    only by the shared-library check, after the whole build, blaming a wheel. A registry out of reach is left
    to BuildKit."""
    if stack.base_seed or not names_its_registry(stack.base_image):
        return
    try:
        served = reference_platforms(stack.base_image)
    except IndexNotItsPlatforms as exc:
        raise BadInput(f"stack '{stack.name}': base image: {exc}") from None
    except SglstackError:
        return
    if served and stack.platforms[0] not in served:
        raise BadInput(f"stack '{stack.name}': base image {stack.base_image} is for {' '.join(served)}, not "
                       f"{stack.platforms[0]}: pin the digest of an index that lists every platform of the stack")


def _require_smoke_host_platform(stack: Stack) -> None:
    """The release smoke serves the image on the smoke's Docker host, which must be of the platform built: an
    arm64 build smoked on this x86 engine would be refused there (it would run emulated), after the whole build."""
    node = platform_of_machine("linux", os.uname().machine)  # a local engine's is this machine's: nothing asked
    if node != stack.platforms[0]:
        raise BadInput(f"stack '{stack.name}': --push smoke-tests the {stack.platforms[0]} image on the local Docker "
                       f"host, which is {node}: give --smoke-opt docker_host=<a {stack.platforms[0]} node's engine>")


@dataclass(frozen=True)
class BuildPlan:
    """A build checked before any Docker work: the stack, the build's settings, the release's signing key
    (None: no release, or --unsigned), and why no lock pins it (None: one does)."""

    stack: Stack
    settings: BuildSettings
    signing_key: Ed25519PrivateKey | None
    lock_missing: str | None


def plan_build(stacks_file: str, whole: Stack, *, target: str | None = None, no_cache: bool = False,
               force: bool = False, full_verify: bool = False, dry_run: bool = False, push: bool = False,
               ca_bundle: str | None = None, docker_cli: str | None = None, docker_host: str | None = None,
               registry: str | None = None,
               smoke_opts: list[str] | None = None, builder_name: str | None = None, key: str | None = None,
               unsigned: bool = False, platform: str | None = None) -> BuildPlan:
    """Every input of `invoke build [--push]` checked (bad input, exit 2), the dry run's as the real one's.
    `whole`: the stack as the matrix `stacks_file` gives it (its locks are beside that file)."""
    stack_name = whole.name
    # One platform per build (BuildKit --platform): its base, its lock, its record (default: the first).
    stack = whole.for_platform(platform or whole.platforms[0])
    lock = lock_for_build(stacks_file, stack)  # a stale lock stops here, before any Docker work
    check_target(stack, target, lock)  # the Dockerfile the build renders: with its lock (a wheels stage)
    resolve_ca_bundle(ca_bundle)  # a CA bundle that is not a file is refused now, dry run too, not after the render
    signing_key = check_release_inputs(stack, push=push, target=target, key=key, unsigned=unsigned,
                                       smoke_opts=smoke_opts or [], registry=registry, docker_host=docker_host)
    if push and not dry_run:
        # The registry answers before the build, not an hour after it: unreachable or refusing our
        # credentials, the release would fail at its first push.
        RegistryClient.from_environment(target_repository(stack, registry).registry, attempts=1).ping()
    if builder_name is not None or docker_cli is not None:
        # A client named on the command line that is not there, or without buildx for --builder, stops
        # here, before any work, the dry run too (whose plan would otherwise show "not possible here").
        detect_builder(docker_cli, builder_name)
    missing = None if lock is not None else missing_message(
        stack_name, lock_path(stacks_file, stack_name, stack.lock_platform))
    if missing and len(stack.whole_platforms) > 1:
        # Without its lock a platform resolves in the build, where a wrong tag falls back silently (an older
        # pure-Python SGLang, a placeholder package) and the platforms' agreement is never checked.
        raise BadInput(f"stack '{stack_name}': "
                       f"{missing_platform_lock(stack_name, lock_path(stacks_file, stack_name, stack.lock_platform))}")
    if lock is not None and len(stack.whole_platforms) > 1:
        _require_platforms_agree(stacks_file, stack.whole or stack)
    if len(stack.whole_platforms) > 1:
        _require_base_serves(stack)
    settings = BuildSettings(target=target, no_cache=no_cache, force=force, full_verify=full_verify,
                             ca_bundle=ca_bundle, docker_cli=docker_cli, docker_host=docker_host,
                             builder_name=builder_name, lock=lock,
                             remote_lookup=lambda s, h: candidate_in_registry(s, h, registry))
    return BuildPlan(stack, settings, signing_key, missing)


def build_and_release(plan: BuildPlan, *, push: bool = False, registry: str | None = None,
                      smoke_opts: list[str] | None = None) -> int:
    """Build (reusing a verified candidate), verify, record; with `push`, release the image: candidate push,
    smoke by digest, attestations, promotion. The exit code."""
    stack, settings = plan.stack, plan.settings
    check_build_folder(stack, settings)
    with stack_lock(stack.name, "build"):  # the release too: its smoke and records belong to this build
        result = build_stack(stack, settings)
        if not push:
            return 0
        if result.record_path is None:  # nothing to make the attestations from: not a release
            raise BuildError(f"stack '{stack.name}': the build left no record, so nothing can be attested")
        attest = AttestPlan(result.record_path, plan.signing_key, settings.docker_host)
        return release(stack, image_ref=result.tag, config_hash=result.config_hash, registry=registry,
                       docker_host=settings.docker_host, smoke_opts=list(smoke_opts or []), force=settings.force,
                       attest=attest, sign_published=attest.sign_published if plan.signing_key else None).exit_code
