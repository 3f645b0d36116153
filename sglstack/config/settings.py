"""The settings sections of a stack: serving, smoke and its gates, publish, and the policies (patches, coverage,
size, shared libraries, the registry cache). `config.schema` puts them together into a `Stack`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from ..core.credentials import (
    argv_references,
    plain_secret_problem,
)
from .fields import (
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_TOKENS,
    STACK_PLACEHOLDER,
    ArgText,
    BindMount,
    ByteSize,
    EnvName,
    KeyedValueError,
    OneLine,
    cache_reference,
    package_name,
)
from .serverflags import extra_args_problem
from .strict import StrictModel


class SpeculativeSettings(StrictModel):
    algorithm: Literal["EAGLE3", "EAGLE", "NEXTN"] = "EAGLE3"
    draft_model: OneLine
    num_steps: int = Field(ge=1, le=MAX_COUNT)
    eagle_topk: int = Field(ge=1, le=MAX_COUNT)
    num_draft_tokens: int = Field(ge=1, le=MAX_COUNT)

    @model_validator(mode="after")
    def _draft_tokens_served(self) -> SpeculativeSettings:
        # SGLang's server_args sets draft tokens to steps + 1 whenever topk is 1 (a warning in its log only), so
        # any other count would be a setting the stack names but never serves.
        if self.eagle_topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            raise KeyedValueError(("num_draft_tokens",), topk_one_problem(self.num_steps, self.num_draft_tokens))
        return self


def topk_one_problem(num_steps: int, num_draft_tokens: int) -> str:
    return (f"with topk 1 SGLang serves steps + 1 = {num_steps + 1} draft tokens, not {num_draft_tokens} "
            f"(set {num_steps + 1}, or a topk above 1)")


class ServingSettings(StrictModel):
    """How the stack's image is served: the one source of the server's command line, env and resources.

    Smoke, compose and any later manifest render from the serving spec derived from this (`serving.py`).
    """

    model: OneLine
    speculative: SpeculativeSettings | None = None
    tp: int = Field(default=1, ge=1, le=MAX_COUNT)
    gpus: int = Field(default=1, ge=0, le=MAX_COUNT)
    port: int = Field(default=30000, ge=1, le=65535)  # the server's listen port
    # How long the server may take to load and answer /health: smoke's wait, compose's start period.
    startup_timeout_s: float = Field(default=3600, gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    shm_size: ByteSize = "32g"
    extra_args: tuple[ArgText, ...] = ()
    env: Mapping[EnvName, ArgText] = Field(default_factory=dict)  # a secret-named key takes only a `${NAME}` reference
    mounts: tuple[BindMount, ...] = ()

    @model_validator(mode="after")
    def _no_plain_secret(self) -> ServingSettings:
        for key, value in self.env.items():
            problem = plain_secret_problem(str(key), str(value))
            if problem:
                raise KeyedValueError(("env", key), problem)
        found = extra_args_problem(self.extra_args)
        if found:
            raise KeyedValueError(("extra_args", found[0]), found[1])
        for i, (_, name) in sorted(argv_references(self.extra_args).items()):
            # The manifests hand the reference to the server as its variable NAME.
            if name in self.env and self.env[name] != f"${{{name}}}":
                raise KeyedValueError(("extra_args", i), f"refers to ${{{name}}}, and serving.env sets {name} to "
                                                         f"something else: use another name for one of them")
        return self


class Gates(StrictModel):
    min_speedup: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    min_accept_length: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    min_agreement: float = Field(default=0.9, ge=0, le=1, allow_inf_nan=False)
    max_regression: float = Field(default=0.05, ge=0, le=1, allow_inf_nan=False)


class StartGates(StrictModel):
    """Gates on a server's start (docs/smoke-and-gates.md, "Start by phase and kernel caches")."""

    # The warm start (the second, with the kernel cache the cold one filled, restored) must be healthy within.
    max_warm_start_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    # The warm start may add no file to the kernel cache: nothing was compiled.
    no_warm_compile: bool = False
    # The cold start to healthy may be at most this fraction slower than the last passing run's.
    max_start_regression: float | None = Field(default=None, ge=0, le=100, allow_inf_nan=False)


class SmokeSettings(StrictModel):
    """How the smoke test measures a served image (the server itself is `serving:`)."""

    max_new_tokens: int = Field(default=128, ge=1, le=MAX_TOKENS)
    concurrency: int = Field(default=8, ge=1, le=MAX_COUNT)
    num_prompts: int = Field(default=8, ge=1, le=MAX_COUNT)
    # The concurrency levels the deployment serves: the smoke measures each, and min_speedup and max_regression
    # apply at each (tokens/s per stream at 1, aggregate above). Empty: concurrency 1 alone is gated.
    concurrency_levels: tuple[Annotated[int, Field(ge=1, le=MAX_COUNT)], ...] = ()
    gates: Gates = Gates()
    # Point every kernel cache at one folder, pack what a passing start filled, and measure a second, warm
    # start with it restored (kernel_cache alone: pack, no warm start).
    kernel_cache: bool = False
    warm_start: bool = False
    start_gates: StartGates = StartGates()

    @model_validator(mode="after")
    def _warm_needs_cache(self) -> SmokeSettings:
        gates = self.start_gates
        if (gates.max_warm_start_s is not None or gates.no_warm_compile) and not self.warm_start:
            raise KeyedValueError(("start_gates",), "gates a warm start: set smoke.warm_start: true")
        return self

    @model_validator(mode="after")
    def _levels_once(self) -> SmokeSettings:
        for i, level in enumerate(self.concurrency_levels):
            if level in self.concurrency_levels[:i]:
                raise KeyedValueError(("concurrency_levels", i), f"concurrency {level} is named twice")
        return self

    @model_validator(mode="before")
    @classmethod
    def _serving_keys_moved(cls, data: Any) -> Any:
        # stacks.yaml files written before the split kept the server's settings under `smoke:`.
        if isinstance(data, Mapping):
            for key in data:
                if key in ServingSettings.model_fields or key == "timeout_s":
                    new = "startup_timeout_s" if key == "timeout_s" else key
                    raise KeyedValueError((key,), f"'{key}' is a serving setting: move it to 'serving.{new}'")
        return data


