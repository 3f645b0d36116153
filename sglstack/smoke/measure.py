"""Pure measurement: tokens/s per stream and in aggregate, TTFT, accept length, greedy agreement."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
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
    # The draft's acceptance where the server gives it (`acceptance.draft_acceptance`: totals, per position).
    acceptance: Mapping[str, Any] | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.single.tokens_per_s if self.single else 0.0

    @property
    def completed(self) -> int:
        return sum(p.completed for p in (self.single, self.concurrent) if p)

    @property
    def requests(self) -> int:
        return sum(p.requests for p in (self.single, self.concurrent) if p)

    @property
    def accept_length(self) -> float | None:
        return self.accept_length_meta if self.accept_length_meta is not None else self.accept_length_server

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
            # Only when measured: a report written before it was recorded reads back the same.
            **({"acceptance": dict(self.acceptance)} if self.acceptance is not None else {}),
        }
