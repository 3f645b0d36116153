"""The side effects of a smoke run: the two servers, the requests, history, report (what it serves,
the image or the Python environment, is read in `subject`).

Each server runs in `running_container`, which removes it on success, failure, Ctrl-C, SIGTERM and
SIGHUP (the tasks turn those signals into `Interrupted`). The report, history and build folder are checked
for writability before the first server starts, not found unwritable after an hour of measuring.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import DeviceRequest, Ulimit

from ..adapters.docker import docker_host_address, is_local_docker_host, running_container
from ..adapters.process import free_tcp_port, running_process
from ..adapters.process import log_tail as file_log_tail
from ..config.schema import Stack
from ..core.console import printable_lines
from ..core.credentials import REDACTED, redact_text, secret_slots
from ..core.errors import SmokeInputError
from ..core.records import require_writable, utc_timestamp
from ..core.safefiles import OutputNotWritable, containing_root, refuse_link, write_bytes
from ..diff.snapshots import local_snapshot
from ..serving import check_mount_sources
from . import history as hist
from .client import Generation, SGLangClient
from .gates import Verdict, evaluate
from .measure import PhaseStats, ServerRun, accept_length_from_meta, accept_length_from_server_info, agreement
from .plan import (
    RUN_KINDS,
    ContainerPlan,
    ProcessPlan,
    SmokeOptions,
    check_secret_references,
    container_plan,
    process_plan,
    redact_argv,
)
from .report import SmokeReport, write_report
from .since import since_last_pass
from .subject import check_what_to_serve, open_what_to_serve
from .workload import prompt_set, run_phase, warm_up

NAME_PREFIX = "sglstack-smoke"
LOG_TAIL_LINES = 15
Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(printable_lines(message), file=sys.stderr, flush=True)  # it quotes the server's log


def report_path_for(options: SmokeOptions, stack: Stack | None) -> Path:
    """--report, else BUILD_ROOT/<stack>/smoke-report.json."""
    if options.report:
        return Path(options.report)
    return Path(options.build_dir) / (stack.name if stack else hist.NO_STACK) / "smoke-report.json"


def check_outputs(options: SmokeOptions, stack: Stack | None) -> tuple[Path, Path | None]:
    """The report and history paths, each checked writable now (one line naming the path if not)."""
    report_path = report_path_for(options, stack)
    try:  # probed, not made: a smoke that stops before its report (a failed pull) leaves no empty folder
        require_writable(report_path, what="smoke report (--report)" if options.report else "smoke report",
                         create=False)
        for sibling in (report_path.with_suffix(".md"), report_path.with_suffix(".png")):
            require_writable(sibling, what="smoke report", create=False)
    except OutputNotWritable as exc:
        if options.report:  # a --report the user named that cannot be written is bad input
            raise SmokeInputError(str(exc)) from None
        raise
    history_file = None if options.no_history else hist.history_path(options.build_dir, stack.name if stack else None)
    if history_file is not None:
        require_writable(history_file, what="smoke history (under the build folder)", create=False)
    if options.runner == "process":  # each server's output, opened once the server starts
        for kind in options.kinds:
            refuse_link(log_root(report_path, options), server_log_path(report_path, kind))
    return report_path, history_file


def run_smoke(stack: Stack | None, image: str | None, options: SmokeOptions, *, log: Log | None = None) -> SmokeReport:
    """Serve `image` (or, with the process runner, the Python environment) as a baseline and as an EAGLE-3
    server, measure both, gate, record, report."""
    log = log or _stderr
    interpreter = check_what_to_serve(image, options)
    # Before anything starts: a missing bind source would be created by Docker, as root.
    if options.runner != "process" and (
        notice := check_mount_sources(options.serving, local=is_local_docker_host(options.docker_host))
    ):
        log(f"smoke: {notice}")
    check_secret_references(options.serving)
    report_path, history_file = check_outputs(options, stack)
    # Read now: a corrupt history file is found before the servers run, not after.
    records = hist.read_history(history_file) if history_file is not None else []
    engine, image_info = open_what_to_serve(stack, image, options, interpreter, log)
    runs, commands = _serve_each_kind(engine, image, image_info, options, report_path, log)

    baseline, eagle3 = runs["baseline"], runs["eagle3"]
    share = agreement(baseline.outputs, eagle3.outputs) if baseline.outputs and eagle3.outputs else None
    fingerprint = options.fingerprint()
    reference = hist.last_passing(records, fingerprint)
    verdict = evaluate(options.gates, baseline, eagle3, share, reference)
    data = _report_data(stack, image_info, runs, verdict, reference, options, report_path, commands, history_file)
    comparable: list[Mapping[str, Any]] = []
    if history_file is not None:
        line = hist.history_record(data, fingerprint)
        hist.append_record(history_file, line)
        comparable = [*hist.comparable(records, fingerprint), line]
    report = SmokeReport(data=data, history=tuple(comparable))
    if data["since_last_pass"] and any(f.startswith("max_regression") for f in verdict.failures):
        log(f"smoke: what changed since the last passing image: {data['since_last_pass']['command']}")
    paths = write_report(report, report_path)
    log(f"smoke: report {paths['json']} ({paths['markdown'].name}, {paths['chart'].name})")
    return report


def _serve_each_kind(
    engine: docker.DockerClient | None, image: str | None, image_info: Mapping[str, Any], options: SmokeOptions,
    report_path: Path, log: Log,
) -> tuple[dict[str, ServerRun], dict[str, list[str]]]:
    """Each kind's server run (in turn, each removed before the next starts), and the argv it started with."""
    # A kind that is not run is reported as not started, with no failure (a baseline-only bisect step).
    runs: dict[str, ServerRun] = {kind: ServerRun(kind=kind, started=False) for kind in RUN_KINDS}
    # The argv each server was started with (the process runner's port is the free one it picked).
    commands = {kind: launch_command(options, image, kind) for kind in options.kinds}
    for kind in options.kinds:
        if any(r.failure for r in runs.values()):
            log(f"smoke: {kind} skipped: the baseline server failed")
            runs[kind] = ServerRun(kind=kind, started=False)
            continue
        if engine is None:
            pplan = process_plan(options, kind, free_tcp_port())
            commands[kind] = redact_argv(pplan.argv)
            log(f"smoke: {kind}: {' '.join(commands[kind])}")
            runs[kind] = serve_process_and_measure(pplan, options, server_log_path(report_path, kind), log)
        else:
            plan = container_plan(options, image_info["id"], kind)
            log(f"smoke: {kind}: {' '.join(redact_argv(plan.command))}")
            runs[kind] = serve_and_measure(engine, plan, options, log)
    return runs, commands


