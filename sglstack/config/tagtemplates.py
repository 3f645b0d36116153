"""Tag templates (`publish.*_tag`, `publish.moving_tags`) filled in: one home for publish, which pushes the
tags, and render, whose compose file names the moving tag before any deploy pins a digest."""

from __future__ import annotations

import re
import string

from ..core.errors import ConfigError
from .imageref import TAG_RE

PLACEHOLDERS = ("sglang", "stack", "date", "confighash8", "confighash12")
TAG_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
# What a tag filled in from these alone names is the same for every release of one stack and SGLang release.
RELEASE_INDEPENDENT = frozenset({"sglang", "stack"})


def template_fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def tag_value(value: str) -> str:
    return TAG_CHARS.sub("-", value)


def render_tag(template: str, values: dict[str, str], *, stack: str | None = None, key: str) -> str:
    tag = template.format(**{k: tag_value(v) for k, v in values.items()})
    if not TAG_RE.fullmatch(tag):
        raise ConfigError(
            f"tag '{tag}' from template '{template}' is not a valid docker tag "
            "(at most 128 characters, not starting with '.' or '-')",
            stack=stack,
            key=key,
        )
    return tag
