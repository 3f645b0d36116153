"""Stack + image reference -> Compose file text (pure: no Docker, no file writes).

One service serves the stack's image with `python3 -m sglang.launch_server` and the stack's serving flags
(`Stack.smoke`). Rendering is deterministic: the same stack, image and options give the same bytes.
Multi-node serving renders one file per node, differing only in `--node-rank`.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .errors import ConfigError
from .matrix import Stack
from .resources import COMPOSE_DIR

TEMPLATES_DIR = COMPOSE_DIR
COMPOSE_TEMPLATE = "compose.yaml.j2"
ENV_EXAMPLE_TEMPLATE = "compose.env.example.j2"
COMPOSE_FILE = "compose.yaml"
ENV_FILE = "compose.env"
ENV_EXAMPLE_FILE = "compose.env.example"
SERVICE = "sglang"
HF_CACHE_TARGET = "/root/.cache/huggingface"
RESTART_POLICIES = ("no", "always", "on-failure", "unless-stopped")

# Labels on the service container: `status` finds deployments on any Docker host through them.
LABEL_STACK = "io.sglstack.stack"
LABEL_IMAGE = "io.sglstack.image"
LABEL_MODEL = "io.sglstack.model"
LABEL_SPECULATIVE = "io.sglstack.speculative"
LABEL_NODE = "io.sglstack.node"


@dataclass(frozen=True)
class ComposeOptions:
    """How to serve a stack; every default comes from the stack or from upstream's serving advice."""

    eagle3: bool = True  # serve with the stack's speculative settings (if it has any)
    gpus: bool = True  # GPU reservations + memlock/stack ulimits; off for CPU hosts
    port: int | None = None  # host port; default: the stack's smoke.port
    hf_cache: str | None = None  # host path of the HF cache; default: the stack's smoke.mounts
    start_period_s: int | None = None  # healthcheck grace; default: the stack's smoke.timeout_s
    healthcheck_interval_s: int = 30
    healthcheck_timeout_s: int = 10
    healthcheck_retries: int = 3
    restart: str = "unless-stopped"
    stop_grace_period_s: int = 30  # SIGTERM, then SIGKILL: time for the server to drain requests
    env_file: str = ENV_FILE  # relative to the compose file's folder, or absolute
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None  # HOST:PORT of node 0, required when nnodes > 1

    def to_record(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_record(cls, data: Mapping[str, object]) -> ComposeOptions:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})  # type: ignore[arg-type]


def project_name(stack_name: str) -> str:
    """The compose project of a stack: compose v1 drops characters other than [a-z0-9_-]."""
    return "sglstack-" + "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in stack_name.lower())


def compose_filename(options: ComposeOptions) -> str:
    return COMPOSE_FILE if options.nnodes == 1 else f"compose.node{options.node_rank}.yaml"


def speculative_summary(stack: Stack, options: ComposeOptions) -> str:
    spec = stack.smoke.speculative
    if spec is None or not options.eagle3:
        return "off"
    return (
        f"{spec.algorithm} draft={spec.draft_model} steps={spec.num_steps} topk={spec.eagle_topk} "
        f"draft_tokens={spec.num_draft_tokens}"
    )


def serving_command(stack: Stack, options: ComposeOptions) -> list[str]:
    """The `launch_server` command line; the speculative flags only when EAGLE-3 is on."""
    smoke = stack.smoke
    cmd = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        smoke.model,
        "--tp-size",
        str(smoke.tp),
        # SGLang listens on 127.0.0.1 by default: unreachable through a port mapping.
        "--host",
        "0.0.0.0",
        "--port",
        str(smoke.port),
    ]
    spec = smoke.speculative
    if spec is not None and options.eagle3:
        cmd += [
            "--speculative-algorithm",
            spec.algorithm,
            "--speculative-draft-model-path",
            spec.draft_model,
            "--speculative-num-steps",
            str(spec.num_steps),
            "--speculative-eagle-topk",
            str(spec.eagle_topk),
            "--speculative-num-draft-tokens",
            str(spec.num_draft_tokens),
        ]
    if options.nnodes > 1:
        cmd += [
            "--nnodes",
            str(options.nnodes),
            "--node-rank",
            str(options.node_rank),
            "--dist-init-addr",
            str(options.dist_init_addr),
        ]
    return [*cmd, *smoke.extra_args]


def _check(stack: Stack, options: ComposeOptions) -> None:
    def bad(key: str, message: str) -> ConfigError:
        return ConfigError(message, stack=stack.name, key=f"compose.{key}")

    if options.restart not in RESTART_POLICIES:
        raise bad("restart", f"'{options.restart}' is not one of {', '.join(RESTART_POLICIES)}")
    if options.port is not None and not 1 <= options.port <= 65535:
        raise bad("port", f"{options.port} is not a TCP port")
    if options.nnodes < 1:
        raise bad("nnodes", f"{options.nnodes} must be at least 1")
    if not 0 <= options.node_rank < options.nnodes:
        raise bad("node_rank", f"{options.node_rank} is not in 0..{options.nnodes - 1}")
    if options.nnodes > 1:
        host, sep, port = (options.dist_init_addr or "").rpartition(":")
        if not sep or not host or not port.isdigit():
            raise bad("dist_init_addr", "multi-node serving needs HOST:PORT of node 0 (--dist-init-addr)")
    for key in (
        "start_period_s",
        "healthcheck_interval_s",
        "healthcheck_timeout_s",
        "healthcheck_retries",
        "stop_grace_period_s",
    ):
        value = getattr(options, key)
        if value is not None and value < 1:
            raise bad(key, f"{value} must be at least 1")


