"""One smoke server, served: a container (`running_container`) or a local process group (`running_process`),
seen as one `Server` and handed to a measurement (`measured`: the health wait, warm-up, single-stream runs
and concurrent phases). Every exit removes the container or ends the group; `runner` plans the runs and writes
the report.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import DeviceRequest, Ulimit

from ..adapters.docker import docker_host_address, running_container
from ..adapters.process import log_tail as file_log_tail
from ..adapters.process import running_process
from ..core.credentials import REDACTED, redact_text, secret_slots
from ..core.errors import first_line
from ..core.safefiles import containing_root, write_bytes
from ..serving.phases import LogLine, docker_log_lines, docker_time, process_log_lines
from .launch import ContainerPlan, ProcessPlan
from .measure import ServerRun
from .measured import LOG_TAIL_LINES, Log, Measure, measure_server
from .plan import SmokeOptions

NAME_PREFIX = "sglstack-smoke"
# A start's log is read whole for its phases; SGLang's start logs a few hundred KB at most.
MAX_START_LOG_BYTES = 64 * 1024 * 1024


def docker_run_kwargs(plan: ContainerPlan) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "environment": dict(plan.environment),
        "ipc_mode": plan.ipc_mode,
        "shm_size": plan.shm_size,
        "ulimits": [Ulimit(name=name, soft=soft, hard=hard) for name, soft, hard in plan.ulimits],
        "ports": {f"{plan.container_port}/tcp": (plan.bind_address, None)},
        "volumes": list(plan.binds),
    }
    if plan.gpus > 0:
        kwargs["device_requests"] = [DeviceRequest(count=plan.gpus, capabilities=[["gpu"]])]
    return kwargs


class ContainerServer:
    local_clock = False

    def __init__(self, container: Container, plan: ContainerPlan, options: SmokeOptions) -> None:
        self.container, self.plan, self.options, self.kind = container, plan, options, plan.kind

    def exit_failure(self) -> str | None:
        self.container.reload()
        state = self.container.attrs.get("State") or {}
        if state.get("Status") in ("exited", "dead"):
            why = " (OOM-killed)" if state.get("OOMKilled") else ""
            return f"the server exited with code {state.get('ExitCode')}{why} before it was healthy"
        return None

    def base_url(self) -> str | None:
        port = _published_port(self.container, self.plan.container_port)
        return f"http://{_server_host(self.options)}:{port}" if port else None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        return [redact_text(line, self.plan.secret_values()) for line in log_tail(self.container, lines)]

    def start_log(self) -> tuple[list[LogLine], float | None, float]:
        """The engine's own per-line UTC stamps and its StartedAt: one clock, even on a remote engine."""
        try:
            raw = self.container.logs(stdout=True, stderr=True, timestamps=True)
            self.container.reload()
        except docker.errors.APIError:
            return [], None, 0.001
        started = docker_time(str((self.container.attrs.get("State") or {}).get("StartedAt") or ""))
        return docker_log_lines(raw.decode("utf-8", "replace")), started, 0.001


class ProcessServer:
    local_clock = True

    def __init__(self, proc: subprocess.Popen[bytes], plan: ProcessPlan, log_path: Path,
                 started_at: float | None = None) -> None:
        self.proc, self.plan, self.log_path, self.kind = proc, plan, log_path, plan.kind
        self.started_at = started_at  # time.time() just before the process started

    def exit_failure(self) -> str | None:
        code = self.proc.poll()
        if code is None:
            return None
        why = f" (killed by {_signal_name(-code)})" if code < 0 else ""
        return f"the server exited with code {code}{why} before it was healthy"

    def base_url(self) -> str | None:
        return f"http://127.0.0.1:{self.plan.port}"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        return [redact_text(line, self.plan.secrets) for line in file_log_tail(self.log_path, lines)]

    def start_log(self) -> tuple[list[LogLine], float | None, float]:
        """SGLang's own stamps (local time: the server runs on this machine, in this time zone)."""
        try:
            with open(self.log_path, "rb") as fh:
                text = fh.read(MAX_START_LOG_BYTES).decode("utf-8", "replace")
        except OSError:
            return [], self.started_at, 1.0
        lines, resolution = process_log_lines(text)
        return lines, self.started_at, resolution


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def serve_and_measure(engine: docker.DockerClient, plan: ContainerPlan, options: SmokeOptions, log: Log,
                      measure: Measure | None = None) -> ServerRun:
    """The server as a container, removed however this returns; `measure` (default `measure_server`) is
    what is done with it once started (`measure_start`: the start alone)."""
    measure = measure or measure_server
    try:
        cm = running_container(
            engine,
            plan.image,
            command=list(plan.command),
            name_prefix=NAME_PREFIX,
            labels=plan.labels,
            **docker_run_kwargs(plan),
        )
        with cm as container:
            return measure(ContainerServer(container, plan, options), _api_key(plan.command), options, log)
    except docker.errors.APIError as exc:
        reason = first_line(exc.explanation or str(exc))
        return ServerRun(kind=plan.kind, started=False, failure=f"the container could not start: {reason}")


