"""`invoke smoke`: serve an image with and without EAGLE-3, measure, gate (its options, and what it prints)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.defaults import default_stacks_file
from ..config.imageref import not_an_image
from ..core.jsonreport import NO_JSON
from ..core.options import BadOption, ReportOptions, docker_host_option, option, repeatable, stacks_file_option
from .cmdoptions import max_new_tokens_option, model_option, only_stack_option, skip_preflight_option, tp_option
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport


@dataclass(frozen=True)
class SmokeTaskOptions(ReportOptions):
    """`invoke smoke`'s flags; `smoke_options` turns them into the smoke's own typed value (`smoke.SmokeOptions`)."""

    at_most_one = (("bisect_exit", "json"), ("bisect_exit", "json_out"))  # `git bisect run` reads the exit code

    image: str | None = option("image reference to test (tag, id, or repo@sha256:... which the Docker host pulls)",
                               check=not_an_image)
    stack: str | None = only_stack_option("stack whose serving settings, smoke settings and gates apply")
    stacks_file: str = stacks_file_option()
    model: str | None = model_option()
    draft_model: str | None = option("EAGLE-3 draft model path or HF repo")
    tp: str | None = tp_option()
    gpus: str | None = option("GPUs to request (0: none, for CPU test doubles)")
    mount: tuple[str, ...] = repeatable("HOST:CONTAINER[:ro] bind mount of an existing host folder, e.g. the HF cache "
                              "(repeatable)")
    env: tuple[str, ...] = repeatable(
        "K=V for the server container (repeatable); HF_TOKEN is passed from the environment")
    label: tuple[str, ...] = repeatable("K=V label on the server containers (repeatable)")
    docker_host: str | None = docker_host_option("Docker engine URL (e.g. ssh://user@gpu-node; default: "
                                                 "DOCKER_HOST / local socket)")
    timeout: str | None = option("seconds each server may take to answer /health_generate (default: "
                                 "serving.startup_timeout_s)")
    concurrency: str | None = option("the higher concurrency measured after concurrency 1")
    concurrency_levels: str | None = option("the concurrency levels served, e.g. 1,4,16: each measured and gated "
                                            "(default: smoke.concurrency_levels)")
    sweep: str | None = option("more EAGLE-3 settings to serve and judge, STEPS:TOPK:DRAFT_TOKENS,... (e.g. "
                               "3:1:4,7:1:8); the report names the best per level")
    num_prompts: str | None = option("prompts per phase")
    max_new_tokens: str | None = max_new_tokens_option()
    min_speedup: str | None = option("gate: EAGLE-3 tok/s over baseline tok/s")
    min_accept_length: str | None = option("gate: accept length")
    min_agreement: str | None = option("gate: share of identical greedy outputs")
    max_regression: str | None = option("gate: allowed tok/s drop against the stack's last passing run (0.05 = 5%)")
    report: str | None = option("JSON report path (a .md summary and .png chart are written next to it)")
    no_history: bool = option("neither compare with nor append to build/STACK/smoke-history.jsonl", False, kind=bool)
    skip_preflight: bool = skip_preflight_option()
    bisect_exit: str | None = option("for `git bisect run`: exit 0 good, 1 bad, 125 skip against BASELINE, the good "
                                     "commit's smoke report (JSON) or a number")
    metric: str | None = option("with --bisect-exit: baseline (default), eagle3, speedup, accept_length")
    threshold: str | None = option("with --bisect-exit: the change that counts as bad, in percent (default 5)")
    runs: str | None = option("with --bisect-exit: measured runs, cache flushed before each (default 5)")
    runner: str | None = option("docker (default: a container from --image) or process (local processes from "
                                "--python-env)")
    python_env: str | None = option("with --runner process: a venv or prefix whose bin/python3 runs the serving argv")
    kernel_cache: bool = option("point every kernel cache at one folder and pack it after a passing smoke", False,
                                kind=bool)
    warm_start: bool = option("start each server again with its kernel cache restored (implies --kernel-cache)",
                              False, kind=bool)
    cache_store: str | None = option("the OCI layout folder kernel caches are packed into (default "
                                     "build/STACK/kernel-cache/store)")
    max_warm_start_s: str | None = option("gate: seconds the warm start may take to healthy")
    no_warm_compile: bool = option("gate: the warm start adds or rewrites no kernel cache file", False, kind=bool)
    max_start_regression: str | None = option("gate: allowed cold-start slowdown against the last passing run "
                                              "(0.25 = 25%)")
    precompile_deep_gemm: bool = option("before each cold start, run `python3 -m sglang.compile_deep_gemm` with the "
                                        "serving flags into the kernel cache", False, kind=bool)


def _refuse_input_report(report: str, stacks_file: str) -> None:
    """`--report PATH` (and the .md and .png written beside it) is never one of the checkout's inputs."""
    # at call time: the face stays light to import
    from ..core.errors import ConfigError
    from ..lock.outputs import input_path_problem

    path = Path(report)
    for given in (report, str(path.with_suffix(".md")), str(path.with_suffix(".png"))):
        problem = input_path_problem(given, stacks_file, "`invoke smoke`", option="--report")
        if problem:
            raise ConfigError(problem)


def _refuse_bisect_only(o: SmokeTaskOptions) -> None:
    """--runs, --metric and --threshold judge a commit under --bisect-exit; a plain smoke would drop them
    unread, so a script that forgot --bisect-exit is told rather than gated differently than it meant."""
    why = {"runs": "without it the smoke runs once per phase", "metric": "the gates judge a plain smoke",
           "threshold": "the gates judge a plain smoke"}
    for name, reason in why.items():
        if getattr(o, name) is not None:
            raise BadOption(f"smoke: --{name} is for --bisect-exit ({reason})")


