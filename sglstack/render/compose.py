"""Serving spec + image reference -> Compose file text (pure), and the writer of those files.

One service serves the image with the serving spec's argv, env, mounts, shm, ulimits, GPUs and
healthcheck (`serving.py`: the same spec the smoke test serves). Rendering is deterministic: the same
stack, image and options give the same bytes. Multi-node serving renders one file per node, differing
only in `--node-rank`. Nothing here writes a file (deploy and `imagebuild.context` write what it returns),
reads records or calls an engine: the caller passes the image reference (and the smoke report it
passed, when one is known).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from ..config.names import compose_project
from ..config.schema import Stack
from ..config.tagtemplates import RELEASE_INDEPENDENT, render_tag, template_fields
from ..core import labels as lb
from ..core.credentials import argv_references
from ..core.errors import ConfigError, did_you_mean
from ..core.quoting import compose_string
from ..serving import (
    RecordedOptions,
    ServingError,
    ServingOverrides,
    ServingSpec,
    gpu_count,
    serving_argv,
    serving_spec,
)
from ..serving.caches import CONTAINER_CACHE_ROOT, with_kernel_caches
from .templates import yaml_environment

COMPOSE_TEMPLATE = "compose.yaml.j2"
ENV_EXAMPLE_TEMPLATE = "compose.env.example.j2"
COMPOSE_FILE = "compose.yaml"
ENV_FILE = "compose.env"
ENV_EXAMPLE_FILE = "compose.env.example"
SERVICE = "sglang"
RESTART_POLICIES = ("no", "always", "on-failure", "unless-stopped")

# Labels on the service container: `status` finds deployments on any Docker host through them.
LABEL_STACK = lb.STACK_LABEL
LABEL_IMAGE = lb.IMAGE_LABEL
LABEL_MODEL = lb.MODEL_LABEL
LABEL_SPECULATIVE = lb.SPECULATIVE_LABEL
LABEL_NODE = lb.NODE_LABEL
# `sha256:` of the smoke report that passed this image (from Publish's records), or UNKNOWN.
LABEL_SMOKE_REPORT = lb.SMOKE_REPORT_LABEL
UNKNOWN = "unknown"


@dataclass(frozen=True)
class ComposeOptions(RecordedOptions):
    """How `deploy` serves a stack: recorded with every deployment, so that a rollback or a restore
    serves the same. None means "the stack's serving value"."""

    eagle3: bool = True  # serve with the stack's speculative settings (if it has any)
    gpus: int | bool | None = None  # GPUs per node (0: none, a CPU host); None: the stack's (see gpu_count)
    port: int | None = None  # host port; default: the stack's serving.port
    hf_cache: str | None = None  # host path of the HF cache; default: the stack's serving.mounts
    start_period_s: int | None = None  # healthcheck grace; default: the stack's serving.startup_timeout_s
    healthcheck_interval_s: int = 30
    healthcheck_timeout_s: int = 10
    healthcheck_retries: int = 3
    restart: str = "unless-stopped"
    stop_grace_period_s: int = 30  # SIGTERM, then SIGKILL: time for the server to drain requests
    env_file: str = ENV_FILE  # relative to the compose file's folder, or absolute
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None  # HOST:PORT of node 0, required when nnodes > 1
    # Serve with the kernel caches in a volume that an init service fills from KERNEL_CACHE_FOLDER beside the
    # compose file (what `invoke deploy` restored there when the key matched; empty: a cold start).
    kernel_cache: bool = False

    def serving_overrides(self) -> ServingOverrides:
        return ServingOverrides(
            eagle3=self.eagle3,
            gpus=gpu_count(self.gpus),
            host_port=self.port,
            publish_port=True,
            hf_cache=self.hf_cache,
            healthcheck_start_period_s=self.start_period_s,
            healthcheck_interval_s=self.healthcheck_interval_s,
            healthcheck_timeout_s=self.healthcheck_timeout_s,
            healthcheck_retries=self.healthcheck_retries,
            nnodes=self.nnodes,
            node_rank=self.node_rank,
            dist_init_addr=self.dist_init_addr,
        )

    def check(self, stack_name: str | None) -> None:
        """The compose-only options (the serving ones are checked by `serving_spec`)."""
        if self.restart not in RESTART_POLICIES:
            raise ServingError(f"--restart '{self.restart}': not one of {', '.join(RESTART_POLICIES)}"
                               f"{did_you_mean(self.restart, RESTART_POLICIES)}", stack=stack_name)
        grace = self.stop_grace_period_s
        if isinstance(grace, bool) or not isinstance(grace, int) or grace < 1:
            raise ServingError(f"--stop-grace-period {grace}: must be at least 1 second", stack=stack_name)
        if not self.env_file:
            raise ServingError("--env-file: needs a path", stack=stack_name)


# The kernel-cache volume, the folder beside the compose file it is filled from, and the init step that fills
# it: the volume is emptied first (it outlives deployments, and a cache of another image or key must not stay),
# then the restored folder is copied in whole; an empty folder is a cold start.
KERNEL_CACHE_VOLUME = "kernel-cache"
KERNEL_CACHE_FOLDER = "kernel-cache-restored"  # beside the compose file; not the smoke's kernel-cache/ of the stack
KERNEL_CACHE_INIT = "find /cache -mindepth 1 -delete && cp -a /restore/. /cache/"


def deploy_spec(stack: Stack, options: ComposeOptions) -> ServingSpec:
    """The serving spec a deployment with `options` serves (every option checked, one line each)."""
    options.check(stack.name)
    spec = serving_spec(stack, options.serving_overrides())
    return with_kernel_caches(spec) if options.kernel_cache else spec


def project_name(stack_name: str) -> str:
    """The compose project of a stack (`names.py`: the matrix refuses two stacks that share one)."""
    return compose_project(stack_name)


def compose_filename(options: ComposeOptions) -> str:
    return COMPOSE_FILE if options.nnodes == 1 else f"compose.node{options.node_rank}.yaml"


def moving_tag_ref(stack: Stack) -> str:
    """What a file rendered before any deploy serves (deploy pins a digest): the stack's own moving tag, as
    `publish.moving_tags` configures it, so the file names a tag a release really pushes. Of the templates
    that every release of this SGLang fills in the same way, the one with the fewest fields (the most moving:
    `{stack}` before `{sglang}-{stack}`), first in the list on a tie."""
    candidates = [(len(set(template_fields(t))), i, t) for i, t in enumerate(stack.publish.moving_tags)
                  if set(template_fields(t)) <= RELEASE_INDEPENDENT]
    if not candidates:
        raise ConfigError(
            "publish.moving_tags has no tag that names this stack apart from a release's date or config hash, "
            "so a compose file has no image to serve: render with --image REF",
            stack=stack.name, key="publish.moving_tags")
    _, i, template = min(candidates)
    values = {"sglang": stack.sglang.label, "stack": stack.name}
    tag = render_tag(template, values, stack=stack.name, key=f"publish.moving_tags[{i}]")
    return f"{stack.publish.repository}:{tag}"


def _interpolated(name: str) -> str:
    """What compose replaces with NAME's value from the environment of `invoke deploy`, refusing without it."""
    return f"${{{name}:?set {name} in the environment of invoke deploy}}"


