"""The schema of a stack: its pieces (torch, kernels, serving, smoke, publish, coverage, size ...) and `Stack`,
`Matrix` (validated, immutable). Loading and the checks across stacks are `config.matrix`'s."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import AfterValidator, Field, model_validator

from ..core.credentials import (
    CredentialError,
    HostLogin,
    merge_logins,
    redact_url,
)
from ..core.errors import ConfigError, did_you_mean, shown
from .baseseed import BaseSeed, seeded_tag
from .fields import (
    AnyRequirement,
    AptPackage,
    ExactRequirement,
    ExactVersion,
    KeyedValueError,
    LabelKey,
    OneLine,
    PatchId,
    PinnedImage,
    Url,
    cuda_release,
    exact_pins,
    package_name,
    split_credentials,
    url_at,
)
from .names import LOCAL_REPOSITORY
from .platforms import MACHINE, meant_platform
from .settings import (
    CoveragePolicy,
    PatchPolicy,
    PublishSettings,
    RegistryCache,
    RuntimeImportsPolicy,
    ServingSettings,
    SharedLibrariesPolicy,
    SizePolicy,
    SmokeSettings,
)
from .strict import StrictModel

# ---- the pieces of a stack -------------------------------------------------------------------------

class TorchPin(StrictModel):
    version: ExactVersion
    index_url: Url | None = None
    packages: tuple[ExactRequirement, ...] = ()  # torchvision/torchaudio pinned alongside, if any

    def requirements(self) -> tuple[str, ...]:
        return (f"torch=={self.version}", *self.packages)


class WheelPin(StrictModel):
    """A package pinned to one version, from an index or from a direct wheel URL."""

    version: ExactVersion
    url: Url | None = None
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    index_url: Url | None = None


# The kernel package's name moves with SGLang (`sgl-kernel` to 0.3.x, `sglang-kernel` from 0.4): the stack
# names it, and every part (lock, render, conflicts, coverage, labels) takes the name from here.
DEFAULT_KERNEL_PACKAGE = "sgl-kernel"




class KernelPin(WheelPin):
    """SGLang's kernel package: `package` is its distribution name (the import name stays `sgl_kernel`)."""

    package: Annotated[str, AfterValidator(package_name)] = DEFAULT_KERNEL_PACKAGE

    def url_for(self, platform: str) -> str | None:
        """The wheel URL for `platform` (its `{arch}` as `uname -m` there); None: the package comes from an index.
        A platform with no machine name is refused, never given another platform's wheel."""
        if not self.url:
            return None
        if platform not in MACHINE:
            raise ConfigError(f"kernel package {self.package}: no wheel URL for platform {shown(platform, 40)} "
                              f"(known: {' '.join(MACHINE)})")
        return self.url.replace("{arch}", MACHINE[platform])


class FlashInferPin(StrictModel):
    version: ExactVersion
    packages: tuple[str, ...] = ("flashinfer-python", "flashinfer-cubin")
    index_url: Url | None = None

    def requirements(self) -> tuple[str, ...]:
        return tuple(f"{p}=={self.version}" for p in self.packages)


