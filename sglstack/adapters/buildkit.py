"""The BuildKit adapter: find a client that runs BuildKit, build, and show live progress.

Order of preference: `docker buildx build`; else a classic docker CLI older than 23.0 with
DOCKER_BUILDKIT=1 (since 23.0 `docker build` *is* buildx, so a newer CLI without the plugin cannot build
with BuildKit at all); else a clear error. The client is configurable because the CLI first on PATH is not
always the one that works.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.live import Live
from rich.text import Text

from ..core.console import console as make_console
from ..core.console import plain
from ..core.credentials import netrc_secrets, redact_text, tool_environment
from ..core.errors import BuildError, DockerUnavailable
from ..core.network import network_advice, network_problem
from ..core.records import build_root
from ..core.safefiles import OutputNotWritable, containing_root, make_folder, open_log

CLI_ENV = "SGLSTACK_DOCKER_CLI"
_FALLBACK_CLIS = ("/usr/bin/docker", "/usr/local/bin/docker")


@dataclass(frozen=True)
class Builder:
    kind: str  # "buildx" | "classic"
    cli: str
    client_version: str
    # A buildx builder instance (`docker buildx create --name NAME`: docker-container, remote buildkitd,
    # kubernetes): None uses the client's current one.
    instance: str | None = None

    def describe(self) -> str:
        how = "docker buildx build" if self.kind == "buildx" else "docker build with DOCKER_BUILDKIT=1"
        on = f", builder {self.instance}" if self.instance else ""
        return f"{how} ({self.cli}, client {self.client_version}{on})"


def _run(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                          env=tool_environment(env))


def _client_version(cli: str) -> str | None:
    try:
        proc = _run([cli, "version", "--format", "{{.Client.Version}}"])
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = proc.stdout.strip()
    return version or None


def _has_buildx(cli: str) -> bool:
    try:
        return _run([cli, "buildx", "version"]).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def buildx_client(configured: str | None = None) -> str | None:
    """The first docker client (`--docker-cli`, SGLSTACK_DOCKER_CLI, then PATH) that has buildx; None if none has."""
    return next((cli for cli in candidate_clis(configured) if _has_buildx(cli)), None)


def run_buildx_bake(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """`docker buildx bake` (`argv`), its output on the terminal, `env` added to the tool environment; its exit code."""
    return subprocess.run(list(argv), check=False, env=tool_environment(env)).returncode


def _major(version: str) -> int:
    m = re.match(r"(\d+)", version)
    return int(m.group(1)) if m else 0


def candidate_clis(configured: str | None = None) -> list[str]:
    """Docker CLIs to try: the configured one alone, else every `docker` on PATH, then known places."""
    configured = configured or os.environ.get(CLI_ENV)
    if configured:
        found = shutil.which(configured)
        if not found:
            raise DockerUnavailable(f"docker client '{configured}' (from --docker-cli or {CLI_ENV}) not found")
        return [found]
    seen: dict[str, str] = {}
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(entry, "docker")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            seen.setdefault(os.path.realpath(path), path)
    for path in _FALLBACK_CLIS:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            seen.setdefault(os.path.realpath(path), path)
    return list(seen.values())


def detect_builder(configured: str | None = None, instance: str | None = None) -> Builder:
    """The client to build with; with `instance` (`--builder NAME`) only a buildx client will do."""
    clis = candidate_clis(configured)
    versions = {cli: _client_version(cli) for cli in clis}
    usable = [cli for cli in clis if versions[cli]]
    for cli in usable:
        if _has_buildx(cli):
            return Builder("buildx", cli, versions[cli] or "?", instance)
    if instance is not None:
        tried = ", ".join(f"{cli} ({versions[cli] or 'not runnable'})" for cli in clis) or "no docker CLI on PATH"
        raise DockerUnavailable(
            f"--builder {instance} names a buildx builder, but no docker client here has buildx (tried {tried}): "
            f"install the buildx plugin (docker-buildx), or drop --builder to build with the classic builder")
    for cli in usable:
        if _major(versions[cli] or "0") < 23:
            return Builder("classic", cli, versions[cli] or "?")
    tried = ", ".join(f"{cli} ({versions[cli] or 'not runnable'})" for cli in clis) or "no docker CLI on PATH"
    raise DockerUnavailable(
        f"no BuildKit-capable docker client: tried {tried}; install the buildx plugin "
        f"(docker-buildx), or point --docker-cli / {CLI_ENV} at a docker CLI older than 23.0 "
        f"(e.g. Debian's docker.io 20.10 at /usr/bin/docker)")


@dataclass(frozen=True)
class BuildRequest:
    dockerfile: Path
    context: Path
    target: str | None = None
    no_cache: bool = False
    build_args: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, Path] = field(default_factory=dict)  # id -> file (BuildKit secret, never a layer)
    # id -> name of an environment variable of the client holding the value: a secret that never touches
    # a disk (`--secret id=hf_token,env=HF_TOKEN`; Debian's docker 20.10 CLI supports it with BuildKit).
    env_secrets: Mapping[str, str] = field(default_factory=dict)
    # variable -> value: set only in the client's environment, for an `env_secrets` entry that names a
    # variable sglstack fills itself (the stack's netrc); never on the command line, in a log or a repr.
    secret_env_values: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    platform: str | None = None
    # BuildKit's registry cache: imported from, and (when `cache_export`) exported to, this reference.
    cache_ref: str | None = None
    cache_mode: str = "max"
    cache_export: bool = True


def registry_cache(req: BuildRequest) -> tuple[list[str], list[str]]:
    """(cache-from, cache-to) of a buildx build or bake target: the one spelling of both."""
    if req.cache_ref is None:
        return [], []
    cache_from = [f"type=registry,ref={req.cache_ref}"]
    cache_to = [f"type=registry,ref={req.cache_ref},mode={req.cache_mode}"] if req.cache_export else []
    return cache_from, cache_to


def classic_cache_notice(ref: str) -> str:
    """Why the classic builder leaves the registry cache as it found it."""
    return (f"the registry cache {ref} is not exported with the classic builder (docker build with "
            f"DOCKER_BUILDKIT=1 has no --cache-to): it is only read (--cache-from); build with buildx "
            f"(--builder NAME) to fill it")


def build_argv(builder: Builder, req: BuildRequest, iidfile: Path) -> list[str]:
    """The exact build command line (pure). No `-t`: tags are set only after verification."""
    if builder.kind == "buildx":
        instance = ("--builder", builder.instance) if builder.instance else ()
        argv = [builder.cli, "buildx", "build", *instance, "--load"]
    else:
        argv = [builder.cli, "build"]
    argv += ["--progress=plain", "--file", str(req.dockerfile), "--iidfile", str(iidfile)]
    if req.target:
        argv += ["--target", req.target]
    if req.no_cache:
        argv.append("--no-cache")
    if req.platform:
        argv += ["--platform", req.platform]
    for key, value in sorted(req.build_args.items()):
        argv += ["--build-arg", f"{key}={value}"]
    for key, value in sorted(req.labels.items()):
        argv += ["--label", f"{key}={value}"]
    for sid, path in sorted(req.secrets.items()):
        argv += ["--secret", f"id={sid},src={path}"]
    for sid, variable in sorted(req.env_secrets.items()):
        argv += ["--secret", f"id={sid},env={variable}"]
    if builder.kind == "buildx":
        cache_from, cache_to = registry_cache(req)
        argv += [f"--cache-from={value}" for value in cache_from]
        argv += [f"--cache-to={value}" for value in cache_to]
    elif req.cache_ref is not None:
        # dockerd's BuildKit imports a registry cache by its plain reference (its inline-cache importer
        # falls back to the registry one); it cannot export one.
        argv.append(f"--cache-from={req.cache_ref}")
    argv.append(str(req.context))
    return argv


def build_env(builder: Builder, docker_host: str | None) -> dict[str, str]:
    env = {"DOCKER_BUILDKIT": "1"} if builder.kind == "classic" else {}
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return env


# ---- progress --------------------------------------------------------------------------------------

_STEP = re.compile(r"^#(\d+) (\[.*)$")
_DONE = re.compile(r"^#(\d+) (DONE [\d.]+s|CACHED)")
_ERR = re.compile(r"^#(\d+) ERROR:? ?(.*)$")
_OUT = re.compile(r"^#(\d+) [\d.]+ (.*)$")
_MOUNTS = re.compile(r"--mount=\S+\s+")
_BOILERPLATE = re.compile(r"\. /opt/sglstack/tools/pip-env\.sh && |pip list --format=freeze > \S+ && ")


def step_title(raw: str) -> str:
    """'[runtime 5/9] RUN --mount=... . pip-env.sh && pip install x' -> '[runtime 5/9] RUN . pip-env.sh ...'"""
    text = re.sub(r"\s+", " ", _MOUNTS.sub("", raw)).strip()
    return _BOILERPLATE.sub("", text)


@dataclass
class StepState:
    number: int
    name: str
    started: float
    lines: list[str] = field(default_factory=list)
    result: str | None = None


@dataclass
class ProgressParser:
    """Turns BuildKit's plain progress into steps: name, elapsed time, output, result."""

    steps: dict[int, StepState] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    failed_step: int | None = None

    def feed(self, line: str, now: float) -> StepState | None:
        line = line.rstrip("\n")
        if m := _STEP.match(line):
            num = int(m.group(1))
            if num not in self.steps:
                self.steps[num] = StepState(num, step_title(m.group(2)), now)
            return self.steps[num]
        if m := _DONE.match(line):
            step = self.steps.get(int(m.group(1)))
            if step:
                step.result = m.group(2)
            return step
        if m := _ERR.match(line):
            num = int(m.group(1))
            step = self.steps.get(num)
            if step:
                step.result = "ERROR"
                step.lines.append(m.group(2))
                self.failed_step = num
            return step
        if m := _OUT.match(line):
            step = self.steps.get(int(m.group(1)))
            if step:
                step.lines.append(m.group(2))
                del step.lines[:-200]
            return step
        if line.startswith(("ERROR:", "error:", "failed to solve")) or "failed to solve" in line:
            self.errors.append(line)
        return None

    def failure_summary(self, tail: int = 25) -> str:
        step = self.steps.get(self.failed_step) if self.failed_step is not None else None
        head = f"failed step {step.name}" if step else "build failed"
        body = "\n".join(step.lines[-tail:]) if step else ""
        errors = "\n".join(self.errors[-3:])
        return "\n".join(x for x in (head, body, errors) if x)

    def network_failure(self, req: BuildRequest) -> str | None:
        """One line for a build that failed because a host could not be reached: which host, what went
        wrong and what to do. BuildKit prints the same error twice (the step, then "failed to solve")."""
        step = self.steps.get(self.failed_step) if self.failed_step is not None else None
        problem = network_problem([*(step.lines if step else []), *self.errors])
        if problem is None:
            return None
        # A base image is pulled by the engine, which a CA bundle handed to the build's steps does not reach.
        pull = step is not None and step.name.startswith("[internal] load metadata")
        return f"{problem.describe()}; " + network_advice(problem, ca_option=None if pull else "--ca-bundle",
                                                          ca_given="ca_bundle" in req.secrets)


