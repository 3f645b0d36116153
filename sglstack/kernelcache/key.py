"""What a kernel cache is valid for (pure). A compiled kernel is only good for the GPU, driver, build and
configuration it was compiled for, so the cache is keyed (`CacheKey`) and restored only on an exact match: a
differing field is one line naming it. Where the caches go is the serving spec's (`serving/caches.py`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..core.credentials import REDACTED, names_secret, secret_reference, secret_slots
from ..serving.caches import CACHE_DIRS

KEY_FIELDS = ("image", "gpu_name", "compute_capability", "driver_major", "tp_size", "ep_size", "model",
              "model_revision", "draft_model", "draft_revision", "serving_hash", "cache_root")
UNKNOWN = "unknown"
# argv flags whose values say nothing about the kernels: where the server listens
_PLACE_FLAGS = ("--port", "--host")


@dataclass(frozen=True)
class NodeGpu:
    """The GPU facts a kernel is compiled for; "none" on a node without GPUs (the CPU double)."""

    name: str = "none"
    compute_capability: str = "none"
    driver_major: str = "none"


@dataclass(frozen=True)
class CacheKey:
    image: str  # the registry digest, else the image id, else the Python environment's id
    gpu_name: str
    compute_capability: str
    driver_major: str
    tp_size: int
    ep_size: int
    model: str
    model_revision: str | None
    draft_model: str | None
    draft_revision: str | None
    serving_hash: str  # the serving argv and env, less where it listens and where the cache is
    cache_root: str  # FlashInfer's ninja files name absolute paths: a cache is good where it was made

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CacheKey:
        """A key read back from an artifact; KeyError/TypeError/ValueError when it is not one."""
        missing = [f.name for f in fields(cls) if f.name not in data]
        if missing:
            raise KeyError(f"no {missing[0]}")
        return cls(**{f.name: data[f.name] for f in fields(cls)})

    def canonical(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()

    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.canonical()).hexdigest()

    def differences(self, other: CacheKey) -> list[str]:
        """The fields where `other` differs, in KEY_FIELDS order; a GPU fact nvidia-smi did not give
        ("unknown") differs from everything, itself included: a cache is never restored on a guess."""
        return [name for name in KEY_FIELDS
                if getattr(self, name) != getattr(other, name) or getattr(self, name) == UNKNOWN]


def mismatch_line(wanted: CacheKey, found: CacheKey) -> str:
    """One line naming the first differing field: what this start needs against what the artifact holds."""
    diff = wanted.differences(found)
    name = diff[0]
    if getattr(wanted, name) == UNKNOWN:  # not a difference with the artifact: this node's own fact is missing
        return unknown_line(name)
    more = f" (and {len(diff) - 1} more: {', '.join(diff[1:])})" if len(diff) > 1 else ""
    return (f"kernel cache: key differs in {name}: this start has {_short(getattr(wanted, name))}, the artifact "
            f"{_short(getattr(found, name))}{more}; starting cold")


def unknown_line(name: str) -> str:
    return (f"kernel cache: this node's {name} is unknown (nvidia-smi did not answer): a cache is never restored on "
            "a guess; starting cold")


def unknown_gpu_fields(key: CacheKey) -> list[str]:
    """The GPU facts of `key` that nvidia-smi did not give: a key with any matches no start, itself included."""
    return [name for name in ("gpu_name", "compute_capability", "driver_major") if getattr(key, name) == UNKNOWN]


def _short(value: Any) -> str:
    text = "none" if value is None else str(value)
    return repr(text[:71] + "..." if len(text) > 74 else text)


def flag_value(argv: Sequence[str], *flags: str) -> str | None:
    """The last value of any of `flags` in `argv` (`--flag V` or `--flag=V`), as argparse keeps the last."""
    found = None
    for i, word in enumerate(argv):
        for flag in flags:
            if word == flag and i + 1 < len(argv):
                found = argv[i + 1]
            elif word.startswith(flag + "="):
                found = word[len(flag) + 1:]
    return found


def serving_hash(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """sha256 of the serving argv and declared env, less the listen port and host, the cache variables,
    and every secret (a secret flag's value, a secret-named or referenced variable's value): two starts
    that compile the same kernels hash the same, and the hash reveals no secret."""
    words = list(argv[1:])  # not the interpreter: the image or environment id names it
    for slot in secret_slots(words):
        words[slot.index] = f"{slot.text}{REDACTED}"
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in _PLACE_FLAGS:
            skip = True
            continue
        if any(word.startswith(flag + "=") for flag in _PLACE_FLAGS):
            continue
        kept.append(word)
    shown_env = {k: (REDACTED if names_secret(k) or secret_reference(v) is not None else v)
                 for k, v in env.items() if k not in CACHE_DIRS}
    body = json.dumps({"argv": kept, "env": dict(sorted(shown_env.items()))}, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def cache_key(*, image: str, gpu: NodeGpu, argv: Sequence[str], env: Mapping[str, str], model: str,
              draft_model: str | None, tp_size: int, cache_root: str) -> CacheKey:
    """The key of a server started with `argv` and `env` (its revisions and EP size are read off the argv)."""
    ep = flag_value(argv, "--expert-parallel-size", "--ep-size", "--ep")
    return CacheKey(
        image=image, gpu_name=gpu.name, compute_capability=gpu.compute_capability, driver_major=gpu.driver_major,
        tp_size=tp_size, ep_size=int(ep) if ep and ep.isdigit() else 1, model=model,
        model_revision=flag_value(argv, "--revision"), draft_model=draft_model,
        draft_revision=flag_value(argv, "--speculative-draft-model-revision") if draft_model else None,
        serving_hash=serving_hash(argv, env), cache_root=cache_root)
