"""A server's start by phase, read from its own log lines and their timestamps (pure).

    process start -> imports done -> weights loaded -> CUDA graphs captured -> healthy -> first token

Each milestone is the line SGLang itself logs there (read from SGLang 0.5.17's and 0.5.23's source; the
lines below are the same in both):

- imports done: `logger.info(f"{server_args=}")` in `sglang/srt/entrypoints/engine.py`
  (`_launch_subprocesses`), the first line after `import sglang.srt.entrypoints.http_server` and friends;
  0.5.23 words it `server_args=...` too.
- weights loaded: the last `Load weight end. elapsed=...` (`model_executor/model_runner.py`; a speculative
  server logs one for the target and one for the draft; 0.5.23's deferred loader logs it after the capture).
- CUDA graphs captured: the last `Capture <role> <kind> CUDA graph end.` (`model_runner_components/
  cuda_graph_setup.py`, `speculative/eagle_worker_v2.py`; `Capture ... cuda graph end.` in older runners).
- healthy: `The server is fired up and ready to roll!` (`entrypoints/http_server.py`, after its warm-up).

Process start and first token are this side's own clock (the process was started; the first streamed
chunk arrived). A milestone whose line is missing (a server run with `--disable-cuda-graph` captures no
graph) is None: unknown, never guessed, and so is every phase that ends or starts there.

SGLang stamps its lines `[%Y-%m-%d %H:%M:%S]` in the server's local time (`.mmm` with SGLANG_LOG_MS=1; a
scheduler adds ` TP0` and the like), so the process runner's phases have that resolution. The docker
runner reads the engine's own per-line timestamps (`docker logs --timestamps`, UTC, nanoseconds) instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.clock import parse_local_stamp, parse_utc

MILESTONES = ("imports_done", "weights_loaded", "cuda_graphs_captured", "healthy", "first_token")
# phase name -> (from milestone, to milestone); "process_start" is 0.
PHASES = (
    ("imports", "process_start", "imports_done"),
    ("weights", "imports_done", "weights_loaded"),
    ("cuda_graphs", "weights_loaded", "cuda_graphs_captured"),
    ("to_healthy", "cuda_graphs_captured", "healthy"),
    ("first_token", "healthy", "first_token"),
)
# milestone -> (the pattern of its line, which occurrence counts)
LINES: dict[str, tuple[re.Pattern[str], str]] = {
    "imports_done": (re.compile(r"\bserver_args="), "first"),
    "weights_loaded": (re.compile(r"\bLoad weight end\."), "last"),
    "cuda_graphs_captured": (re.compile(r"\bCapture .*(?:CUDA|cuda) graph end\."), "last"),
    "healthy": (re.compile(r"The server is fired up and ready to roll!"), "first"),
}
_SGLANG_STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(\.\d{1,6})?(?: [^\]]*)?\]")
_DOCKER_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?Z ")


@dataclass(frozen=True)
class LogLine:
    """One line of a server's log and when it was written (seconds since the epoch; None: no stamp)."""

    at: float | None
    text: str


def sglang_stamp(text: str) -> tuple[float | None, float]:
    """(epoch seconds of SGLang's `[date time(.ms)]` prefix in this machine's local time, its resolution)."""
    found = _SGLANG_STAMP.match(text)
    at = parse_local_stamp(found.group(1)) if found else None
    if found is None or at is None:
        return None, 1.0
    fraction = found.group(2)
    return at + (float(fraction) if fraction else 0.0), (0.001 if fraction else 1.0)


def process_log_lines(text: str) -> tuple[list[LogLine], float]:
    """A process runner's log: each line with its own stamp; and the coarsest resolution seen."""
    lines, resolution = [], 0.001
    for raw in text.splitlines():
        at, res = sglang_stamp(raw)
        if at is not None:
            resolution = max(resolution, res)
        lines.append(LogLine(at, raw))
    return lines, resolution


def docker_log_lines(text: str) -> list[LogLine]:
    """`docker logs --timestamps` output: each line with the engine's own UTC stamp, which is taken off."""
    out = []
    for raw in text.splitlines():
        found = _DOCKER_STAMP.match(raw)
        if not found:
            out.append(LogLine(None, raw))
            continue
        at = docker_time(found.group(1) + (found.group(2) or ""))
        out.append(LogLine(at, raw[found.end():]))
    return out


def docker_time(text: str) -> float | None:
    """Docker's RFC 3339 time (`2026-12-05T03:30:00.123456789Z`) as epoch seconds (None: not one)."""
    when = parse_utc(text)
    return None if when is None else when.timestamp()


def milestones_of(lines: Iterable[LogLine]) -> dict[str, float | None]:
    """Epoch seconds of each log milestone (None where its line is missing or carries no stamp)."""
    found: dict[str, float | None] = dict.fromkeys(LINES)
    for line in lines:
        for name, (pattern, which) in LINES.items():
            if pattern.search(line.text) and line.at is not None and (which == "last" or found[name] is None):
                found[name] = line.at
    return found


# How far a stamp may fall before the process started or after the log was read, beyond the stamps' own
# resolution, and still be on this side's clock.
CLOCK_SLACK_S = 1.0


def start_phases(lines: Iterable[LogLine], started_at: float, first_token_s: float | None,
                 resolution_s: float = 0.001, read_at: float | None = None) -> dict[str, Any]:
    """The start by phase: each milestone as seconds since the process started (`started_at`, epoch seconds
    on the clock the lines are stamped by), each phase's duration, and what is unknown.

    A stamp a little before `started_at` (a line stamped to the whole second) counts as 0. One well before it,
    or after the log was read (`read_at`), is on another clock (a server given another TZ stamps its local time
    hours off): unknown, and named in `off_clock`, never clamped into a phase."""
    at = milestones_of(lines)
    since: dict[str, float | None] = {"process_start": 0.0}
    off_clock: list[str] = []
    for name in LINES:
        value = at[name]
        if value is not None and (value < started_at - resolution_s - CLOCK_SLACK_S
                                  or (read_at is not None and value > read_at + resolution_s + CLOCK_SLACK_S)):
            off_clock.append(name)
            value = None
        since[name] = None if value is None else round(max(0.0, value - started_at), 3)
    since["first_token"] = None if first_token_s is None else round(first_token_s, 3)
    phases: dict[str, float | None] = {}
    for phase, begin, end in PHASES:
        a, b = since[begin], since[end]
        phases[phase] = None if a is None or b is None else round(max(0.0, b - a), 3)
    out = {"milestones_s": {k: since[k] for k in MILESTONES}, "phases_s": phases,
           "unknown": [k for k in MILESTONES if since[k] is None], "resolution_s": resolution_s}
    return {**out, "off_clock": off_clock} if off_clock else out


def phases_line(kind: str, phases: Mapping[str, Any]) -> str:
    """`smoke: baseline: start by phase: imports 37.2s, weights 1.0s, cuda_graphs unknown, ...`."""
    shown = ", ".join(f"{name} {'unknown' if value is None else f'{value:.1f}s'}"
                      for name, value in (phases.get("phases_s") or {}).items())
    off = phases.get("off_clock") or []
    why = (f" ({len(off)} log stamp(s) fall outside the start, on another clock: a time zone (TZ) of the server's "
           "own?)") if off else ""
    return f"smoke: {kind}: start by phase: {shown}{why}"
