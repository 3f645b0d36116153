"""Pure planning: the smoke options (a serving spec + measurement settings), read and checked by `overrides`;
the two launches are `launch`.

The server is the stack's serving spec (`sglstack.serving`), the same one `deploy` renders: baseline
= the spec without speculative decoding, EAGLE-3 = the spec with it. Nothing here touches Docker or
the network; `runner.py` turns a `ContainerPlan` into a container.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..config.settings import Gates, SpeculativeSettings, StartGates
from ..core.credentials import REDACTED, redact_text, secret_slots
from ..core.records import build_root
from ..serving import ServingSpec
from .sweepspec import SpecSetting, parse_sweep

CONTAINER_PORT = 30000
RUN_KINDS = ("baseline", "eagle3")
# Where the servers run: "docker" (a container from an image, the default) or "process" (a local process
# group from a Python environment, for GPU nodes with no Docker daemon: Slurm, enroot, plain environments).
RUNNERS = ("docker", "process")


@dataclass(frozen=True)
class SmokeOptions:
    """Everything one smoke run needs: the server (`serving`) and how it is measured and gated."""

    serving: ServingSpec  # with speculation on: the EAGLE-3 run; `.baseline()` is the other
    concurrency: int = 8
    num_prompts: int = 8
    max_new_tokens: int = 128
    labels: Mapping[str, str] = field(default_factory=dict)
    docker_host: str | None = None
    request_timeout: float = 600.0
    gates: Gates = field(default_factory=Gates)
    report: str | None = None
    build_dir: str = field(default_factory=lambda: str(build_root()))  # SGLSTACK_BUILD_DIR, else build/
    no_history: bool = False
    pull: bool = True
    # A GPU smoke checks the node first (driver, GPUs, NCCL, shm): minutes of model loading are not
    # spent on a node that cannot serve.
    skip_preflight: bool = False
    # The servers to start: ("baseline",) needs no draft model and runs on SGLang versions that predate
    # EAGLE-3 (a bisect of the baseline speed).
    kinds: tuple[str, ...] = RUN_KINDS
    # Measured concurrency-1 runs per server start (one sample each), with the radix cache flushed
    # before each one when flush_cache is set, so no run is faster for having seen the prompts.
    runs: int = 1
    flush_cache: bool = False
    runner: str = "docker"
    # With runner "process": the Python environment (a venv or prefix) whose bin/python3 runs the argv.
    python_env: str | None = None
    # Kernel caches (smoke/warm.py): every cache of a server pointed at one folder and packed after a passing
    # smoke; warm_start: a second start of each server with its cache restored from the artifact.
    kernel_cache: bool = False
    warm_start: bool = False
    # The on-disk OCI layout store of kernel-cache artifacts (default BUILD/<stack>/kernel-cache/store).
    cache_store: str | None = None
    start_gates: StartGates = field(default_factory=StartGates)
    # The concurrency levels the deployment serves (smoke.concurrency_levels): each is measured, and min_speedup
    # and max_regression apply at each. Empty: concurrency 1 is gated and `concurrency` only measured.
    concurrency_levels: tuple[int, ...] = ()
    # More speculative settings to serve and judge in the same run, besides the stack's own (smoke/sweep.py), as
    # STEPS:TOPK:DRAFT_TOKENS.
    sweep: tuple[str, ...] = ()

    @property
    def sweep_settings(self) -> tuple[SpecSetting, ...]:
        return parse_sweep(self.sweep) if self.sweep else ()
    # Before each cold start: `python3 -m sglang.compile_deep_gemm` with the serving flags, into the cache folder.
    precompile_deep_gemm: bool = False

    # Read-only views of the server, for the runner and reports.
    @property
    def model(self) -> str:
        return self.serving.model

    @property
    def draft_model(self) -> str | None:
        spec = self.serving.speculative
        return spec.draft_model if spec is not None else None

    @property
    def tp(self) -> int:
        return self.serving.tp

    @property
    def gpus(self) -> int:
        return self.serving.gpus

    @property
    def port(self) -> int:
        return self.serving.port

    @property
    def timeout(self) -> float:
        """How long each server may take to answer /health_generate: the spec's startup budget."""
        return self.serving.startup_timeout_s

    @property
    def env(self) -> Mapping[str, str]:
        return self.serving.environment

    @property
    def mounts(self) -> tuple[str, ...]:
        return tuple(m.bind for m in self.serving.mounts)

    @property
    def _speculative(self) -> SpeculativeSettings | None:
        # smoke_options refuses an EAGLE-3 run without a draft model; a baseline-only run needs none.
        return self.serving.speculative

    def fingerprint(self) -> dict[str, Any]:
        """What must match for two runs' tokens/s to be comparable (the image may differ: that is the point)."""
        spec = self._speculative
        return {
            "model": self.model,
            "draft_model": spec.draft_model if spec else None,
            "tp": self.tp,
            "gpus": self.gpus,
            "algorithm": spec.algorithm if spec else None,
            "num_steps": spec.num_steps if spec else None,
            "eagle_topk": spec.eagle_topk if spec else None,
            "num_draft_tokens": spec.num_draft_tokens if spec else None,
            "max_new_tokens": self.max_new_tokens,
            "concurrency": self.concurrency,
            "num_prompts": self.num_prompts,
            # Only a non-default runner is named, so that the history of Docker runs stays comparable.
            **({"runner": self.runner} if self.runner != "docker" else {}),
            # Likewise named levels: a run gated per level compares with runs measured at the same levels.
            **({"concurrency_levels": list(self.concurrency_levels)} if self.concurrency_levels else {}),
        }

    def describe(self) -> dict[str, Any]:
        """A report-safe view: env values are not included (they may be credentials)."""
        spec = self._speculative
        out: dict[str, Any] = {
            "model": self.model,
            "draft_model": spec.draft_model if spec else None,
            "speculative_algorithm": spec.algorithm if spec else None,
            "num_steps": spec.num_steps if spec else None,
            "eagle_topk": spec.eagle_topk if spec else None,
            "num_draft_tokens": spec.num_draft_tokens if spec else None,
            "tp": self.tp,
            "gpus": self.gpus,
            "port": self.port,
            "timeout": self.timeout,
            "shm_size": self.serving.shm_size,
        }
        hidden = ("serving", "gates", "labels", "start_gates")
        out.update({f.name: getattr(self, f.name) for f in fields(self) if f.name not in hidden})
        out["env_keys"] = sorted(self.env)
        out["gates"] = self.gates.model_dump()
        out["start_gates"] = self.start_gates.model_dump()
        out["extra_args"] = redact_argv(self.serving.extra_args)
        out["mounts"] = list(self.mounts)
        return out


def redact_argv(argv: Iterable[str]) -> list[str]:
    """The argv with the values of secret flags and the logins in URLs replaced, for logs and reports."""
    out = [redact_text(word) for word in argv]
    for slot in secret_slots(out):
        out[slot.index] = f"{slot.text}{REDACTED}"
    return out
