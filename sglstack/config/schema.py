"""The schema of a stack: its pieces (torch, kernels, serving, smoke, publish, coverage, size ...) and `Stack`,
`Matrix` (validated, immutable). Loading and the checks across stacks are `config.matrix`'s."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..core.credentials import (
    CredentialError,
    HostLogin,
    argv_references,
    merge_logins,
    plain_secret_problem,
    redact_url,
)
from ..core.errors import ConfigError, did_you_mean, shown
from .fields import (
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_TOKENS,
    STACK_PLACEHOLDER,
    AnyRequirement,
    AptPackage,
    ArgText,
    BindMount,
    ByteSize,
    EnvName,
    ExactRequirement,
    ExactVersion,
    KeyedValueError,
    LabelKey,
    OneLine,
    PatchId,
    PinnedImage,
    Url,
    cache_reference,
    cuda_release,
    exact_pins,
    split_credentials,
    url_at,
)
from .names import LOCAL_REPOSITORY
from .serverflags import extra_args_problem


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_yes_no_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        # YAML reads yes/no/on/off/true/false as booleans, and pydantic's lax mode takes a boolean for 1 or 0:
        # `port: yes` would serve on port 1, `min_agreement: no` turn the gate off.
        if isinstance(value, bool) and info.field_name and _is_number(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"{str(value).lower()} is a yes/no (YAML reads yes, no, on, off, true and false so), "
                             "not a number")
        return value


def _is_number(annotation: Any) -> bool:
    """`int`, `float` or an optional one (a bool is an int to Python, but never a number of stacks.yaml)."""
    return annotation in (int, float) or (get_origin(annotation) in (Union, UnionType)
                                          and any(arg in (int, float) for arg in get_args(annotation)))


# ---- the pieces of a stack -------------------------------------------------------------------------

class TorchPin(_Model):
    version: ExactVersion
    index_url: Url | None = None
    packages: tuple[ExactRequirement, ...] = ()  # torchvision/torchaudio pinned alongside, if any

    def requirements(self) -> tuple[str, ...]:
        return (f"torch=={self.version}", *self.packages)


class WheelPin(_Model):
    """A package pinned to one version, from an index or from a direct wheel URL."""

    version: ExactVersion
    url: Url | None = None
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    index_url: Url | None = None


# The kernel package's name moves with SGLang (`sgl-kernel` to 0.3.x, `sglang-kernel` from 0.4): the stack
# names it, and every part (lock, render, conflicts, coverage, labels) takes the name from here.
DEFAULT_KERNEL_PACKAGE = "sgl-kernel"


def _package_name(value: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", value):
        raise ValueError(f"'{value}' is not a package name")
    return str(canonicalize_name(value))


class KernelPin(WheelPin):
    """SGLang's kernel package: `package` is its distribution name (the import name stays `sgl_kernel`)."""

    package: Annotated[str, AfterValidator(_package_name)] = DEFAULT_KERNEL_PACKAGE


class FlashInferPin(_Model):
    version: ExactVersion
    packages: tuple[str, ...] = ("flashinfer-python", "flashinfer-cubin")
    index_url: Url | None = None

    def requirements(self) -> tuple[str, ...]:
        return tuple(f"{p}=={self.version}" for p in self.packages)


