"""YAML loading that remembers where every key came from, and refuses duplicate keys.

PyYAML silently keeps the last of two equal keys; for a version matrix that hides a duplicated stack, so
duplicates are an error here. Line numbers let validation errors point at the offending line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

KeyPath = tuple[str | int, ...]


class _LineLoader(yaml.SafeLoader):
    pass


_SCALARS = yaml.SafeLoader("")


def load_yaml_with_lines(path: Path) -> tuple[Any, dict[KeyPath, int]]:
    """Parse `path`; return the data and a map from key path to 1-based line number."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    try:
        node = yaml.compose(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"invalid YAML: {problem}", file=str(path), line=mark.line + 1 if mark else None
        ) from None
    lines: dict[KeyPath, int] = {}
    if node is None:
        return {}, lines
    return _construct(node, (), lines, str(path)), lines


def _construct(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int], file: str) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ConfigError("YAML merge keys (<<) are not supported", file=file,
                                  line=key_node.start_mark.line + 1)
            if key in out:
                stack = path[1] if len(path) >= 2 and path[0] == "stacks" else None
                if path == ("stacks",):
                    raise ConfigError(f"duplicate stack '{key}'", file=file, stack=key,
                                      line=key_node.start_mark.line + 1)
                raise ConfigError("duplicate key", file=file, stack=stack,
                                  key=".".join(map(str, (*path, key))),
                                  line=key_node.start_mark.line + 1)
            lines[(*path, key)] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, (*path, key), lines, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*path, i), lines, file) for i, item in enumerate(node.value)]
    return _SCALARS.construct_object(node)