def serve_process_and_measure(plan: ProcessPlan, options: SmokeOptions, log_path: Path, log: Log,
                              measure: Measure | None = None) -> ServerRun:
    """The server as a local process group, ended (all of it) however this returns."""
    measure = measure or measure_server
    try:
        cm = running_process(plan.argv, env=plan.environment, log_path=log_path,
                             log_root=containing_root(log_path.parent, Path(options.build_dir)))
        started_at = time.time()
        with cm as proc:
            return measure(ProcessServer(proc, plan, log_path, started_at), _api_key(plan.argv), options, log)
    except OSError as exc:
        return ServerRun(kind=plan.kind, started=False, failure=f"the server process could not start: {exc}")
    finally:
        _hide_in_log(log_path, plan.secrets)


def run_to_end(argv: list[str], env: Mapping[str, str], log_path: Path, log_root: Path, timeout_s: float
               ) -> int | str:
    """A one-off process (the DeepGEMM pre-compiler) to its end: its exit code, or "a timeout" (its group ended)."""
    try:
        with running_process(argv, env=env, log_path=log_path, log_root=log_root) as proc:
            try:
                return proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return f"a timeout after {timeout_s:g}s"
    except OSError as exc:
        return f"an error ({exc.strerror})"


def container_to_end(engine: docker.DockerClient, plan: ContainerPlan, timeout_s: float) -> int | str:
    """A one-off container of `plan` to its end (removed however this returns): its exit code, or why not."""
    try:
        with running_container(engine, plan.image, command=list(plan.command), name_prefix=NAME_PREFIX,
                               labels=plan.labels, **docker_run_kwargs(plan)) as container:
            try:
                return int(container.wait(timeout=timeout_s).get("StatusCode", -1))
            except Exception:  # the engine's read timeout: requests' or urllib3's, by version
                return f"a timeout after {timeout_s:g}s"
    except docker.errors.APIError as exc:
        return f"an error ({first_line(exc.explanation or str(exc))})"


def _hide_in_log(path: Path, secrets: tuple[str, ...]) -> None:
    """The kept server log with the server's secrets as `***` (SGLang logs its server_args, the API key
    among them), once the server is gone; it is replaced whole, never written through a link."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    hidden = data
    for secret in secrets:
        if len(secret) >= 4:  # as redact_text: a one-letter "secret" would blank half the log
            hidden = hidden.replace(secret.encode(), REDACTED.encode())
    if hidden != data:
        write_bytes(path.parent, path, hidden)


def _published_port(container: Container, container_port: int) -> int | None:
    bindings = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
    for binding in bindings.get(f"{container_port}/tcp") or []:
        if binding.get("HostPort"):
            return int(binding["HostPort"])
    return None


def _server_host(options: SmokeOptions) -> str:
    return docker_host_address(options.docker_host)


def _api_key(argv: tuple[str, ...]) -> str | None:
    """The key the server checks: the last `--api-key` value (in any form), as argparse keeps the last."""
    keys = [slot.value for slot in secret_slots(argv) if slot.flag == "--api-key"]
    return keys[-1] if keys else None


def log_tail(container: Container, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        raw = container.logs(stdout=True, stderr=True, tail=lines)
    except docker.errors.APIError:
        return []
    return [line for line in raw.decode("utf-8", "replace").splitlines() if line.strip()]