class PipLayer(_Model):
    """One extra install layer: exact requirements, installed in its own cached layer."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    requirements: tuple[ExactRequirement, ...]
    index_url: Url | None = None
    no_deps: bool = False
    force_reinstall: bool = False
    # Layers that replace something SGLang's requirements pinned (upstream's NCCL force-install) must run
    # after SGLang's requirements are resolved, or the resolver would refuse them.
    after_sglang: bool = False


class GitSource(_Model):
    repo: str
    ref: str = Field(pattern=r"^[0-9a-f]{40}$", description="a full commit sha: branches and tags move")
    subdirectory: OneLine = "python"


class SGLangSource(_Model):
    version: ExactVersion | None = None
    git: GitSource | None = None
    install_deps: bool = True

    @model_validator(mode="after")
    def _one_source(self) -> SGLangSource:
        if (self.version is None) == (self.git is None):
            raise ValueError("set exactly one of 'version' (PyPI) or 'git' (repo + ref)")
        return self

    @property
    def label(self) -> str:
        return self.version if self.version else f"git-{self.git.ref[:12]}"  # type: ignore[union-attr]


class Override(_Model):
    """An SGLang requirement this stack replaces on purpose (visible in the image's labels)."""

    replaces: AnyRequirement
    pin: ExactRequirement
    reason: str = Field(min_length=1)

    @property
    def package(self) -> str:
        return canonicalize_name(Requirement(self.pin).name)


class SpeculativeSettings(_Model):
    algorithm: Literal["EAGLE3", "EAGLE", "NEXTN"] = "EAGLE3"
    draft_model: OneLine
    num_steps: int = Field(ge=1, le=MAX_COUNT)
    eagle_topk: int = Field(ge=1, le=MAX_COUNT)
    num_draft_tokens: int = Field(ge=1, le=MAX_COUNT)


class ServingSettings(_Model):
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


class Gates(_Model):
    min_speedup: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    min_accept_length: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    min_agreement: float = Field(default=0.9, ge=0, le=1, allow_inf_nan=False)
    max_regression: float = Field(default=0.05, ge=0, le=1, allow_inf_nan=False)


class SmokeSettings(_Model):
    """How the smoke test measures a served image (the server itself is `serving:`)."""

    max_new_tokens: int = Field(default=128, ge=1, le=MAX_TOKENS)
    concurrency: int = Field(default=8, ge=1, le=MAX_COUNT)
    num_prompts: int = Field(default=8, ge=1, le=MAX_COUNT)
    gates: Gates = Gates()

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


class PublishSettings(_Model):
    repository: str = "127.0.0.1:5000/sglstack/sglang"
    immutable_tag: str = "{sglang}-{stack}-{date}-{confighash8}"
    moving_tags: tuple[str, ...] = ("{sglang}-{stack}", "{stack}")
    candidate_tag: str = "candidate-{stack}-{confighash12}"


class PatchPolicy(_Model):
    # 'notice': a patch already upstream is skipped with a message; 'error': the build stops so the
    # stack's patch list gets cleaned up.
    on_upstream: Literal["notice", "error"] = "notice"


class CoverageException(_Model):
    """A kernel-coverage cell this stack accepts below `require`, declared with a reason (like an override)."""

    extension: str = Field(min_length=1)  # a row of `invoke coverage` (e.g. sgl_kernel.flash_ops); globs allowed
    capability: str | None = Field(default=None, pattern=r"^[0-9]+\.[0-9]+$")  # e.g. "10.3"; None: every capability
    reason: str = Field(min_length=1)


class CoveragePolicy(_Model):
    """What every GPU of `cuda_arch_list` must get from each CUDA extension (`invoke coverage`, the build)."""

    require: Literal["native", "ptx"] = "native"  # ptx: a JIT-compiled first start is acceptable
    exceptions: tuple[CoverageException, ...] = ()
    # More distributions whose device code is checked, beyond the kernel package, FlashInfer's and torch's:
    # the CUDA packages the stack's SGLang brings (DeepEP, FlashMLA, NVIDIA's libraries, ...), at the
    # versions the image installs (the lock's, for `invoke coverage`).
    packages: tuple[Annotated[str, AfterValidator(_package_name)], ...] = ()


class LibraryException(_Model):
    """Compiled files whose missing shared libraries this stack accepts, with the reason (like an override):
    plugins and alternative builds a package loads only for a feature, a fabric or a library version that
    the serving image does not use."""

    file: str = Field(min_length=1)  # a glob on the path under site-packages, e.g. "torchcodec/libtorchcodec_*"
    reason: str = Field(min_length=1)


class SizePolicy(_Model):
    """The serving image's size policy, checked after verification. `max_gb`: the most it may weigh
    (uncompressed, as the engine counts it, in GB of 10^9 bytes); over it the build fails with what grew
    since the stack's last recorded build. `library_copies`: the second builds of a CUDA library (one file
    name at two paths) this stack accepts, each with its reason; any other fails the build."""

    max_gb: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    library_copies: tuple[LibraryException, ...] = ()


class SharedLibrariesPolicy(_Model):
    """The build's shared-library check: every DT_NEEDED of every compiled file resolves in the image,
    except the driver's (the host provides them) and the files declared here."""

    exceptions: tuple[LibraryException, ...] = ()


class RegistryCache(_Model):
    """BuildKit's registry cache of a stack's layers: `cache-from` on every build, `cache-to` where the
    builder can export one (buildx; not the classic builder)."""

    registry: Annotated[str, AfterValidator(cache_reference)]
    mode: Literal["min", "max"] = "max"  # max: every stage's layers, so a cold runner rebuilds none

    def ref_for(self, stack_name: str) -> str:
        return self.registry.replace(STACK_PLACEHOLDER, stack_name)


class Stack(_Model):
    name: str
    description: OneLine = ""
    inherits: str | None = None
    base_image: PinnedImage
    # The base's image id, for a base no registry holds (a locally made one has no manifest digest to pin
    # with `@sha256:`): the build refuses a base_image whose id differs, before it builds anything.
    base_image_id: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    src_image: PinnedImage = "debian:bookworm-slim"
    cuda: ExactVersion | None = None
    python: str = Field(default="3.12", pattern=r"^3\.[0-9]+$")
    python_packages: tuple[AptPackage, ...] | None = None  # apt packages providing `python`; None = derived
    platforms: tuple[Literal["linux/amd64", "linux/arm64"], ...] = ("linux/amd64",)
    cuda_arch_list: tuple[str, ...] = ()
    # Where the CUDA toolkit (nvcc, headers) lives for the JIT compilers: a CUDA base image's, or the
    # `nvidia-cuda-nvcc` wheel's folder in the venv for a stack whose CUDA comes from PyPI.
    cuda_home: str = Field(default="/usr/local/cuda", pattern=r"^/[A-Za-z0-9._/-]*$")
    # The base image's glibc ("2.36"): the manylinux tag the lock resolves for (None: read from the base
    # image when it is present, else the 2.28 baseline). A release with only manylinux_2_34 wheels needs it.
    glibc: str | None = Field(default=None, pattern=r"^2\.[0-9]+$")
    system_packages: tuple[AptPackage, ...] = ()
    torch: TorchPin | None = None
    sgl_kernel: KernelPin | None = None
    flashinfer: FlashInferPin | None = None
    extra_layers: tuple[PipLayer, ...] = ()
    sglang: SGLangSource
    overrides: tuple[Override, ...] = ()
    patches: tuple[PatchId, ...] = ()
    patch_policy: PatchPolicy = PatchPolicy()
    serving: ServingSettings
    smoke: SmokeSettings = SmokeSettings()
    publish: PublishSettings = PublishSettings()
    labels: Mapping[LabelKey, OneLine] = Field(default_factory=dict)
    coverage: CoveragePolicy = CoveragePolicy()
    shared_libraries: SharedLibrariesPolicy = SharedLibrariesPolicy()
    size: SizePolicy | None = None
    cache: RegistryCache | None = None
    # The credentials the stack's URLs carried (their URLs above keep none): never dumped, never shown.
    credentials: tuple[HostLogin, ...] = Field(default=(), exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _split_credentials(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        given = data.get("credentials", ())
        if not isinstance(given, tuple) or not all(isinstance(x, HostLogin) for x in given):
            raise KeyedValueError(("credentials",), "unknown key (credentials go inside the URLs that need them)")
        public, found = split_credentials({k: v for k, v in data.items() if k != "credentials"})
        logins = list(given)
        for key, login in found:
            logins.append(login)
            try:
                merge_logins(logins)
            except CredentialError as exc:
                raise KeyedValueError(key, f"'{redact_url(url_at(public, key))}': {exc}") from None
        public["credentials"] = merge_logins(logins)
        return public

    @model_validator(mode="after")
    def _coverage_capabilities(self) -> Stack:
        arch = {a.removesuffix("+PTX").removesuffix("a") for a in self.cuda_arch_list}
        for i, exception in enumerate(self.coverage.exceptions):
            if exception.capability is not None and exception.capability not in arch:
                raise KeyedValueError(("coverage", "exceptions", i, "capability"),
                                       f"capability {exception.capability} is not in cuda_arch_list")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> Stack:
        if self.torch and self.cuda and "+cu" in self.torch.version:
            want = "cu" + (self.cuda_release or "").replace(".", "")
            if not self.torch.version.endswith("+" + want):
                raise KeyedValueError(
                    ("torch", "version"), f"torch {self.torch.version} is not a {want} build for CUDA {self.cuda}"
                )
        for i, arch in enumerate(self.cuda_arch_list):
            if not re.fullmatch(r"[0-9]+\.[0-9]+a?(\+PTX)?", arch):
                raise KeyedValueError(
                    ("cuda_arch_list", i), f"cuda_arch_list entry '{arch}' is not like '9.0' or '10.0a'"
                )
        # An override's pin wins in the install, so it must not contradict the stack's own pin of that package.
        own = self._own_pins()
        for i, override in enumerate(self.overrides):
            req = Requirement(override.pin)
            pinned = own.get(canonicalize_name(req.name))
            if pinned and not req.url and not req.specifier.contains(pinned, prereleases=True):
                raise KeyedValueError(
                    ("overrides", i, "pin"), f"'{override.pin}' contradicts the stack's own pin {req.name}=={pinned}"
                )
        # gpus: 0 is the CPU profile used with test doubles, where tp is only passed through.
        if self.serving.gpus and self.serving.tp > self.serving.gpus:
            raise KeyedValueError(
                ("serving", "tp"), f"serving.tp {self.serving.tp} needs at least as many gpus ({self.serving.gpus})"
            )
        return self

    # The pins the built image must report, as {canonical name: version}.
    def pins(self) -> dict[str, str]:
        return {**exact_pins(o.pin for o in self.overrides), **self._own_pins()}

    def _own_pins(self) -> dict[str, str]:
        """The stack's pins from its own sections (torch, FlashInfer, layers, sgl-kernel, SGLang)."""
        out = exact_pins(self.all_pinned_requirements())
        if self.sgl_kernel:
            out[self.sgl_kernel.package] = self.sgl_kernel.version
        if self.sglang.version:
            out["sglang"] = self.sglang.version
        return out

    def all_pinned_requirements(self) -> tuple[str, ...]:
        reqs: list[str] = []
        if self.torch:
            reqs += self.torch.requirements()
        if self.flashinfer:
            reqs += self.flashinfer.requirements()
        for layer in self.extra_layers:
            reqs += layer.requirements
        return tuple(reqs)

    @property
    def cuda_release(self) -> str | None:
        """The stack's CUDA as major.minor (`13.0` for `13.0.1`): what torch and nvcc report; None without CUDA."""
        return cuda_release(self.cuda)

    @property
    def kernel_package(self) -> str | None:
        """The canonical name of SGLang's kernel package in this stack (None: it pins none)."""
        return self.sgl_kernel.package if self.sgl_kernel else None

    @property
    def local_image(self) -> str:
        """The name of this stack's local images (the part before `:tag`)."""
        return f"{LOCAL_REPOSITORY}/{self.name}"

    @property
    def build_platform(self) -> str | None:
        """The platform to pass to a single-platform build; None lets the builder use its own."""
        return self.platforms[0] if len(self.platforms) == 1 else None

    @property
    def cache_ref(self) -> str | None:
        """The registry reference of this stack's build cache, if it has one."""
        return self.cache.ref_for(self.name) if self.cache else None


class Matrix(_Model):
    file: str
    stacks: Mapping[str, Stack]

    def get(self, name: str) -> Stack:
        if name not in self.stacks:
            known = ", ".join(sorted(self.stacks)) or "none"
            # a name from the command line, up to 8192 characters: named by its start
            raise ConfigError(f"unknown stack (known: {known}){did_you_mean(name, self.stacks)}", file=self.file,
                              stack=shown(name, 80))
        return self.stacks[name]

    def names(self) -> list[str]:
        return list(self.stacks)


# ---- loading ---------------------------------------------------------------------------------------

