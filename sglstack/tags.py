"""Tag policy, as pure functions: which tags a release of a stack gets, and the one image-reference parser.

Templates come from `Stack.publish` and may use {sglang} {stack} {date} {confighash8} {confighash12}.
The immutable tag carries the config hash, so one config never maps to two different digests; the moving
tags (`<sglang>-<stack>`, `<stack>`) are re-pointed by each release and by a rollback.
"""

from __future__ import annotations

import datetime as dt
import re
import string
from dataclasses import dataclass

from .dockerref import DOMAIN_RE, PATH_COMPONENT_RE, TAG_RE
from .errors import ConfigError
from .matrix import PublishSettings, Stack

PLACEHOLDERS = ("sglang", "stack", "date", "confighash8", "confighash12")
_TAG_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_PATH_COMPONENT = PATH_COMPONENT_RE
_CONFIG_HASH = re.compile(r"[0-9a-f]{12,}")
_DOMAIN = DOMAIN_RE
NAME_MAX = 255
# A registry digest: what `is_digest` accepts and every record, reference and API call uses.
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
DOCKER_HUB = "docker.io"


@dataclass(frozen=True)
class ReleaseTags:
    """The tags of one release: the candidate (pushed before the smoke) and the release tags."""

    candidate: str
    immutable: str
    moving: tuple[str, ...]

    @property
    def release(self) -> tuple[str, ...]:
        return (self.immutable, *self.moving)


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

    def __str__(self) -> str:
        text = str(self.repository)
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def validate_template(template: str, *, stack: str | None = None, key: str, require_hash: bool = False) -> None:
    """Refuse unknown placeholders, format specs, and literal text that cannot be in a docker tag."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"tag template '{template}' is malformed: {exc}", stack=stack, key=key) from None
    literal = ""
    for text, name, spec, conversion in parsed:
        literal += text
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise ConfigError(
                f"tag template '{template}' has unknown placeholder '{{{name}}}' (known: {known})", stack=stack, key=key
            )
        if spec or conversion:
            raise ConfigError(
                f"tag template '{template}' uses a format spec; write plain '{{{name}}}'", stack=stack, key=key
            )
    if not template:
        raise ConfigError("tag template is empty", stack=stack, key=key)
    if _TAG_CHARS.search(literal):
        raise ConfigError(
            f"tag template '{template}' has characters a docker tag cannot hold "
            "(allowed: letters, digits, '_', '.', '-')",
            stack=stack,
            key=key,
        )
    if require_hash and not {"confighash8", "confighash12"} & set(_fields(template)):
        raise ConfigError(
            f"tag template '{template}' must contain {{confighash8}} or {{confighash12}}: "
            "otherwise two configs could claim the same tag",
            stack=stack,
            key=key,
        )


def validate_publish_settings(settings: PublishSettings, *, stack: str | None = None) -> None:
    parse_repository(settings.repository, stack=stack, key="publish.repository")
    validate_template(settings.immutable_tag, stack=stack, key="publish.immutable_tag", require_hash=True)
    validate_template(settings.candidate_tag, stack=stack, key="publish.candidate_tag", require_hash=True)
    for i, template in enumerate(settings.moving_tags):
        validate_template(template, stack=stack, key=f"publish.moving_tags[{i}]")
    templates = [settings.candidate_tag, settings.immutable_tag, *settings.moving_tags]
    if len(set(templates)) != len(templates):
        raise ConfigError("candidate, immutable and moving tag templates must all differ", stack=stack, key="publish")


def _tag_value(value: str) -> str:
    return _TAG_CHARS.sub("-", value)


def render_tag(template: str, values: dict[str, str], *, stack: str | None = None, key: str) -> str:
    tag = template.format(**{k: _tag_value(v) for k, v in values.items()})
    if not TAG_RE.fullmatch(tag):
        raise ConfigError(
            f"tag '{tag}' from template '{template}' is not a valid docker tag "
            "(at most 128 characters, not starting with '.' or '-')",
            stack=stack,
            key=key,
        )
    return tag


def tag_values(stack: Stack, config_hash: str, date: dt.date) -> dict[str, str]:
    if not _CONFIG_HASH.fullmatch(config_hash):
        raise ConfigError(
            f"config hash '{config_hash}' is not a hex digest of at least 12 characters", stack=stack.name
        )
    return {
        "sglang": stack.sglang.label,
        "stack": stack.name,
        "date": date.strftime("%Y%m%d"),
        "confighash8": config_hash[:8],
        "confighash12": config_hash[:12],
    }


def release_tags(stack: Stack, config_hash: str, date: dt.date) -> ReleaseTags:
    """The candidate, immutable and moving tags for `stack` built from `config_hash`, released on `date`."""
    settings = stack.publish
    validate_publish_settings(settings, stack=stack.name)
    values = tag_values(stack, config_hash, date)
    return ReleaseTags(
        candidate=render_tag(settings.candidate_tag, values, stack=stack.name, key="publish.candidate_tag"),
        immutable=render_tag(settings.immutable_tag, values, stack=stack.name, key="publish.immutable_tag"),
        moving=tuple(
            render_tag(t, values, stack=stack.name, key=f"publish.moving_tags[{i}]")
            for i, t in enumerate(settings.moving_tags)
        ),
    )


def immutable_tag_pattern(stack: Stack, config_hash: str) -> re.Pattern[str]:
    """Matches this config's immutable tag on any date: a config released once is released."""
    values = tag_values(stack, config_hash, dt.date(2000, 1, 1))
    values = {k: re.escape(_tag_value(v)) for k, v in values.items()}
    values["date"] = r"\d{8}"
    parts = []
    for text, name, _, _ in string.Formatter().parse(stack.publish.immutable_tag):
        parts.append(re.escape(text))
        if name is not None:
            parts.append(values[name])
    return re.compile("".join(parts))


