"""stacks.yaml -> validated, immutable `Stack` objects.

The matrix file has `defaults:` and `stacks:`; a stack may `inherits:` another. Values merge
defaults <- parent chain <- stack (mappings deep-merge, lists and scalars replace). Every piece must be
pinned exactly; every validation failure is one `ConfigError` naming file, stack, key path and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.credentials import (
    CredentialError,
    HostLogin,
    has_credentials,
    host_login,
    merge_logins,
    plain_secret_problem,
    public_url,
    redact_url,
)
from ..core.errors import ConfigError
from ..core.quoting import APT_PACKAGE_RE, ENV_NAME_RE, LABEL_KEY_RE, PATCH_ID_RE, control_character, one_line_problem
from ..core.resources import DEFAULT_PATCHES_DIR
from ..inimage.incontainer.wheelkit import WheelKitError, split_requirement
from .defaults import DEFAULT_STACKS_FILE
from .imageref import (
    TAG_MAX,
    image_reference_problem,
    name_problem,
    path_component_problem,
    registry_reference_problem,
    tag_problem,
)
from .names import LOCAL_REPOSITORY, collisions
from .yamlsrc import MAX_VALUES, KeyPath, load_yaml_with_lines

# Every command validates every stack, and `stacks` prints them all (rich takes about 1 ms a row): a
# hand-kept matrix of more is a generated one gone wrong. Today's has 2.
MAX_STACKS = 1000


# ---- exact-pin value types -------------------------------------------------------------------------

def _exact_version(value: str) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a version string (quote it in YAML)")
    if value.strip().lower() in {"latest", "main", "master", "nightly", "*", ""}:
        raise ValueError(f"'{value}' is not an exact version")
    if value != value.strip() or one_line_problem(value):  # Version() would strip it; a Dockerfile would not
        raise ValueError(f"'{value}' is not an exact version: it has surrounding whitespace or a control character")
    if any(ch in value for ch in "<>=!~*, "):
        raise ValueError(f"'{value}' is a range, not an exact version")
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"'{value}' is not a valid PEP 440 version") from None
    return value


def _exact_requirement(value: str) -> str:
    _one_line(value)  # packaging accepts a trailing line break; a requirements file or RUN line would not
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        raise ValueError(f"'{value}' is not a valid requirement: {exc}") from None
    if req.url:
        return value
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
        raise ValueError(f"'{value}' must pin exactly one version with '==' (no ranges)")
    _exact_version(specs[0].version)
    return value


def _requirement(value: str) -> str:
    """Any requirement, as pip and the build stage's wheelkit both parse it."""
    _one_line(value)
    try:
        Requirement(value)
        split_requirement(value)
    except (InvalidRequirement, WheelKitError) as exc:
        raise ValueError(f"'{value}' is not a valid requirement: {exc}") from None
    return value


def _pinned_image(value: str) -> str:
    if "@sha256:" not in value:
        name, _, tag = value.rpartition(":")
        if not name or "/" in tag or not tag:
            raise ValueError(f"image '{value}' has no tag: pin a version tag or a digest")
        if tag == "latest":
            raise ValueError(f"image '{value}' uses 'latest': pin a version tag or a digest")
    # It is the word after FROM: only what Docker's reference grammar allows may reach the Dockerfile.
    if problem := image_reference_problem(value):
        raise ValueError(f"image '{value}' is not an image reference: it {problem}")
    return value


# ---- values that reach another language (Dockerfile, shell, compose, k8s): see quoting.py -----------

def _one_line(value: str) -> str:
    """Text rendered into a line of a Dockerfile, a label or an annotation: a line break has no business in it."""
    if problem := one_line_problem(value):
        raise ValueError(f"'{value}' {problem}")
    return value


def _no_nul(value: str) -> str:
    """An argument or environment value: any text a process can receive (a NUL ends it early)."""
    if "\x00" in value:
        raise ValueError(f"'{value}' holds a NUL character, which no argument or environment value can")
    return value


def _url(value: str) -> str:
    """A URL is one word of a pip command line: whitespace in one is percent-encoded (%20)."""
    if any(ch.isspace() for ch in value) or control_character(value):
        raise ValueError(f"URL '{value}' holds whitespace or a control character (percent-encode it)")
    return value


def _matching(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"'{value}' is not {what}")
        return value

    return AfterValidator(check)


