"""Compose deployment of a published stack: deploy, status, logs, undeploy, rollback.

The compose CLI (`docker compose` v2, else `docker-compose` v1) runs the rendered file; the Docker SDK
reads container health, so that `deploy` returns only once the server answers `/health`. Every deploy is
appended to `build/<stack>/deployments.jsonl`; `rollback` redeploys the previous healthy image from it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import requests

from . import compose as cmp
from .dockerhost import docker_client, image_exists
from .errors import DeployError, DockerUnavailable
from .matrix import Stack, load_matrix
from .records import append_jsonl, read_jsonl
from .records import build_root as default_build_root  # the name deploy's callers and options know

RECORDS_FILE = "deployments.jsonl"


LOG_TAIL_LINES = 40
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

Say = Callable[[str], None]


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class DeployFailed(DeployError):
    """The service crashed or never became healthy; `log_tail` holds its last log lines."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


# ---- the compose CLI adapter -----------------------------------------------------------------------


@dataclass(frozen=True)
class ComposeCLI:
    """One compose implementation: `argv` prefix and a label saying which it is."""

    argv: tuple[str, ...]
    version: str
    major: int

    @property
    def label(self) -> str:
        name = " ".join(Path(self.argv[0]).name if i == 0 else a for i, a in enumerate(self.argv))
        return f"{name} {self.version} (v{self.major})"

    def run(
        self,
        project: str,
        files: Iterable[Path],
        args: list[str],
        *,
        docker_host: str | None = None,
        cwd: Path | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        argv = [*self.argv, "-p", project]
        for f in files:
            argv += ["-f", str(f)]
        env = dict(os.environ)
        if docker_host:
            env["DOCKER_HOST"] = docker_host
        try:
            return subprocess.run(
                [*argv, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise DeployError(f"project {project}: `{shlex.join([*argv, *args])}` ran past {timeout:.0f} s") from None


def _version_of(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.strip()
    return out.removeprefix("v") if proc.returncode == 0 and out else None


def detect_compose(preferred: str | None = None) -> ComposeCLI:
    """`docker compose` (v2, a plugin of the docker CLI) when present, else `docker-compose` (v1).

    `preferred` (or SGLSTACK_COMPOSE), e.g. "docker-compose" or "/usr/bin/docker compose", skips the search.
    """
    return _detect_compose(preferred or os.environ.get("SGLSTACK_COMPOSE"), os.environ.get("PATH", ""))


@functools.lru_cache(maxsize=8)
def _detect_compose(preferred: str | None, path: str) -> ComposeCLI:
    # Cached per (choice, PATH): each compose v1 start costs about a second.
    candidates: list[list[str]] = []
    if preferred:
        candidates.append(shlex.split(preferred))
    else:
        if docker_bin := shutil.which("docker"):
            candidates.append([docker_bin, "compose"])
        if v1 := shutil.which("docker-compose"):
            candidates.append([v1])
    for argv in candidates:
        version = _version_of(argv)
        if version:
            major = int(version.split(".")[0]) if version[:1].isdigit() else 2
            return ComposeCLI(argv=tuple(argv), version=version, major=major)
    tried = ", ".join(shlex.join(c) for c in candidates) or "docker compose, docker-compose (not on PATH)"
    raise DockerUnavailable(f"no compose CLI found (tried {tried}); install the compose plugin or docker-compose")


# ---- records ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeploymentRecord:
    stack: str
    action: str  # deploy | rollback | undeploy
    result: str  # healthy | failed | removed
    image: str
    digest: str
    image_id: str
    time: str
    host: str
    docker_host: str
    project: str
    compose_tool: str
    compose_file: str
    options: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return self.__dict__ | {"options": dict(self.options)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> DeploymentRecord:
        """Raises KeyError/TypeError on a row that is not a deployment record."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


def records_path(build_root: Path, stack_name: str) -> Path:
    return build_root / stack_name / RECORDS_FILE


def append_record(build_root: Path, record: DeploymentRecord) -> None:
    append_jsonl(records_path(build_root, record.stack), [record.to_dict()])


def read_records(build_root: Path, stack_name: str) -> list[DeploymentRecord]:
    path = records_path(build_root, stack_name)
    return read_jsonl(
        path,
        parse=DeploymentRecord.from_dict,
        bad_line=lambda n: DeployError(f"{path}:{n}: not a deployment record"),
    )


def rollback_target(records: list[DeploymentRecord]) -> DeploymentRecord | None:
    """What `rollback` redeploys (pure): after a failed deploy, the last healthy one (the failure took
    it down); otherwise the healthy deployment before the current one, with a different image."""
    served = [r for r in records if r.action in ("deploy", "rollback")]
    healthy = [r for r in served if r.result == "healthy"]
    if not healthy:
        return None
    if served[-1].result != "healthy":
        return healthy[-1]
    current = healthy[-1]
    for record in reversed(healthy[:-1]):
        if (record.image, record.digest) != (current.image, current.digest):
            return record
    return None


# ---- image references ------------------------------------------------------------------------------


def published_image_ref(stack_name: str, build_root: Path | None = None) -> str | None:
    """The stack's current published `repo@sha256:...`, as Publish's records say."""
    from .publish import published_release

    release = published_release(stack_name, build_root)
    return release.ref if release else None


def resolve_image_ref(
    stack: Stack, *, digest: str | None = None, image: str | None = None, build_root: Path | None = None
) -> str:
    """--image as given; --digest D as `<publish.repository>@D`; else the stack's last published digest."""
    if image and digest:
        raise DeployError(f"stack '{stack.name}': give --digest or --image, not both")
    if image:
        return image
    if digest:
        if "@sha256:" in digest:
            return digest
        if not DIGEST_RE.match(digest):
            raise DeployError(f"stack '{stack.name}': --digest '{digest}' is not sha256:<64 hex>")
        return f"{stack.publish.repository}@{digest}"
    ref = published_image_ref(stack.name, build_root)
    if ref is None:
        raise DeployError(
            f"stack '{stack.name}': no published digest in "
            f"{_display((build_root or default_build_root()) / 'publish')}; "
            "publish it first, or pass --digest/--image"
        )
    return ref


def image_identity(client: docker.DockerClient, ref: str) -> tuple[str, str]:
    """(digest, image id) of a reference: the repo digest when there is one, else the image id."""
    try:
        img = client.images.get(ref)
    except docker.errors.ImageNotFound:
        return (ref.split("@", 1)[1] if "@" in ref else "", "")
    except docker.errors.APIError as exc:
        raise DeployError(f"image {ref}: {str(exc).splitlines()[0]}") from None
    if "@" in ref:
        return ref.split("@", 1)[1], img.id
    repo = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    for rd in img.attrs.get("RepoDigests") or []:
        if rd.split("@", 1)[0] == repo:
            return rd.split("@", 1)[1], img.id
    return img.id, img.id


# ---- health ----------------------------------------------------------------------------------------


def health_verdict(attrs: Mapping[str, object]) -> tuple[str, str]:
    """(verdict, detail) from a container's inspect data (pure): healthy, starting, crashed or unhealthy."""
    state = attrs.get("State") or {}
    assert isinstance(state, Mapping)
    restarts = int(attrs.get("RestartCount") or 0)  # type: ignore[call-overload]
    status = state.get("Status", "")
    if status in ("exited", "dead") or state.get("Restarting") or restarts > 0:
        return "crashed", f"exited with code {state.get('ExitCode')} (restarts: {restarts})"
    health = (state.get("Health") or {}).get("Status")
    if health == "healthy" and status == "running":
        return "healthy", "healthy"
    if health == "unhealthy":
        return "unhealthy", "its healthcheck on /health failed"
    if health is None and status == "running":
        return "starting", "running (no healthcheck)"
    return "starting", str(health or status)


def _is_local(docker_host: str | None) -> bool:
    host = docker_host or os.environ.get("DOCKER_HOST") or ""
    return host == "" or host.startswith("unix://")


# ---- the deployment ---------------------------------------------------------------------------------


@dataclass
class Deployment:
    """Where a stack's deployment lives: its build folder, compose project and Docker host."""

    stack: Stack
    build_root: Path = field(default_factory=default_build_root)
    project: str | None = None
    docker_host: str | None = None

    @property
    def out_dir(self) -> Path:
        return self.build_root / self.stack.name

    @property
    def project_name(self) -> str:
        return self.project or cmp.project_name(self.stack.name)


def deploy(
    dep: Deployment,
    image_ref: str,
    options: cmp.ComposeOptions,
    *,
    compose: ComposeCLI | None = None,
    wait_timeout_s: float | None = None,
    action: str = "deploy",
    say: Say = _say,
) -> DeploymentRecord:
    """Render, `up -d`, wait until healthy, record. On failure: the logs, `down`, and `DeployFailed`."""
    stack, project = dep.stack, dep.project_name
    compose = compose or detect_compose()
    say(f"compose: {compose.label}")
    client = docker_client(dep.docker_host)
    written = cmp.write_compose(stack, image_ref, dep.out_dir, options=options)
    compose_file = dep.out_dir / cmp.compose_filename(options)
    _ensure_env_file(dep.out_dir, options, say)
    say(f"rendered {_display(compose_file)} (+ {', '.join(p.name for p in written if p != compose_file)})")

    # Validate before `up`: a file compose rejects must not take the running deployment down.
    checked = compose.run(project, [compose_file], ["config", "-q"], docker_host=dep.docker_host)
    if checked.returncode != 0:
        raise DeployError(f"{_display(compose_file)}: compose rejected it: {_error_line(checked.stderr)}")

    if not image_exists(client, image_ref):
        # Pull before `up`: an image that cannot be fetched must not take the running deployment down.
        say(f"pulling {image_ref}")
        pulled = compose.run(project, [compose_file], ["pull", cmp.SERVICE], docker_host=dep.docker_host)
        if pulled.returncode != 0 or not image_exists(client, image_ref):
            raise DeployError(
                f"stack '{stack.name}': cannot pull {image_ref}: {_error_line(pulled.stderr)} (nothing was changed)"
            )
    digest, image_id = image_identity(client, image_ref)
    attempt = DeploymentRecord(
        stack=stack.name,
        action=action,
        result="failed",
        image=image_ref,
        digest=digest,
        image_id=image_id,
        time=_now(),
        host=_engine_name(client),
        docker_host=dep.docker_host or os.environ.get("DOCKER_HOST", ""),
        project=project,
        compose_tool=compose.label,
        compose_file=compose_file.name,
        options=options.to_record(),
    )
    say(f"deploying stack '{stack.name}' as project {project}: {image_ref}")
    up = compose.run(
        project, [compose_file], ["up", "-d", "--remove-orphans", "--no-build"], docker_host=dep.docker_host
    )
    if up.returncode != 0:
        hint = (
            " (no NVIDIA runtime on this host: deploy with --no-gpus for a CPU host)"
            if ("device driver" in up.stderr and options.gpus)
            else ""
        )
        _fail(dep, compose, compose_file, attempt, f"`up` failed: {_error_line(up.stderr)}{hint}", up.stderr)

    start_period = options.start_period_s if options.start_period_s is not None else int(stack.smoke.timeout_s)
    retries_s = options.healthcheck_interval_s * (options.healthcheck_retries + 1) + options.healthcheck_timeout_s
    limit = wait_timeout_s if wait_timeout_s is not None else start_period + retries_s + 30
    verdict, detail = _wait_healthy(client, dep, limit, say)
    if verdict != "healthy":
        _fail(dep, compose, compose_file, attempt, detail)
    if _is_local(dep.docker_host) and options.nnodes == 1:
        port = stack.smoke.port if options.port is None else options.port
        if not _answers_200(f"http://127.0.0.1:{port}/health"):
            _fail(dep, compose, compose_file, attempt, f"healthy, but port {port} does not answer /health")

    record = dataclasses.replace(attempt, result="healthy", time=_now())
    append_record(dep.build_root, record)
    say(
        f"stack '{stack.name}' is healthy ({digest or image_ref}); recorded in "
        f"{_display(records_path(dep.build_root, stack.name))}"
    )
    return record


def _ensure_env_file(out_dir: Path, options: cmp.ComposeOptions, say: Say) -> None:
    path = Path(options.env_file)
    if path.is_absolute():
        if not path.is_file():
            raise DeployError(f"env file {path} not found (it holds HF_TOKEN; see compose.env.example)")
        return
    path = out_dir / path
    if not path.exists():
        # Public models need no token; compose refuses a missing env_file, so start from an empty one.
        path.touch(mode=0o600)
        say(f"created an empty {_display(path)}: put HF_TOKEN there for gated models ({cmp.ENV_EXAMPLE_FILE})")


def _wait_healthy(client: docker.DockerClient, dep: Deployment, limit_s: float, say: Say) -> tuple[str, str]:
    deadline = time.monotonic() + limit_s
    last = ""
    while True:
        # Through the engine, not `compose ps`: one API call instead of a CLI start per poll.
        ids = [c.id for c in _project_containers(client, dep.project_name, service=cmp.SERVICE)]
        if not ids:
            return "crashed", "no container is running for the service"
        verdicts = []
        for cid in ids:
            try:
                attrs = client.api.inspect_container(cid)
            except docker.errors.NotFound:
                return "crashed", f"container {cid[:12]} disappeared"
            verdicts.append(health_verdict(attrs))
        for verdict, detail in verdicts:
            if verdict in ("crashed", "unhealthy"):
                return verdict, detail
        if all(v == "healthy" for v, _ in verdicts):
            return "healthy", "healthy"
        state = ", ".join(d for _, d in verdicts)
        if state != last:
            say(f"waiting for /health: {state}")
            last = state
        if time.monotonic() > deadline:
            return "unhealthy", f"not healthy after {limit_s:.0f} s ({state})"
        time.sleep(1.0)


def _answers_200(url: str) -> bool:
    try:
        return requests.get(url, timeout=10).status_code == 200
    except requests.RequestException:
        return False


def _fail(
    dep: Deployment,
    compose: ComposeCLI,
    compose_file: Path,
    attempt: DeploymentRecord,
    reason: str,
    extra: str = "",
) -> None:
    """Collect the logs, take the failed service down, record the failure, raise `DeployFailed`."""
    tail = "\n".join(filter(None, [_container_log_tail(dep, LOG_TAIL_LINES), extra.strip()]))
    compose.run(dep.project_name, [compose_file], ["down", "-v", "--remove-orphans"], docker_host=dep.docker_host)
    earlier = [r for r in read_records(dep.build_root, dep.stack.name) if r.project == dep.project_name]
    append_record(dep.build_root, dataclasses.replace(attempt, time=_now()))
    hint = (
        f"; `invoke rollback --stack {dep.stack.name}` restores the last healthy one"
        if any(r.result == "healthy" for r in earlier)
        else ""
    )
    raise DeployFailed(
        f"stack '{dep.stack.name}' (project {dep.project_name}): {reason}; took it down (its last log lines "
        f"are above){hint}",
        tail,
    )


def _container_log_tail(dep: Deployment, lines: int) -> str:
    """The service's last log lines, through the engine (a compose CLI start costs seconds)."""
    client = docker_client(dep.docker_host)
    out = []
    for c in _project_containers(client, dep.project_name, service=cmp.SERVICE):
        out.append(c.logs(stdout=True, stderr=True, tail=lines).decode("utf-8", "replace"))
    return "".join(out)


def service_logs(
    dep: Deployment,
    *,
    compose: ComposeCLI | None = None,
    compose_file: Path | None = None,
    tail: int | None = LOG_TAIL_LINES,
) -> str:
    compose = compose or detect_compose()
    compose_file = compose_file or _current_compose_file(dep)
    args = ["logs", "--no-color"] + (["--tail", str(tail)] if tail else [])
    proc = compose.run(dep.project_name, [compose_file], args, docker_host=dep.docker_host)
    return proc.stdout + (proc.stderr if proc.returncode else "")


def _current_compose_file(dep: Deployment) -> Path:
    records = [r for r in read_records(dep.build_root, dep.stack.name) if r.project == dep.project_name]
    name = records[-1].compose_file if records else cmp.COMPOSE_FILE
    path = dep.out_dir / name
    if not path.is_file():
        raise DeployError(f"stack '{dep.stack.name}': {_display(path)} not found (deploy it first)")
    return path


def undeploy(dep: Deployment, *, compose: ComposeCLI | None = None, say: Say = _say) -> int:
    """`down -v` the stack's project; return how many of its containers remain (0 unless something failed)."""
    compose = compose or detect_compose()
    say(f"compose: {compose.label}")
    client = docker_client(dep.docker_host)
    path: Path | None
    try:
        path = _current_compose_file(dep)
    except DeployError:
        path = None
    if path is not None:
        proc = compose.run(dep.project_name, [path], ["down", "-v", "--remove-orphans"], docker_host=dep.docker_host)
        if proc.returncode != 0:
            raise DeployError(f"project {dep.project_name}: compose down failed: {_last_line(proc.stderr)}")
    else:
        # The build folder is gone: remove what carries the project's label.
        for c in _project_containers(client, dep.project_name):
            c.remove(force=True, v=True)
        for network in client.networks.list(filters={"label": f"{COMPOSE_PROJECT_LABEL}={dep.project_name}"}):
            network.remove()
    left = _project_containers(client, dep.project_name)
    if left:
        raise DeployError(f"project {dep.project_name}: {len(left)} container(s) still present after down")
    last = read_records(dep.build_root, dep.stack.name)
    ours = [r for r in last if r.project == dep.project_name]
    if ours:
        append_record(
            dep.build_root,
            DeploymentRecord(**{**ours[-1].__dict__, "action": "undeploy", "result": "removed", "time": _now()}),
        )
    say(f"stack '{dep.stack.name}' (project {dep.project_name}) removed")
    return len(left)


def rollback(
    dep: Deployment,
    *,
    compose: ComposeCLI | None = None,
    wait_timeout_s: float | None = None,
    say: Say = _say,
) -> DeploymentRecord:
    """Redeploy the healthy image recorded before the current one, with the options it ran with."""
    records = [r for r in read_records(dep.build_root, dep.stack.name) if r.project == dep.project_name]
    target = rollback_target(records)
    if target is None:
        raise DeployError(
            f"stack '{dep.stack.name}': no earlier healthy deployment to roll back to in "
            f"{_display(records_path(dep.build_root, dep.stack.name))}"
        )
    say(f"rolling back stack '{dep.stack.name}' to {target.image} (deployed {target.time})")
    options = cmp.ComposeOptions.from_record(target.options)
    return deploy(
        dep, target.image, options, compose=compose, wait_timeout_s=wait_timeout_s, action="rollback", say=say
    )


# ---- status ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackStatus:
    stack: str
    project: str
    container: str
    state: str
    health: str
    uptime: str
    image: str
    digest: str
    model: str
    speculative: str
    node: str


def _project_containers(client: docker.DockerClient, project: str, *, service: str | None = None) -> list:
    labels = [f"{COMPOSE_PROJECT_LABEL}={project}"]
    if service:
        labels.append(f"{COMPOSE_SERVICE_LABEL}={service}")
    return client.containers.list(all=True, filters={"label": labels})


def deployment_status(
    *,
    build_root: Path | None = None,
    docker_host: str | None = None,
    stack: str | None = None,
    project: str | None = None,
    now: dt.datetime | None = None,
) -> list[StackStatus]:
    """One row per deployed service container (found by its sglstack labels), plus recorded stacks that
    have no container any more."""
    client = docker_client(docker_host)
    label_filter = [cmp.LABEL_STACK + (f"={stack}" if stack else "")]
    if project:
        label_filter.append(f"{COMPOSE_PROJECT_LABEL}={project}")
    containers = client.containers.list(all=True, filters={"label": label_filter})
    build_root = build_root or default_build_root()
    now = now or dt.datetime.now(dt.UTC)
    rows: list[StackStatus] = []
    seen: set[tuple[str, str]] = set()
    for c in sorted(containers, key=lambda c: (c.labels.get(cmp.LABEL_STACK, ""), c.name)):
        labels = c.labels
        name, proj = labels.get(cmp.LABEL_STACK, "?"), labels.get(COMPOSE_PROJECT_LABEL, "")
        seen.add((name, proj))
        records = [r for r in _safe_records(build_root, name) if r.project == proj and r.action != "undeploy"]
        image = labels.get(cmp.LABEL_IMAGE, "")
        digest = next((r.digest for r in reversed(records) if r.image == image), "") or (
            image.split("@", 1)[1] if "@" in image else c.attrs.get("Image", "")
        )
        state = c.attrs.get("State") or {}
        verdict = (state.get("Health") or {}).get("Status", "none")
        rows.append(
            StackStatus(
                stack=name,
                project=proj,
                container=c.name,
                state=state.get("Status", "?"),
                health=verdict,
                uptime=_uptime(state.get("StartedAt"), now) if state.get("Status") == "running" else "-",
                image=image,
                digest=digest,
                model=labels.get(cmp.LABEL_MODEL, ""),
                speculative=labels.get(cmp.LABEL_SPECULATIVE, ""),
                node=labels.get(cmp.LABEL_NODE, ""),
            )
        )
    if build_root.is_dir() and not project:
        for path in sorted(build_root.glob(f"{stack or '*'}/{RECORDS_FILE}")):
            records = _safe_records(build_root, path.parent.name)
            if not records or (records[-1].stack, records[-1].project) in seen:
                continue
            last = records[-1]
            rows.append(
                StackStatus(
                    stack=last.stack,
                    project=last.project,
                    container="-",
                    state="removed" if last.action == "undeploy" else f"not running ({last.result})",
                    health="-",
                    uptime="-",
                    image=last.image,
                    digest=last.digest,
                    model="",
                    speculative="",
                    node="",
                )
            )
    return rows


def _safe_records(build_root: Path, stack_name: str) -> list[DeploymentRecord]:
    try:
        return read_records(build_root, stack_name)
    except DeployError:
        return []


def _uptime(started_at: str | None, now: dt.datetime) -> str:
    if not started_at:
        return "-"
    # Docker writes nanoseconds; Python parses at most microseconds.
    trimmed = re.sub(r"(\.\d{6})\d*", r"\1", started_at).replace("Z", "+00:00")
    try:
        seconds = int((now - dt.datetime.fromisoformat(trimmed)).total_seconds())
    except ValueError:
        return "-"
    return format_duration(max(seconds, 0))


def format_duration(seconds: int) -> str:
    days, rem = divmod(seconds, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def print_status(rows: list[StackStatus]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="sglstack deployments")
    for column in ("stack", "project", "state", "health", "uptime", "digest", "model", "EAGLE-3", "node"):
        table.add_column(column, overflow="fold")
    for r in rows:
        short = r.digest.removeprefix("sha256:")[:12] if r.digest else "-"
        table.add_row(
            r.stack,
            r.project,
            r.state,
            r.health,
            r.uptime,
            short,
            r.model or "-",
            r.speculative or "-",
            r.node or "-",
        )
    if not rows:
        table.caption = "nothing deployed"
    # Piped (CI logs), rich would squeeze the table into 80 columns.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


# ---- helpers ---------------------------------------------------------------------------------------


def _engine_name(client: docker.DockerClient) -> str:
    try:
        return str(client.info().get("Name", ""))
    except docker.errors.APIError:
        return ""


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _error_line(text: str) -> str:
    """The line of compose's output that says what went wrong (it ends with a generic summary)."""
    errors = [line.strip() for line in text.splitlines() if "error" in line.lower() and ":" in line]
    if not errors:
        return _last_line(text)
    return re.sub(r"^ERROR: (for \S+\s+)?", "", errors[-1])[:300]


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ---- task entry points (what `invoke` calls) -------------------------------------------------------


def _deployment(
    stacks_file: str,
    stack_name: str,
    docker_host: str | None,
    build_root: Path | None,
    project: str | None,
    *,
    from_records: bool = False,
) -> Deployment:
    """The deployment to act on; for logs/undeploy/rollback, project and host default to the last record's."""
    stack = load_matrix(stacks_file).get(stack_name)
    dep = Deployment(
        stack=stack, build_root=build_root or default_build_root(), project=project, docker_host=docker_host
    )
    if from_records:
        records = read_records(dep.build_root, stack_name)
        if records:
            dep.project = dep.project or records[-1].project
            dep.docker_host = dep.docker_host or records[-1].docker_host or None
    return dep


def deploy_command(
    stacks_file: str,
    stack_name: str,
    *,
    digest: str | None = None,
    image: str | None = None,
    docker_host: str | None = None,
    eagle3: bool = True,
    gpus: bool = True,
    port: int | None = None,
    hf_cache: str | None = None,
    start_period: int | None = None,
    restart: str = "unless-stopped",
    env_file: str | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    dist_init_addr: str | None = None,
    wait_timeout: float | None = None,
    health_interval: int = 30,
    build_root: Path | None = None,
    project: str | None = None,
    skip_preflight: bool = False,
) -> DeploymentRecord:
    dep = _deployment(stacks_file, stack_name, docker_host, build_root, project)
    ref = resolve_image_ref(dep.stack, digest=digest, image=image, build_root=dep.build_root)
    if gpus and not skip_preflight:
        # The GPU node is checked before compose replaces a running deployment with one that cannot start.
        from .preflight.command import require_ready

        _say(f"preflight of the GPU node ({docker_host or 'local engine'}) in {ref}")
        require_ready(dep.stack, docker_host=docker_host, image=ref)
    options = cmp.ComposeOptions(
        eagle3=eagle3,
        gpus=gpus,
        port=port,
        hf_cache=hf_cache,
        start_period_s=start_period,
        restart=restart,
        env_file=str(Path(env_file).resolve()) if env_file else cmp.ENV_FILE,
        nnodes=nnodes,
        node_rank=node_rank,
        dist_init_addr=dist_init_addr,
        healthcheck_interval_s=health_interval,
    )
    try:
        return deploy(dep, ref, options, wait_timeout_s=wait_timeout)
    except DeployFailed as exc:
        _say(exc.log_tail.rstrip())
        raise


def status_command(
    *, stack: str | None = None, docker_host: str | None = None, build_root: Path | None = None
) -> list[StackStatus]:
    rows = deployment_status(build_root=build_root or default_build_root(), docker_host=docker_host, stack=stack)
    print_status(rows)
    return rows


def logs_command(
    stacks_file: str,
    stack_name: str,
    *,
    tail: int | None = None,
    docker_host: str | None = None,
    build_root: Path | None = None,
    project: str | None = None,
) -> None:
    dep = _deployment(stacks_file, stack_name, docker_host, build_root, project, from_records=True)
    print(service_logs(dep, tail=tail), end="")


def undeploy_command(
    stacks_file: str,
    stack_name: str,
    *,
    docker_host: str | None = None,
    build_root: Path | None = None,
    project: str | None = None,
) -> None:
    dep = _deployment(stacks_file, stack_name, docker_host, build_root, project, from_records=True)
    undeploy(dep)


def rollback_command(
    stacks_file: str,
    stack_name: str,
    *,
    docker_host: str | None = None,
    wait_timeout: float | None = None,
    build_root: Path | None = None,
    project: str | None = None,
) -> DeploymentRecord:
    dep = _deployment(stacks_file, stack_name, docker_host, build_root, project, from_records=True)
    try:
        return rollback(dep, wait_timeout_s=wait_timeout)
    except DeployFailed as exc:
        _say(exc.log_tail.rstrip())
        raise
