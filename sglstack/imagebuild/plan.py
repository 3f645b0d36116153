"""Pure planning of a build: its options and result, the tags, the secrets it is handed, the BuildKit request
and the config hash. Nothing here builds; `flow` runs what this plans.
"""

from __future__ import annotations

import dataclasses
import os
import secrets as pysecrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..adapters.buildkit import (
    BuildRequest,
)
from ..adapters.git import GitSource
from ..config.schema import Stack
from ..core import records
from ..core.credentials import netrc_text
from ..core.errors import BuildInputError, did_you_mean
from ..core.labels import BUILDER_LABEL, CONFIG_HASH_LABEL, TARGET_LABEL
from ..core.records import stack_dir
from ..lockfile.model import Lock
from ..render import confighash
from ..render.dockerfile import GIT_SOURCE_DIR, INDEX_NETRC_SECRET, dockerfile_stages, render_dockerfile
from .context import RenderedContext
from .verify import (
    FINAL_TARGET,
)

CA_BUNDLE_ENV = "SGLSTACK_CA_BUNDLE"
HF_TOKEN_ENV = "HF_TOKEN"
# The client variable holding the stack netrc (`invoke bake` users set it; see docs/stacks-and-settings.md).
INDEX_NETRC_ENV = "SGLSTACK_INDEX_NETRC"
# The build's own short-lived tags live in a repository of their own, named after the stack and config
# hash, and end with a random part: a tag is only ever removed by the build that set it.
TEMP_REPOSITORY = "sglstack-unverified"


RemoteLookup = Callable[[Stack, str], str | None]


@dataclass(frozen=True)
class BuildSettings:
    target: str | None = None
    no_cache: bool = False
    force: bool = False
    full_verify: bool = False  # run every check of the verify step, reusing none (see imagebuild.incremental)
    ca_bundle: str | None = None
    docker_cli: str | None = None
    docker_host: str | None = None
    builder_name: str | None = None  # a buildx builder instance (`--builder NAME`)
    out_dir: Path | None = None  # default: records.stack_dir(STACK)
    show_progress: bool = True
    # Where else a verified image of this config may already be (a registry's candidate, found by
    # Publish's tags): `(stack, config_hash) -> repo@sha256:...`. The pipeline passes it; Build knows
    # no registry.
    remote_lookup: RemoteLookup | None = None
    patches_dir: Path | None = None
    lock: Lock | None = None  # the stack's current lock: layers install it exactly, verify compares with it

    @property
    def effective_target(self) -> str:
        return self.target or FINAL_TARGET


@dataclass(frozen=True)
class BuildResult:
    stack: str
    target: str
    config_hash: str
    image_id: str
    tag: str
    skipped: bool
    record_path: Path | None
    builder: str




# ---- pure planning ---------------------------------------------------------------------------------

def stack_folder_name(stack: Stack) -> str:
    """NAME; a further platform of a stack of several (`Stack.lock_platform`): NAME.OS-ARCH."""
    return records.stack_folder_name(stack.name, stack.lock_platform)


def out_dir_for(stack: Stack, options: BuildSettings) -> Path:
    return options.out_dir or stack_dir(stack.name, platform=stack.lock_platform)


def local_tag(stack: Stack, config_hash: str, target: str) -> str:
    suffix = "" if target == FINAL_TARGET else f"{target}-"
    return f"sglstack/{stack.name}:{suffix}{config_hash[:12]}"


def temporary_ref(stack: Stack, config_hash: str) -> str:
    """A tag of this build alone: two builds of one config never share (or remove) each other's."""
    return f"{TEMP_REPOSITORY}/{stack.name}:{config_hash[:12]}-{pysecrets.token_hex(4)}"


def check_target(stack: Stack, target: str | None, lock: Lock | None = None) -> None:
    """A `--target` names a stage of the stack's Dockerfile (rendered with the lock the build uses: a stack of
    several platforms has a wheels stage), checked when it is typed: a typo is one line with the nearest stage,
    not a plan of a tag (dry run) or a failure deep inside BuildKit."""
    if target is None:
        return
    stages = dockerfile_stages(render_dockerfile(stack, lock))
    if target not in stages:
        raise BuildInputError(f"stack '{stack.name}': --target '{target}' is not a stage of its Dockerfile "
                              f"(stages: {', '.join(stages)}){did_you_mean(target, stages)}")