def _report_data(
    stack: Stack | None, image_info: dict[str, Any], runs: Mapping[str, ServerRun], verdict: Verdict,
    reference: Mapping[str, Any] | None, options: SmokeOptions, report_path: Path, commands: dict[str, list[str]],
    history_file: Path | None,
) -> dict[str, Any]:
    """The report's fields (its history line is made from them)."""
    return {
        "verdict": "pass" if verdict.passed else "fail",
        "failures": list(verdict.failures),
        "stack": stack.name if stack else None,
        "image": image_info,
        "time": utc_timestamp(),
        "baseline": runs["baseline"].to_dict(),
        "eagle3": runs["eagle3"].to_dict(),
        "speedup": verdict.speedup,
        "accept_length": verdict.accept_length,
        "agreement": verdict.agreement,
        "gates": options.gates.model_dump(),
        # The last passing run the max_regression gate compared with (None: the gate did not apply).
        "regression_reference": _reference_summary(reference),
        # When that run smoked another image: `invoke diff OLD NEW`, and what changed if both are readable here.
        # Another image's packages can be read back from this host; an environment's folder has no snapshot.
        "since_last_pass": None if options.runner == "process" else since_last_pass(
            reference, image_info, lambda spec: local_snapshot(spec, docker_host=options.docker_host)),
        "options": options.describe(),
        "runner": runner_summary(options, report_path),
        "commands": commands,
        "history_file": None if history_file is None else str(history_file),
    }