class PipLayer(StrictModel):
    """One extra install layer: exact requirements, installed in its own cached layer."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    requirements: tuple[ExactRequirement, ...]
    index_url: Url | None = None
    no_deps: bool = False
    force_reinstall: bool = False
    # Layers that replace something SGLang's requirements pinned (upstream's NCCL force-install) must run
    # after SGLang's requirements are resolved, or the resolver would refuse them.
    after_sglang: bool = False


class GitSource(StrictModel):
    repo: str
    ref: str = Field(pattern=r"^[0-9a-f]{40}$", description="a full commit sha: branches and tags move")
    subdirectory: OneLine = "python"


class SGLangSource(StrictModel):
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


class Override(StrictModel):
    """An SGLang requirement this stack replaces on purpose (visible in the image's labels)."""

    replaces: AnyRequirement
    pin: ExactRequirement
    reason: str = Field(min_length=1)

    @property
    def package(self) -> str:
        return canonicalize_name(Requirement(self.pin).name)


class Stack(StrictModel):
    name: str
    description: OneLine = ""
    inherits: str | None = None
    base_image: PinnedImage
    # The base's image id, for a base no registry holds (a locally made one has no manifest digest to pin
    # with `@sha256:`): the build refuses a base_image whose id differs, before it builds anything.
    base_image_id: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    # A base made here (`invoke seed-base`), the same bytes on every machine: pinned by its root file system's
    # digest per platform; each platform's image is `base_image` + `-ARCH` (config.baseseed).
    base_seed: BaseSeed | None = None
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
    runtime_imports: RuntimeImportsPolicy = RuntimeImportsPolicy()
    size: SizePolicy | None = None
    cache: RegistryCache | None = None
    # The stack as written, when this is one platform of it (`for_platform`): its lock and records are the
    # whole stack's, narrowed to that platform.
    whole: Stack | None = Field(default=None, exclude=True, repr=False)
    # The credentials the stack's URLs carried (their URLs above keep none): never dumped, never shown.
    credentials: tuple[HostLogin, ...] = Field(default=(), exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _split_credentials(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        if "whole" in data:  # set by for_platform only, never written
            raise KeyedValueError(("whole",), "unknown key")
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

    @model_validator(mode="before")
    @classmethod
    def _platforms_spelled_one_way(cls, data: Any) -> Any:
        """`linux/aarch64`, `arm64` or `linux/arm64/v8` under `platforms:` names the one spelling, as `--platform`."""
        given = data.get("platforms") if isinstance(data, Mapping) else None
        for i, item in enumerate(given if isinstance(given, list | tuple) else ()):
            if isinstance(item, str) and item not in MACHINE and (meant := meant_platform(item)):
                raise KeyedValueError(("platforms", i), f"{shown(item, 40)} is not one of {' '.join(MACHINE)}; "
                                                        f"did you mean {meant}?")
        return data

    @model_validator(mode="after")
    def _coverage_capabilities(self) -> Stack:
        arch = {a.removesuffix("+PTX").removesuffix("a") for a in self.cuda_arch_list}
        for i, exception in enumerate(self.coverage.exceptions):
            if exception.capability is not None and exception.capability not in arch:
                raise KeyedValueError(("coverage", "exceptions", i, "capability"),
                                       f"capability {exception.capability} is not in cuda_arch_list")
        return self

    @model_validator(mode="after")
    def _platforms_listed_once(self) -> Stack:
        if not self.platforms:
            raise KeyedValueError(("platforms",), "empty: a stack builds for at least one platform (linux/amd64, "
                                                  "linux/arm64)")
        for i, platform in enumerate(self.platforms):
            if platform in self.platforms[:i]:
                raise KeyedValueError(("platforms", i), f"{platform} is listed twice")
        return self

    @model_validator(mode="after")
    def _seeded_base(self) -> Stack:
        if self.base_seed and self.whole is None:
            if self.base_image_id:
                raise KeyedValueError(("base_image_id",), "a seeded base (base_seed) is pinned by its rootfs digests, "
                                                          "not by an image id: set one of the two")
            if set(self.base_seed.rootfs) != set(self.platforms):
                raise KeyedValueError(("base_seed", "rootfs"), f"pins {' '.join(sorted(self.base_seed.rootfs))}; the "
                                                               f"stack's platforms are {' '.join(self.platforms)}")
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

    def for_platform(self, platform: str) -> Stack:
        """The stack as one platform builds it: that platform only, and that platform's base."""
        if platform not in self.platforms:
            meant = meant_platform(platform)
            hint = f"; did you mean {meant}?" if meant in self.platforms else ""
            raise ConfigError(f"platform {shown(platform, 40)} is not one of the stack's ({' '.join(self.platforms)})"
                              f"{hint}", stack=self.name)
        if self.whole is not None or (self.platforms == (platform,) and not self.base_seed):
            return self
        update: dict[str, Any] = {"platforms": (platform,), "whole": self}
        if self.base_seed:
            update["base_image"] = seeded_tag(self.base_image, platform)
        return self.model_copy(update=update)

    @property
    def whole_platforms(self) -> tuple[str, ...]:
        """Every platform of the stack as written, even when this is one platform of it (`for_platform`)."""
        return (self.whole or self).platforms

    @property
    def lock_platform(self) -> str | None:
        """The platform whose lock is `locks/NAME.PLATFORM.txt` (None: `locks/NAME.txt`, the first platform's)."""
        return self.platforms[0] if self.whole and self.platforms[0] != self.whole.platforms[0] else None

    @property
    def build_platform(self) -> str | None:
        """The platform to pass to a single-platform build; None lets the builder use its own."""
        return self.platforms[0] if len(self.platforms) == 1 else None

    @property
    def cache_ref(self) -> str | None:
        """The registry reference of this stack's build cache, if it has one."""
        return self.cache.ref_for(self.name) if self.cache else None


class Matrix(StrictModel):
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

