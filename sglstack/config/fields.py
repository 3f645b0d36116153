"""The value types of stacks.yaml: exact pins, one-line text, names, bind mounts, cache references, and
the split of credentials out of the URLs that may carry them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, ValidationError

from ..core.credentials import (
    CredentialError,
    HostLogin,
    has_credentials,
    host_login,
    public_url,
    redact_url,
)
from ..core.errors import ConfigError
from ..core.quoting import APT_PACKAGE_RE, ENV_NAME_RE, LABEL_KEY_RE, PATCH_ID_RE, control_character, one_line_problem
from ..inimage.incontainer.wheelkit import WheelKitError, split_requirement
from .imageref import (
    ImageReference,
    image_reference_problem,
    parse_image_reference,
    registry_reference_problem,
)
from .yamlsrc import KeyPath

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
    try:
        ref: ImageReference | None = parse_image_reference(value)
    except ConfigError:
        ref = None  # the grammar check below names what is wrong
    if (ref is not None and ref.digest is None) or value.endswith(":"):  # `name:` has an empty tag: no tag
        if ref is None or ref.tag is None:
            raise ValueError(f"image '{value}' has no tag: pin a version tag or a digest")
        if ref.tag == "latest":
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
    """An argument or environment value: any text a process can receive (a NUL ends it early). The value is
    not quoted: it may be a secret (an env value, the word after `--api-key`); the key names it."""
    if "\x00" in value:
        raise ValueError("the value holds a NUL character, which no argument or environment value can")
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


# ---- sizes, counts and durations ---------------------------------------------------------------------

# A size as every reader of it takes it: Docker's shm_size, Kubernetes' emptyDir sizeLimit (render.k8s turns
# the unit into Ki/Mi/Gi/Ti), preflight's /dev/shm check. A whole number (no sign, no fraction: Kubernetes
# would refuse 1.5g), then an optional binary unit and "b". ASCII digits only: `\d` and int() also take Arabic-Indic
# and fullwidth digits, which no reader of a size does.
SIZE_RE = re.compile(r"([0-9]{1,15})([bkmgt]?)b?", re.IGNORECASE)
SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MAX_SIZE_BYTES = 1 << 44  # 16 TiB: more /dev/shm than any node has
# Whole numbers written into argv, compose files and manifests (int32 fields): a count beyond any machine.
MAX_COUNT = 1 << 16
MAX_TOKENS = 1 << 24  # tokens a request may generate: beyond any model's context
MAX_DURATION_S = 7 * 24 * 3600  # a week: no server takes longer to start, and int() of .inf would crash


def size_bytes(value: str) -> int:
    """`value` (a size such as 32g) in bytes; ValueError for anything that is not a size above 0."""
    m = SIZE_RE.fullmatch(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"'{value}' is not a size such as 32g (a whole number, then b, k, m, g or t)")
    size = int(m.group(1)) * SIZE_UNITS[m.group(2).lower()]
    if not 0 < size <= MAX_SIZE_BYTES:
        raise ValueError(f"'{value}' must be more than 0 and at most 16t")
    return size


def _size(value: str) -> str:
    size_bytes(value)
    return value


ByteSize = Annotated[str, AfterValidator(_size)]

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


class KeyedValueError(ValueError):
    """A cross-field check's failure that knows which key it is about (model validators have no loc)."""

    def __init__(self, key: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.key = key


def cuda_release(version: str | None) -> str | None:
    """`13.0.1` -> `13.0`: the CUDA release torch, nvcc and the NVIDIA runtime name (None stays None)."""
    return ".".join(version.split(".")[:2]) if version else None


def exact_pins(requirements: Iterable[str]) -> dict[str, str]:
    """`name==version` requirements as {canonical name: version}; direct URL requirements carry none."""
    out: dict[str, str] = {}
    for text in requirements:
        req = Requirement(text)
        if not req.url:
            out[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    return out


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

STACK_PLACEHOLDER = "{stack}"


def cache_reference(value: str) -> str:
    # `{stack}` lets one default serve every stack; it is checked as a name it could become.
    problem = registry_reference_problem(value.replace(STACK_PLACEHOLDER, "x"))
    if problem:
        raise ValueError(f"'{value}' is not a registry reference like 'ghcr.io/team/sglstack-cache:{{stack}}': "
                         f"it {problem}")
    return value


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
        raise KeyedValueError(path, f"'{redact_url(urls[0])}' carries credentials, which only {CREDENTIAL_PLACES} "
                                     "may (sglstack hands those to pip, uv and git as a netrc, never in a file)")
    logins: list[tuple[KeyPath, HostLogin]] = []
    for url in urls:
        try:
            login = host_login(url)
        except CredentialError as exc:
            raise KeyedValueError(path, str(exc)) from None
        if login is not None:
            logins.append((path, login))
        data = data.replace(url, public_url(url))
    return data, logins


def url_at(data: Any, key: KeyPath) -> str:
    for part in key:
        data = data[part]
    return str(data)


def package_name(value: str) -> str:
    """A distribution name as given (PEP 508's form), canonicalized (`Foo_Bar` -> `foo-bar`)."""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", value):
        raise ValueError(f"'{value}' is not a package name")
    return str(canonicalize_name(value))


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def bound_text(error: Mapping[str, Any]) -> str:
    """What a value refused by a model's field must be (`must be >= 1`, `not one of 'EAGLE3', 'EAGLE'`), from
    one of pydantic's `errors()`: its context in our words, not the validator's sentence."""
    ctx = error.get("ctx") or {}
    if bounds := " and ".join(f"{op} {ctx[key]}" for key, op in _BOUNDS if key in ctx):
        return f"must be {bounds}"
    if "expected" in ctx:
        return f"not one of {ctx['expected']}"
    kind = str(error.get("type", ""))
    if kind.startswith(("int_", "float_")):
        return "not a whole number" if kind.startswith("int_") else "not a number"
    return str(error.get("msg", "not a value it takes"))


def bound_problem(exc: ValueError) -> str:
    """`NAME VALUE: must be >= 0` for a model's refusal of a field's value (its first error)."""
    if not isinstance(exc, ValidationError) or not exc.errors():
        return str(exc)
    error = exc.errors()[0]
    value = error.get("input")
    shown_value = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{'.'.join(str(p) for p in error.get('loc', ()))} {shown_value}: {bound_text(error)}"
