"""`invoke bisect`: the SGLang change that moved a serving metric (its options, and the request it makes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.options import ReportOptions, docker_host_option, option, repeatable, required, stacks_file_option
from .cmdoptions import (
    ca_bundle_option,
    docker_cli_option,
    max_new_tokens_option,
    model_option,
    skip_preflight_option,
    smoke_opt_option,
    stack_option,
    tp_option,
)
from .options import command

if TYPE_CHECKING:
    from ..bisect.driver import BisectRequest
    from ..core.jsonreport import JsonReport


@dataclass(frozen=True)
class BisectOptions(ReportOptions):
    stack: str = stack_option()
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
    ca_bundle: str | None = ca_bundle_option()
    docker_cli: str | None = docker_cli_option()
    docker_host: str | None = docker_host_option("Docker engine that builds and serves (default: DOCKER_HOST / "
                                                 "local socket)")
    gpus: int | None = option("GPUs per server (0: none, for CPU test doubles)", kind=int)
    tp: int | None = tp_option(int)
    model: str | None = model_option()
    draft_model: str | None = option("EAGLE-3 draft model (eagle3/speedup metrics)")
    mount: tuple[str, ...] = repeatable("HOST:CONTAINER bind mount for the servers, e.g. the HF cache (repeatable)")
    env: tuple[str, ...] = repeatable("K=V for the server containers (repeatable)")
    timeout: float | None = option("seconds each server may take to answer /health_generate", kind=float)
    num_prompts: int | None = option("prompts per measured run", kind=int)
    max_new_tokens: int | None = max_new_tokens_option(int)
    skip_preflight: bool = skip_preflight_option()
    smoke_opt: tuple[str, ...] = smoke_opt_option("any other smoke option, KEY=VALUE (repeatable)")


@command(BisectOptions)
def bisect(o: BisectOptions, as_json: JsonReport) -> int:
    """Find the SGLang commit or release that changed a serving metric: build, smoke, decide; resumable.

    Exit 0 when a first bad change is named, 1 when the range can't be decided, 2 for bad input."""
    from ..bisect.driver import run_bisect  # at call time: builds and smokes load Docker

    result = run_bisect(bisect_request(o))
    as_json.emit(dict(result.data))  # the report written beside the bisect log
    return result.exit_code


def bisect_request(o: BisectOptions) -> BisectRequest:
    """The options as the bisect's one typed request (smoke's own flags read by smoke's one parser)."""
    from ..bisect.driver import BisectRequest, smoke_overrides  # at call time: builds and smokes load Docker

    smoke = smoke_overrides(list(o.smoke_opt), gpus=o.gpus, tp=o.tp, model=o.model, draft_model=o.draft_model,
                            mounts=list(o.mount) or None, env=list(o.env) or None, timeout=o.timeout,
                            num_prompts=o.num_prompts, max_new_tokens=o.max_new_tokens,
                            skip_preflight=o.skip_preflight or None)
    return BisectRequest(stack=o.stack, good=o.good, bad=o.bad, stacks_file=o.stacks_file, metric=o.metric,
                         repeats=o.runs, threshold_pct=o.threshold,  # type: ignore[arg-type]  # parsed by the request
                         max_batches=o.max_batches, ca_bundle=o.ca_bundle, docker_cli=o.docker_cli,
                         docker_host=o.docker_host, smoke=smoke)
