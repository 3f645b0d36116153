"""Pure: what `invoke upgrade` recommends for a stack's speculative settings, from the stack's last smoke sweep.

`invoke smoke --stack S --sweep 3:1:4,7:1:8` serves each setting and records, in its report
(BUILD_ROOT/S/smoke-report.json), the best setting per concurrency level and `recommended`: the one setting that
passes every gate at every level the stack names, with the highest worst-level speedup. The upgrade's report shows
it beside the stack's own setting; the edit is part of what `--write` writes, and nothing is written without it.
The sweep measured the release the stack had: the report says so, and the smoke of the new image re-checks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..config.schema import Stack
from ..core.errors import SglstackError
from ..core.inputs import read_json
from ..core.records import stack_dir

SWEEP_HINT = "--sweep 3:1:4,7:1:8"


def current_setting(stack: Stack) -> str | None:
    spec = stack.serving.speculative
    return None if spec is None else f"{spec.num_steps}:{spec.eagle_topk}:{spec.num_draft_tokens}"


def sweep_advice(stack: Stack, report: Mapping[str, Any] | None, source: str) -> dict[str, Any]:
    """The report's `speculative` section: the stack's setting, the sweep's recommendation and per-level best,
    and the edit `--write` makes (empty when there is nothing to change or no sweep to go by)."""
    current = current_setting(stack)
    advice: dict[str, Any] = {"current": current, "source": source, "found": False, "recommended": None,
                              "best": [], "edits": {}}
    sweep = (report or {}).get("sweep")
    if current is None:
        advice["lines"] = ["The stack serves no speculative decoding: nothing to recommend."]
        return advice
    if not isinstance(sweep, Mapping) or (report or {}).get("stack") != stack.name:
        advice["lines"] = [f"No sweep recorded for stack '{stack.name}' (`{source}`): `invoke smoke --stack "
                           f"{stack.name} {SWEEP_HINT}` measures the settings and names the best per level."]
        return advice
    if problem := sweep_problem(sweep):
        advice["lines"] = [f"The sweep recorded for stack '{stack.name}' (`{source}`) cannot be read ({problem}): "
                           f"`invoke smoke --stack {stack.name} {SWEEP_HINT}` measures the settings again."]
        return advice
    recommended = sweep.get("recommended")
    advice.update(found=True, time=report.get("time") if report else None, levels=list(sweep.get("levels") or []),
                  best=list(sweep.get("best") or []), recommended=recommended)
    measured = f"the sweep of {advice['time']} (`{source}`), measured on the image of sglang before this upgrade"
    lines = [f"| concurrency {row['concurrency']} | {row['setting'] or 'no speculation'} | "
             f"{'n/a' if row['speedup'] is None else format(row['speedup'], '.2f') + 'x'} |" for row in advice["best"]]
    head = ["Best setting per level (steps:topk:draft tokens), from " + measured + ":", "",
            "| level | best | speedup |", "| --- | --- | --- |", *lines, ""]
    if recommended is None:
        advice["lines"] = [*head, f"No setting passed every gate at every level: the stack keeps {current}."]
    elif recommended["setting"] == current:
        advice["lines"] = [*head, f"The stack's setting {current} is the recommended one "
                                  f"({recommended['worst_speedup']:.2f}x at its worst level)."]
    else:
        advice["edits"] = {"serving": {"speculative": {key: recommended[key] for key in
                                                       ("num_steps", "eagle_topk", "num_draft_tokens")}}}
        advice["lines"] = [*head, f"Recommended: {recommended['setting']} instead of the stack's {current} "
                                  f"({recommended['worst_speedup']:.2f}x at its worst level); `--write` writes it "
                                  f"into the entry's serving.speculative with the upgrade."]
    return advice


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _figure(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def sweep_problem(sweep: Mapping[str, Any]) -> str | None:
    """What in a recorded sweep is not as the smoke writes it (a report edited by hand, cut short, or of another
    version), or None: its figures are printed and its recommendation may be written into the stack."""
    recommended, best = sweep.get("recommended"), sweep.get("best")
    if recommended is not None:
        if not isinstance(recommended, Mapping):
            return "'recommended' is not a setting"
        for key in ("num_steps", "eagle_topk", "num_draft_tokens"):
            if not _count(recommended.get(key)):
                return f"'recommended.{key}' is not a whole number from 1"
        if not isinstance(recommended.get("setting"), str) or not _figure(recommended.get("worst_speedup")):
            return "'recommended' has no setting or no worst_speedup"
    if best is not None:
        if not isinstance(best, Sequence) or isinstance(best, str):
            return "'best' is not a list"
        for row in best:
            if not (isinstance(row, Mapping) and _count(row.get("concurrency"))
                    and (row.get("setting") is None or isinstance(row.get("setting"), str))
                    and (row.get("speedup") is None or _figure(row.get("speedup")))):
                return "a row of 'best' is not a concurrency, a setting and a speedup"
    levels = sweep.get("levels")
    if levels is not None and (not isinstance(levels, Sequence) or isinstance(levels, str)):
        return "'levels' is not a list"
    return None


def last_sweep_report(stack: Stack) -> tuple[dict[str, Any] | None, str]:
    """The stack's last smoke report (where `invoke smoke --stack` writes it) and its path; None when there is none
    or it cannot be read as a report: the upgrade then says how to make one, it does not fail."""
    path = stack_dir(stack.name) / "smoke-report.json"
    try:
        report = read_json(path, what="smoke report")
    except (OSError, SglstackError):
        return None, str(path)
    return (report if isinstance(report, dict) else None), str(path)
