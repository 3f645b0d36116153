"""What a release renames that the stack sets: its serving flags and its `SGLANG_*` environment variables,
derived from the two releases' own sources (their wheels, no GPU, nothing installed).

- Environment: the names a release reads are the `SGLANG_*` names in its Python source (`envs.SGLANG_X`,
  `os.environ["SGLANG_X"]`, the `Envs` class of `srt/environ.py`); its own deprecation table says what it
  renamed (`"OLD": _DeprecatedEnv(replacement="NEW", transform=_invert_bool)`, `EnvBoolWithAlias(...,
  deprecated_name="OLD")`). SGLang 0.5.18 forwards `SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK` to
  `SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK`, inverted; 0.5.23 no longer reads the old name at all: a stack that
  sets it gets the check it meant to disable, silently.
- Flags: each release's parser (`argv_probe`, the release's own `ServerArgs.add_cli_args`) lists its flags and
  its deprecated ones with their replacement (`Deprecated*Action(new_flag=...)`).

A name the old release read and the new one does not is renamed to the replacement the old release's table
names (or what it says), else to its opposite (ENABLE <-> DISABLE) when the new release reads that; else the
closest name only the new release has is offered as a guess; none: removed.
"""

from __future__ import annotations

import ast
import difflib
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..adapters.wheels import WheelFetchError, open_wheel
from ..config.schema import Stack

ENV_NAME = re.compile(r"^SGLANG_[A-Z0-9_]+$")
POLARITY = (("ENABLE", "DISABLE"), ("enable", "disable"))


@dataclass(frozen=True)
class Rename:
    new: str | None
    inverted: bool = False
    note: str | None = None  # what the release itself says instead of a name
    guessed: bool = False  # the closest name only the new release has, not a table's or the opposite


def table_entry(said: str | None) -> Rename:
    """A deprecation table's value: a flag (or `--flag=value`) to use, or words saying what to do."""
    said = (said or "").strip()
    if said.startswith("--") and not any(ch.isspace() for ch in said):
        return Rename(said)
    return Rename(None, note=said or None)


@dataclass(frozen=True)
class EnvFacts:
    """The `SGLANG_*` names a release's source mentions, and its deprecation table (old -> Rename)."""

    names: frozenset[str] = frozenset()
    deprecated: Mapping[str, Rename] = field(default_factory=dict)

    @property
    def read(self) -> frozenset[str]:
        return self.names - set(self.deprecated)


def opposite(name: str) -> str | None:
    for a, b in POLARITY:
        if a in name:
            return name.replace(a, b, 1)
        if b in name:
            return name.replace(b, a, 1)
    return None


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def source_env(sources: Iterable[str]) -> EnvFacts:
    """The environment facts of a release's Python sources (pure: `ast`, nothing runs)."""
    names: set[str] = set()
    deprecated: dict[str, Rename] = {}
    for text in sources:
        if "SGLANG_" not in text:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for node in ast.walk(tree):
            value = _text(node)
            if value and ENV_NAME.match(value):
                names.add(value)
            elif isinstance(node, ast.Name | ast.Attribute):
                ident = node.id if isinstance(node, ast.Name) else node.attr
                if ENV_NAME.match(ident):
                    names.add(ident)
            if isinstance(node, ast.Dict):
                for key, val in zip(node.keys, node.values, strict=True):
                    old = _text(key)
                    if old and ENV_NAME.match(old) and isinstance(val, ast.Call) and \
                            _call_name(val).endswith("DeprecatedEnv"):
                        transform = _keyword(val, "transform")
                        inverted = isinstance(transform, ast.Name) and "invert" in transform.id
                        deprecated[old] = Rename(_text(_keyword(val, "replacement")), inverted,
                                                 _text(_keyword(val, "note")))
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                old = _text(_keyword(node.value, "deprecated_name"))
                if isinstance(target, ast.Name) and ENV_NAME.match(target.id) and old:
                    deprecated[old] = Rename(target.id)
    return EnvFacts(frozenset(names), deprecated)


def wheel_env(wheel: Path) -> EnvFacts:
    """`source_env` of a wheel's `sglang/` Python files."""
    with open_wheel(wheel) as zf:
        return source_env(zf.read(n).decode("utf-8", "replace") for n in zf.namelist()
                          if n.startswith("sglang/") and n.endswith(".py"))


def _renamed_to(name: str, old_table: Mapping[str, Rename], old_known: Iterable[str],
                new_known: frozenset[str]) -> Rename:
    if name in old_table and old_table[name].new:
        return old_table[name]
    flipped = opposite(name)
    if flipped and flipped in new_known:
        return Rename(flipped, inverted=True)
    if name in old_table and old_table[name].note:
        return old_table[name]
    fresh = sorted(new_known - set(old_known))
    close = difflib.get_close_matches(name, fresh, n=1, cutoff=0.8)
    return Rename(close[0], guessed=True) if close else Rename(None)


