"""Pure measurement: tokens/s per stream and in aggregate, TTFT, accept length, greedy agreement."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .client import Generation


@dataclass(frozen=True)
class PhaseStats:
    """One batch of requests sent at a fixed concurrency."""

    concurrency: int
    requests: int
    completed: int
    tokens_per_s: float  # median over completed requests of completion_tokens / request latency
    aggregate_tokens_per_s: float  # all completion tokens / the phase's wall time
    ttft_s: float | None  # median time to first token
    wall_s: float
    errors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["errors"] = list(self.errors)
        return out


def phase_from_dict(data: Mapping[str, Any] | None) -> PhaseStats | None:
    return None if data is None else PhaseStats(**{**data, "errors": tuple(data["errors"])})


def phase_stats(results: Sequence[Generation], concurrency: int, wall_s: float) -> PhaseStats:
    done = [r for r in results if r.ok]
    per_stream = [r.completion_tokens / r.latency_s for r in done if r.latency_s > 0]
    ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
    tokens = sum(r.completion_tokens for r in done)
    return PhaseStats(
        concurrency=concurrency,
        requests=len(results),
        completed=len(done),
        tokens_per_s=statistics.median(per_stream) if per_stream else 0.0,
        aggregate_tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        ttft_s=statistics.median(ttfts) if ttfts else None,
        wall_s=wall_s,
        errors=tuple(sorted({r.error for r in results if r.error})),
    )


def accept_length_from_meta(results: Sequence[Generation]) -> float | None:
    """sum(completion_tokens) / sum(spec_verify_ct), over requests that report spec_verify_ct."""
    spec = [r for r in results if r.ok and r.spec_verify_ct]
    steps = sum(int(r.spec_verify_ct or 0) for r in spec)
    return sum(r.completion_tokens for r in spec) / steps if steps else None


def accept_length_from_server_info(server_info: Mapping[str, Any] | None) -> float | None:
    states = (server_info or {}).get("internal_states") or [{}]
    value = states[0].get("avg_spec_accept_length") if isinstance(states[0], Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def greedy_outputs(results: Sequence[Generation]) -> dict[str, str]:
    """Each prompt's greedy output, of the requests that completed: a failed one's empty text is no output (two
    failures would otherwise count as agreeing outputs, and one as a disagreement the model never made)."""
    return {r.prompt: r.text for r in results if r.ok}


def agreement(baseline: Mapping[str, str], eagle3: Mapping[str, str]) -> float | None:
    """The share of prompts whose greedy outputs are identical in both runs (None: nothing to compare)."""
    common = [p for p in baseline if p in eagle3]
    if not common:
        return None
    return sum(baseline[p] == eagle3[p] for p in common) / len(common)


@dataclass(frozen=True)
class ServerRun:
    """One server (baseline or EAGLE-3): whether it came up, and what it measured."""

    kind: str
    started: bool
    failure: str | None = None
    startup_s: float | None = None
    single: PhaseStats | None = None  # concurrency 1
    concurrent: PhaseStats | None = None  # the configured higher concurrency
    outputs: Mapping[str, str] | None = None  # prompt -> greedy text, from the concurrency-1 phase
    accept_length_meta: float | None = None
    accept_length_server: float | None = None
    # One entry per measured concurrency-1 run: tokens_per_s, ttft_s, accept_length (meta_info), flushed.
    runs: tuple[Mapping[str, Any], ...] = ()
    # The start by phase, from the server's log (`phases.start_phases`); None: not read (a server that
    # never started, a report from before phases).
    phases: Mapping[str, Any] | None = None
    # The kernel cache this start used (`smoke/warm.py`): its folder, files before and after, the restore.
    kernel_cache: Mapping[str, Any] | None = None
    # The phases at the stack's named concurrency levels other than 1 and `concurrent`'s (smoke.concurrency_levels).
    level_phases: Mapping[int, PhaseStats] = field(default_factory=dict)

    def phase_at(self, level: int) -> PhaseStats | None:
        if level == 1:
            return self.single
        if self.concurrent is not None and self.concurrent.concurrency == level:
            return self.concurrent
        return self.level_phases.get(level)

    def tokens_per_s_at(self, level: int) -> float | None:
        """What a deployment serving `level` streams gets: one stream's tokens/s at 1, the aggregate above."""
        phase = self.phase_at(level)
        if phase is None:
            return None
        return phase.tokens_per_s if level == 1 else phase.aggregate_tokens_per_s

    @property
    def load_phases(self) -> list[PhaseStats]:
        """The measured load phases (concurrency 1, `concurrent`, the named levels) this run has."""
        return [p for p in (self.single, self.concurrent, *self.level_phases.values()) if p]
    # The draft's acceptance where the server gives it (`acceptance.draft_acceptance`: totals, per position).
    acceptance: Mapping[str, Any] | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.single.tokens_per_s if self.single else 0.0

    @property
    def completed(self) -> int:
        return sum(p.completed for p in self.load_phases)

    @property
    def requests(self) -> int:
        return sum(p.requests for p in self.load_phases)

    @property
    def accept_length(self) -> float | None:
        return self.accept_length_meta if self.accept_length_meta is not None else self.accept_length_server

    @classmethod
    def from_dict(cls, kind: str, run: Mapping[str, Any]) -> ServerRun:
        """A run back from its report entry (`to_dict`), to re-derive a recorded verdict with the gates."""
        levels = {int(level): phase_from_dict(phase) for level, phase in (run.get("concurrency_levels") or {}).items()}
        return cls(kind=kind, started=run["started"], failure=run["failure"], startup_s=run["startup_s"],
                   single=phase_from_dict(run["concurrency_1"]), concurrent=phase_from_dict(run["concurrency_n"]),
                   accept_length_meta=run["accept_length_meta"], accept_length_server=run["accept_length_server"],
                   runs=tuple(run.get("runs") or ()), level_phases={k: v for k, v in levels.items() if v},
                   phases=run.get("phases"), kernel_cache=run.get("kernel_cache"), acceptance=run.get("acceptance"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "failure": self.failure,
            "startup_s": self.startup_s,
            "tokens_per_s": self.tokens_per_s,
            "aggregate_tokens_per_s": self.concurrent.aggregate_tokens_per_s if self.concurrent else None,
            "ttft_s": self.single.ttft_s if self.single else None,
            "completed": self.completed,
            "requests": self.requests,
            "concurrency_1": self.single.to_dict() if self.single else None,
            "concurrency_n": self.concurrent.to_dict() if self.concurrent else None,
            "accept_length_meta": self.accept_length_meta,
            "accept_length_server": self.accept_length_server,
            "runs": [dict(r) for r in self.runs],
            # Only when read: reports and recordings from before phases compare equal as they were.
            **({"phases": dict(self.phases)} if self.phases is not None else {}),
            **({"kernel_cache": dict(self.kernel_cache)} if self.kernel_cache is not None else {}),
            # Only when the stack names levels beyond these two phases: a report without them keeps its shape.
            **({"concurrency_levels": {str(n): phase.to_dict() for n, phase in sorted(self.level_phases.items())}}
               if self.level_phases else {}),
            # Only when measured: a report written before it was recorded reads back the same.
            **({"acceptance": dict(self.acceptance)} if self.acceptance is not None else {}),
        }