def _volumes(stack: Stack, options: ComposeOptions) -> list[str]:
    mounts = list(stack.smoke.mounts)
    if options.hf_cache is not None:
        mounts = [m for m in mounts if posixpath.normpath(m.split(":")[1]) != HF_CACHE_TARGET]
        mounts.append(f"{options.hf_cache}:{HF_CACHE_TARGET}")
    return mounts


def _quote(value: object) -> str:
    """A YAML double-quoted scalar; `$` doubled because compose interpolates `$VAR` in every value."""
    return json.dumps(str(value).replace("$", "$$"), ensure_ascii=False)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = _quote
    return env


def render_compose(stack: Stack, image_ref: str, *, options: ComposeOptions | None = None) -> str:
    """The Compose file serving `image_ref` (by digest, for a published stack) for one node."""
    options = options or ComposeOptions()
    _check(stack, options)
    smoke = stack.smoke
    gpus = options.gpus and smoke.gpus > 0
    port = smoke.port if options.port is None else options.port
    start_period = options.start_period_s if options.start_period_s is not None else int(smoke.timeout_s)
    health_url = f"http://127.0.0.1:{smoke.port}/health"
    # python3, not curl: it is in every SGLang image, since it runs the server.
    timeout = options.healthcheck_timeout_s
    probe = f"import urllib.request; urllib.request.urlopen('{health_url}', timeout={timeout})"
    labels = {
        LABEL_STACK: stack.name,
        LABEL_IMAGE: image_ref,
        LABEL_MODEL: smoke.model,
        LABEL_SPECULATIVE: speculative_summary(stack, options),
        LABEL_NODE: f"{options.node_rank}/{options.nnodes}",
    }
    return (
        _environment()
        .get_template(COMPOSE_TEMPLATE)
        .render(
            stack_name=stack.name,
            image=image_ref,
            command=serving_command(stack, options),
            restart=options.restart,
            stop_grace_period=f"{options.stop_grace_period_s}s",
            shm_size=smoke.shm_size,
            network_host=options.nnodes > 1,
            port_mapping=f"{port}:{smoke.port}",
            gpus=gpus,
            gpu_count=smoke.gpus,
            env_file=options.env_file,
            environment=sorted(smoke.env.items()),
            volumes=_volumes(stack, options),
            healthcheck=["CMD", "python3", "-c", probe],
            healthcheck_interval=f"{options.healthcheck_interval_s}s",
            healthcheck_timeout=f"{options.healthcheck_timeout_s + 2}s",
            healthcheck_retries=options.healthcheck_retries,
            start_period=f"{start_period}s",
            nnodes=options.nnodes,
            node_rank=options.node_rank,
            labels=sorted(labels.items()),
        )
    )


def render_compose_nodes(stack: Stack, image_ref: str, *, options: ComposeOptions | None = None) -> dict[str, str]:
    """{file name: text}: `compose.yaml` for one node, `compose.node<R>.yaml` for each of several."""
    options = options or ComposeOptions()
    out: dict[str, str] = {}
    for rank in range(options.nnodes):
        node = ComposeOptions(**{**options.to_record(), "node_rank": rank})  # type: ignore[arg-type]
        out[compose_filename(node)] = render_compose(stack, image_ref, options=node)
    return out


def render_env_example(stack: Stack, *, options: ComposeOptions | None = None) -> str:
    """The example env file: the names of the secrets, never their values."""
    options = options or ComposeOptions()
    models = [stack.smoke.model]
    if stack.smoke.speculative is not None:
        models.append(stack.smoke.speculative.draft_model)
    return (
        _environment()
        .get_template(ENV_EXAMPLE_TEMPLATE)
        .render(stack_name=stack.name, env_file=Path(options.env_file).name, models=", ".join(models))
    )


def write_compose(stack: Stack, image_ref: str, out_dir: Path, *, options: ComposeOptions | None = None) -> list[Path]:
    """Write the compose file(s) and `compose.env.example` into `out_dir`; return the paths written."""
    options = options or ComposeOptions()
    files = render_compose_nodes(stack, image_ref, options=options)
    files[ENV_EXAMPLE_FILE] = render_env_example(stack, options=options)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def render_compose_files(
    stack: Stack, out_dir: Path, image_ref: str | None = None, *, options: ComposeOptions | None = None
) -> list[Path]:
    """What `invoke render` writes next to the Dockerfile: the compose file(s) and the env example.

    Without `image_ref`: the stack's current published digest, else (never published) its moving tag,
    which `invoke deploy` replaces with a digest.
    """
    if image_ref is None:
        from .deploy import published_image_ref

        image_ref = published_image_ref(stack.name) or f"{stack.publish.repository}:{stack.name}"
    return write_compose(stack, image_ref, out_dir, options=options)
