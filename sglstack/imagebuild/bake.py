"""`invoke bake`: the whole matrix as one BuildKit bake file, for `docker buildx bake` on any builder.

Each target is the build request `invoke build` makes for that stack and stage (`build.build_request`),
written in bake's JSON: the same Dockerfile, context, target, labels, secrets, platform and registry
cache. sglstack drives bake and does not imitate it: bake schedules the targets in parallel on the
builder (docker-container, remote buildkitd, kubernetes, Depot) and fills the shared cache. Tags stay
`invoke build`'s: it sets them only on an image it verified, so a bake target carries none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# buildx_client is the face's too (it names the client in the command it prints): re-exported for it
from ..adapters.buildkit import BuildRequest, registry_cache, run_buildx_bake
from ..adapters.buildkit import buildx_client as buildx_client
from ..config.matrix import load_matrix
from ..config.schema import Stack
from ..core.credentials import CredentialError, HostLogin, merge_logins, netrc_text
from ..core.errors import BuildError, ConfigError, DockerUnavailable
from ..core.folderlock import folder_lock
from ..core.jsonreport import write_json
from ..core.records import build_root, require_writable, stack_dir
from ..core.safefiles import containing_root
from ..lock.outputs import input_path_problem
from ..lock.trust import lock_for_build
from ..lockfile.model import Lock
from .context import write_build_context
from .flow import FINAL_TARGET
from .plan import (
    INDEX_NETRC_ENV,
    add_git_source,
    build_request,
    compute_config_hash,
    resolve_ca_bundle,
    secret_sources,
    stack_folder_name,
)

BAKE_FILE = "docker-bake.json"
SRC_TARGET = "sglang-src"
STAGES = (SRC_TARGET, FINAL_TARGET)
# Groups: the whole matrix (its serving images; bake builds the stages they need once) and each stage.
DEFAULT_GROUP, MATRIX_GROUP = "default", "matrix"
# bake's target names are letters, digits, '_' and '-'; a stack name may also hold '.'.
_NOT_IN_TARGET_NAME = re.compile(r"[^A-Za-z0-9_-]")
# What `--load` is in a bake target: `invoke build` loads the image into the engine it verifies in.
LOAD_OUTPUT = "type=docker"


def target_name(stack_name: str, stage: str) -> str:
    return _NOT_IN_TARGET_NAME.sub("_", f"{stack_name}-{stage}")


def bake_target(req: BuildRequest) -> dict[str, Any]:
    """One bake target (JSON) passing exactly what `build_argv` passes to `docker buildx build`."""
    cache_from, cache_to = registry_cache(req)
    target: dict[str, Any] = {
        "context": str(req.context),
        "dockerfile": str(req.dockerfile),  # absolute: bake reads a relative one from the context
        "args": dict(sorted(req.build_args.items())),
        "labels": dict(sorted(req.labels.items())),
        "tags": [],
        "secret": [*(f"id={sid},src={path}" for sid, path in sorted(req.secrets.items())),
                   *(f"id={sid},env={var}" for sid, var in sorted(req.env_secrets.items()))],
        "output": [LOAD_OUTPUT],
    }
    if req.target:
        target["target"] = req.target
    if req.platform:
        target["platforms"] = [req.platform]
    if cache_from:
        target["cache-from"] = cache_from
    if cache_to:
        target["cache-to"] = cache_to
    if req.no_cache:
        target["no-cache"] = True
    return target


@dataclass(frozen=True)
class BakePlan:
    """Every target of the bake file: name -> (stack, stage, the build request)."""

    targets: Mapping[str, tuple[str, str, BuildRequest]]

    def names(self, stage: str) -> list[str]:
        return [name for name, (_, s, _) in self.targets.items() if s == stage]


def bake_definition(plan: BakePlan) -> dict[str, Any]:
    """The bake file: a target per stack and stage, a group for the matrix and one per stage."""
    matrix = plan.names(FINAL_TARGET)
    groups = {DEFAULT_GROUP: {"targets": matrix}, MATRIX_GROUP: {"targets": matrix},
              **{stage: {"targets": plan.names(stage)} for stage in STAGES if stage != FINAL_TARGET}}
    return {"group": groups, "target": {name: bake_target(req) for name, (_, _, req) in plan.targets.items()}}


def plan_targets(requests: Iterable[tuple[str, str, BuildRequest]]) -> BakePlan:
    """Name each (stack, stage, request); two stacks whose names bake would spell alike are an error."""
    targets: dict[str, tuple[str, str, BuildRequest]] = {}
    for stack_name, stage, req in requests:
        name = target_name(stack_name, stage)
        if name in targets:
            raise BuildError(f"stacks '{targets[name][0]}' and '{stack_name}' both make the bake target '{name}' "
                             f"(bake names hold only letters, digits, '_' and '-'): rename one")
        targets[name] = (stack_name, stage, req)
    return BakePlan(targets)


def bake_argv(cli: str, bake_file: Path, *, builder_name: str | None = None,
              targets: Sequence[str] = (DEFAULT_GROUP,)) -> list[str]:
    instance = ["--builder", builder_name] if builder_name else []
    return [cli, "buildx", "bake", "-f", str(bake_file), *instance, "--progress=plain", *targets]


# ---- the task --------------------------------------------------------------------------------------

def render_stack_targets(stack: Stack, out_dir: Path, lock: Lock | None,
                         secrets: tuple[Mapping[str, Path], Mapping[str, str]]) -> list[tuple[str, str, BuildRequest]]:
    """Render the stack's context where its targets point, and its request for every stage."""
    # Under the stack's folder lock: a build of the stack may be hashing this very context.
    with folder_lock(out_dir, "bake", root=containing_root(out_dir, build_root()), stack=stack.name):
        rendered = add_git_source(stack, write_build_context(stack, out_dir, lock=lock))
    dockerfile, context = rendered.dockerfile.resolve(), rendered.context.resolve()
    return [(stack_folder_name(stack), stage, build_request(
        stack, dockerfile=dockerfile, context=context, target=stage, builder_kind="buildx", secrets=secrets,
        config_hash=compute_config_hash(rendered, stage, stack.build_platform))) for stage in STAGES]


