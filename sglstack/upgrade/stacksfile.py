"""The stacks file with one entry upgraded, as text: comments, order, quoting and layout kept (ruamel.yaml).

The matrix loader (PyYAML, with line numbers) stays the one reader that validates; this module only edits,
and the shell loads what it wrote with that loader before anything replaces the real file.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.tokens import CommentToken

from ..core.errors import ConfigError


def _yaml() -> YAML:
    y = YAML()  # round-trip mode
    y.preserve_quotes = True
    y.width = 4096  # never fold a long line the file has on one line
    y.indent(mapping=2, sequence=4, offset=2)  # stacks.yaml's own layout: `key:\n  - item`
    return y


def _value(new: Any, old: Any) -> Any:
    """`new` as a YAML node; a list takes the flow or block style of the list it replaces."""
    if isinstance(new, Mapping):
        out = CommentedMap()
        for k, v in new.items():
            out[k] = _value(v, None)
        if isinstance(old, CommentedMap) and old.fa.flow_style():
            out.fa.set_flow_style()
        return out
    if isinstance(new, list | tuple):
        seq = CommentedSeq(_value(v, None) for v in new)
        if isinstance(old, CommentedSeq) and old.fa.flow_style():
            seq.fa.set_flow_style()
        elif old is None and all(isinstance(v, str) for v in new):
            seq.fa.set_flow_style()  # a new list of names reads like the file's `[a, b]` lists
        return seq
    return new


def _merge(target: CommentedMap, edits: Mapping[str, Any]) -> None:
    for key, new in edits.items():
        old = target.get(key)
        if new is None:
            target.pop(key, None)
        elif isinstance(new, Mapping) and isinstance(old, CommentedMap):
            _merge(old, new)
        else:
            target[key] = _value(new, old)


def _rightmost(node: Any) -> tuple[list[Any], tuple[list[Any], int] | None]:
    """The block collections on the way to `node`'s last line, and the comment slot of that line's item
    (slot 2 of a mapping key, slot 0 of a list item): ruamel keeps the blank lines and comments that follow
    a collection in one of them (`ca.end` of a collection, or that slot)."""
    path: list[Any] = []
    while isinstance(node, CommentedMap | CommentedSeq) and node and not node.fa.flow_style():
        path.append(node)
        key, pos = (next(reversed(node)), 2) if isinstance(node, CommentedMap) else (len(node) - 1, 0)
        value = node[key]
        if not (isinstance(value, CommentedMap | CommentedSeq) and value and not value.fa.flow_style()):
            return path, (node.ca.items.setdefault(key, [None, None, None, None]), pos)
        node = value
    return path, None


def _take_tail(node: Any) -> str:
    """The blank lines and comment lines after `node`, taken off it (a comment on its last line stays)."""
    path, where = _rightmost(node)
    tail = ""
    if where and where[0][where[1]] is not None:
        slot, pos = where
        own, _, tail = slot[pos].value.partition("\n")  # `own`: a comment on the last line itself
        slot[pos] = CommentToken(own + "\n", slot[pos].start_mark, None) if own else None
    for collection in reversed(path):
        # these tokens keep a comment's indentation as a column, not in their text
        tail += "".join(" " * token.column * token.value.startswith("#") + token.value
                        for token in collection.ca.end or ())
        collection.ca.end = []
    return tail


def _put_tail(node: Any, tail: str) -> None:
    """`tail` (from `_take_tail`) after `node`'s last line, where new keys may have been added."""
    _, where = _rightmost(node)
    if not tail or where is None:
        return
    slot, pos = where
    own = slot[pos]  # a comment on that line keeps its column
    slot[pos] = CommentToken(own.value + tail, own.start_mark, None) if own else CommentToken("\n" + tail,
                                                                                               CommentMark(0), None)


def upgraded_text(text: str, *, file: str, stack: str, edits: Mapping[str, Any], as_name: str | None) -> str:
    """The stacks file's text with `stack` edited in place (`as_name` None) or a new entry `as_name` that
    inherits `stack` and carries the edits (a key set to None there is written null: the loader's merge
    then clears what the parent has)."""
    y = _yaml()
    try:
        data = y.load(text)
    except YAMLError as exc:
        raise ConfigError(f"cannot be edited: {str(exc).splitlines()[0]}", file=file) from None
    stacks = data.get("stacks") if isinstance(data, CommentedMap) else None
    if not isinstance(stacks, CommentedMap) or not isinstance(stacks.get(stack), CommentedMap):
        raise ConfigError("is not a mapping in the file's `stacks:`", file=file, stack=stack)
    if as_name is None:
        # keys the edit adds go before the blank line and comments that end the entry, not after them
        tail = _take_tail(stacks[stack])
        _merge(stacks[stack], edits)
        _put_tail(stacks[stack], tail)
    else:
        tail = _take_tail(stacks)  # what ends the last entry ends the new one, which comes after it
        entry = CommentedMap()
        if "description" in edits:
            entry["description"] = edits["description"]
        entry["inherits"] = stack
        for key, value in edits.items():
            if key != "description":
                entry[key] = _value(value, stacks[stack].get(key)) if value is not None else None
        stacks[as_name] = entry
        # a blank line before the new entry, like the ones between the file's stacks
        stacks.yaml_set_comment_before_after_key(as_name, before="\n")
        _put_tail(stacks, tail)
    out = io.StringIO()
    y.dump(data, out)
    return out.getvalue()


def read_text(path: Path, file: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot be read: {exc.__class__.__name__}", file=file) from None
