"""Docker's image reference grammar (github.com/distribution/reference), as pure checks.

    reference       := name [ ":" tag ] [ "@" digest ]
    name            := [domain '/'] path-component ['/' path-component]*   (at most 255 characters)
    path-component  := alpha-numeric [separator alpha-numeric]*
    separator       := /[_.]|__|[-]*/
    tag             := /[\\w][\\w.-]{0,127}/

Stack names end up in local tags (`sglstack/<stack>:<hash>`) and in publish tags, so the matrix is
checked against this grammar when it is loaded, before anything is built.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.errors import ConfigError

PATH_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*")
TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
TAG_MAX = 128
NAME_TOTAL_MAX = 255
# A registry host: DNS labels or an IPv6 literal, with an optional port.
DOMAIN_RE = re.compile(
    r"(?:(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])(?:\.(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]))*"
    r"|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
)


def path_component_problem(component: str) -> str | None:
    """Why `component` cannot be one path component of an image name; None if it can."""
    if PATH_COMPONENT_RE.fullmatch(component):
        return None
    if component != component.lower():
        return "has uppercase letters"
    if not component:
        return "is empty"
    if not component[0].isalnum() or not component[-1].isalnum():
        return "must start and end with a lowercase letter or digit"
    if re.search(r"[^a-z0-9._-]", component):
        return "may hold only lowercase letters, digits, '.', '_' and '-'"
    return "has a separator Docker refuses ('..', '._', '___' and the like)"


def name_problem(name: str) -> str | None:
    """Why `name` (the part before `:tag`, e.g. `sglstack/cu130`) is not an image name; None if it is."""
    if len(name) > NAME_TOTAL_MAX:
        return f"is {len(name)} characters long, over Docker's limit of {NAME_TOTAL_MAX}"
    return None


def tag_problem(tag: str) -> str | None:
    """Why `tag` is not an image tag; None if it is."""
    if TAG_RE.fullmatch(tag):
        return None
    if len(tag) > TAG_MAX:
        return f"is {len(tag)} characters long, over Docker's limit of {TAG_MAX}"
    return "may hold only letters, digits, '_', '.' and '-', and may not start with '.' or '-'"


# A registry digest: what `is_digest` accepts and every record, reference and API call uses.
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
DOCKER_HUB = "docker.io"


def image_reference_problem(ref: str) -> str | None:
    """Why `ref` (`name[:tag][@sha256:...]`, as after FROM) is not an image reference; None if it is."""
    name, at, digest = ref.partition("@")
    if at and not DIGEST_RE.fullmatch(digest):
        return f"has a digest '{digest}' that is not sha256: and 64 lowercase hex digits"
    if not name:
        return "has no name"
    return registry_reference_problem(name)


def not_an_image(ref: str) -> str | None:
    """Why `ref`, typed as an image (`--image`: a tag, an id or repo@sha256:...), is not one; None if it
    is. The check of every task option that takes an image."""
    problem = image_reference_problem(ref)
    return f"not an image reference: it {problem}" if problem else None


def registry_reference_problem(ref: str) -> str | None:
    """Why `ref` (`host[:port]/path[:tag]`, no digest) cannot name a registry image; None if it can.

    A first component that looks like a host (a dot, a port, `localhost`) is the registry, as Docker
    reads it; a digest is refused, since a cache is written to its reference.
    """
    if "@" in ref:
        return "may not hold a digest: a cache is written to a tag"
    name, tag = ref, None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, _, tag = ref.rpartition(":")
    if tag is not None and (problem := tag_problem(tag)):
        return f"has a tag that {problem}"
    first, sep, rest = name.partition("/")
    path = name
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        if not DOMAIN_RE.fullmatch(first):
            return f"has an invalid registry host '{first}'"
        path = rest
    for component in path.split("/"):
        if problem := path_component_problem(component):
            return f"has a path component '{component}' that {problem}"
    return name_problem(name)


# ---- parsed references -------------------------------------------------------------------------

@dataclass(frozen=True)
class Repository:
    """`host[:port]/path`: `registry` is where the HTTP API lives, `path` is the name inside it."""

    registry: str
    path: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.path}"

    def ref(self, tag_or_digest: str) -> str:
        """`repo:tag`, or `repo@sha256:...` for a digest."""
        sep = "@" if is_digest(tag_or_digest) else ":"
        return f"{self}{sep}{tag_or_digest}"


@dataclass(frozen=True)
class ImageReference:
    """`repository[:tag][@digest]`, parsed: the repository always carries its registry host."""

    repository: Repository
    tag: str | None = None
    digest: str | None = None
    # the repository as written (`ubuntu`, `host:5000/a/b`): what Docker's API and a `name@digest` take back
    name: str = field(default="", compare=False)

    def __str__(self) -> str:
        text = str(self.repository)
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def _is_host(component: str) -> bool:
    # Docker's own rule (splitDockerDomain). An IPv6 literal holds a colon, so brackets need no case:
    # `[ab]/x` is a (bad) path, not a host.
    return "." in component or ":" in component or component == "localhost"


def names_its_registry(ref: str) -> bool:
    """`ref` names its registry host (`host.domain/...`, `host:port/...`, `localhost/...`), as a published
    image's reference does; `team/name` and `name` are Docker Hub's by default, not named."""
    first, slash, _ = ref.partition("/")
    return bool(slash) and _is_host(first)


def parse_repository(repository: str, *, stack: str | None = None, key: str = "repository") -> Repository:
    """`127.0.0.1:5000/sglstack/sglang` -> Repository('127.0.0.1:5000', 'sglstack/sglang').

    A first component that looks like a host (a dot, a port, `localhost`) is the registry; otherwise the
    name is on Docker Hub, where one-component names live under `library/`.
    """
    first, sep, rest = repository.partition("/")
    if sep and _is_host(first):
        registry, path = first, rest
        if not DOMAIN_RE.fullmatch(registry):
            raise ConfigError(f"'{repository}' has an invalid registry host '{registry}'", stack=stack, key=key)
    else:
        registry, path = DOCKER_HUB, repository
        if "/" not in path:
            path = f"library/{path}"
    if not path or not all(PATH_COMPONENT_RE.fullmatch(c) for c in path.split("/")):
        raise ConfigError(
            f"'{repository}' is not a valid repository (lowercase path components like 'host:port/team/name')",
            stack=stack,
            key=key,
        )
    if len(repository) > NAME_TOTAL_MAX:
        raise ConfigError(f"'{repository[:40]}...' is longer than {NAME_TOTAL_MAX} characters", stack=stack, key=key)
    return Repository(registry=registry, path=path)


def parse_image_reference(ref: str, *, stack: str | None = None, key: str = "image") -> ImageReference:
    """`repository[:tag][@sha256:<64 hex>]` -> its parts; a bad reference is a ConfigError naming `key`."""
    name, at, digest = ref.partition("@")
    if at and not is_digest(digest):
        raise ConfigError(f"'{ref}' has an invalid digest (expected sha256:<64 hex>)", stack=stack, key=key)
    tag = None
    last = name.rsplit("/", 1)[-1]
    if ":" in last and not (last.startswith("[") and last.endswith("]")):
        name, _, tag = name.rpartition(":")
        if not TAG_RE.fullmatch(tag):
            raise ConfigError(
                f"'{ref}' has an invalid tag '{tag}' (letters, digits, '_', '.', '-'; at most 128)",
                stack=stack,
                key=key,
            )
    return ImageReference(parse_repository(name, stack=stack, key=key), tag=tag, digest=digest or None, name=name)


def pinned_digest(ref: str) -> str | None:
    """The digest `ref` pins (`repo[:tag]@sha256:...`); None for a tag, an image id or no reference at all."""
    try:
        return parse_image_reference(ref).digest
    except ConfigError:
        return None


def names_a_digest(ref: str) -> bool:
    """`ref` is a valid reference that pins a digest: what a tag cannot move under a running server."""
    return pinned_digest(ref) is not None


def registry_digest(ref: str, repo_digests: Iterable[str]) -> str | None:
    """The registry (manifest) digest of the local image `ref` names, given the engine's `RepoDigests` for
    it: the digest `ref` pins; else the one it was pushed to or pulled from its own repository as; else
    None (a local build, or one known only under another repository's name): never an image id."""
    wanted = None
    with contextlib.suppress(ConfigError):  # an image id or a short id: no repository to match
        wanted = parse_image_reference(ref)
    if wanted is None or wanted.digest:
        return wanted.digest if wanted else None
    for entry in repo_digests:
        with contextlib.suppress(ConfigError):
            known = parse_image_reference(entry)
            if known.digest and known.repository == wanted.repository:
                return known.digest
    return None


def image_name(digest: str | None, image_id: str | None) -> str | None:
    """How sglstack names an image that ran or was measured: its registry digest (what a registry serves again,
    where a tag can move), else its image id (a local build has no digest), else None."""
    return digest or image_id or None


def image_label(digest: str | None, image_id: str | None, ref: str | None = None) -> str | None:
    """How a person is shown an image, by `image_name`'s rule: its registry digest; else its image id, said to be
    one (`REF (image id ID)`, or `id ID` without a ref: a local build has no digest); else `ref`. A caller that
    shows them short passes them cut."""
    name = image_name(digest, image_id)
    if name is None or name == digest:
        return name or ref
    return f"{ref} (image id {name})" if ref else f"id {name}"


def is_digest(value: str) -> bool:
    """A registry digest, `sha256:<64 lowercase hex>` (not a config hash)."""
    return DIGEST_RE.fullmatch(value) is not None
