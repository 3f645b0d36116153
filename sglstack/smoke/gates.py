"""Pure gates: each failed gate is one string that starts with the gate's name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config.settings import Gates
from .acceptance import nothing_accepted, nothing_accepted_failure
from .levels import LABELS, LevelSpeedup, crossover, level_failures, level_regressions, level_speedups
from .measure import ServerRun


@dataclass(frozen=True)
class Verdict:
    speedup: float | None
    accept_length: float | None
    agreement: float | None
    failures: tuple[str, ...]
    # With named concurrency levels: the speedup at each, and the first level where EAGLE-3 stops paying.
    levels: tuple[LevelSpeedup, ...] = ()
    crossover: int | None = None

    @property
    def passed(self) -> bool:
        return not self.failures


def speedup_of(baseline: ServerRun, eagle3: ServerRun) -> float | None:
    if not (baseline.single and eagle3.single) or baseline.tokens_per_s <= 0:
        return None
    return eagle3.tokens_per_s / baseline.tokens_per_s


def evaluate(
    gates: Gates,
    baseline: ServerRun,
    eagle3: ServerRun,
    agreement: float | None,
    last_pass: Mapping[str, Any] | None = None,
    levels: Sequence[int] = (),
) -> Verdict:
    """The gates; with `levels` (the stack's smoke.concurrency_levels) min_speedup and max_regression apply at each
    named level instead of at concurrency 1 alone."""
    failures: list[str] = []
    for run in (baseline, eagle3):
        if run.failure:
            failures.append(f"{run.kind}: {run.failure}")
        elif run.requests and run.completed < run.requests:
            errors = [e for p in run.load_phases for e in p.errors]
            first = f": {errors[0]}" if errors else ""
            failures.append(f"{run.kind}: {run.requests - run.completed}/{run.requests} requests failed{first}")

    speedup = speedup_of(baseline, eagle3)
    accept = eagle3.accept_length
    ran = baseline.single is not None and eagle3.single is not None
    # Per level only where both servers were measured: a baseline-only run (a warm start) has no crossover.
    speedups = level_speedups(levels, baseline, eagle3) if levels and ran else ()
    if ran:
        if speedups:
            failures += level_failures(gates.min_speedup, speedups)
        elif speedup is None or speedup < gates.min_speedup:
            failures.append(
                f"min_speedup: EAGLE-3 {eagle3.tokens_per_s:.1f} tok/s vs baseline {baseline.tokens_per_s:.1f} "
                f"tok/s is {speedup or 0:.2f}x, below {gates.min_speedup:.2f}x"
            )
        if accept is None:
            failures.append(
                "min_accept_length: the EAGLE-3 server reported no accept length "
                "(no meta_info spec_verify_ct, no avg_spec_accept_length)"
            )
        elif evidence := nothing_accepted(accept, eagle3.accept_length_server, eagle3.acceptance):
            failures.append(nothing_accepted_failure(evidence, accept))  # whatever the gate: speculation did nothing
        elif accept < gates.min_accept_length:
            failures.append(f"min_accept_length: accept length {accept:.2f} is below {gates.min_accept_length:.2f}")
        if agreement is None:
            failures.append("min_agreement: no greedy outputs to compare")
        elif agreement < gates.min_agreement:
            failures.append(
                f"min_agreement: {agreement:.0%} of greedy outputs match the baseline, below {gates.min_agreement:.0%}"
            )
        if levels:
            failures += level_regressions(gates.max_regression, levels, baseline, eagle3, last_pass)
        else:
            failures += regressions(gates.max_regression, baseline, eagle3, last_pass)
    return Verdict(speedup=speedup, accept_length=accept, agreement=agreement, failures=tuple(failures),
                   levels=speedups, crossover=crossover(speedups, gates.min_speedup) if speedups else None)


def regressions(
    max_regression: float, baseline: ServerRun, eagle3: ServerRun, last_pass: Mapping[str, Any] | None
) -> list[str]:
    """Tokens/s of each run against the last passing run of the same stack and settings."""
    if not last_pass:
        return []
    out = []
    for run in (baseline, eagle3):
        before = (last_pass.get(run.kind) or {}).get("tokens_per_s")
        if not before or run.tokens_per_s <= 0:
            continue
        drop = 1.0 - run.tokens_per_s / before
        if drop > max_regression:
            when = last_pass.get("time", "?")
            out.append(
                f"max_regression: {LABELS[run.kind]} {run.tokens_per_s:.1f} tok/s is {drop:.1%} below the last "
                f"passing run's {before:.1f} tok/s ({when}), more than {max_regression:.0%}"
            )
    return out
