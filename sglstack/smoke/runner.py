"""The side effects of a smoke run: the two servers (each served and measured in `server`), history, report
(what it serves, the image or the Python environment, is read in `subject`).

Each server runs in `running_container`, which removes it on success, failure, Ctrl-C, SIGTERM and
SIGHUP (the tasks turn those signals into `Interrupted`). The report, history and build folder are checked
for writability before the first server starts (`outputs`); what the report says is `fields`'.
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
from ..core.console import printable_lines
from ..serving import check_mount_sources, check_secret_references, require_draft_fits
from . import history as hist
from .fields import launch_argv, report_fields, start_report, sweep_fields
from .gates import Verdict, evaluate
from .launch import container_plan, process_plan, run_spec
from .measure import ServerRun, agreement
from .measured import Log
from .outputs import check_outputs, server_log_path
from .plan import RUN_KINDS, SmokeOptions, redact_argv
from .report import SmokeReport, write_report
from .server import serve_and_measure, serve_process_and_measure
from .startgates import start_failures
from .subject import check_what_to_serve, open_what_to_serve
from .sweep import extra_settings, with_setting
from .sweepspec import SpecSetting
from .warm import KernelCaches, precompile_deep_gemm, warm_starts


def _stderr(message: str) -> None:
    print(printable_lines(message), file=sys.stderr, flush=True)  # it quotes the server's log


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
    data = report_fields(stack, image_info, runs, verdict, reference, options, report_path, commands, history_file)
    data.update(start_report(options, runs, warm, cache_summary))
    if options.sweep:
        data["sweep"] = sweep_fields(options, runs, commands, swept)
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