OneLine = Annotated[str, AfterValidator(_one_line)]
ArgText = Annotated[str, AfterValidator(_no_nul)]
Url = Annotated[str, AfterValidator(_url)]
LabelKey = Annotated[str, _matching(LABEL_KEY_RE, "a label key like 'org.example.key' (letters, digits, "
                                                  "'.', '_', '/', '-'; starting with a letter or digit)")]
EnvName = Annotated[str, _matching(ENV_NAME_RE, "an environment variable name (letters, digits and '_', "
                                               "not starting with a digit)")]
AptPackage = Annotated[str, _matching(APT_PACKAGE_RE, "a Debian package name (lowercase letters, digits, "
                                                     "'+', '-', '.'; optional :arch and =version)")]
PatchId = Annotated[str, _matching(PATCH_ID_RE, "a patch id (a folder name of lowercase letters, digits, "
                                               "'.', '_', '-')")]

ExactVersion = Annotated[str, AfterValidator(_exact_version)]
ExactRequirement = Annotated[str, AfterValidator(_exact_requirement)]
AnyRequirement = Annotated[str, AfterValidator(_requirement)]
PinnedImage = Annotated[str, AfterValidator(_pinned_image)]


class _KeyedValueError(ValueError):
    """A cross-field check's failure that knows which key it is about (model validators have no loc)."""

    def __init__(self, key: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.key = key


def _exact_pins(requirements: Iterable[str]) -> dict[str, str]:
    """`name==version` requirements as {canonical name: version}; direct URL requirements carry none."""
    out: dict[str, str] = {}
    for text in requirements:
        req = Requirement(text)
        if not req.url:
            out[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    return out


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


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
    num_steps: int = Field(ge=1)
    eagle_topk: int = Field(ge=1)
    num_draft_tokens: int = Field(ge=1)


def parse_bind(value: str) -> tuple[str, str, bool]:
    """`HOST:CONTAINER[:ro|rw]` -> (host path, container path, read-only); ValueError says what is wrong."""
    if problem := one_line_problem(str(value)):
        raise ValueError(f"it {problem}")
    parts = str(value).split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        raise ValueError("expected HOST:CONTAINER[:ro] with an absolute container path")
    if len(parts) == 3 and parts[2] not in ("ro", "rw"):
        raise ValueError(f"mode '{parts[2]}' is not ro or rw")
    return parts[0], parts[1], len(parts) == 3 and parts[2] == "ro"


def _bind_mount(value: str) -> str:
    try:
        parse_bind(value)
    except ValueError as exc:
        raise ValueError(f"mount '{value}': {exc}") from None
    return value


BindMount = Annotated[str, AfterValidator(_bind_mount)]


class ServingSettings(_Model):
    """How the stack's image is served: the one source of the server's command line, env and resources.

    Smoke, compose and any later manifest render from the serving spec derived from this (`serving.py`).
    """

    model: OneLine
    speculative: SpeculativeSettings | None = None
    tp: int = Field(default=1, ge=1)
    gpus: int = Field(default=1, ge=0)
    port: int = Field(default=30000, ge=1, le=65535)  # the server's listen port
    # How long the server may take to load and answer /health: smoke's wait, compose's start period.
    startup_timeout_s: float = Field(default=3600, gt=0)
    shm_size: str = "32g"
    extra_args: tuple[ArgText, ...] = ()
    env: Mapping[EnvName, ArgText] = Field(default_factory=dict)  # a secret-named key takes only a `${NAME}` reference
    mounts: tuple[BindMount, ...] = ()

    @model_validator(mode="after")
    def _no_plain_secret(self) -> ServingSettings:
        for key, value in self.env.items():
            problem = plain_secret_problem(str(key), str(value))
            if problem:
                raise _KeyedValueError(("env", key), problem)
        return self


class Gates(_Model):
    min_speedup: float = Field(default=1.0, gt=0)
    min_accept_length: float = Field(default=2.0, ge=0)
    min_agreement: float = Field(default=0.9, ge=0, le=1)
    max_regression: float = Field(default=0.05, ge=0, le=1)


class SmokeSettings(_Model):
    """How the smoke test measures a served image (the server itself is `serving:`)."""

    max_new_tokens: int = Field(default=128, ge=1)
    concurrency: int = Field(default=8, ge=1)
    num_prompts: int = Field(default=8, ge=1)
    gates: Gates = Gates()

    @model_validator(mode="before")
    @classmethod
    def _serving_keys_moved(cls, data: Any) -> Any:
        # stacks.yaml files written before the split kept the server's settings under `smoke:`.
        if isinstance(data, Mapping):
            for key in data:
                if key in ServingSettings.model_fields or key == "timeout_s":
                    new = "startup_timeout_s" if key == "timeout_s" else key
                    raise _KeyedValueError((key,), f"'{key}' is a serving setting: move it to 'serving.{new}'")
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
    capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")  # e.g. "10.3"; None: every capability
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


STACK_PLACEHOLDER = "{stack}"


def _cache_reference(value: str) -> str:
    # `{stack}` lets one default serve every stack; it is checked as a name it could become.
    problem = registry_reference_problem(value.replace(STACK_PLACEHOLDER, "x"))
    if problem:
        raise ValueError(f"'{value}' is not a registry reference like 'ghcr.io/team/sglstack-cache:{{stack}}': "
                         f"it {problem}")
    return value


class RegistryCache(_Model):
    """BuildKit's registry cache of a stack's layers: `cache-from` on every build, `cache-to` where the
    builder can export one (buildx; not the classic builder)."""

    registry: Annotated[str, AfterValidator(_cache_reference)]
    mode: Literal["min", "max"] = "max"  # max: every stage's layers, so a cold runner rebuilds none

    def ref_for(self, stack_name: str) -> str:
        return self.registry.replace(STACK_PLACEHOLDER, stack_name)


# Where a URL may carry credentials: sglstack hands them to pip, uv and git as a netrc (`credentials.py`).
# `int` stands for any list index.
_CREDENTIAL_URLS: tuple[tuple[object, ...], ...] = (
    ("sglang", "git", "repo"), ("torch", "index_url"), ("sgl_kernel", "url"), ("sgl_kernel", "index_url"),
    ("flashinfer", "index_url"), ("extra_layers", int, "index_url"))
# Requirement strings, whose `name @ URL` may carry them too.
_CREDENTIAL_REQUIREMENTS: tuple[tuple[object, ...], ...] = (
    ("torch", "packages", int), ("extra_layers", int, "requirements", int), ("overrides", int, "pin"),
    ("overrides", int, "replaces"))
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s;,'\"]+")
CREDENTIAL_PLACES = "index_url, url, sglang.git.repo and requirement URLs"


def _matches(path: KeyPath, patterns: tuple[tuple[object, ...], ...]) -> bool:
    return any(len(p) == len(path)
               and all((w is int and isinstance(k, int)) or w == k for w, k in zip(p, path, strict=True))
               for p in patterns)


def split_credentials(data: Any, path: KeyPath = ()) -> tuple[Any, list[tuple[KeyPath, HostLogin]]]:
    """`data` with the credentials of every URL removed, and those credentials with the key of each URL.

    Where no tool is handed credentials (a description, a label, serving settings), a URL carrying them
    is refused: sglstack would have to write it somewhere as it is.
    """
    if isinstance(data, Mapping):
        out: dict[Any, Any] = {}
        found: list[tuple[KeyPath, HostLogin]] = []
        for key, value in data.items():
            out[key], more = split_credentials(value, (*path, key))
            found += more
        return out, found
    if isinstance(data, list | tuple):
        items = [split_credentials(v, (*path, i)) for i, v in enumerate(data)]
        return type(data)(v for v, _ in items), [x for _, more in items for x in more]
    if not isinstance(data, str) or "@" not in data or "://" not in data:
        return data, []
    urls = [u for u in _URL_IN_TEXT.findall(data) if has_credentials(u)]
    if not urls:
        return data, []
    if not (_matches(path, _CREDENTIAL_URLS) or _matches(path, _CREDENTIAL_REQUIREMENTS)):
        raise _KeyedValueError(path, f"'{redact_url(urls[0])}' carries credentials, which only {CREDENTIAL_PLACES} "
                                     "may (sglstack hands those to pip, uv and git as a netrc, never in a file)")
    logins: list[tuple[KeyPath, HostLogin]] = []
    for url in urls:
        try:
            login = host_login(url)
        except CredentialError as exc:
            raise _KeyedValueError(path, str(exc)) from None
        if login is not None:
            logins.append((path, login))
        data = data.replace(url, public_url(url))
    return data, logins


def _url_at(data: Any, key: KeyPath) -> str:
    for part in key:
        data = data[part]
    return str(data)


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
    python: str = Field(default="3.12", pattern=r"^3\.\d+$")
    python_packages: tuple[AptPackage, ...] | None = None  # apt packages providing `python`; None = derived
    platforms: tuple[Literal["linux/amd64", "linux/arm64"], ...] = ("linux/amd64",)
    cuda_arch_list: tuple[str, ...] = ()
    # Where the CUDA toolkit (nvcc, headers) lives for the JIT compilers: a CUDA base image's, or the
    # `nvidia-cuda-nvcc` wheel's folder in the venv for a stack whose CUDA comes from PyPI.
    cuda_home: str = Field(default="/usr/local/cuda", pattern=r"^/[A-Za-z0-9._/-]*$")
    # The base image's glibc ("2.36"): the manylinux tag the lock resolves for (None: read from the base
    # image when it is present, else the 2.28 baseline). A release with only manylinux_2_34 wheels needs it.
    glibc: str | None = Field(default=None, pattern=r"^2\.\d+$")
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
            raise _KeyedValueError(("credentials",), "unknown key (credentials go inside the URLs that need them)")
        public, found = split_credentials({k: v for k, v in data.items() if k != "credentials"})
        logins = list(given)
        for key, login in found:
            logins.append(login)
            try:
                merge_logins(logins)
            except CredentialError as exc:
                raise _KeyedValueError(key, f"'{redact_url(_url_at(public, key))}': {exc}") from None
        public["credentials"] = merge_logins(logins)
        return public

    @model_validator(mode="after")
    def _coverage_capabilities(self) -> Stack:
        arch = {a.removesuffix("+PTX").removesuffix("a") for a in self.cuda_arch_list}
        for i, exception in enumerate(self.coverage.exceptions):
            if exception.capability is not None and exception.capability not in arch:
                raise _KeyedValueError(("coverage", "exceptions", i, "capability"),
                                       f"capability {exception.capability} is not in cuda_arch_list")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> Stack:
        if self.torch and self.cuda and "+cu" in self.torch.version:
            want = "cu" + "".join(self.cuda.split(".")[:2])
            if not self.torch.version.endswith("+" + want):
                raise _KeyedValueError(
                    ("torch", "version"), f"torch {self.torch.version} is not a {want} build for CUDA {self.cuda}"
                )
        for i, arch in enumerate(self.cuda_arch_list):
            if not re.fullmatch(r"\d+\.\d+a?(\+PTX)?", arch):
                raise _KeyedValueError(
                    ("cuda_arch_list", i), f"cuda_arch_list entry '{arch}' is not like '9.0' or '10.0a'"
                )
        # An override's pin wins in the install, so it must not contradict the stack's own pin of that package.
        own = self._own_pins()
        for i, override in enumerate(self.overrides):
            req = Requirement(override.pin)
            pinned = own.get(canonicalize_name(req.name))
            if pinned and not req.url and not req.specifier.contains(pinned, prereleases=True):
                raise _KeyedValueError(
                    ("overrides", i, "pin"), f"'{override.pin}' contradicts the stack's own pin {req.name}=={pinned}"
                )
        # gpus: 0 is the CPU profile used with test doubles, where tp is only passed through.
        if self.serving.gpus and self.serving.tp > self.serving.gpus:
            raise _KeyedValueError(
                ("serving", "tp"), f"serving.tp {self.serving.tp} needs at least as many gpus ({self.serving.gpus})"
            )
        return self

    # The pins the built image must report, as {canonical name: version}.
    def pins(self) -> dict[str, str]:
        return {**_exact_pins(o.pin for o in self.overrides), **self._own_pins()}

    def _own_pins(self) -> dict[str, str]:
        """The stack's pins from its own sections (torch, FlashInfer, layers, sgl-kernel, SGLang)."""
        out = _exact_pins(self.all_pinned_requirements())
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
            raise ConfigError(f"unknown stack (known: {known})", file=self.file, stack=name)
        return self.stacks[name]

    def names(self) -> list[str]:
        return list(self.stacks)


# ---- loading ---------------------------------------------------------------------------------------

TOP_LEVEL_KEYS = {"defaults", "stacks"}


def known_patch_ids(patches_dir: Path = DEFAULT_PATCHES_DIR) -> set[str]:
    """A patch is a folder under patches/ holding a `patch.toml`."""
    if not patches_dir.is_dir():
        return set()
    return {p.parent.name for p in patches_dir.glob("*/patch.toml")}


def _deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class _ValueBudget:
    """Counts the values the stacks hold once merged, and refuses more than `limit` in all.

    The YAML loader bounds what the file expands to, but every stack is validated with the defaults
    and its parents merged in, so a long `defaults:` list times many one-line stacks would still be
    validated, and copied, once per stack. Sizes are remembered per object (merged stacks share their
    parts), so counting is linear in what the file holds.
    """

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.sizes: dict[int, tuple[object, int]] = {}  # id -> (the object, kept alive; its size)

    def size(self, value: object) -> int:
        hit = self.sizes.get(id(value))
        if hit is not None:
            return hit[1]
        n = 1
        if isinstance(value, Mapping):
            n += sum(1 + self.size(v) for v in value.values())
        elif isinstance(value, list | tuple):
            n += sum(self.size(v) for v in value)
        self.sizes[id(value)] = (value, n)
        return n

    def spend(self, stack: Mapping[str, Any], *, file: str, name: str) -> None:
        self.left -= self.size(stack)
        if self.left < 0:
            raise ConfigError(f"the stacks hold more than {MAX_VALUES:,} values once defaults and parents "
                              "are merged in", file=file, stack=name)


def stack_name_problem(name: str) -> str | None:
    """Why `name` cannot name a stack: it must be usable in the local image name `sglstack/<name>`."""
    problem = path_component_problem(name)
    if problem is None:
        problem = name_problem(f"{LOCAL_REPOSITORY}/{name}")
    if problem is None:
        return None
    return (f"stack name {problem}: it names the image {LOCAL_REPOSITORY}/{name} (Docker's reference "
            "grammar: lowercase letters and digits, separated by one '.', '_', '__' or dashes)")


def _publish_tag_problem(stack: Stack) -> tuple[str, str] | None:
    """(key, problem) for the first publish tag built from the stack's name that Docker would refuse.

    The tags are rendered as a release would render them, with the longest date and config-hash
    values; a template that does not render is left to publish's own template check.
    """
    values = {"sglang": re.sub(r"[^A-Za-z0-9_.-]", "-", stack.sglang.label), "stack": stack.name,
              "date": "20000101", "confighash8": "0" * 8, "confighash12": "0" * 12}
    publish = stack.publish
    templates = [("publish.candidate_tag", publish.candidate_tag), ("publish.immutable_tag", publish.immutable_tag),
                 *((f"publish.moving_tags[{i}]", t) for i, t in enumerate(publish.moving_tags))]
    for key, template in templates:
        if "{stack}" not in template:
            continue
        try:
            tag = template.format(**values)
        except (KeyError, IndexError, ValueError):
            continue
        # A valid stack name holds only tag characters, so its length is all it can get wrong; any
        # other fault of the template is reported by publish's template check.
        if len(tag) > TAG_MAX:
            return key, f"the tag '{tag}' built from the stack name {tag_problem(tag)}: use a shorter stack name"
    return None


def _line_for(lines: dict[KeyPath, int], candidates: list[KeyPath]) -> int | None:
    """The line of the first candidate path present; else of the nearest present ancestor."""
    for path in candidates:
        if path in lines:
            return lines[path]
    for path in candidates:
        while path:
            if path in lines:
                return lines[path]
            path = path[:-1]
    return None


def load_matrix(path: Path | str = DEFAULT_STACKS_FILE, patches_dir: Path | None = None) -> Matrix:
    """Read, merge and validate the matrix; raise `ConfigError` on the first problem found."""
    path = Path(path)
    file = _display(path)
    patches_dir = patches_dir if patches_dir is not None else DEFAULT_PATCHES_DIR
    data, lines = load_yaml_with_lines(path, file)
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping with 'defaults' and 'stacks'", file=file)
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError("unknown top-level key (expected 'defaults', 'stacks')", file=file, key=key,
                              line=lines.get((key,)))
    defaults = data.get("defaults") or {}
    raw_stacks = data.get("stacks")
    if not isinstance(defaults, dict):
        raise ConfigError("must be a mapping", file=file, key="defaults", line=lines.get(("defaults",)))
    if not isinstance(raw_stacks, dict) or not raw_stacks:
        raise ConfigError("must be a non-empty mapping of stack name to settings", file=file, key="stacks",
                          line=lines.get(("stacks",)))
    if len(raw_stacks) > MAX_STACKS:
        raise ConfigError(f"has {len(raw_stacks):,} stacks, over the limit of {MAX_STACKS:,} for one matrix",
                          file=file, key="stacks", line=lines.get(("stacks",)))

    patch_ids = known_patch_ids(patches_dir)
    resolved: dict[str, dict[str, Any]] = {}
    budget = _ValueBudget(MAX_VALUES)

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in resolved:
            return resolved[name]
        raw = raw_stacks[name]
        if not isinstance(raw, dict):
            raise ConfigError("must be a mapping", file=file, stack=name, line=lines.get(("stacks", name)))
        parent = raw.get("inherits")
        if parent is not None:
            if not isinstance(parent, str):
                raise ConfigError("must be the name of another stack", file=file, stack=name, key="inherits",
                                  line=lines.get(("stacks", name, "inherits")))
            if parent not in raw_stacks:
                raise ConfigError(f"unknown parent stack '{parent}'", file=file, stack=name, key="inherits",
                                  line=lines.get(("stacks", name, "inherits")))
            if parent in chain:
                cycle = " -> ".join((*chain, parent))
                raise ConfigError(f"inheritance cycle {cycle}", file=file, stack=name, key="inherits",
                                  line=lines.get(("stacks", name, "inherits")))
            base = resolve(parent, (*chain, parent))
            base = {k: v for k, v in base.items() if k not in ("description", "inherits")}
        else:
            base = dict(defaults)
        merged = _deep_merge(base, raw)
        resolved[name] = merged
        return merged

    stacks: dict[str, Stack] = {}
    for name in raw_stacks:
        problem = stack_name_problem(name)
        if problem:
            raise ConfigError(problem, file=file, stack=name, line=lines.get(("stacks", name)))
        merged = resolve(name, (name,))
        budget.spend(merged, file=file, name=name)
        try:
            stack = Stack.model_validate({**merged, "name": name})
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
            if loc[-1:] == ("[key]",):  # a mapping's key is wrong (the message names it): the mapping's key path
                loc = loc[:-2]
            cause = (err.get("ctx") or {}).get("error")
            if isinstance(cause, _KeyedValueError):
                loc = (*loc, *cause.key)
            key = ".".join(map(str, loc)) or None
            msg = _pydantic_message(err)
            line = _line_for(lines, [("stacks", name, *loc), ("defaults", *loc)])
            raise ConfigError(msg, file=file, stack=name, key=key, line=line) from None
        tag_problem_found = _publish_tag_problem(stack)
        if tag_problem_found:
            key, msg = tag_problem_found
            raise ConfigError(msg, file=file, stack=name, key=key, line=lines.get(("stacks", name)))
        for i, pid in enumerate(stack.patches):
            if pid not in patch_ids:
                raise ConfigError(f"unknown patch id '{pid}' (no {_display(patches_dir)}/{pid}/patch.toml)",
                                  file=file, stack=name, key=f"patches[{i}]",
                                  line=_line_for(lines, [("stacks", name, "patches", i),
                                                         ("defaults", "patches", i)]))
        stacks[name] = stack
    _check_cache_refs(stacks, file, lines)
    _check_name_collisions(stacks, file, lines)
    return Matrix(file=file, stacks=stacks)


def _check_name_collisions(stacks: Mapping[str, Stack], file: str, lines: dict[KeyPath, int]) -> None:
    """Two stacks that Compose or Kubernetes would call the same would deploy over, and remove, each other."""
    for name, other, what, shared in collisions(stacks):
        raise ConfigError(f"stack name '{name}' becomes the {what} '{shared}', as stack '{other}' does: one would "
                          "deploy over or remove the other; rename one of them", file=file, stack=name,
                          line=lines.get(("stacks", name)))


def _check_cache_refs(stacks: Mapping[str, Stack], file: str, lines: dict[KeyPath, int]) -> None:
    """Two stacks exporting one cache reference would overwrite each other's cache on every build."""
    owner: dict[str, str] = {}
    for name, stack in stacks.items():
        ref = stack.cache_ref
        if ref is None:
            continue
        if ref in owner:
            raise ConfigError(f"cache reference '{ref}' is also stack '{owner[ref]}''s: each build would overwrite "
                              f"the other's cache (put '{STACK_PLACEHOLDER}' in the reference)",
                              file=file, stack=name, key="cache.registry",
                              line=_line_for(lines, [("stacks", name, "cache", "registry"),
                                                     ("defaults", "cache", "registry")]))
        owner[ref] = name


def _pydantic_message(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    msg = str(err.get("msg", "invalid value"))
    return msg.removeprefix("Value error, ")


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