def _said(what: str, name: str, version: str, rename: Rename, verb: str) -> str:
    head = f"{what} {name}: {verb} in sglang {version}"
    if rename.new is None:
        return f"{head}: {rename.note}" if rename.note else f"{head}, with no replacement"
    if rename.guessed:
        return f"{head}: the closest name only it has is {rename.new} (check its meaning)"
    flip = ", with the opposite meaning (set it to the opposite value)" if rename.inverted else ""
    return f"{head}: use {rename.new}{flip}"


def env_renames(keys: Iterable[str], old: EnvFacts, new: EnvFacts, new_version: str) -> list[str]:
    """One line per environment variable the stack sets that the new release renames, deprecates or drops."""
    out = []
    for key in sorted(set(keys)):
        if key in new.deprecated:
            out.append(_said("serving.env", key, new_version, new.deprecated[key], "deprecated"))
        elif key not in new.names and key in old.names:
            rename = _renamed_to(key, old.deprecated, old.names, new.read)
            out.append(_said("serving.env", key, new_version, rename, "renamed" if rename.new or rename.note
                             else "no longer read"))
    return out


@dataclass(frozen=True)
class FlagFacts:
    """A release's parser: every flag, and the deprecated ones with what their action names (a flag, or words)."""

    flags: frozenset[str] = frozenset()
    deprecated: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_probe(cls, output: Mapping[str, object] | None) -> FlagFacts | None:
        """From the probe's output, or the argv check's (which keeps the flags as `known`)."""
        flags = (output or {}).get("known", (output or {}).get("flags"))
        if not isinstance(flags, list):
            return None
        deprecated = (output or {}).get("deprecated")
        return cls(frozenset(str(f) for f in flags),
                   {str(k): str(v or "") for k, v in deprecated.items()} if isinstance(deprecated, Mapping) else {})


def used_flags(argv: Sequence[str]) -> list[str]:
    return sorted({a.split("=", 1)[0] for a in argv if a.startswith("--")})


def flag_renames(argv: Sequence[str], old: FlagFacts | None, new: FlagFacts | None, new_version: str) -> list[str]:
    """One line per serving flag the new release's parser deprecates, or renames from the old one's."""
    if new is None:
        return []
    old = old or FlagFacts()
    old_table = {k: table_entry(v) for k, v in old.deprecated.items()}
    out = []
    for flag in used_flags(argv):
        if flag in new.deprecated:
            out.append(_said("serving flag", flag, new_version, table_entry(new.deprecated[flag]), "deprecated"))
        elif flag not in new.flags and flag in old.flags:
            rename = _renamed_to(flag, old_table, old.flags, new.flags - set(new.deprecated))
            out.append(_said("serving flag", flag, new_version, rename, "renamed" if rename.new or rename.note
                             else "removed"))
    return out


def stack_renames(argv: Sequence[str], env_keys: Iterable[str], old_probe: Mapping[str, object] | None,
                  new_probe: Mapping[str, object] | None, old_env: EnvFacts, new_env: EnvFacts,
                  new_version: str) -> list[str]:
    """The flags of `argv` and the `env_keys` the new release renames, deprecates or drops, one line each."""
    return (flag_renames(argv, FlagFacts.from_probe(old_probe), FlagFacts.from_probe(new_probe), new_version)
            + env_renames(env_keys, old_env, new_env, new_version))


def release_renames(stack: Stack, new_stack: Stack, wheel: Path, argv: list[str], engines: Any,
                    version_of: Callable[[str], str]) -> tuple[str, ...]:
    """What the new release renames of the flags and env the stack sets, from both releases' parsers and sources
    (`engines`: the upgrade's `world.Engines`, whose `sglang_wheel`, `flags` and `env` are asked)."""
    try:
        old_wheel = engines.sglang_wheel(stack.sglang.version or "")
        old_flags, new_flags = engines.flags(old_wheel, version_of), engines.flags(wheel, version_of)
        old_env, new_env = engines.env(old_wheel), engines.env(wheel)
    except (WheelFetchError, OSError, zipfile.BadZipFile) as exc:
        return (f"renamed flags and environment not checked: sglang {stack.sglang.version}'s wheel: {exc}",)
    return tuple(stack_renames(argv, new_stack.serving.env, old_flags, new_flags, old_env, new_env,
                               new_stack.sglang.version or ""))