def _reference_summary(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {
        "time": record.get("time"),
        "image": (record.get("image") or {}).get("digest"),
        "image_id": (record.get("image") or {}).get("id"),
        "baseline": {"tokens_per_s": (record.get("baseline") or {}).get("tokens_per_s")},
        "eagle3": {"tokens_per_s": (record.get("eagle3") or {}).get("tokens_per_s")},
    }


def launch_command(options: SmokeOptions, image: str | None, kind: str) -> list[str]:
    """The argv as the report shows it, secrets hidden (a process run replaces it with the one it started)."""
    if options.runner == "process":
        return redact_argv(process_plan(options, kind, options.port, host_env={}).argv)
    return redact_argv(container_plan(options, image or "", kind, host_env={}).command)


def runner_summary(options: SmokeOptions, report_path: Path) -> dict[str, Any]:
    """Which runner measured the servers, and where the process runner kept each server's log."""
    if options.runner != "process":
        return {"kind": options.runner, "docker_host": options.docker_host or "local engine"}
    return {"kind": "process", "python_env": options.python_env,
            "logs": {kind: str(server_log_path(report_path, kind)) for kind in options.kinds}}


def log_root(report_path: Path, options: SmokeOptions) -> Path:
    """The folder no link may lead out of on the way to a server's log: the build folder, or the report's
    own folder (a `--report` elsewhere)."""
    return containing_root(report_path.parent, Path(options.build_dir))


def server_log_path(report_path: Path, kind: str) -> Path:
    """report.json -> report.baseline.log: the process runner keeps each server's output beside the report."""
    return report_path.with_suffix(f".{kind}.log")


# ---- one server --------------------------------------------------------------------------------------


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


class ProcessServer:
    def __init__(self, proc: subprocess.Popen[bytes], plan: ProcessPlan, log_path: Path) -> None:
        self.proc, self.plan, self.log_path, self.kind = proc, plan, log_path, plan.kind

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


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def serve_and_measure(engine: docker.DockerClient, plan: ContainerPlan, options: SmokeOptions, log: Log) -> ServerRun:
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
            return measure_server(ContainerServer(container, plan, options), _api_key(plan.command), options, log)
    except docker.errors.APIError as exc:
        reason = (exc.explanation or str(exc)).splitlines()[0][:300]
        return ServerRun(kind=plan.kind, started=False, failure=f"the container could not start: {reason}")


def serve_process_and_measure(plan: ProcessPlan, options: SmokeOptions, log_path: Path, log: Log) -> ServerRun:
    """The server as a local process group, ended (all of it) however this returns."""
    try:
        cm = running_process(plan.argv, env=plan.environment, log_path=log_path,
                             log_root=containing_root(log_path.parent, Path(options.build_dir)))
        with cm as proc:
            return measure_server(ProcessServer(proc, plan, log_path), _api_key(plan.argv), options, log)
    except OSError as exc:
        return ServerRun(kind=plan.kind, started=False, failure=f"the server process could not start: {exc}")
    finally:
        _hide_in_log(log_path, plan.secrets)


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


def measure_server(server: Server, api_key: str | None, options: SmokeOptions, log: Log) -> ServerRun:
    start = time.monotonic()
    client, failure = wait_until_healthy(server, api_key, options)
    if failure:
        return _not_started(server, failure, log)
    assert client is not None
    startup = time.monotonic() - start
    log(f"smoke: {server.kind}: healthy after {startup:.1f}s; warming up")
    kind = server.kind
    try:
        warm_up(client, options.max_new_tokens)
        measured = _single_stream_runs(client, kind, options, log)
        single, single_results, _ = measured[0]
        concurrent, results_n = _concurrent_phase(client, kind, options, log)
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
        accept_length_meta=accept_length_from_meta([*single_results, *results_n]) if speculative else None,
        accept_length_server=accept_length_from_server_info(server_info) if speculative else None,
        runs=tuple(
            {"tokens_per_s": phase.tokens_per_s, "ttft_s": phase.ttft_s, "completed": phase.completed,
             "requests": phase.requests, "flushed": flushed,
             "accept_length": accept_length_from_meta(results) if speculative else None}
            for phase, results, flushed in measured
        ),
    )


def _not_started(server: Server, failure: str, log: Log) -> ServerRun:
    """A server that never became healthy: its failure and last log lines, logged and in one line."""
    log(f"smoke: {server.kind}: {failure.splitlines()[0]}")
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