def run_build(builder: Builder, req: BuildRequest, *, log_path: Path, docker_host: str | None = None,
              show_progress: bool = True) -> str:
    """Run the build with live progress; return the image id. On failure raise BuildError.

    The client runs in its own session (process group): a Ctrl-C typed at the terminal reaches only
    sglstack, which then stops the whole group (`_stop`) on any exit that is not a finished build,
    SIGTERM and SIGHUP included, and BuildKit cancels the solve once its client is gone.
    """
    console = make_console()
    root = containing_root(log_path.parent, build_root())
    make_folder(root, log_path.parent)
    iidfile = log_path.parent / ".iid"
    iidfile.unlink(missing_ok=True)
    argv = build_argv(builder, req, iidfile)
    hidden = tuple(v for text in req.secret_env_values.values() for v in netrc_secrets(text))
    parser = ProgressParser()
    started = time.monotonic()
    current: StepState | None = None
    try:  # never through a link (a build.log linked elsewhere would be overwritten)
        log_file = open_log(root, log_path)
    except OutputNotWritable as exc:
        raise BuildError(str(exc)) from None
    with io.TextIOWrapper(log_file, encoding="utf-8") as log:
        log.write("$ " + " ".join(argv) + "\n")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                env=tool_environment({**build_env(builder, docker_host), **req.secret_env_values}),
                                start_new_session=True)
        try:
            live_view = (Live(Text(""), console=console, transient=True, refresh_per_second=4)
                         if show_progress else contextlib.nullcontext(None))
            with live_view as live:
                assert proc.stdout is not None
                for line in proc.stdout:
                    # A tool in a step may echo a URL with what it was given: the log keeps none of it.
                    line = redact_text(line, hidden)
                    log.write(line)
                    now = time.monotonic()
                    step = parser.feed(line, now)
                    if step is not None and step.result and show_progress:
                        took = step.result if step.result != "ERROR" else "FAILED"
                        console.print(f"  {plain(step.name[:150])}  [dim]{took}[/]")
                    elif step is not None:
                        current = step
                    if current is not None and live is not None:
                        live.update(Text(f"  ... {current.name[:120]}  {now - current.started:5.1f}s "
                                         f"(total {now - started:5.1f}s)"))
            code = proc.wait()
        finally:
            # A signal (Interrupted), Ctrl-C or any error: stop the client and everything it started.
            _stop(proc)
    if code != 0:
        if unreachable := parser.network_failure(req):
            raise BuildError(f"build of {req.dockerfile} failed: {unreachable}; log: {log_path}")
        raise BuildError(f"build of {req.dockerfile} failed ({builder.kind}); log: {log_path}\n"
                         + parser.failure_summary())
    image_id = iidfile.read_text().strip() if iidfile.exists() else ""
    if not image_id:
        raise BuildError(f"build of {req.dockerfile} produced no image id; log: {log_path}")
    return image_id


def _stop(proc: subprocess.Popen) -> None:
    """End a client still running, with its process group: SIGINT (the client cancels the solve), then
    SIGKILL after 10 s. The group id cannot be reused before its leader is reaped, which happens here."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
