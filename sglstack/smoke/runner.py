"""The side effects of a smoke run: the two servers (each served and measured in `server`), history, report
(what it serves, the image or the Python environment, is read in `subject`).

Each server runs in `running_container`, which removes it on success, failure, Ctrl-C, SIGTERM and
SIGHUP (the tasks turn those signals into `Interrupted`). The report, history and build folder are checked
for writability before the first server starts, not found unwritable after an hour of measuring.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ..adapters.docker import is_local_docker_host
from ..adapters.process import free_tcp_port
from ..config.schema import Stack
from ..core.clock import utc_timestamp
from ..core.console import printable_lines
from ..core.errors import SmokeInputError
from ..core.records import require_writable
from ..core.safefiles import OutputNotWritable, containing_root, refuse_link
from ..diff.snapshots import local_snapshot
from ..serving import check_mount_sources, check_secret_references, require_draft_fits
from . import history as hist
from .gates import Verdict, evaluate
from .launch import container_plan, process_plan, run_spec
from .levels import crossover_line
from .measure import ServerRun, agreement
from .measured import Log
from .plan import RUN_KINDS, SmokeOptions, redact_argv
from .report import SmokeReport, write_report
from .server import serve_and_measure, serve_process_and_measure
from .since import since_last_pass
from .startgates import start_failures, warm_saving
from .subject import check_what_to_serve, open_what_to_serve
from .sweep import (
    best_per_level,
    extra_settings,
    judge,
    recommendation_lines,
    recommended_setting,
    sweep_levels,
    with_setting,
)
from .sweepspec import SpecSetting, setting_of
from .warm import KernelCaches, precompile_deep_gemm, warm_starts


def _stderr(message: str) -> None:
    print(printable_lines(message), file=sys.stderr, flush=True)  # it quotes the server's log


def report_path_for(options: SmokeOptions, stack: Stack | None) -> Path:
    """--report, else BUILD_ROOT/<stack>/smoke-report.json."""
    if options.report:
        return Path(options.report)
    return hist.smoke_folder(options.build_dir, stack.name if stack else None) / "smoke-report.json"


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
        for kind in [*options.kinds, *(f"eagle3.{s.file_part}" for s in extra_settings(options))]:
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
    # A draft that cannot fit its target or its flags is refused now, not found after an hour on a GPU.
    if "eagle3" in options.kinds and (options.runner == "process" or is_local_docker_host(options.docker_host)):
        require_draft_fits(run_spec(options, "eagle3"), container=options.runner != "process")
    check_secret_references(options.serving)
    report_path, history_file = check_outputs(options, stack)
    caches = KernelCaches.plan(options, stack.name if stack else None, report_path)
    # Two smokes in one build folder would share each kind's cache folder: each packed the other's kernels.
    with caches.in_use() if caches is not None else contextlib.nullcontext():
        return _serve_and_report(stack, image, options, log, interpreter, report_path, history_file, caches)


def _serve_and_report(stack: Stack | None, image: str | None, options: SmokeOptions, log: Log,
                      interpreter: str | None, report_path: Path, history_file: Path | None,
                      caches: KernelCaches | None) -> SmokeReport:
    # Read now: a corrupt history file is found before the servers run, not after.
    records = hist.read_history(history_file) if history_file is not None else []
    engine, image_info = open_what_to_serve(stack, image, options, interpreter, log)
    caches = caches.bound(image_info) if caches is not None else None
    runs, commands = _serve_each_kind(engine, image, image_info, options, report_path, log, caches)
    swept = _serve_sweep(engine, image_info, options, report_path, log, runs) if options.sweep else []

    baseline, eagle3 = runs["baseline"], runs["eagle3"]
    share = agreement(baseline.outputs, eagle3.outputs) if baseline.outputs and eagle3.outputs else None
    fingerprint = options.fingerprint()
    reference = hist.last_passing(records, fingerprint)
    verdict = evaluate(options.gates, baseline, eagle3, share, reference, options.concurrency_levels)
    warm, cache_summary = _kernel_caches(caches, verdict, engine, image_info, report_path, log)
    ran = {kind: runs[kind] for kind in options.kinds}
    failures = start_failures(options.start_gates, ran, warm, reference)
    verdict = replace(verdict, failures=(*verdict.failures, *failures))
    data = _report_data(stack, image_info, runs, verdict, reference, options, report_path, commands, history_file)
    data.update(start_report(options, runs, warm, cache_summary))
    if options.sweep:
        data["sweep"] = _sweep_data(options, runs, commands, swept)
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


def _kernel_caches(caches: KernelCaches | None, verdict: Verdict, engine: docker.DockerClient | None,
                   image_info: Mapping[str, Any], report_path: Path, log: Log
                   ) -> tuple[dict[str, ServerRun] | None, dict[str, Any] | None]:
    """After a passing smoke: its kernel caches packed, then (warm_start) each server started again with its
    cache restored. A failed smoke packs nothing: what it compiled is not vouched for."""
    if caches is None:
        return None, None
    if not verdict.passed:
        log("smoke: kernel caches not packed: the smoke failed")
        return None, caches.summary({})
    packed = caches.pack(caches.options.kinds, log)
    warm = warm_starts(caches, engine, image_info, report_path, log) if caches.options.warm_start else None
    return warm, caches.summary(packed)


def start_report(options: SmokeOptions, runs: Mapping[str, ServerRun], warm: Mapping[str, ServerRun] | None,
                 cache_summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report's start fields: the start gates, the kernel caches, and each warm start with its saving."""
    out: dict[str, Any] = {"start_gates": options.start_gates.model_dump()}
    if cache_summary is not None:
        out["kernel_cache"] = dict(cache_summary)
    if warm is not None:
        out["warm"] = {kind: {**run.to_dict(), "saving": warm_saving(runs[kind], run)} for kind, run in warm.items()}
    return out


