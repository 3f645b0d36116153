"""Pure: a sweep of speculative settings in one smoke run (as SGLang's bench_speculative.py does), and the best
setting per concurrency level.

`sweep` names settings as STEPS:TOPK:DRAFT_TOKENS (`3:1:4,7:1:8`). The baseline is served once; the stack's own
setting is the one the gates judge (the smoke's verdict), and every other setting is served in turn and judged by
the same gates, each with its own verdict. The best setting at a level is the one with the highest speedup there
among those whose greedy outputs agree with the baseline (`min_agreement`); where none pays (`min_speedup`), the
recommendation is to serve that level without speculation. The recommendation is a report: nothing here writes
a stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..config.settings import Gates
from .gates import evaluate
from .levels import measure_name, normalize_levels
from .measure import ServerRun, agreement
from .plan import SmokeOptions
from .sweepspec import SpecSetting, setting_of


def with_setting(options: SmokeOptions, setting: SpecSetting) -> SmokeOptions:
    """The same smoke with the EAGLE-3 server at another setting (the same draft, the same everything else)."""
    spec = options.serving.speculative
    assert spec is not None  # smoke_options refuses a sweep without speculative settings
    changed = spec.model_copy(update={"num_steps": setting.num_steps, "eagle_topk": setting.eagle_topk,
                                      "num_draft_tokens": setting.num_draft_tokens})
    return replace(options, serving=replace(options.serving, speculative=changed), sweep=())


def extra_settings(options: SmokeOptions) -> tuple[SpecSetting, ...]:
    """The sweep's settings other than the stack's own (which the smoke serves anyway)."""
    spec = options.serving.speculative
    own = setting_of(spec) if spec is not None else None
    return tuple(s for s in options.sweep_settings if s != own)


def sweep_levels(options: SmokeOptions) -> tuple[int, ...]:
    """The levels a sweep ranks at: the stack's named levels, else concurrency 1 and the higher concurrency."""
    if options.concurrency_levels:
        return normalize_levels(options.concurrency_levels)
    return normalize_levels((1, options.concurrency))


def judge(gates: Gates, levels: Sequence[int], baseline: ServerRun, run: ServerRun, setting: SpecSetting,
          configured: bool, command: Sequence[str] | None) -> dict[str, Any]:
    """One setting's entry: its figures and its own verdict by the smoke's gates (no regression reference: the
    history belongs to the stack's own setting)."""
    share = agreement(baseline.outputs, run.outputs) if baseline.outputs and run.outputs else None
    verdict = evaluate(gates, baseline, run, share, None, levels)
    return {
        **setting.to_dict(),
        "configured": configured,
        "verdict": "pass" if verdict.passed else "fail",
        "failures": list(verdict.failures),
        "speedup": verdict.speedup,
        "accept_length": verdict.accept_length,
        "agreement": verdict.agreement,
        "levels": [s.to_dict(gates.min_speedup) for s in verdict.levels],
        "crossover": verdict.crossover,
        "command": list(command) if command is not None else None,
        "eagle3": run.to_dict(),
    }


def best_per_level(entries: Sequence[Mapping[str, Any]], levels: Sequence[int], gates: Gates) -> list[dict[str, Any]]:
    """Per level: the setting with the highest speedup among those whose outputs agree; `setting` None where no
    setting pays there (serve that level without speculation)."""
    out = []
    for level in normalize_levels(levels):
        ranked = []
        for entry in entries:
            at = next((s for s in entry["levels"] if s["concurrency"] == level), None)
            agreed = entry["agreement"] is not None and entry["agreement"] >= gates.min_agreement
            if at is not None and at["speedup"] is not None and agreed:
                ranked.append((at["speedup"], entry["setting"]))
        if not ranked:
            out.append({"concurrency": level, "setting": None, "speedup": None, "pays": False})
            continue
        speedup, key = max(ranked, key=lambda pair: pair[0])
        pays = speedup >= gates.min_speedup
        out.append({"concurrency": level, "setting": key if pays else None, "speedup": speedup, "pays": pays,
                    **({} if pays else {"closest": key})})
    return out


def recommended_setting(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The one setting a stack that serves all its levels should carry: of the settings that pass every gate at
    every level, the one whose worst speedup across the levels is highest (None when no setting passes)."""
    passing = [e for e in entries if e["verdict"] == "pass" and e["levels"]]
    if not passing:
        return None
    worst = {e["setting"]: min(row["speedup"] for row in e["levels"]) for e in passing}
    best = max(passing, key=lambda e: worst[e["setting"]])
    return {key: best[key] for key in ("setting", "num_steps", "eagle_topk", "num_draft_tokens", "configured")} | {
        "worst_speedup": worst[best["setting"]]}


def recommendation_lines(best: Sequence[Mapping[str, Any]], min_speedup: float) -> list[str]:
    """One line per level, for the report, the console and `upgrade`'s report."""
    lines = []
    for row in best:
        level = row["concurrency"]
        if row["setting"] is not None:
            lines.append(f"concurrency {level}: {row['setting']} (steps:topk:draft tokens), {row['speedup']:.2f}x "
                         f"{measure_name(level)}")
        elif row["speedup"] is None:
            lines.append(f"concurrency {level}: no setting measured with agreeing outputs")
        else:
            lines.append(f"concurrency {level}: no speculation (the best, {row['closest']}, is {row['speedup']:.2f}x, "
                         f"below {min_speedup:.2f}x)")
    return lines