def candidate_tag_pattern(settings: PublishSettings) -> re.Pattern[str]:
    """Matches the candidate tag of any stack and config (what `registry.cleanup` may remove)."""
    wild = {
        "sglang": r"[A-Za-z0-9_.-]+",
        "stack": r"[a-z0-9._-]+",
        "date": r"\d{8}",
        "confighash8": r"[0-9a-f]{8}",
        "confighash12": r"[0-9a-f]{12}",
    }
    parts = []
    for text, name, _, _ in string.Formatter().parse(settings.candidate_tag):
        parts.append(re.escape(text))
        if name is not None:
            parts.append(wild[name])
    return re.compile("".join(parts))


# ---- references ------------------------------------------------------------------------------------


def _is_host(component: str) -> bool:
    # Docker's own rule (splitDockerDomain). An IPv6 literal holds a colon, so brackets need no case:
    # `[ab]/x` is a (bad) path, not a host.
    return "." in component or ":" in component or component == "localhost"


def parse_repository(repository: str, *, stack: str | None = None, key: str = "repository") -> Repository:
    """`127.0.0.1:5000/sglstack/sglang` -> Repository('127.0.0.1:5000', 'sglstack/sglang').

    A first component that looks like a host (a dot, a port, `localhost`) is the registry; otherwise the
    name is on Docker Hub, where one-component names live under `library/`.
    """
    first, sep, rest = repository.partition("/")
    if sep and _is_host(first):
        registry, path = first, rest
        if not _DOMAIN.fullmatch(registry):
            raise ConfigError(f"'{repository}' has an invalid registry host '{registry}'", stack=stack, key=key)
    else:
        registry, path = DOCKER_HUB, repository
        if "/" not in path:
            path = f"library/{path}"
    if not path or not all(_PATH_COMPONENT.fullmatch(c) for c in path.split("/")):
        raise ConfigError(
            f"'{repository}' is not a valid repository (lowercase path components like 'host:port/team/name')",
            stack=stack,
            key=key,
        )
    if len(repository) > NAME_MAX:
        raise ConfigError(f"'{repository[:40]}...' is longer than {NAME_MAX} characters", stack=stack, key=key)
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
    return ImageReference(parse_repository(name, stack=stack, key=key), tag=tag, digest=digest or None)


def is_digest(value: str) -> bool:
    """A registry digest, `sha256:<64 lowercase hex>` (not a config hash)."""
    return DIGEST_RE.fullmatch(value) is not None