def command_entries(spec: ServingSpec) -> list[str]:
    """The service's `command:` words, quoted: a secret flag's `${NAME}` stays a reference compose
    interpolates (as serving.env's do); every other word is written as it is, `$` doubled."""
    argv = serving_argv(spec)
    refs = argv_references(argv)
    # The text before a reference is `--flag=` of a secret flag: letters and '-', nothing to escape.
    return [json.dumps(refs[i][0] + _interpolated(refs[i][1])) if i in refs
            else compose_string(word) for i, word in enumerate(argv)]


def environment_entries(spec: ServingSpec) -> list[tuple[str, str]]:
    """(quoted key, quoted value) of the service's `environment:`. A `${NAME}` secret reference stays a
    reference, which compose interpolates from the environment of `invoke deploy` (and refuses to start
    without, `:?`); every other value is written as it is, `$` doubled."""
    refs = dict(spec.secret_references)
    return [(compose_string(k), json.dumps(_interpolated(refs[k])) if k in refs else compose_string(v))
            for k, v in spec.env]


def compose_text(
    spec: ServingSpec, image_ref: str, options: ComposeOptions, *, smoke_report: str | None = None
) -> str:
    """The Compose file of one node serving `image_ref` (by digest, for a published stack) as `spec` says."""
    health = spec.healthcheck
    health_url = f"http://127.0.0.1:{spec.port}{health.path}"
    # python3, not curl: it is in every SGLang image, since it runs the server.
    probe = f"import urllib.request; urllib.request.urlopen('{health_url}', timeout={health.timeout_s})"
    nodes = spec.nodes
    labels = {
        LABEL_STACK: spec.stack or "",
        LABEL_IMAGE: image_ref,
        LABEL_MODEL: spec.model,
        LABEL_SPECULATIVE: spec.speculative_summary(),
        LABEL_NODE: f"{nodes.node_rank}/{nodes.nnodes}",
        LABEL_SMOKE_REPORT: smoke_report or UNKNOWN,
    }
    return (
        yaml_environment()
        .get_template(COMPOSE_TEMPLATE)
        .render(
            stack_name=spec.stack,
            image=image_ref,
            command=command_entries(spec),
            restart=options.restart,
            stop_grace_period=f"{options.stop_grace_period_s}s",
            ipc_mode=spec.ipc_mode,
            shm_size=spec.shm_size,
            network_host=spec.host_network,
            port_mapping=f"{spec.host_port or spec.port}:{spec.port}",
            gpu_count=spec.gpus,
            ulimits=[(u.name, u.soft, u.hard) for u in spec.ulimits],
            env_file=options.env_file,
            environment=environment_entries(spec),
            volumes=[m.bind for m in spec.mounts]
            + ([f"{KERNEL_CACHE_VOLUME}:{CONTAINER_CACHE_ROOT}"] if options.kernel_cache else []),
            kernel_cache=options.kernel_cache,
            kernel_cache_volume=KERNEL_CACHE_VOLUME,
            kernel_cache_restore=f"./{KERNEL_CACHE_FOLDER}:/restore:ro",
            kernel_cache_command=["sh", "-c", KERNEL_CACHE_INIT],
            healthcheck=["CMD", "python3", "-c", probe],
            healthcheck_interval=f"{health.interval_s}s",
            # The probe's own timeout plus the interpreter's start.
            healthcheck_timeout=f"{health.timeout_s + 2}s",
            healthcheck_retries=health.retries,
            start_period=f"{health.start_period_s}s",
            nnodes=nodes.nnodes,
            node_rank=nodes.node_rank,
            labels=sorted(labels.items()),
            init_labels=[(LABEL_STACK, spec.stack or "")],
        )
    )


