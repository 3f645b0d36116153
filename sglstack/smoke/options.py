"""`--smoke-opt KEY=VALUE`: the one reading of smoke's free-form options, for every task that passes them on
(publish's release smoke, bisect's smoke; `smoke_options` then checks keys and values).

Repeatable keys keep every value: `env=A=1 env=B=2` is two variables, `mount=/a:/a mount=/b:/b` two mounts.
Any other key given twice is refused rather than silently keeping one of the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..core.errors import SmokeInputError

# The spelling on the command line (`--mount`, `--label`, and so `mount=`, `label=`) -> the key smoke_options
# reads. The plural keys were the --smoke-opt spelling once: refused with the name to use (one name, one meaning).
ALIASES = {"mount": "mounts", "label": "labels"}
SPELLING = {key: flag for flag, key in ALIASES.items()}
# NAME=VALUE pairs, one mapping
PAIR_KEYS = ("env", "labels")
# values in the order given, one list (extra_args split on white space, as a flag's value is)
LIST_KEYS = ("mounts", "extra_args", "kinds")
# What the task running the smoke decides, never a --smoke-opt (before: dropped unread, or a traceback for
# gates=, which is the smoke's own structure: the gates are min_speedup= and the others)
NOT_SMOKE_OPTS = {"image": "the smoke serves the image the task built", "stack": "the task's --stack is the stack",
                  "stacks_file": "the task's --stacks-file is the matrix",
                  "serving": "give its keys (model=, tp=, ...)",
                  "gates": "give min_speedup=, min_accept_length=, min_agreement= or max_regression="}


class SmokeOptionError(SmokeInputError):
    """A `--smoke-opt` value that is not KEY=VALUE (or not NAME=VALUE for env/label)."""


def malformed_pair(flag: str, number: int, item: str, expected: str) -> str:
    """The refusal of a `flag` value that is not `expected`, never quoting what follows a `=`, nor a value
    without one: it may be a secret (`--env HF_TOKEN:hf_...`, an `--env` given the token alone)."""
    name, sep, _ = item.partition("=")
    if not sep:
        return f"{flag} #{number}: expected {expected} (it has no '='; not shown, as it may be a secret)"
    return f"{flag} '{name}=…': expected {expected}"


def parse_smoke_opts(opts: Iterable[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings -> keyword overrides for `smoke_options`: `env`/`label` a dict, `mount`,
    `extra_args`, `kinds` a list, anything else its string; `-` in a key reads as `_`."""
    out: dict[str, Any] = {}
    for number, opt in enumerate(opts, 1):
        raw_key, sep, value = str(opt).partition("=")
        key = raw_key.strip().replace("-", "_")
        if key in SPELLING:
            raise SmokeOptionError(f"--smoke-opt '{raw_key.strip()}=…': the key is {SPELLING[key]}= (as smoke's "
                                   f"--{SPELLING[key]})")
        key = ALIASES.get(key, key)
        if key in NOT_SMOKE_OPTS:
            raise SmokeOptionError(f"--smoke-opt '{raw_key.strip()}=…': not a smoke option here: {NOT_SMOKE_OPTS[key]}")
        if not sep or not key.isidentifier():
            raise SmokeOptionError(malformed_pair("--smoke-opt", number, str(opt), "KEY=VALUE"))
        if key in PAIR_KEYS:
            name, sep, val = value.partition("=")
            if not sep or not name:
                raise SmokeOptionError(malformed_pair("--smoke-opt", number, str(opt),
                                                      f"{raw_key.strip()}=NAME=VALUE"))
            out.setdefault(key, {})[name] = val
        elif key in LIST_KEYS:
            out.setdefault(key, []).extend(value.split() if key == "extra_args" else [value])
        elif key in out:
            raise SmokeOptionError(f"--smoke-opt '{opt}': {key} is given twice (give it once)")
        else:
            out[key] = value
    return out


def smoke_overrides(opts: Iterable[str], **named: Any) -> dict[str, Any]:
    """`--smoke-opt` pairs plus a task's own smoke flags (None = not given). A named flag wins for a single
    value; `env`/`labels` merge by name (the named flag's value wins) and `mounts` add up."""
    out = parse_smoke_opts(opts)
    for key, value in named.items():
        if value is None:
            continue
        if key in PAIR_KEYS and key in out:
            out[key] = {**out[key], **_pairs(value, key)}
        elif key in LIST_KEYS and key in out:
            out[key] = [*out[key], *([value] if isinstance(value, str) else value)]
        else:
            out[key] = value
    return out


def _pairs(value: Mapping[str, str] | Iterable[str] | str, key: str) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    out: dict[str, str] = {}
    for number, item in enumerate([value] if isinstance(value, str) else value, 1):
        name, sep, val = str(item).partition("=")
        if not sep or not name:
            raise SmokeOptionError(malformed_pair(f"--{key.removesuffix('s')}", number, str(item), "NAME=VALUE"))
        out[name] = val
    return out
