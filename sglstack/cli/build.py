"""Building: `invoke build` (and its release, --push), `invoke bake`."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.jsonreport import NO_JSON, dumps
from ..core.options import (
    ReportOptions,
    TaskOptions,
    docker_host_option,
    option,
    stacks_file_option,
)
from .cmdoptions import (
    ca_bundle_option,
    docker_cli_option,
    registry_option,
    signing_key_option,
    smoke_opt_option,
    stack_option,
    stacks_option,
)
from .options import command

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..core.jsonreport import JsonReport


@dataclass(frozen=True)
class BuildOptions(ReportOptions):
    stack: str = stack_option()
    stacks_file: str = stacks_file_option()
    target: str | None = option("build one stage only (e.g. sglang-src)")
    no_cache: bool = option("build without BuildKit's cache", False, kind=bool)
    force: bool = option("rebuild even when an image of this config hash exists", False, kind=bool)
    full_verify: bool = option("run every check of the verify step again, reusing none (each check otherwise "
                               "runs only where the files it reads changed)", False, kind=bool)
    dry_run: bool = option("print the plan (render, build command, tags, smoke) without touching Docker", False,
                           kind=bool)
    push: bool = option("release: push a candidate, smoke it by digest, promote the tested digest", False, kind=bool)
    ca_bundle: str | None = ca_bundle_option()
    docker_cli: str | None = docker_cli_option()
    docker_host: str | None = docker_host_option(
        "Docker engine URL for the build (default: DOCKER_HOST / local socket)")
    registry: str | None = registry_option("registry repository to push to (default: the stack's publish.repository)")
    smoke_opt: tuple[str, ...] = smoke_opt_option("extra option for the release smoke, KEY=VALUE (repeatable)")
    builder: str | None = option("buildx builder instance to build on (docker buildx create --name NAME: "
                                 "docker-container, remote buildkitd, kubernetes); needs buildx")
    signing_key: str | None = signing_key_option("--push: the ed25519 private key (PEM) that signs the release's "
                                                 "attestations (also SGLSTACK_SIGNING_KEY: a path or the PEM; never "
                                                 "written anywhere)")
    unsigned: bool = option("--push without a signature (SBOM and provenance are still attached)", False, kind=bool)
    platform: str | None = option("the stack's platform to build (default: its first): its base, its lock; a "
                                  "foreign one runs its RUN steps under QEMU")


@command(BuildOptions)
def build(o: BuildOptions, as_json: JsonReport) -> int:
    """Render and build a stack with BuildKit, verify the image, record it; --push releases it (--json,
    --json-out: the plan of --dry-run)."""
    return build_command(o.stacks_file, o.stack, target=o.target, no_cache=o.no_cache, force=o.force,
                         full_verify=o.full_verify, dry_run=o.dry_run, push=o.push, ca_bundle=o.ca_bundle,
                         docker_cli=o.docker_cli, docker_host=o.docker_host, registry=o.registry,
                         smoke_opts=list(o.smoke_opt), builder_name=o.builder, key=o.signing_key,
                         unsigned=o.unsigned, as_json=as_json, platform=o.platform)


@dataclass(frozen=True)
class BakeOptions(TaskOptions):
    stack: tuple[str, ...] = stacks_option("only this stack (repeatable; default: the whole matrix)")
    stacks_file: str = stacks_file_option()
    out: str | None = option("the bake file (default: build/docker-bake.json, under SGLSTACK_BUILD_DIR if set)")
    print: bool = option("print the bake file's JSON instead of the summary", False, kind=bool)
    builder: str | None = option("buildx builder instance for the printed (or run) bake command")
    ca_bundle: str | None = ca_bundle_option()
    docker_cli: str | None = option("docker client with buildx, for --run (also SGLSTACK_DOCKER_CLI)")
    run: bool = option("run docker buildx bake too (needs buildx)", False, kind=bool)


@command(BakeOptions)
def bake(o: BakeOptions) -> int:
    """Write build/docker-bake.json (a target per stack and stage) and its contexts; print the bake command."""
    return bake_command(o.stacks_file, list(o.stack), out=o.out, print_only=o.print, builder_name=o.builder,
                        ca_bundle=o.ca_bundle, docker_cli=o.docker_cli, run=o.run)


def build_command(stacks_file: str, stack_name: str, *, target: str | None = None, no_cache: bool = False,
                  force: bool = False, full_verify: bool = False, dry_run: bool = False, push: bool = False,
                  ca_bundle: str | None = None,
                  docker_cli: str | None = None, docker_host: str | None = None, registry: str | None = None,
                  smoke_opts: list[str] | None = None, builder_name: str | None = None,
                  key: str | None = None, unsigned: bool = False, as_json: JsonReport = NO_JSON,
                  platform: str | None = None) -> int:
    """Every input checked, then the plan printed (--dry-run) or the build (and release) run."""
    # at call time: the Docker SDK and the matrix are slow to import
    from ..attest.errors import BadInput
    from ..config.matrix import load_matrix
    from ..core.console import console as make_console
    from ..core.console import plain
    from ..core.errors import one_line
    from ..pipeline.flow import build_and_release, describe_plan, plan_build

    if as_json and not dry_run:
        raise BadInput("build: --json and --json-out report the plan of --dry-run (a build reports as it goes)")
    plan = plan_build(stacks_file, load_matrix(stacks_file).get(stack_name), target=target, no_cache=no_cache,
                      force=force, full_verify=full_verify, dry_run=dry_run,
                      push=push, ca_bundle=ca_bundle, docker_cli=docker_cli, docker_host=docker_host,
                      registry=registry, smoke_opts=smoke_opts, builder_name=builder_name, key=key, unsigned=unsigned,
                      platform=platform)
    if plan.lock_missing:
        make_console().print(f"[yellow]warning[/]: stack '{stack_name}': {plain(plan.lock_missing)}", highlight=False)
    if not dry_run:
        return build_and_release(plan, push=push, registry=registry, smoke_opts=smoke_opts)
    lines = describe_plan(plan.stack, plan.settings, push=push, registry=registry, signed=not unsigned)
    steps = [line.partition(":") for line in lines]  # each line is `step: what`, the step padded for the eye
    as_json.emit({"stack": plan.stack.name, "push": push,
                  "plan": [{"step": step.strip(), "detail": detail.strip()} for step, _, detail in steps]})
    if not as_json.stdout:
        for line in lines:
            make_console().print(one_line(line), highlight=False, markup=False)
    return 0


def bake_command(stacks_file: str, stack_names: Sequence[str] = (), *, out: str | None = None,
                 print_only: bool = False, builder_name: str | None = None, ca_bundle: str | None = None,
                 docker_cli: str | None = None, run: bool = False) -> int:
    """Write the bake file and every context it points at (`sglstack.imagebuild.bake`); print (or run) the bake."""
    # at call time: the matrix and the renderer are slow to import
    from ..core.console import console as make_console
    from ..core.console import plain
    from ..imagebuild.bake import DEFAULT_GROUP, bake_argv, buildx_client, run_bake, write_bake
    from ..imagebuild.plan import INDEX_NETRC_ENV

    written = write_bake(stacks_file, stack_names, out=out, ca_bundle=ca_bundle)
    console = make_console()
    if print_only:
        sys.stdout.write(dumps(written.definition))
    else:
        console.print(f"bake file: {plain(written.path)} ({len(written.definition['target'])} targets, "
                      f"{len(written.stacks)} stacks; group '{DEFAULT_GROUP}' is the whole matrix)", highlight=False)
    cli = buildx_client(docker_cli) if run else None
    argv = bake_argv(cli or "docker", written.path, builder_name=builder_name)
    if written.logins and not print_only:
        console.print(f"credentials: the targets read the netrc of {', '.join(x.host for x in written.logins)} from "
                      f"{INDEX_NETRC_ENV} (a BuildKit secret): set it to that netrc before running bake "
                      "yourself (--run sets it from stacks.yaml)", highlight=False, markup=False)
    if not print_only:
        console.print(f"run: {shlex.join(argv)}", highlight=False, markup=False)
        console.print("then: invoke build --stack STACK [--builder NAME] [--push] verifies, tags and releases "
                      "each image from the same cache", highlight=False, markup=False)
    return run_bake(written, cli, argv) if run else 0


@dataclass(frozen=True)
class SeedBaseOptions(TaskOptions):
    stack: str = stack_option("stack name from the matrix (one with base_seed)")
    stacks_file: str = stacks_file_option()
    platform: str | None = option("only this platform of the stack (linux/amd64, linux/arm64; default: each)")
    docker_host: str | None = docker_host_option("Docker engine URL to load the base into (default: DOCKER_HOST / "
                                                 "local socket)")


@command(SeedBaseOptions, name="seed-base")
def seed_base(o: SeedBaseOptions) -> int:
    """Make the stack's seeded Debian base for each platform (mmdebstrap; QEMU for a foreign one) and load it;
    exit 1 when the bytes made here are not the pinned root file system."""
    # at call time: the Docker SDK and pydantic are slow to import
    from ..config.matrix import load_matrix
    from ..imagebuild.seedbase import seed_stack

    for s in seed_stack(load_matrix(o.stacks_file).get(o.stack), platform=o.platform, docker_host=o.docker_host):
        how = "already there" if s.already else f"seeded in {s.seconds:.0f} s{' (emulated)' if s.emulated else ''}"
        print(f"{o.stack}: {s.platform}: {s.image} {how}: rootfs {s.rootfs}, image {s.image_id}")
    return 0