class PublishSettings(StrictModel):
    repository: str = "127.0.0.1:5000/sglstack/sglang"
    immutable_tag: str = "{sglang}-{stack}-{date}-{confighash8}"
    moving_tags: tuple[str, ...] = ("{sglang}-{stack}", "{stack}")
    candidate_tag: str = "candidate-{stack}-{confighash12}"


class PatchPolicy(StrictModel):
    # 'notice': a patch already upstream is skipped with a message; 'error': the build stops so the
    # stack's patch list gets cleaned up.
    on_upstream: Literal["notice", "error"] = "notice"


class CoverageException(StrictModel):
    """A kernel-coverage cell this stack accepts below `require`, declared with a reason (like an override)."""

    extension: str = Field(min_length=1)  # a row of `invoke coverage` (e.g. sgl_kernel.flash_ops); globs allowed
    capability: str | None = Field(default=None, pattern=r"^[0-9]+\.[0-9]+$")  # e.g. "10.3"; None: every capability
    reason: str = Field(min_length=1)


class CoveragePolicy(StrictModel):
    """What every GPU of `cuda_arch_list` must get from each CUDA extension (`invoke coverage`, the build)."""

    require: Literal["native", "ptx"] = "native"  # ptx: a JIT-compiled first start is acceptable
    exceptions: tuple[CoverageException, ...] = ()
    # More distributions whose device code is checked, beyond the kernel package, FlashInfer's and torch's:
    # the CUDA packages the stack's SGLang brings (DeepEP, FlashMLA, NVIDIA's libraries, ...), at the
    # versions the image installs (the lock's, for `invoke coverage`).
    packages: tuple[Annotated[str, AfterValidator(package_name)], ...] = ()


class LibraryException(StrictModel):
    """Compiled files whose missing shared libraries this stack accepts, with the reason (like an override):
    plugins and alternative builds a package loads only for a feature, a fabric or a library version that
    the serving image does not use."""

    file: str = Field(min_length=1)  # a glob on the path under site-packages, e.g. "torchcodec/libtorchcodec_*"
    reason: str = Field(min_length=1)


class SizePolicy(StrictModel):
    """The serving image's size policy, checked after verification. `max_gb`: the most it may weigh
    (uncompressed, as the engine counts it, in GB of 10^9 bytes); over it the build fails with what grew
    since the stack's last recorded build. `library_copies`: the second builds of a CUDA library (one file
    name at two paths) this stack accepts, each with its reason; any other fails the build."""

    max_gb: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    library_copies: tuple[LibraryException, ...] = ()


class SharedLibrariesPolicy(StrictModel):
    """The build's shared-library check: every DT_NEEDED of every compiled file resolves in the image,
    except the driver's (the host provides them) and the files declared here."""

    exceptions: tuple[LibraryException, ...] = ()


class ImportException(StrictModel):
    """An import that no installed distribution provides which this stack accepts, with the reason (like a
    coverage exception): a module an optional feature or another platform's code path imports."""

    module: str = Field(min_length=1)  # the top-level module name imported, e.g. "vllm"; globs allowed
    importer: str | None = Field(default=None, min_length=1)  # a glob on the importing file under site-packages
    reason: str = Field(min_length=1)


class RuntimeImportsPolicy(StrictModel):
    """The build's import-closure check: the serving path's modules import, and no file imports a module no
    installed distribution provides (an error on the serving path, a listed warning elsewhere), except the
    imports declared here. `architectures`: the served model's classes (its config.json's `architectures`),
    whose SGLang model module is on the serving path; when not given, read from the model's config.json where
    its files are at hand."""

    architectures: tuple[OneLine, ...] = ()
    exceptions: tuple[ImportException, ...] = ()


class RegistryCache(StrictModel):
    """BuildKit's registry cache of a stack's layers: `cache-from` on every build, `cache-to` where the
    builder can export one (buildx; not the classic builder)."""

    registry: Annotated[str, AfterValidator(cache_reference)]
    mode: Literal["min", "max"] = "max"  # max: every stage's layers, so a cold runner rebuilds none

    def ref_for(self, stack_name: str) -> str:
        return self.registry.replace(STACK_PLACEHOLDER, stack_name)
