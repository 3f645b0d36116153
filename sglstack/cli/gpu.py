"""On the GPU node: `invoke preflight`, `smoke`, `bisect`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.imageref import not_an_image
from ..core.options import (
    BadOption,
    ReportOptions,
    docker_host_option,
    option,
    repeatable,
    required,
    stacks_file_option,
)
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport

SKIP_PREFLIGHT = "do not run `invoke preflight` on the GPU node first"


@dataclass(frozen=True)
class PreflightOptions(ReportOptions):
    stack: str = required("stack name from the matrix")
    stacks_file: str = stacks_file_option()
    docker_host: str | None = docker_host_option("run the checks inside --image on this Docker engine (ssh://, "
                                                 "tcp://, unix://)")
    image: str | None = option("the stack image to run the checks in (with every GPU requested)",
                               check=not_an_image)
    sizes: str | None = option("all-reduce message sizes (default: 1M,64M,1G)")


@command(PreflightOptions)
def preflight(o: PreflightOptions, as_json: JsonReport) -> int:
    """Check a GPU node before the expensive run: driver, GPUs, topology, copy and NCCL bandwidth, limits."""
    # at call time: rich and the matrix are slow to import
    from ..config.matrix import load_matrix
    from ..core.console import console as make_console
    from ..preflight.errors import PreflightUnavailable
    from ..preflight.gate import parse_sizes, run_preflight
    from ..preflight.report import render_report

    console = make_console()
    stack = load_matrix(o.stacks_file).get(o.stack)
    report = run_preflight(stack, docker_host=o.docker_host, image=o.image,
                           sizes=parse_sizes(o.sizes) if o.sizes else None, console=console)
    as_json.emit(report.to_dict())
    if report.fatal:
        where = f" in {o.image}" if o.image else ""
        raise PreflightUnavailable(f"preflight for stack '{o.stack}'{where}: {report.fatal}")
    render_report(report, console, where=f"{o.image} on {o.docker_host or 'the local engine'}" if o.image
                  else report.node.get("hostname") or "this node")
    return report.exit_code


@dataclass(frozen=True)
class SmokeOptions(ReportOptions):
    at_most_one = (("bisect_exit", "json"), ("bisect_exit", "json_out"))  # `git bisect run` reads the exit code

    image: str | None = option("image reference to test (tag, id, or repo@sha256:... which the Docker host pulls)",
                               check=not_an_image)
    stack: str | None = option("stack whose serving settings, smoke settings and gates apply")
    stacks_file: str = stacks_file_option()
    model: str | None = option("target model path or HF repo")
    draft_model: str | None = option("EAGLE-3 draft model path or HF repo")
    tp: str | None = option("tensor parallel size")
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
    max_new_tokens: str | None = option("tokens generated per request")
    min_speedup: str | None = option("gate: EAGLE-3 tok/s over baseline tok/s")
    min_accept_length: str | None = option("gate: accept length")
    min_agreement: str | None = option("gate: share of identical greedy outputs")
    max_regression: str | None = option("gate: allowed tok/s drop against the stack's last passing run (0.05 = 5%)")
    report: str | None = option("JSON report path (a .md summary and .png chart are written next to it)")
    no_history: bool = option("neither compare with nor append to build/STACK/smoke-history.jsonl", False, kind=bool)
    skip_preflight: bool = option(SKIP_PREFLIGHT, False, kind=bool)
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
    no_warm_compile: bool = option("gate: the warm start adds no file to the kernel cache", False, kind=bool)
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


def _refuse_bisect_only(o: SmokeOptions) -> None:
    """--runs, --metric and --threshold judge a commit under --bisect-exit; a plain smoke would drop them
    unread, so a script that forgot --bisect-exit is told rather than gated differently than it meant."""
    why = {"runs": "without it the smoke runs once per phase", "metric": "the gates judge a plain smoke",
           "threshold": "the gates judge a plain smoke"}
    for name, reason in why.items():
        if getattr(o, name) is not None:
            raise BadOption(f"smoke: --{name} is for --bisect-exit ({reason})")


@command(SmokeOptions)
def smoke(o: SmokeOptions, as_json: JsonReport) -> int:
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
    from ..smoke import smoke_command  # at call time: the smoke runner loads the Docker SDK

    return smoke_command(o.image, stack=o.stack, stacks_file=o.stacks_file, min_speedup=o.min_speedup,
                         min_accept_length=o.min_accept_length, min_agreement=o.min_agreement,
                         max_regression=o.max_regression, no_history=o.no_history or None, runner=o.runner,
                         python_env=o.python_env, as_json=as_json, **serving)


@dataclass(frozen=True)
class BisectOptions(ReportOptions):
    stack: str = required("stack name from the matrix")
    good: str = required("the last known good SGLang ref: a release (PyPI stacks) or a commit, tag, branch "
                         "(git stacks)")
    bad: str = required("the first known bad SGLang ref (a newer release, or a descendant commit)")
    stacks_file: str = stacks_file_option()
    metric: str = option("baseline (default: only the baseline server, no draft model), eagle3, speedup, "
                         "accept_length", "baseline")
    runs: int = option("measured runs per server start (default 5); undecided refs get more server starts", 5,
                       kind=int)
    threshold: str = option("the smallest change that matters, in percent (default 5)", "5")
    max_batches: int = option("server starts per ref at most (default 4): the bound on runs", 4, kind=int)
    ca_bundle: str | None = option("extra CA bundle passed to builds as a BuildKit secret (also SGLSTACK_CA_BUNDLE)")
    docker_cli: str | None = option("BuildKit-capable docker client binary (also SGLSTACK_DOCKER_CLI)")
    docker_host: str | None = docker_host_option("Docker engine that builds and serves (default: DOCKER_HOST / "
                                                 "local socket)")
    gpus: int | None = option("GPUs per server (0: none, for CPU test doubles)", kind=int)
    tp: int | None = option("tensor parallel size", kind=int)
    model: str | None = option("target model path or HF repo")
    draft_model: str | None = option("EAGLE-3 draft model (eagle3/speedup metrics)")
    mount: tuple[str, ...] = repeatable("HOST:CONTAINER bind mount for the servers, e.g. the HF cache (repeatable)")
    env: tuple[str, ...] = repeatable("K=V for the server containers (repeatable)")
    timeout: float | None = option("seconds each server may take to answer /health_generate", kind=float)
    num_prompts: int | None = option("prompts per measured run", kind=int)
    max_new_tokens: int | None = option("tokens generated per request", kind=int)
    skip_preflight: bool = option(SKIP_PREFLIGHT, False, kind=bool)
    smoke_opt: tuple[str, ...] = repeatable("any other smoke option, KEY=VALUE (repeatable)")


@command(BisectOptions)
def bisect(o: BisectOptions, as_json: JsonReport) -> int:
    """Find the SGLang commit or release that changed a serving metric: build, smoke, decide; resumable.

    Exit 0 when a first bad change is named, 1 when the range can't be decided, 2 for bad input."""
    from ..bisect.driver import bisect_command, smoke_overrides  # at call time: builds and smokes load Docker

    smoke = smoke_overrides(list(o.smoke_opt), gpus=o.gpus, tp=o.tp, model=o.model, draft_model=o.draft_model,
                            mounts=list(o.mount) or None, env=list(o.env) or None, timeout=o.timeout,
                            num_prompts=o.num_prompts, max_new_tokens=o.max_new_tokens,
                            skip_preflight=o.skip_preflight or None)
    return bisect_command(o.stacks_file, o.stack, good=o.good, bad=o.bad, metric=o.metric, repeats=o.runs,
                          threshold=o.threshold,  # type: ignore[arg-type]  # the text, parsed by the request
                          max_batches=o.max_batches, ca_bundle=o.ca_bundle,
                          docker_cli=o.docker_cli, docker_host=o.docker_host, smoke=smoke, as_json=as_json)
