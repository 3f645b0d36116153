"""What is done with a started smoke server, whatever runs it (`server`: a container or a process group): the
one health wait, then the smoke's measurement (warm-up, single-stream runs, concurrent phases and levels) or a
warm start's (its first token and phases alone).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.errors import first_line
from ..serving.phases import LogLine, phases_line, start_phases
from .acceptance import draft_acceptance
from .client import Generation, SGLangClient
from .measure import (
    PhaseStats,
    ServerRun,
    accept_length_from_meta,
    accept_length_from_server_info,
    greedy_outputs,
)
from .plan import SmokeOptions
from .workload import prompt_set, run_phase, warm_up

LOG_TAIL_LINES = 15
Log = Callable[[str], None]


class Server(Protocol):
    """A server that was started, seen the same way whatever runs it: everything after "it is listening"
    (the health wait, measurement, gates, report) goes through this one code path."""

    kind: str
    # Its log is stamped by this machine's clock (a local process; a container's by its engine's, maybe remote)
    local_clock: bool

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
        outputs=greedy_outputs(single_results),
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
    read_at = time.time() if server.local_clock else None  # every line read was written by now, on this clock
    if started_at is None:
        lines = []  # no start on the lines' clock: every log milestone is unknown, not guessed
    phases = start_phases(lines, started_at or 0.0, first_token, resolution, read_at)
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
