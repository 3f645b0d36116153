"""What a smoke report says, from what the run measured: its fields (the history line is made from them), the
start fields, the sweep's judged settings, and which runner measured with which argv."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.schema import Stack
from ..core.clock import utc_timestamp
from ..diff.snapshots import local_snapshot
from .gates import Verdict
from .launch import container_plan, process_plan
from .levels import crossover_line
from .measure import ServerRun
from .outputs import server_log_path
from .plan import SmokeOptions, redact_argv
from .since import since_last_pass
from .startgates import warm_saving
from .sweep import best_per_level, judge, recommendation_lines, recommended_setting, sweep_levels
from .sweepspec import SpecSetting, setting_of


def report_fields(
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
        # Per named concurrency level (smoke.concurrency_levels): the speedup there, and where EAGLE-3 stops paying.
        **({"levels": [s.to_dict(options.gates.min_speedup) for s in verdict.levels], "crossover": verdict.crossover,
            "crossover_line": crossover_line(verdict.levels, options.gates.min_speedup)}
           if options.concurrency_levels else {}),
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


def start_report(options: SmokeOptions, runs: Mapping[str, ServerRun], warm: Mapping[str, ServerRun] | None,
                 cache_summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report's start fields: the start gates, the kernel caches, and each warm start with its saving."""
    out: dict[str, Any] = {"start_gates": options.start_gates.model_dump()}
    if cache_summary is not None:
        out["kernel_cache"] = dict(cache_summary)
    if warm is not None:
        out["warm"] = {kind: {**run.to_dict(), "saving": warm_saving(runs[kind], run)} for kind, run in warm.items()}
    return out


def sweep_fields(options: SmokeOptions, runs: Mapping[str, ServerRun], commands: Mapping[str, list[str]],
                swept: list[tuple[SpecSetting, ServerRun, list[str] | None]]) -> dict[str, Any]:
    """Each setting judged by the smoke's gates at the sweep's levels, and the best setting per level."""
    levels = sweep_levels(options)
    spec = options.serving.speculative
    assert spec is not None  # a sweep needs the EAGLE-3 server (smoke_options)
    entries = [judge(options.gates, levels, runs["baseline"], runs["eagle3"], setting_of(spec), True,
                     commands.get("eagle3"))]
    entries += [judge(options.gates, levels, runs["baseline"], run, setting, False, command)
                for setting, run, command in swept]
    best = best_per_level(entries, levels, options.gates)
    # `recommended`: the one setting for the stack (what `invoke upgrade` offers to write); `best`: per level.
    return {"levels": list(levels), "settings": entries, "best": best, "recommended": recommended_setting(entries),
            "recommendation": recommendation_lines(best, options.gates.min_speedup)}


def launch_argv(options: SmokeOptions, image: str | None, kind: str) -> list[str]:
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
