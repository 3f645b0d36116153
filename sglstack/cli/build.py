"""Building: `invoke build` (and its release, --push), `invoke bake`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.options import (
    ReportOptions,
    TaskOptions,
    docker_host_option,
    option,
    repeatable,
    required,
    stacks_file_option,
)
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport

CA_BUNDLE = "extra CA bundle passed as a BuildKit secret (also SGLSTACK_CA_BUNDLE)"


@dataclass(frozen=True)
class BuildOptions(ReportOptions):
    stack: str = required("stack name from the matrix")
    stacks_file: str = stacks_file_option()
    target: str | None = option("build one stage only (e.g. sglang-src)")
    no_cache: bool = option("build without BuildKit's cache", False, kind=bool)
    force: bool = option("rebuild even when an image of this config hash exists", False, kind=bool)
    full_verify: bool = option("run every check of the verify step again, reusing none (each check otherwise "
                               "runs only where the files it reads changed)", False, kind=bool)
    dry_run: bool = option("print the plan (render, build command, tags, smoke) without touching Docker", False,
                           kind=bool)
    push: bool = option("release: push a candidate, smoke it by digest, promote the tested digest", False, kind=bool)
    ca_bundle: str | None = option(CA_BUNDLE)
    docker_cli: str | None = option("BuildKit-capable docker client binary (also SGLSTACK_DOCKER_CLI)")
    docker_host: str | None = docker_host_option(
        "Docker engine URL for the build (default: DOCKER_HOST / local socket)")
    registry: str | None = option("registry repository to push to (default: the stack's publish.repository)")
    smoke_opt: tuple[str, ...] = repeatable("extra option for the release smoke, KEY=VALUE (repeatable)")
    builder: str | None = option("buildx builder instance to build on (docker buildx create --name NAME: "
                                 "docker-container, remote buildkitd, kubernetes); needs buildx")
    signing_key: str | None = option("--push: the ed25519 private key (PEM) that signs the release's attestations "
                             "(also SGLSTACK_SIGNING_KEY: a path or the PEM; never written anywhere)")
    unsigned: bool = option("--push without a signature (SBOM and provenance are still attached)", False, kind=bool)


@command(BuildOptions)
def build(o: BuildOptions, as_json: JsonReport) -> int:
    """Render and build a stack with BuildKit, verify the image, record it; --push releases it (--json,
    --json-out: the plan of --dry-run)."""
    from .pipeline import build_command  # at call time: the Docker SDK and the matrix are slow to import

    return build_command(o.stacks_file, o.stack, target=o.target, no_cache=o.no_cache, force=o.force,
                         full_verify=o.full_verify,
                         dry_run=o.dry_run, push=o.push, ca_bundle=o.ca_bundle, docker_cli=o.docker_cli,
                         docker_host=o.docker_host, registry=o.registry, smoke_opts=list(o.smoke_opt),
                         builder_name=o.builder, key=o.signing_key, unsigned=o.unsigned,
                         as_json=as_json)


@dataclass(frozen=True)
class BakeOptions(TaskOptions):
    stack: tuple[str, ...] = repeatable("only this stack (repeatable; default: the whole matrix)")
    stacks_file: str = stacks_file_option()
    out: str | None = option("the bake file (default: build/docker-bake.json, under SGLSTACK_BUILD_DIR if set)")
    print: bool = option("print the bake file's JSON instead of the summary", False, kind=bool)
    builder: str | None = option("buildx builder instance for the printed (or run) bake command")
    ca_bundle: str | None = option(CA_BUNDLE)
    docker_cli: str | None = option("docker client with buildx, for --run (also SGLSTACK_DOCKER_CLI)")
    run: bool = option("run docker buildx bake too (needs buildx)", False, kind=bool)


@command(BakeOptions)
def bake(o: BakeOptions) -> int:
    """Write build/docker-bake.json (a target per stack and stage) and its contexts; print the bake command."""
    from ..imagebuild.bake import bake_command  # at call time: the matrix and the renderer are slow to import

    return bake_command(o.stacks_file, list(o.stack), out=o.out, print_only=o.print, builder_name=o.builder,
                        ca_bundle=o.ca_bundle, docker_cli=o.docker_cli, run=o.run)
