"""One smoke server, served and measured: a container (`running_container`) or a local process group
(`running_process`), waited for until healthy, then warm-up, single-stream runs and concurrent phases.
Every exit removes the container or ends the group; `runner` plans the runs and writes the report.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
from ..serving.phases import LogLine, docker_log_lines, docker_time, phases_line, process_log_lines, start_phases
from .acceptance import draft_acceptance
from .client import Generation, SGLangClient
from .launch import ContainerPlan, ProcessPlan
from .measure import PhaseStats, ServerRun, accept_length_from_meta, accept_length_from_server_info
from .plan import SmokeOptions
from .workload import prompt_set, run_phase, warm_up

NAME_PREFIX = "sglstack-smoke"
LOG_TAIL_LINES = 15
# A start's log is read whole for its phases; SGLang's start logs a few hundred KB at most.
MAX_START_LOG_BYTES = 64 * 1024 * 1024
Log = Callable[[str], None]


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


class Server(Protocol):
    """A server that was started, seen the same way whatever runs it: everything after "it is listening"
    (the health wait, measurement, gates, report) goes through this one code path."""

    kind: str

    def exit_failure(self) -> str | None:
        """Why the server is gone (exit code, OOM kill), or None while it runs."""

    def base_url(self) -> str | None:
        """Where its HTTP API answers, once known."""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        """Its last log lines, for a failure message."""

    def start_log(self) -> tuple[list[LogLine], float | None, float]:
        """Its whole log with each line's time, when it started on that same clock (None: unknown), and the
        stamps' resolution in seconds: what its start by phase is read from."""


# What is done with a started server: `measure_server` (the smoke) or `measure_start` (a warm start).
Measure = Callable[[Server, "str | None", SmokeOptions, Log], ServerRun]


class ContainerServer:
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


@dataclass(frozen=True)
class _Healthy:
    """A server that answered healthy: its client (the caller closes it) and when the wait for it began."""

    client: SGLangClient
    start: float  # time.monotonic() when the wait began
    startup_s: float

    def since_start(self) -> float:
        return time.monotonic() - self.start


def _healthy_or_not_started(server: Server, api_key: str | None, options: SmokeOptions, log: Log, *,
                            next_step: str = "") -> _Healthy | ServerRun:
    """The one wait before any measurement: until healthy (logged, with what comes next), else the run of a
    server that never started (its failure and log tail, logged)."""
    start = time.monotonic()
    client, failure = wait_until_healthy(server, api_key, options)
    if failure:
        return _not_started(server, failure, log)
    assert client is not None
    startup = time.monotonic() - start
    log(f"smoke: {server.kind}: healthy after {startup:.1f}s{next_step}")
    return _Healthy(client, start, startup)


def measure_server(server: Server, api_key: str | None, options: SmokeOptions, log: Log) -> ServerRun:
    healthy = _healthy_or_not_started(server, api_key, options, log, next_step="; warming up")
    if isinstance(healthy, ServerRun):
        return healthy
    client, startup = healthy.client, healthy.startup_s
    kind = server.kind
    try:
        phases = start_phases_of(server, healthy.since_start(), warm_up(client, options.max_new_tokens), log)
        measured = _single_stream_runs(client, kind, options, log)
        single, single_results, _ = measured[0]
        concurrent, results_n = _concurrent_phase(client, kind, options, log)
        level_phases, results_levels = _level_phases(client, kind, options, log)
        results_n = [*results_n, *results_levels]
        server_info = _server_info_or_none(client)
    finally:
        client.close()
    speculative = kind == "eagle3"
    return ServerRun(
        kind=kind,
        started=True,
        startup_s=startup,
        single=single,
        concurrent=concurrent,
        outputs={r.prompt: r.text for r in single_results if r.ok},
        level_phases=level_phases,
        accept_length_meta=accept_length_from_meta([*single_results, *results_n]) if speculative else None,
        accept_length_server=accept_length_from_server_info(server_info) if speculative else None,
        acceptance=draft_acceptance([*single_results, *results_n]) if speculative else None,
        runs=tuple(
            {"tokens_per_s": phase.tokens_per_s, "ttft_s": phase.ttft_s, "completed": phase.completed,
             "requests": phase.requests, "flushed": flushed,
             "accept_length": accept_length_from_meta(results) if speculative else None}
            for phase, results, flushed in measured
        ),
        phases=phases,
    )


def start_phases_of(server: Server, before_warm_up_s: float, warm_up_runs: list[Generation], log: Log
                    ) -> dict[str, Any]:
    """The start by phase of a healthy server whose warm-up began `before_warm_up_s` after it started: the
    first token is the first warm-up request's."""
    first = warm_up_runs[0] if warm_up_runs else None
    first_token = before_warm_up_s + first.ttft_s if first is not None and first.ttft_s is not None else None
    lines, started_at, resolution = server.start_log()
    if started_at is None:
        lines = []  # no start on the lines' clock: every log milestone is unknown, not guessed
    phases = start_phases(lines, started_at or 0.0, first_token, resolution)
    log(phases_line(server.kind, phases))
    return phases


