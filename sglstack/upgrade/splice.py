"""The edited stacks file, with the original's own lines wherever the edit changed nothing.

ruamel.yaml dumps the whole document it loaded, in its own layout: a flow list written over two lines
comes back on one, `[ "9.0",   "10.0" ]` loses its spaces, a block list moves its dashes, an unused anchor
goes. So an upgrade of one stack would rewrite lines of every other stack in the reviewer's diff. Here the
dumped text is cut, as the original is, into one region per mapping key (from its line to the next key's
line), recursively through block mappings; a region whose YAML events (values, tags, anchors, aliases;
never layout, nor an anchor nothing uses) are the same on both sides is taken from the original, byte for
byte. The comment and blank lines that end a region come from the dump: ruamel moves them when a key is
added after them.
"""

from __future__ import annotations

import itertools
from typing import Any

import yaml
from ruamel.yaml.comments import CommentedMap


def spliced(original: str, data: CommentedMap, dumped: str, reloaded: CommentedMap) -> str:
    """`dumped` (the dump of the edited `reloaded`, whose original text is `original`, loaded as `data`)
    with every unchanged region in `original`'s own bytes. Both texts use "\\n" line ends."""
    old, new = original.splitlines(keepends=True), dumped.splitlines(keepends=True)
    if not (_block(data) and _block(reloaded)):
        return dumped
    head = old[:_line(data, next(iter(data)))]
    anchors = frozenset(str(event.anchor) for event in yaml.parse(dumped)  # type: ignore[attr-defined]
                        if getattr(event, "anchor", None) and not isinstance(event, yaml.AliasEvent))
    return "".join(head + _splice(old, data, len(old), new, reloaded, len(new), anchors))


def _splice(old: list[str], o: CommentedMap, o_end: int, new: list[str], n: CommentedMap, n_end: int,
            anchors: frozenset[str]) -> list[str]:
    o_regions, n_regions = _regions(o, o_end), _regions(n, n_end)
    out: list[str] = []
    for key, (start, end) in n_regions.items():
        body = _body_end(new, start, end)
        if key in o_regions:
            o_start, o_end_ = o_regions[key]
            o_body = _body_end(old, o_start, o_end_)
            if _same(old[o_start:o_body], new[start:body], anchors):
                out += old[o_start:o_body]
            elif _block(o[key]) and _block(n[key]) and _line(n[key], next(iter(n[key]))) > start \
                    and _line(o[key], next(iter(o[key]))) > o_start:
                first = _line(n[key], next(iter(n[key])))
                out += new[start:first]  # the key's own line: an anchor on it may have gone
                out += _splice(old, o[key], o_body, new, n[key], body, anchors)
            else:
                out += new[start:body]
        else:
            out += new[start:body]
        out += new[body:end]
    return out


def _block(node: Any) -> bool:
    """A non-empty block mapping whose keys each start a line of their own (so each is a region)."""
    if not isinstance(node, CommentedMap) or not node or node.fa.flow_style():
        return False
    lines = [_line(node, key) for key in node]
    return all(a < b for a, b in itertools.pairwise(lines))


def _line(node: CommentedMap, key: Any) -> int:
    return node.lc.key(key)[0]


def _regions(node: CommentedMap, end: int) -> dict[Any, tuple[int, int]]:
    starts = [_line(node, key) for key in node]
    return {key: (start, stop) for key, start, stop in zip(node, starts, [*starts[1:], end], strict=True)}


def _body_end(lines: list[str], start: int, end: int) -> int:
    """Where the region's trailing comment and blank lines begin."""
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def _same(a: list[str], b: list[str], anchors: frozenset[str]) -> bool:
    events = _events(a, anchors)
    return events is not None and events == _events(b, anchors)


def _events(lines: list[str], anchors: frozenset[str]) -> list[tuple[Any, ...]] | None:
    """What the lines say in YAML, without their layout (None: not a fragment that parses on its own)."""
    out: list[tuple[Any, ...]] = []
    try:
        for event in yaml.parse("".join(lines)):
            # ruamel drops an anchor nothing refers to: one the dump has nowhere is not a difference (kept
            # where the original has it, it is still valid YAML: no second one, no alias)
            anchor = getattr(event, "anchor", None)
            if not isinstance(event, yaml.AliasEvent) and anchor not in anchors:
                anchor = None
            out.append((type(event).__name__, anchor, getattr(event, "tag", None), getattr(event, "value", None),
                        getattr(event, "implicit", None)))
    except yaml.YAMLError:
        return None
    return out