@command(SmokeTaskOptions)
def smoke(o: SmokeTaskOptions, as_json: JsonReport) -> int:
    """Serve IMAGE with and without EAGLE-3, measure, gate; exit 0 only on pass (--bisect-exit: 0/1/125)."""
    serving: dict[str, Any] = dict(
        model=o.model, draft_model=o.draft_model, tp=o.tp, gpus=o.gpus, mounts=list(o.mount) or None,
        env=list(o.env) or None, labels=list(o.label) or None, docker_host=o.docker_host, timeout=o.timeout,
        concurrency=o.concurrency, concurrency_levels=o.concurrency_levels, sweep=o.sweep, num_prompts=o.num_prompts,
        max_new_tokens=o.max_new_tokens, report=o.report,
        skip_preflight=o.skip_preflight or None, kernel_cache=o.kernel_cache or None, warm_start=o.warm_start or None,
        cache_store=o.cache_store, max_warm_start_s=o.max_warm_start_s, no_warm_compile=o.no_warm_compile or None,
        max_start_regression=o.max_start_regression, precompile_deep_gemm=o.precompile_deep_gemm or None)
    if o.report:
        _refuse_input_report(o.report, o.stacks_file)
    if not o.bisect_exit:
        _refuse_bisect_only(o)
    if o.bisect_exit and o.sweep:
        raise BadOption("smoke: --sweep is not for --bisect-exit (a bisect step compares one setting)")
    if o.bisect_exit:
        from ..bisect.gitexit import smoke_bisect_exit  # at call time: the smoke runner loads the Docker SDK

        # No --image is the smoke's to refuse, in its own one line (as before the face moved here).
        return smoke_bisect_exit(o.image, o.bisect_exit,  # type: ignore[arg-type]
                                 stack=o.stack, stacks_file=o.stacks_file, metric=o.metric or "baseline",
                                 threshold=o.threshold or "5", runs=o.runs, **serving)
    return smoke_command(o.image, stack=o.stack, stacks_file=o.stacks_file, min_speedup=o.min_speedup,
                         min_accept_length=o.min_accept_length, min_agreement=o.min_agreement,
                         max_regression=o.max_regression, no_history=o.no_history or None, runner=o.runner,
                         python_env=o.python_env, as_json=as_json, **serving)


def smoke_command(image: str | None, *, stack: str | None = None, stacks_file: str | Path | None = None,
                  as_json: JsonReport = NO_JSON, **overrides: Any) -> int:
    """The smoke run (`sglstack.smoke.run_smoke`) and its summary: 0 only when every gate passed; the JSON
    report is `--report`'s document."""
    # at call time: the smoke runner loads the Docker SDK
    from ..config.imageref import image_name
    from ..config.matrix import load_matrix
    from ..core.errors import one_line
    from ..smoke import run_smoke, smoke_options

    stack_obj = load_matrix(stacks_file or default_stacks_file()).get(stack) if stack else None
    report = run_smoke(stack_obj, image, smoke_options(stack_obj, **overrides))
    data = report.data
    as_json.emit(data)
    runner = (data.get("runner") or {}).get("kind", "docker")
    served = image or data["image"]["ref"]
    shown = image_name(data["image"].get("digest"), data["image"].get("id"))
    print(f"smoke {report.verdict.upper()}: {served} ({shown}, {runner} runner)")
    b, e = data["baseline"], data["eagle3"]
    speedup = f"{data['speedup']:.2f}x" if data["speedup"] is not None else "n/a"
    accept = f"{data['accept_length']:.2f}" if data["accept_length"] is not None else "n/a"
    agree = f"{data['agreement']:.0%}" if data["agreement"] is not None else "n/a"
    print(f"  baseline {b['tokens_per_s']:.1f} tok/s, EAGLE-3 {e['tokens_per_s']:.1f} tok/s, speedup {speedup}, "
          f"accept length {accept}, agreement {agree}")
    for line in _start_level_and_sweep_lines(data):
        print(f"  {line}")
    for failure in report.failures:
        print(f"  FAIL {one_line(failure)}")
    return 0 if report.passed else 1


def _start_level_and_sweep_lines(data: Mapping[str, Any]) -> list[str]:
    """The summary's warm-start, per-concurrency-level and sweep lines (each only when the run had them)."""
    from ..smoke.startreport import empty_cache_note  # at call time: the face stays light to import

    lines = []
    for kind, run in (data.get("warm") or {}).items():
        cold, saving = data[kind].get("startup_s"), run.get("saving")
        cache = run.get("kernel_cache") or {}
        warm = f"warm {run['startup_s']:.1f}s" if run.get("startup_s") is not None else "warm start failed"
        lines.append(f"{kind} start: cold {cold or 0:.1f}s, {warm}"
                     + (f" (saved {saving:.0%})" if saving is not None else "")
                     + f", {cache.get('new_files')} new and {cache.get('rewritten_files', 0)} rewritten kernel "
                       "cache files" + (f"; {note}" if (note := empty_cache_note(run)) else ""))
    for row in data.get("levels") or []:
        speedup = f"{row['speedup']:.2f}x" if row["speedup"] is not None else "n/a"
        lines.append(f"concurrency {row['concurrency']}: speedup {speedup} ({row['measure']})")
    if data.get("crossover_line"):
        lines.append(data["crossover_line"])
    lines += [f"best at {line}" for line in (data.get("sweep") or {}).get("recommendation", [])]
    return lines