def _serve_sweep(
    engine: docker.DockerClient | None, image_info: Mapping[str, Any], options: SmokeOptions, report_path: Path,
    log: Log, runs: Mapping[str, ServerRun],
) -> list[tuple[SpecSetting, ServerRun, list[str] | None]]:
    """The EAGLE-3 server at each sweep setting besides the stack's own, in turn: (setting, run, argv)."""
    out: list[tuple[SpecSetting, ServerRun, list[str] | None]] = []
    for setting in extra_settings(options):
        # Only the baseline decides: an EAGLE-3 setting that did not start says nothing about the next one.
        if runs["baseline"].failure or not runs["baseline"].started:
            log(f"smoke: sweep {setting.key} skipped: the baseline server failed")
            out.append((setting, ServerRun(kind="eagle3", started=False, failure="not served: the baseline failed"),
                        None))
            continue
        variant = with_setting(options, setting)
        log(f"smoke: sweep: EAGLE-3 at {setting.label}")
        if engine is None:
            pplan = process_plan(variant, "eagle3", free_tcp_port())
            command = redact_argv(pplan.argv)
            log(f"smoke: eagle3: {' '.join(command)}")
            run = serve_process_and_measure(pplan, variant, server_log_path(report_path, f"eagle3.{setting.file_part}"),
                                            log)
        else:
            plan = container_plan(variant, image_info["id"], "eagle3")
            command = redact_argv(plan.command)
            log(f"smoke: eagle3: {' '.join(command)}")
            run = serve_and_measure(engine, plan, variant, log)
        out.append((setting, run, command))
    return out


def _sweep_data(options: SmokeOptions, runs: Mapping[str, ServerRun], commands: Mapping[str, list[str]],
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


def _serve_each_kind(
    engine: docker.DockerClient | None, image: str | None, image_info: Mapping[str, Any], options: SmokeOptions,
    report_path: Path, log: Log, caches: KernelCaches | None = None,
) -> tuple[dict[str, ServerRun], dict[str, list[str]]]:
    """Each kind's server run (in turn, each removed before the next starts), and the argv it started with."""
    # A kind that is not run is reported as not started, with no failure (a baseline-only bisect step).
    runs: dict[str, ServerRun] = {kind: ServerRun(kind=kind, started=False) for kind in RUN_KINDS}
    # The argv each server was started with (the process runner's port is the free one it picked).
    commands = {kind: launch_argv(options, image, kind) for kind in options.kinds}
    for kind in options.kinds:
        if any(r.failure for r in runs.values()):
            log(f"smoke: {kind} skipped: the baseline server failed")
            runs[kind] = ServerRun(kind=kind, started=False)
            continue
        served = options
        if caches is not None:  # a cold start: its cache folder empty, and every cache pointed at it
            caches.empty(kind)
            served = caches.options_for(kind)
            if options.precompile_deep_gemm:
                precompile_deep_gemm(caches, kind, engine, image_info, report_path, log)
        if engine is None:
            pplan = process_plan(served, kind, free_tcp_port())
            commands[kind] = redact_argv(pplan.argv)
            log(f"smoke: {kind}: {' '.join(commands[kind])}")
            runs[kind] = serve_process_and_measure(pplan, served, server_log_path(report_path, kind), log)
        else:
            plan = container_plan(served, image_info["id"], kind)
            log(f"smoke: {kind}: {' '.join(redact_argv(plan.command))}")
            runs[kind] = serve_and_measure(engine, plan, served, log)
        if caches is not None:
            runs[kind] = caches.record(kind, {}, runs[kind])
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


def log_root(report_path: Path, options: SmokeOptions) -> Path:
    """The folder no link may lead out of on the way to a server's log: the build folder, or the report's
    own folder (a `--report` elsewhere)."""
    return containing_root(report_path.parent, Path(options.build_dir))


def server_log_path(report_path: Path, kind: str) -> Path:
    """report.json -> report.baseline.log: the process runner keeps each server's output beside the report."""
    return report_path.with_suffix(f".{kind}.log")