def write_bake_file(path: Path, definition: Mapping[str, Any]) -> None:
    """Whole or not at all: a temp file beside it, then a rename."""
    write_json(path, definition)


@dataclass(frozen=True)
class WrittenBake:
    """A bake file written: where, its definition, the stacks in it, and the index logins its targets read."""

    path: Path
    definition: dict[str, Any]
    stacks: tuple[Stack, ...]
    logins: tuple[HostLogin, ...]


def write_bake(stacks_file: str, stack_names: Sequence[str] = (), *, out: str | None = None,
               ca_bundle: str | None = None) -> WrittenBake:
    """The bake file of the stacks (default: the whole matrix) and every context it points at, written."""
    matrix = load_matrix(stacks_file)
    names = list(dict.fromkeys(stack_names)) or matrix.names()  # a stack named twice is baked once
    stacks = [matrix.get(name) for name in names]
    # A target per platform of each stack (its base, its lock): bake's own multi-platform targets would share
    # one lock and one base between platforms.
    ones = [stack.for_platform(p) for stack in stacks for p in stack.platforms]
    # Everything that can refuse the run does so before anything is rendered.
    locks = {stack_folder_name(one): lock_for_build(stacks_file, one) for one in ones}
    secrets = secret_sources(resolve_ca_bundle(ca_bundle))
    try:  # one bake run, one client environment: the stacks' netrc entries must agree per host
        logins = merge_logins(login for stack in stacks for login in stack.credentials)
    except CredentialError as exc:
        raise BuildError(f"bake of {', '.join(names)}: {exc}") from None
    bake_file = Path(out) if out else build_root() / BAKE_FILE
    problem = input_path_problem(out, stacks_file, "`invoke bake`", option="--out") if out else None
    if problem:
        raise ConfigError(problem)
    require_writable(bake_file, what="bake file")
    requests = [target for one in ones
                for target in render_stack_targets(one, stack_dir(one.name, platform=one.lock_platform),
                                                   locks[stack_folder_name(one)], secrets)]
    definition = bake_definition(plan_targets(requests))
    write_bake_file(bake_file, definition)
    return WrittenBake(bake_file, definition, tuple(stacks), tuple(logins))


def run_bake(plan: WrittenBake, cli: str | None, argv: Sequence[str]) -> int:
    """`docker buildx bake` by `cli` (`buildx_client`'s; None: none here has buildx, a one-line refusal), with
    the netrc of the targets' index logins as a BuildKit secret's source."""
    if cli is None:
        raise DockerUnavailable("bake not run: no docker client here has buildx (docker buildx version failed); "
                                "the bake file is written, run the command above where buildx is installed")
    netrc_env = {INDEX_NETRC_ENV: netrc_text(plan.logins)} if plan.logins else {}
    return run_buildx_bake(argv, netrc_env)
