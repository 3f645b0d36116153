"""YAML loading that remembers where every key came from, refuses duplicate keys, and bounds its work.

PyYAML silently keeps the last of two equal keys; for a version matrix that hides a duplicated stack, so
duplicates are an error here. Line numbers let validation errors point at the offending line.

The file is untrusted input for a command that should answer in well under a second, so the work is
bounded before it is done, and every way it can go wrong is one `ConfigError` naming the file:
- at most `MAX_FILE_BYTES` are read, from a regular file, decoded as UTF-8;
- libyaml parses it where PyYAML has it (about 30 times faster than PyYAML's pure-Python parser, which
  takes 10-20 s for a 1 MiB file here), else the pure-Python parser;
- values nest at most `MAX_DEPTH` levels (a scalar in the deepest collection is one), checked on the
  parser's events before anything is composed (both composers recurse once per level);
- an anchored node is constructed once and shared by its aliases, as `yaml.safe_load` does, and the
  document may expand to at most `MAX_VALUES` values counting every alias in full, so that an alias
  bomb (nine levels of `&a [*b, *b, ...]`, about 1 KB) is refused at once instead of filling memory in
  whatever walks the data next (merging, validation);
- an alias that refers to its own anchor (a cycle) is refused;
- mapping keys are plain scalars (`? [a, b]: c` is refused).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import ConfigError, first_line
from ..core.inputs import read_text

KeyPath = tuple[str | int, ...]

MAX_FILE_BYTES = 1024 * 1024  # 250 times today's stacks.yaml; PyYAML parses about 0.15 MB/s here
MAX_DEPTH = 64  # a stack nests 4 levels; Python's recursion limit would end near 300
MAX_VALUES = 1_000_000  # more than a MAX_FILE_BYTES file can hold without aliases (2 bytes a value)


_FAST_LOADER: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None) if yaml.__with_libyaml__ else None


class _DepthLimitedLoader(yaml.SafeLoader):
    """The pure-Python SafeLoader, whose composer refuses nesting past MAX_DEPTH as it goes."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(problem=f"nested more than {MAX_DEPTH} levels deep",
                                           problem_mark=self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml_with_lines(path: Path, name: str | None = None) -> tuple[Any, dict[KeyPath, int]]:
    """Parse `path`; return the data and a map from key path to 1-based line number.

    `name` is how errors call the file (default: the path as given).
    """
    file = name or str(path)
    text = _read_text(path, file)
    loader: yaml.SafeLoader | None = None
    try:
        if _FAST_LOADER is not None:
            _check_depth_fast(text, file)
            loader = _FAST_LOADER(text)
        else:
            loader = _DepthLimitedLoader(text)  # its reader refuses control characters right here
        node = loader.get_single_node()
        if node is None:
            return {}, {}
        _expanded_size(node, {}, set(), file)
        return _Builder(loader, file).build(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {_yaml_problem(exc)}", file=file, line=_yaml_line(exc, text)) from None
    finally:
        if loader is not None:
            loader.dispose()


def _read_text(path: Path, file: str) -> str:
    return read_text(path, limit=MAX_FILE_BYTES, what="YAML file", file=file)


def _check_depth_fast(text: str, file: str) -> None:
    """`_check_depth` with libyaml; where libyaml itself refuses the text, the pure-Python parser decides
    whether it was nesting, so the user reads our depth message whatever libyaml's release calls it
    (PyYAML 6.0.4's libyaml stops deep input with its own "exceeded maximum nesting depth")."""
    assert _FAST_LOADER is not None
    try:
        _check_depth(text, _FAST_LOADER, file)
    except yaml.YAMLError as fast_error:
        with contextlib.suppress(yaml.YAMLError):  # not depth: libyaml's own words stand
            _check_depth(text, yaml.SafeLoader, file)
        raise fast_error from None


def _check_depth(text: str, loader: type[yaml.SafeLoader], file: str) -> None:
    """Refuse nesting past MAX_DEPTH from the parser's events, stopping at the first level too deep
    (libyaml's composer recurses in C, where no recursion limit would stop it)."""
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        # A scalar or an alias is a level too, as the pure-Python composer counts it: else a scalar inside
        # MAX_DEPTH collections passed here and was refused later as nested "through YAML aliases".
        if isinstance(event, yaml.NodeEvent):
            if depth + 1 > MAX_DEPTH:
                mark = event.start_mark
                raise ConfigError(f"invalid YAML: nested more than {MAX_DEPTH} levels deep", file=file,
                                  line=mark.line + 1 if mark is not None else None)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character #x{exc.character:04x} is not allowed in YAML"
    problem, context = getattr(exc, "problem", None), getattr(exc, "context", None)
    if context and "duplicate anchor" in str(context):
        return "found a duplicate anchor"
    if problem:
        return f"{context} {problem}" if context and str(context).startswith("expected") else str(problem)
    return first_line(str(exc)) or "unreadable"


def _yaml_line(exc: yaml.YAMLError, text: str) -> int | None:
    if isinstance(exc, yaml.reader.ReaderError):
        return text.count("\n", 0, exc.position) + 1
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark is not None else None


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _expanded_size(node: yaml.Node, seen: dict[int, tuple[int, int]], open_nodes: set[int],
                   file: str) -> tuple[int, int]:
    """(values, depth) that `node` stands for with every alias expanded.

    Computed once per node, so linear in the number of nodes. Anchors come before their aliases in the
    file, so an alias is always to a node already measured and this recursion is as deep as the file's
    own nesting (at most MAX_DEPTH). Refuses cycles, and documents past MAX_VALUES or MAX_DEPTH once
    expanded: whatever walks the data next (merging, validation) recurses and copies that much.
    """
    key = id(node)
    if key in seen:
        return seen[key]
    if key in open_nodes:
        raise ConfigError("a YAML alias refers to its own anchor (a cycle)", file=file, line=_line(node))
    open_nodes.add(key)
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    total, depth = 1, 0
    for child in children:
        size, child_depth = _expanded_size(child, seen, open_nodes, file)
        total, depth = total + size, max(depth, child_depth)
    depth += 1
    open_nodes.discard(key)
    if total > MAX_VALUES:
        raise ConfigError(f"expands to more than {MAX_VALUES:,} values through YAML aliases "
                          "(an alias bomb?)", file=file, line=_line(node))
    if depth > MAX_DEPTH:
        raise ConfigError(f"nests more than {MAX_DEPTH} levels deep through YAML aliases", file=file,
                          line=_line(node))
    seen[key] = (total, depth)
    return seen[key]


class _Builder:
    """Nodes -> Python values. Each node is built once: aliases share the value of their anchor, and
    the line map records a key path only where a node is first reached, so neither grows past the
    number of nodes in the file."""

    def __init__(self, loader: yaml.SafeLoader, file: str) -> None:
        self.loader, self.file = loader, file
        self.lines: dict[KeyPath, int] = {}
        self.built: dict[int, Any] = {}

    def build(self, node: yaml.Node) -> tuple[Any, dict[KeyPath, int]]:
        return self.value(node, ()), self.lines

    def value(self, node: yaml.Node, path: KeyPath) -> Any:
        key = id(node)
        if key in self.built:
            return self.built[key]
        self.lines.setdefault(path, _line(node))
        out: Any
        if isinstance(node, yaml.MappingNode):
            out = self.mapping(node, path)
        elif isinstance(node, yaml.SequenceNode):
            out = [self.value(item, (*path, i)) for i, item in enumerate(node.value)]
        else:
            out = self.scalar(node, path)
        self.built[key] = out
        return out

    def mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ConfigError("YAML merge keys (<<) are not supported", file=self.file, line=_line(key_node))
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "sequence" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                raise ConfigError(f"a mapping key must be a plain value, not a {kind}", file=self.file,
                                  key=_dotted(path) or None, line=_line(key_node))
            key = str(key_node.value)
            if key in out:
                if path == ("stacks",):
                    raise ConfigError(f"duplicate stack '{key}'", file=self.file, stack=key, line=_line(key_node))
                stack = str(path[1]) if len(path) >= 2 and path[0] == "stacks" else None
                raise ConfigError("duplicate key", file=self.file, stack=stack, key=_dotted((*path, key)),
                                  line=_line(key_node))
            self.lines[(*path, key)] = _line(key_node)
            out[key] = self.value(value_node, (*path, key))
        return out

    def scalar(self, node: yaml.Node, path: KeyPath) -> Any:
        try:
            return self.loader.construct_object(node)
        except (yaml.YAMLError, ValueError, TypeError, AttributeError, OverflowError, LookupError) as exc:
            # An explicit tag that does not fit its text (`!!int abc`, `!!timestamp x`, `!custom`; `!!int ""`
            # and `!!bool x` end in PyYAML's constructors as IndexError and KeyError).
            problem = _yaml_problem(exc) if isinstance(exc, yaml.YAMLError) else str(exc)
            raise ConfigError(f"invalid value for tag {node.tag}: {problem}", file=self.file,
                              key=_dotted(path) or None, line=_line(node)) from None


def _dotted(path: KeyPath) -> str:
    return ".".join(map(str, path))