def render_compose(
    stack: Stack, image_ref: str, *, options: ComposeOptions | None = None, smoke_report: str | None = None
) -> str:
    """The Compose file serving `image_ref` for one node (the spec derived from `stack` and `options`)."""
    options = options or ComposeOptions()
    return compose_text(deploy_spec(stack, options), image_ref, options, smoke_report=smoke_report)


def render_compose_nodes(
    stack: Stack, image_ref: str, *, options: ComposeOptions | None = None, smoke_report: str | None = None
) -> dict[str, str]:
    """{file name: text}: `compose.yaml` for one node, `compose.node<R>.yaml` for each of several."""
    options = options or ComposeOptions()
    deploy_spec(stack, options)  # the options as given, before ranks are substituted
    out: dict[str, str] = {}
    for rank in range(options.nnodes):
        node = replace(options, node_rank=rank)
        out[compose_filename(node)] = render_compose(stack, image_ref, options=node, smoke_report=smoke_report)
    return out


def render_env_example(stack: Stack, *, options: ComposeOptions | None = None) -> str:
    """The example env file: the names of the secrets, never their values."""
    options = options or ComposeOptions()
    spec = deploy_spec(stack, options)
    models = spec.models()
    return (
        yaml_environment()
        .get_template(ENV_EXAMPLE_TEMPLATE)
        .render(stack_name=stack.name, env_file=Path(options.env_file).name, models=", ".join(models),
                references=sorted({name for _, name in spec.secret_references} | set(spec.argv_secret_names)))
    )


def deployment_files(
    stack: Stack, image_ref: str, *, options: ComposeOptions | None = None, smoke_report: str | None = None
) -> dict[str, str]:
    """Every file a deployment folder holds: the compose file(s) and `compose.env.example`."""
    files = render_compose_nodes(stack, image_ref, options=options, smoke_report=smoke_report)
    files[ENV_EXAMPLE_FILE] = render_env_example(stack, options=options)
    return files
