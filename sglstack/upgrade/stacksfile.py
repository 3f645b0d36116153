"""The stacks file with one entry upgraded, as text: comments, order, quoting and layout kept (ruamel.yaml).

The matrix loader (PyYAML, with line numbers) stays the one reader that validates; this module only edits,
and the shell loads what it wrote with that loader before anything replaces the real file.

Only the named entry changes. A YAML anchor makes one node the value of several places (`sglang: &s ...`
in one stack, `sglang: *s` in another, or a whole entry `b: *a`): editing that node in place would move
every stack that shares it. So each shared node on the way to an edit is first replaced, in the named
entry only, by a copy of it without its anchor; the other places keep the original node, and
`Edited.notes` names them for the report. (Merge keys, `<<: *x`, never get here: the loader refuses them.)
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.anchor import Anchor
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.tokens import CommentToken

from ..core.errors import ConfigError, first_line, one_line
from .splice import spliced


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


Unshare = Callable[[Any, Any], Any]
Aliased = Callable[[Any, Any], bool]


def _merge(target: CommentedMap, edits: Mapping[str, Any], own: Unshare) -> None:
    for key, new in edits.items():
        # a shared node is copied before it is edited, and named in the notes even where it is only replaced
        old = own(target, key) if key in target else None
        if new is None:
            target.pop(key, None)
        elif isinstance(new, Mapping) and isinstance(old, CommentedMap):
            _merge(old, new, own)
        else:
            target[key] = _value(new, old)


def _children(node: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, CommentedMap):
        yield from node.items()
    elif isinstance(node, CommentedSeq):
        yield from enumerate(node)


def _reachable(node: Any, seen: set[int]) -> set[int]:
    """The ids of the collections under `node` (itself included), each alias followed once."""
    if isinstance(node, CommentedMap | CommentedSeq) and id(node) not in seen:
        seen.add(id(node))
        for _, child in _children(node):
            _reachable(child, seen)
    return seen


class _Sharing:
    """Where each collection of the document stands: how many places name it, and the first of them (in
    the file's order: where its anchor is written; every later place is an alias)."""

    def __init__(self, root: Any) -> None:
        self.places: dict[int, int] = {}
        self.first: dict[int, tuple[int, Any]] = {}
        self.alive: list[Any] = []  # by id: no node the edit drops may free its id for a new one
        self._walk(root, None, None)

    def _walk(self, node: Any, parent: Any, key: Any) -> None:
        if not isinstance(node, CommentedMap | CommentedSeq):
            return
        self.places[id(node)] = self.places.get(id(node), 0) + 1
        if id(node) in self.first:
            return
        self.first[id(node)] = (id(parent), key)
        self.alive.append(node)
        for k, child in _children(node):
            self._walk(child, node, k)

    def shared(self, node: Any) -> bool:
        return self.places.get(id(node), 0) > 1

    def aliased(self, parent: Any, key: Any) -> bool:
        """Whether `parent[key]` is an alias there (its node is written in full at another place)."""
        first = self.first.get(id(parent[key]))
        return first is not None and first != (id(parent), key)


def _detached(node: Any) -> Any:
    """A deep copy of `node` with no anchor anywhere in it, on a collection or a scalar (two nodes may not
    carry one anchor's name; the originals keep theirs for the aliases elsewhere)."""
    out = copy.deepcopy(node)
    for collection in _collections(out):
        setattr(collection, Anchor.attrib, Anchor())
        for _, child in _children(collection):
            if getattr(child, Anchor.attrib, None) is not None and not isinstance(child, CommentedMap | CommentedSeq):
                setattr(child, Anchor.attrib, Anchor())  # a new object too: the original keeps its anchor
    return out


def _collections(node: Any) -> Iterator[Any]:
    if isinstance(node, CommentedMap | CommentedSeq):
        yield node
        for _, child in _children(node):
            yield from _collections(child)


def _rightmost(node: Any, aliased: Aliased = lambda _p, _k: False) -> tuple[list[Any], tuple[list[Any], int] | None]:
    """The block collections on the way to `node`'s last line, and the comment slot of that line's item
    (slot 2 of a mapping key, slot 0 of a list item): ruamel keeps the blank lines and comments that follow
    a collection in one of them (`ca.end` of a collection, or that slot). An alias is a last line of its
    own: what follows the collection it names belongs to the place where that one is written."""
    path: list[Any] = []
    while isinstance(node, CommentedMap | CommentedSeq) and node and not node.fa.flow_style():
        path.append(node)
        key, pos = (next(reversed(node)), 2) if isinstance(node, CommentedMap) else (len(node) - 1, 0)
        value = node[key]
        if not (isinstance(value, CommentedMap | CommentedSeq) and value and not value.fa.flow_style()) \
                or aliased(node, key):
            return path, (node.ca.items.setdefault(key, [None, None, None, None]), pos)
        node = value
    return path, None


def _take_tail(node: Any, aliased: Aliased = lambda _p, _k: False) -> str:
    """The blank lines and comment lines after `node`, taken off it (a comment on its last line stays)."""
    path, where = _rightmost(node, aliased)
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


def _put_tail(node: Any, tail: str, aliased: Aliased = lambda _p, _k: False) -> None:
    """`tail` (from `_take_tail`) after `node`'s last line, where new keys may have been added."""
    _, where = _rightmost(node, aliased)
    if not tail or where is None:
        return
    slot, pos = where
    own = slot[pos]  # a comment on that line keeps its column
    slot[pos] = CommentToken(own.value + tail, own.start_mark, None) if own else CommentToken("\n" + tail,
                                                                                               CommentMark(0), None)


@dataclass(frozen=True)
class Edited:
    text: str
    notes: tuple[str, ...]  # each YAML anchor the edit broke, and who keeps the old values


def upgraded_text(text: str, *, file: str, stack: str, edits: Mapping[str, Any], as_name: str | None) -> str:
    """`edited(...).text`."""
    return edited(text, file=file, stack=stack, edits=edits, as_name=as_name).text


def edited(text: str, *, file: str, stack: str, edits: Mapping[str, Any], as_name: str | None) -> Edited:
    """The stacks file's text with `stack` edited in place (`as_name` None) or a new entry `as_name` that
    inherits `stack` and carries the edits (a key set to None there is written null: the loader's merge
    then clears what the parent has). Nothing outside that entry changes (see the module's doc)."""
    y = _yaml()
    # The file's own byte-order mark and line endings come back as they were: the editor writes "\n" and
    # no mark, which would change every line of the file in its diff, not only the entry's.
    mark = "\ufeff" if text.startswith("\ufeff") else ""
    newline = "\r\n" if "\r\n" in text.split("\n", 1)[0] + "\n" else "\n"
    data = _load(y, text.removeprefix(mark), file)
    stacks = data.get("stacks") if isinstance(data, CommentedMap) else None
    if not isinstance(stacks, CommentedMap) or not isinstance(stacks.get(stack), CommentedMap):
        raise ConfigError("is not a mapping in the file's `stacks:`", file=file, stack=stack)
    sharing = _Sharing(data)
    notes: list[str] = []
    if as_name is None:
        own = _owner(data, stacks, stack, sharing, notes)
        # keys the edit adds go before the blank line and comments that end the entry, not after them
        tail = "" if sharing.aliased(stacks, stack) else _take_tail(stacks[stack], sharing.aliased)
        _merge(own(stacks, stack), edits, own)
        _put_tail(stacks[stack], tail, sharing.aliased)
    else:
        tail = _take_tail(stacks, sharing.aliased)  # what ends the last entry ends the new one, which comes after it
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
        _put_tail(stacks, tail, sharing.aliased)
    out = io.StringIO()
    y.dump(data, out)
    # the lines the edit did not change keep the file's own bytes, not ruamel's layout of them
    original = text.removeprefix(mark).replace("\r\n", "\n")
    kept = spliced(original, _load(_yaml(), original, file), out.getvalue(), _load(_yaml(), out.getvalue(), file))
    return Edited(mark + kept.replace("\n", newline), tuple(notes))


def check_editable(text: str, *, file: str) -> None:
    """Refuse, before any work, a file the round-trip editor cannot read though the matrix loader can."""
    _load(_yaml(), text.removeprefix("\ufeff"), file)


def _load(y: YAML, text: str, file: str) -> Any:
    try:
        return y.load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(one_line(f"cannot be edited by invoke upgrade ({first_line(str(exc))}): write that "
                                   "line as plain block YAML (spaces, no tabs)"),
                          file=file, line=mark.line + 1 if mark is not None else None) from None


def _owner(data: CommentedMap, stacks: CommentedMap, stack: str, sharing: _Sharing, notes: list[str]) -> Unshare:
    """`own(parent, key)`: `parent[key]`, made the named entry's own first if other places share it."""
    holders = {name: _reachable(entry, set()) for name, entry in stacks.items() if name != stack}
    if isinstance(data.get("defaults"), CommentedMap | CommentedSeq):
        holders = {"defaults": _reachable(data["defaults"], set()), **holders}
    where: dict[int, str] = {id(stacks[stack]): "the whole entry"}

    def own(parent: Any, key: Any) -> Any:
        node = parent[key]
        if not sharing.shared(node):
            return node
        stacks_ = [name for name, ids in holders.items() if name != "defaults" and id(node) in ids]
        others = (["`defaults`"] if id(node) in holders.get("defaults", set()) else []) + (
            [f"stack{'s' * (len(stacks_) > 1)} " + ", ".join(f"'{n}'" for n in stacks_)] if stacks_ else [])
        mine = _detached(node)
        if sharing.aliased(parent, key):
            _take_tail(mine)  # what followed the anchored original ends another entry, not this one
        parent[key] = mine
        what = where.get(id(node), f"`{key}`")
        if others:
            who = " and ".join(others)
            notes.append(f"stack '{stack}': {what} was shared with {who} through a YAML anchor: the upgrade writes "
                         f"'{stack}''s own copy, and {who} keep{'s' * (len(others) == 1 and len(stacks_) < 2)} "
                         "the old values")
        return mine

    return own


def read_text(path: Path, file: str) -> str:
    try:
        return path.read_bytes().decode("utf-8")  # its line endings as they are (`edited` writes them back)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot be read: {exc.__class__.__name__}", file=file) from None
