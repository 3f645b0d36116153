"""Tag policy, as pure functions: which tags a release of a stack gets (references: `config.imageref`).

Templates come from `Stack.publish` and may use {sglang} {stack} {date} {confighash8} {confighash12}.
The immutable tag carries the config hash, so one config never maps to two different digests; the moving
tags (`<sglang>-<stack>`, `<stack>`) are re-pointed by each release and by a rollback.
"""

from __future__ import annotations

import datetime as dt
import re
import string
from dataclasses import dataclass

from ..config.imageref import parse_repository
from ..config.schema import Stack
from ..config.settings import PublishSettings
from ..config.tagtemplates import PLACEHOLDERS, render_tag
from ..config.tagtemplates import TAG_CHARS as _TAG_CHARS
from ..config.tagtemplates import tag_value as _tag_value
from ..config.tagtemplates import template_fields as _fields
from ..core.errors import ConfigError

__all__ = ["PLACEHOLDERS", "ReleaseTags", "release_tags", "render_tag", "tag_values", "validate_template"]

_CONFIG_HASH = re.compile(r"[0-9a-f]{12,}")


@dataclass(frozen=True)
class ReleaseTags:
    """The tags of one release: the candidate (pushed before the smoke) and the release tags."""

    candidate: str
    immutable: str
    moving: tuple[str, ...]

    @property
    def release(self) -> tuple[str, ...]:
        return (self.immutable, *self.moving)


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


def release_tag_pattern(stack: Stack) -> re.Pattern[str]:
    """Matches any release tag of `stack` (its immutable tag of any config and date, its moving tags): tags only
    `publish` moves, all together, recorded (never a candidate's tag)."""
    wild = {"sglang": re.escape(_tag_value(stack.sglang.label)), "stack": re.escape(_tag_value(stack.name)),
            "date": r"\d{8}", "confighash8": r"[0-9a-f]{8}", "confighash12": r"[0-9a-f]{12}"}
    alternatives = []
    for template in (stack.publish.immutable_tag, *stack.publish.moving_tags):
        parts = []
        for text, name, _, _ in string.Formatter().parse(template):
            parts.append(re.escape(text))
            if name is not None:
                parts.append(wild[name])
        alternatives.append("".join(parts))
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


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