def resolve_ca_bundle(option: str | None) -> Path | None:
    value = option or os.environ.get(CA_BUNDLE_ENV)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise BuildInputError(f"CA bundle '{value}' (from --ca-bundle or {CA_BUNDLE_ENV}) is not a file")
    return path


def secret_sources(ca_bundle: Path | None) -> tuple[dict[str, Path], dict[str, str]]:
    """BuildKit secrets: the CA bundle from its own file, the HF token from this process's environment.

    `--secret id=hf_token,env=HF_TOKEN` (supported by buildx and by docker 20.10's CLI with
    DOCKER_BUILDKIT=1) hands the value over the BuildKit session, so it is never written to a disk.
    """
    files = {"ca_bundle": ca_bundle} if ca_bundle else {}
    env = {"hf_token": HF_TOKEN_ENV} if os.environ.get(HF_TOKEN_ENV) else {}
    return files, env


def index_netrc_secret(stack: Stack) -> tuple[dict[str, str], dict[str, str]]:
    """({secret id: variable}, {variable: netrc}) for a stack whose URLs had credentials; empty otherwise.

    The netrc reaches the BuildKit client only through its environment (`--secret id=index_netrc,env=...`),
    so the Dockerfile, the context, the command line and the log name the URLs without credentials.
    """
    if not stack.credentials:
        return {}, {}
    return {INDEX_NETRC_SECRET: INDEX_NETRC_ENV}, {INDEX_NETRC_ENV: netrc_text(stack.credentials)}


def build_labels(stack: Stack, config_hash: str, target: str, builder: str) -> dict[str, str]:
    """Labels known before the build (the Dockerfile's own labels carry the pins and patch ids)."""
    return {CONFIG_HASH_LABEL: config_hash, TARGET_LABEL: target, BUILDER_LABEL: builder}


def build_request(stack: Stack, *, dockerfile: Path, context: Path, config_hash: str, target: str,
                  builder_kind: str, secrets: tuple[Mapping[str, Path], Mapping[str, str]],
                  no_cache: bool = False) -> BuildRequest:
    """What one build of a stack's stage passes to BuildKit: `invoke build` and `invoke bake` both use it.

    Only the serving stage exports the registry cache: in `max` mode it holds every stage's layers, and a
    second writer of the same reference (the `sglang-src` stage) would overwrite it with fewer.
    """
    files, env = secrets
    netrc_ids, netrc_values = index_netrc_secret(stack)
    return BuildRequest(dockerfile=dockerfile, context=context, target=target, no_cache=no_cache,
                        labels=build_labels(stack, config_hash, target, builder_kind),
                        secrets=dict(files), env_secrets={**env, **netrc_ids}, secret_env_values=netrc_values,
                        platform=stack.build_platform,
                        cache_ref=stack.cache_ref, cache_mode=stack.cache.mode if stack.cache else "max",
                        cache_export=target == FINAL_TARGET)


def add_git_source(stack: Stack, rendered: RenderedContext) -> RenderedContext:
    """Export a git source's tree at its commit into the context (a context file, so the config hash
    covers it): git on this host fetches it, from any repository it can clone."""
    git = stack.sglang.git
    if git is None:
        return rendered
    GitSource(git.repo, logins=stack.credentials).export(git.ref, git.subdirectory, rendered.context / GIT_SOURCE_DIR)
    files = tuple(sorted(p for p in rendered.context.rglob("*") if p.is_file()))
    return dataclasses.replace(rendered, files=files)


def compute_config_hash(rendered: RenderedContext, target: str, platform: str | None) -> str:
    return confighash.config_hash(rendered.dockerfile.read_text(encoding="utf-8"),
                                  confighash.read_context(rendered.context, rendered.files),
                                  target=target, platform=platform)
