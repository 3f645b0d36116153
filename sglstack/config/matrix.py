"""stacks.yaml -> validated, immutable `Stack` objects.

The matrix file has `defaults:` and `stacks:`; a stack may `inherits:` another. Values merge
defaults <- parent chain <- stack (mappings deep-merge, lists and scalars replace). Every piece must be
pinned exactly; every validation failure is one `ConfigError` naming file, stack, key path and line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import ConfigError, did_you_mean
from ..core.resources import DEFAULT_PATCHES_DIR
from .defaults import DEFAULT_STACKS_FILE as DEFAULT_STACKS_FILE  # re-exported: the library functions' default
from .defaults import default_stacks_file
from .fields import STACK_PLACEHOLDER, KeyedValueError
from .imageref import (
    TAG_MAX,
    name_problem,
    path_component_problem,
    tag_problem,
)
from .names import LOCAL_REPOSITORY, collisions
from .schema import Matrix, Stack
from .yamlsrc import MAX_VALUES, KeyPath, load_yaml_with_lines

# Every command validates every stack, and `stacks` prints them all (rich takes about 1 ms a row): a
# hand-kept matrix of more is a generated one gone wrong. Today's has 2.
MAX_STACKS = 1000


TOP_LEVEL_KEYS = {"defaults", "stacks"}


def known_patch_ids(patches_dir: Path = DEFAULT_PATCHES_DIR) -> set[str]:
    """A patch is a folder under patches/ holding a `patch.toml`."""
    if not patches_dir.is_dir():
        return set()
    return {p.parent.name for p in patches_dir.glob("*/patch.toml")}


def _deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class _ValueBudget:
    """Counts the values the stacks hold once merged, and refuses more than `limit` in all.

    The YAML loader bounds what the file expands to, but every stack is validated with the defaults
    and its parents merged in, so a long `defaults:` list times many one-line stacks would still be
    validated, and copied, once per stack. Sizes are remembered per object (merged stacks share their
    parts), so counting is linear in what the file holds.
    """

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.sizes: dict[int, tuple[object, int]] = {}  # id -> (the object, kept alive; its size)

    def size(self, value: object) -> int:
        hit = self.sizes.get(id(value))
        if hit is not None:
            return hit[1]
        n = 1
        if isinstance(value, Mapping):
            n += sum(1 + self.size(v) for v in value.values())
        elif isinstance(value, list | tuple):
            n += sum(self.size(v) for v in value)
        self.sizes[id(value)] = (value, n)
        return n

    def spend(self, stack: Mapping[str, Any], *, file: str, name: str) -> None:
        self.left -= self.size(stack)
        if self.left < 0:
            raise ConfigError(f"the stacks hold more than {MAX_VALUES:,} values once defaults and parents "
                              "are merged in", file=file, stack=name)


def stack_name_problem(name: str) -> str | None:
    """Why `name` cannot name a stack: it must be usable in the local image name `sglstack/<name>`."""
    problem = path_component_problem(name)
    if problem is None:
        problem = name_problem(f"{LOCAL_REPOSITORY}/{name}")
    if problem is None:
        return None
    return (f"stack name {problem}: it names the image {LOCAL_REPOSITORY}/{name} (Docker's reference "
            "grammar: lowercase letters and digits, separated by one '.', '_', '__' or dashes)")


def _publish_tag_problem(stack: Stack) -> tuple[str, str] | None:
    """(key, problem) for the first publish tag built from the stack's name that Docker would refuse.

    The tags are rendered as a release would render them, with the longest date and config-hash
    values; a template that does not render is left to publish's own template check.
    """
    values = {"sglang": re.sub(r"[^A-Za-z0-9_.-]", "-", stack.sglang.label), "stack": stack.name,
              "date": "20000101", "confighash8": "0" * 8, "confighash12": "0" * 12}
    publish = stack.publish
    templates = [("publish.candidate_tag", publish.candidate_tag), ("publish.immutable_tag", publish.immutable_tag),
                 *((f"publish.moving_tags[{i}]", t) for i, t in enumerate(publish.moving_tags))]
    for key, template in templates:
        if "{stack}" not in template:
            continue
        try:
            tag = template.format(**values)
        except (KeyError, IndexError, ValueError):
            continue
        # A valid stack name holds only tag characters, so its length is all it can get wrong; any
        # other fault of the template is reported by publish's template check.
        if len(tag) > TAG_MAX:
            return key, f"the tag '{tag}' built from the stack name {tag_problem(tag)}: use a shorter stack name"
    return None


def _line_for(lines: dict[KeyPath, int], candidates: list[KeyPath]) -> int | None:
    """The line of the first candidate path present; else of the nearest present ancestor."""
    for path in candidates:
        if path in lines:
            return lines[path]
    for path in candidates:
        while path:
            if path in lines:
                return lines[path]
            path = path[:-1]
    return None


def load_matrix(path: Path | str | None = None, patches_dir: Path | None = None) -> Matrix:
    """Read, merge and validate the matrix (by default `default_stacks_file()`); raise `ConfigError` on the
    first problem found."""
    path = Path(default_stacks_file() if path is None else path)
    file = _display(path)
    patches_dir = patches_dir if patches_dir is not None else DEFAULT_PATCHES_DIR
    data, lines = load_yaml_with_lines(path, file)
    defaults, raw_stacks = _top_level(data, file, lines)
    patch_ids = known_patch_ids(patches_dir)
    merged_stacks = _Inheritance(defaults, raw_stacks, file, lines)
    budget = _ValueBudget(MAX_VALUES)
    stacks: dict[str, Stack] = {}
    for name in raw_stacks:
        problem = stack_name_problem(name)
        if problem:
            raise ConfigError(problem, file=file, stack=name, line=lines.get(("stacks", name)))
        merged = merged_stacks.resolve(name, (name,))
        budget.spend(merged, file=file, name=name)
        stack = _validated(name, merged, file, lines)
        tag_problem_found = _publish_tag_problem(stack)
        if tag_problem_found:
            key, msg = tag_problem_found
            raise ConfigError(msg, file=file, stack=name, key=key, line=lines.get(("stacks", name)))
        for i, pid in enumerate(stack.patches):
            if pid not in patch_ids:
                raise ConfigError(f"unknown patch id '{pid}' (no {_display(patches_dir)}/{pid}/patch.toml)"
                                  f"{did_you_mean(pid, patch_ids)}",
                                  file=file, stack=name, key=f"patches[{i}]",
                                  line=_line_for(lines, [("stacks", name, "patches", i),
                                                         ("defaults", "patches", i)]))
        stacks[name] = stack
    _check_cache_refs(stacks, file, lines)
    _check_name_collisions(stacks, file, lines)
    return Matrix(file=file, stacks=stacks)


def descendants(matrix: Matrix, name: str) -> list[str]:
    """The stacks that inherit `name`, directly or through a parent (in the file's order): a change to
    `name`'s own entry changes each of them too."""
    out = []
    for other, stack in matrix.stacks.items():
        parent = stack.inherits
        while parent is not None and parent != name:
            parent = matrix.stacks[parent].inherits  # the loader refused unknown parents and cycles
        if parent == name:
            out.append(other)
    return out


def _top_level(data: Any, file: str, lines: dict[KeyPath, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(defaults, stacks) of the file, each checked for its shape."""
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping with 'defaults' and 'stacks'", file=file)
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError("unknown top-level key (expected 'defaults', 'stacks')", file=file, key=key,
                              line=lines.get((key,)))
    defaults = data.get("defaults") or {}
    raw_stacks = data.get("stacks")
    if not isinstance(defaults, dict):
        raise ConfigError("must be a mapping", file=file, key="defaults", line=lines.get(("defaults",)))
    if not isinstance(raw_stacks, dict) or not raw_stacks:
        raise ConfigError("must be a non-empty mapping of stack name to settings", file=file, key="stacks",
                          line=lines.get(("stacks",)))
    if len(raw_stacks) > MAX_STACKS:
        raise ConfigError(f"has {len(raw_stacks):,} stacks, over the limit of {MAX_STACKS:,} for one matrix",
                          file=file, key="stacks", line=lines.get(("stacks",)))
    return defaults, raw_stacks


class _Inheritance:
    """Each stack's settings merged as defaults <- parent chain <- stack, remembered once merged."""

    def __init__(self, defaults: dict[str, Any], raw_stacks: dict[str, Any], file: str,
                 lines: dict[KeyPath, int]) -> None:
        self.defaults, self.raw_stacks, self.file, self.lines = defaults, raw_stacks, file, lines
        self.resolved: dict[str, dict[str, Any]] = {}

    def resolve(self, name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in self.resolved:
            return self.resolved[name]
        file, lines = self.file, self.lines
        raw = self.raw_stacks[name]
        if not isinstance(raw, dict):
            raise ConfigError("must be a mapping", file=file, stack=name, line=lines.get(("stacks", name)))
        parent = raw.get("inherits")
        if parent is not None:
            if not isinstance(parent, str):
                raise ConfigError("must be the name of another stack", file=file, stack=name, key="inherits",
                                  line=lines.get(("stacks", name, "inherits")))
            if parent not in self.raw_stacks:
                raise ConfigError(f"unknown parent stack '{parent}'{did_you_mean(parent, self.raw_stacks)}",
                                  file=file, stack=name, key="inherits",
                                  line=lines.get(("stacks", name, "inherits")))
            if parent in chain:
                cycle = " -> ".join((*chain, parent))
                raise ConfigError(f"inheritance cycle {cycle}", file=file, stack=name, key="inherits",
                                  line=lines.get(("stacks", name, "inherits")))
            base = self.resolve(parent, (*chain, parent))
            base = {k: v for k, v in base.items() if k not in ("description", "inherits")}
        else:
            base = dict(self.defaults)
        merged = _deep_merge(base, raw)
        self.resolved[name] = merged
        return merged


def _validated(name: str, merged: dict[str, Any], file: str, lines: dict[KeyPath, int]) -> Stack:
    """The `Stack`, or a `ConfigError` naming the key (and its line) pydantic refused first."""
    try:
        return Stack.model_validate({**merged, "name": name})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
        if loc[-1:] == ("[key]",):  # a mapping's key is wrong (the message names it): the mapping's key path
            loc = loc[:-2]
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, KeyedValueError):
            loc = (*loc, *cause.key)
        key = ".".join(map(str, loc)) or None
        msg = _pydantic_message(err)
        line = _line_for(lines, [("stacks", name, *loc), ("defaults", *loc)])
        raise ConfigError(msg, file=file, stack=name, key=key, line=line) from None


def _check_name_collisions(stacks: Mapping[str, Stack], file: str, lines: dict[KeyPath, int]) -> None:
    """Two stacks that Compose or Kubernetes would call the same would deploy over, and remove, each other."""
    for name, other, what, shared in collisions(stacks):
        raise ConfigError(f"stack name '{name}' becomes the {what} '{shared}', as stack '{other}' does: one would "
                          "deploy over or remove the other; rename one of them", file=file, stack=name,
                          line=lines.get(("stacks", name)))


def _check_cache_refs(stacks: Mapping[str, Stack], file: str, lines: dict[KeyPath, int]) -> None:
    """Two stacks exporting one cache reference would overwrite each other's cache on every build."""
    owner: dict[str, str] = {}
    for name, stack in stacks.items():
        ref = stack.cache_ref
        if ref is None:
            continue
        if ref in owner:
            raise ConfigError(f"cache reference '{ref}' is also stack '{owner[ref]}''s: each build would overwrite "
                              f"the other's cache (put '{STACK_PLACEHOLDER}' in the reference)",
                              file=file, stack=name, key="cache.registry",
                              line=_line_for(lines, [("stacks", name, "cache", "registry"),
                                                     ("defaults", "cache", "registry")]))
        owner[ref] = name


def _pydantic_message(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    msg = str(err.get("msg", "invalid value"))
    return msg.removeprefix("Value error, ")


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
