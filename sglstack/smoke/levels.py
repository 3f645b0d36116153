"""Pure gates at the concurrency a deployment serves: speedup per named level, the crossover, regressions per level.

A stack names the levels that matter (`smoke.concurrency_levels`). At concurrency 1 the figure is tokens/s of one
stream (as the single-level gate has always read it); above 1 it is the aggregate: all completion tokens over the
phase's wall time, what a server serving that many streams delivers. Speedup at a level = EAGLE-3's figure / the
baseline's. `min_speedup` applies at every named level, and the crossover is the first level where EAGLE-3 stops
paying (its speedup falls below `min_speedup`, the stack's own measure of paying for itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .measure import ServerRun

LABELS = {"baseline": "baseline", "eagle3": "EAGLE-3"}


def measure_name(level: int) -> str:
    return "per stream" if level == 1 else "aggregate"


@dataclass(frozen=True)
class LevelSpeedup:
    concurrency: int
    baseline_tokens_per_s: float | None
    eagle3_tokens_per_s: float | None
    speedup: float | None

    def pays(self, min_speedup: float) -> bool:
        return self.speedup is not None and self.speedup >= min_speedup

    def to_dict(self, min_speedup: float) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "measure": measure_name(self.concurrency),
                "baseline_tokens_per_s": self.baseline_tokens_per_s, "eagle3_tokens_per_s": self.eagle3_tokens_per_s,
                "speedup": self.speedup, "pays": self.pays(min_speedup)}


def normalize_levels(levels: Iterable[int]) -> tuple[int, ...]:
    """The named levels, ascending, each once."""
    return tuple(sorted(set(levels)))


def level_speedups(levels: Sequence[int], baseline: ServerRun, eagle3: ServerRun) -> tuple[LevelSpeedup, ...]:
    out = []
    for level in normalize_levels(levels):
        b, e = baseline.tokens_per_s_at(level), eagle3.tokens_per_s_at(level)
        speedup = e / b if b and e is not None else None
        out.append(LevelSpeedup(level, b, e, speedup))
    return tuple(out)


def crossover(speedups: Sequence[LevelSpeedup], min_speedup: float) -> int | None:
    """The first (lowest) named level where EAGLE-3 stops paying; None when it pays at every one."""
    return next((s.concurrency for s in speedups if not s.pays(min_speedup)), None)


def crossover_line(speedups: Sequence[LevelSpeedup], min_speedup: float) -> str:
    """One sentence for the report and the console."""
    if not speedups:
        return ""
    level = crossover(speedups, min_speedup)
    if level is None:
        return f"EAGLE-3 pays at every named level (concurrency {', '.join(str(s.concurrency) for s in speedups)})."
    at = next(s for s in speedups if s.concurrency == level)
    shown = "nothing measured" if at.speedup is None else f"{at.speedup:.2f}x"
    return f"EAGLE-3 stops paying at concurrency {level} ({shown}, below {min_speedup:.2f}x)."


def level_failures(min_speedup: float, speedups: Sequence[LevelSpeedup]) -> list[str]:
    out = []
    for s in speedups:
        if s.pays(min_speedup):
            continue
        if s.baseline_tokens_per_s is None or s.eagle3_tokens_per_s is None:
            out.append(f"min_speedup: at concurrency {s.concurrency} nothing was measured")
            continue
        out.append(
            f"min_speedup: at concurrency {s.concurrency} EAGLE-3 {s.eagle3_tokens_per_s:.1f} tok/s "
            f"{measure_name(s.concurrency)} vs baseline {s.baseline_tokens_per_s:.1f} tok/s is "
            f"{s.speedup or 0:.2f}x, below {min_speedup:.2f}x"
        )
    return out


def recorded_at(record: Mapping[str, Any], kind: str, level: int) -> float | None:
    """A history record's tokens/s of one kind at one level (a record made before levels: concurrency 1 only)."""
    by_level = ((record.get("levels") or {}).get(kind) or {}) if isinstance(record.get("levels"), Mapping) else {}
    value = by_level.get(str(level))
    if value is None and level == 1:
        value = (record.get(kind) or {}).get("tokens_per_s")
    return value if isinstance(value, int | float) else None


def level_regressions(max_regression: float, levels: Sequence[int], baseline: ServerRun, eagle3: ServerRun,
                      last_pass: Mapping[str, Any] | None) -> list[str]:
    """Each kind's tokens/s at each named level against the last passing run of the same settings."""
    if not last_pass:
        return []
    out = []
    when = last_pass.get("time", "?")
    for level in normalize_levels(levels):
        for run in (baseline, eagle3):
            now, before = run.tokens_per_s_at(level), recorded_at(last_pass, run.kind, level)
            if not before or not now:
                continue
            drop = 1.0 - now / before
            if drop > max_regression:
                out.append(
                    f"max_regression: at concurrency {level} {LABELS[run.kind]} {now:.1f} tok/s "
                    f"{measure_name(level)} is {drop:.1%} below the last passing run's {before:.1f} tok/s ({when}), "
                    f"more than {max_regression:.0%}"
                )
    return out


def levels_by_kind(levels: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """A report's `levels` rows as a history line keeps them: {kind: {"level": tokens/s}} (JSON keys are strings),
    what `recorded_at` reads back for the regression gate."""
    return {kind: {str(row["concurrency"]): row[f"{kind}_tokens_per_s"] for row in levels} for kind in LABELS}