def measure_start(server: Server, api_key: str | None, options: SmokeOptions, log: Log) -> ServerRun:
    """A start and nothing more (the warm start): healthy, its first token, its phases."""
    healthy = _healthy_or_not_started(server, api_key, options, log)
    if isinstance(healthy, ServerRun):
        return healthy
    try:
        phases = start_phases_of(server, healthy.since_start(), warm_up(healthy.client, options.max_new_tokens, 1),
                                 log)
    finally:
        healthy.client.close()
    return ServerRun(kind=server.kind, started=True, startup_s=healthy.startup_s, phases=phases)


def _not_started(server: Server, failure: str, log: Log) -> ServerRun:
    """A server that never became healthy: its failure and last log lines, logged and in one line."""
    log(f"smoke: {server.kind}: {first_line(failure)}")
    tail = server.log_tail()
    for line in tail:
        log(f"  | {line}")
    one_line = failure + ("; last log lines: " + " | ".join(tail[-5:]) if tail else "")
    return ServerRun(kind=server.kind, started=False, failure=one_line)


def _single_stream_runs(
    client: SGLangClient, kind: str, options: SmokeOptions, log: Log
) -> list[tuple[PhaseStats, list[Generation], bool | None]]:
    """--runs phases at concurrency 1, each after a cache flush if asked: (stats, generations, flushed)."""
    prompts = prompt_set(options.num_prompts)
    measured: list[tuple[PhaseStats, list[Generation], bool | None]] = []
    for number in range(1, options.runs + 1):
        flushed = client.flush_cache() if options.flush_cache else None
        phase, results = run_phase(client, prompts, 1, options.max_new_tokens)
        measured.append((phase, results, flushed))
        run_name = f" run {number}/{options.runs}" if options.runs > 1 else ""
        log(
            f"smoke: {kind}:{run_name} concurrency 1: {phase.tokens_per_s:.1f} tok/s per stream, "
            f"TTFT {phase.ttft_s or 0:.3f}s, {phase.completed}/{phase.requests} completed"
            + ("" if flushed is None else f", cache {'flushed' if flushed else 'NOT flushed'}")
        )
    return measured


def _concurrent_phase(
    client: SGLangClient, kind: str, options: SmokeOptions, log: Log
) -> tuple[PhaseStats | None, list[Generation]]:
    """The phase at --concurrency (None, [] when it is 1)."""
    if options.concurrency <= 1:
        return None, []
    many = prompt_set(max(options.num_prompts, options.concurrency))
    concurrent, results_n = run_phase(client, many, options.concurrency, options.max_new_tokens)
    log(
        f"smoke: {kind}: concurrency {options.concurrency}: "
        f"{concurrent.aggregate_tokens_per_s:.1f} tok/s aggregate, "
        f"{concurrent.tokens_per_s:.1f} tok/s per stream"
    )
    return concurrent, results_n


def _level_phases(
    client: SGLangClient, kind: str, options: SmokeOptions, log: Log
) -> tuple[dict[int, PhaseStats], list[Generation]]:
    """A phase at each named concurrency level the two phases above did not measure (smoke.concurrency_levels)."""
    phases: dict[int, PhaseStats] = {}
    results: list[Generation] = []
    for level in options.concurrency_levels:
        if level == 1 or (level == options.concurrency and options.concurrency > 1):
            continue
        phase, level_results = run_phase(client, prompt_set(max(options.num_prompts, level)), level,
                                         options.max_new_tokens)
        log(f"smoke: {kind}: concurrency {level}: {phase.aggregate_tokens_per_s:.1f} tok/s aggregate, "
            f"{phase.tokens_per_s:.1f} tok/s per stream")
        phases[level] = phase
        results += level_results
    return phases, results


def _server_info_or_none(client: SGLangClient) -> dict[str, Any] | None:
    """/get_server_info, or None: the accept length it holds is a second opinion, not a reason to fail."""
    try:
        return client.server_info()
    except Exception:
        return None


def wait_until_healthy(
    server: Server, api_key: str | None, options: SmokeOptions
) -> tuple[SGLangClient | None, str | None]:
    """Poll /health_generate until 200; stop at once if the server exits (crash, OOM kill)."""
    deadline = time.monotonic() + options.timeout
    client: SGLangClient | None = None
    last_status: int | None = None
    interval = 0.2
    while True:
        if failure := server.exit_failure():
            if client:
                client.close()
            return None, failure
        if client is None and (url := server.base_url()):
            client = SGLangClient(url, timeout=options.request_timeout, api_key=api_key)
        if client is not None:
            remaining = deadline - time.monotonic()
            last_status = client.health_generate(timeout=max(1.0, min(30.0, remaining)))
            if last_status == 200:
                return client, None
        if time.monotonic() >= deadline:
            if client:
                client.close()
            answer = f"last answered {last_status}" if last_status else "never answered"
            return None, f"not healthy after {options.timeout:g}s (/health_generate {answer})"
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, 2.0)


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
