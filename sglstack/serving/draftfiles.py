"""The draft and target files the draft check reads, where they are at hand on this machine: a folder the
model path names (through the spec's mounts for a container), or a Hugging Face cache snapshot of a repo id.
`config.json` is read whole; of the weights only the safetensors headers (8 bytes of length, then JSON), so a
draft's `d2t`/`t2d` shapes are known without loading a tensor. Nothing at hand: nothing is checked."""

from __future__ import annotations

import os
import posixpath
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.inputs import MalformedJSON, loads, read_json
from .draft import MAP_TENSORS, DraftMismatch, Shapes, draft_mismatches
from .spec import HF_CACHE_TARGET, ServingSpec

CONFIG_LIMIT = 4 * 1024 * 1024
HEADER_LIMIT = 100 * 1024 * 1024  # the safetensors format's own bound on a header
INDEX_FILE = "model.safetensors.index.json"
PATH_STARTS = ("/", ".", "~")  # a model path, not a Hugging Face repo id


@dataclass(frozen=True)
class ModelFiles:
    folder: Path
    config: Mapping[str, Any]


def hf_cache_hub(spec: ServingSpec, env: Mapping[str, str]) -> Path:
    """The hub folder a served repo id is downloaded to: the host folder mounted at the container's cache,
    else this machine's ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)."""
    mounted = next((m.source for m in spec.mounts if m.target == HF_CACHE_TARGET), None)
    if mounted:
        return Path(os.path.expanduser(mounted)) / "hub"
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    home = env.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def host_folder(spec: ServingSpec, model: str, *, container: bool, env: Mapping[str, str]) -> Path | None:
    """Where `model` (a path or a repo id, as the argv names it) is on this machine, if it is."""
    if model.startswith(PATH_STARTS):
        if not container:
            return Path(os.path.expanduser(model))
        path = posixpath.normpath(model)
        for mount in spec.mounts:  # the container's path, back to the host folder mounted there
            target = mount.target.rstrip("/")
            if path == target or path.startswith(target + "/"):
                return Path(os.path.expanduser(mount.source)) / path[len(target):].lstrip("/")
        # No mount: the folder at that path here, if any (a model the image holds at it cannot be read from here).
        return Path(model)
    repo = Path(hf_cache_hub(spec, env)) / f"models--{model.replace('/', '--')}"
    try:
        revision = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return repo / "snapshots" / revision if revision and "/" not in revision else None


def read_model(folder: Path | None) -> ModelFiles | None:
    if folder is None:
        return None
    path = folder / "config.json"
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None  # not at hand
    except OSError as exc:  # a symlink loop, no permission: the server could not read it either
        raise ConfigError(f"cannot be read ({exc.strerror or exc})", file=str(path)) from None
    if not stat.S_ISREG(mode):
        raise ConfigError("is not a regular file", file=str(path))
    config = read_json(folder / "config.json", limit=CONFIG_LIMIT, what="model config.json")
    if not isinstance(config, Mapping):
        raise ConfigError("is not a JSON object", file=str(folder / "config.json"))
    return ModelFiles(folder, config)


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in one safetensors file, from its header alone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:  # a symlink loop, a dangling link, no permission
        raise ConfigError(f"cannot be read ({exc.strerror or exc})", file=str(path)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError("is not a regular file", file=str(path))
        head = os.read(fd, 8)
        size = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 < size <= HEADER_LIMIT:
            raise ConfigError("is not a safetensors file (no header length)", file=str(path))
        raw = b""
        while len(raw) < size and (chunk := os.read(fd, size - len(raw))):
            raw += chunk
    finally:
        os.close(fd)
    try:
        header = loads(raw)
    except (ValueError, MalformedJSON):
        raise ConfigError("is not a safetensors file (its header is not JSON)", file=str(path)) from None
    if not isinstance(header, Mapping):
        raise ConfigError("is not a safetensors file (its header is not a JSON object)", file=str(path))
    return {str(k): tuple(v.get("shape") or ()) for k, v in header.items()
            if isinstance(v, Mapping) and isinstance(v.get("shape"), list)}


def map_shapes(folder: Path) -> Shapes | None:
    """The shapes of the draft's d2t/t2d tensors (any prefix), or None when it has no safetensors weights."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    found: dict[str, tuple[int, ...]] = {}
    for path in files:
        for name, shape in safetensors_shapes(path).items():
            short = name.rsplit(".", 1)[-1]
            if short in MAP_TENSORS:
                found.setdefault(short, shape)
    return found


def draft_check(spec: ServingSpec, *, container: bool, env: Mapping[str, str] | None = None) -> list[str]:
    """The draft check of a speculative spec, where both models' files are at hand: one error line per
    mismatch (each naming the stack and the draft), and nothing when a file is not here to read."""
    speculative = spec.speculative
    if speculative is None or not spec.eagle3:
        return []
    env = os.environ if env is None else env
    where = f"stack '{spec.stack}': " if spec.stack else ""
    folders = {role: host_folder(spec, name, container=container, env=env)
               for role, name in (("target", spec.model), ("draft", speculative.draft_model))}
    if not container:  # the process runner serves from this machine: a path that is not here fails the server
        named = (("target", spec.model), ("draft", speculative.draft_model))
        missing = [f"{where}{role} {name}: no folder {folders[role]} on this machine (the process runner's server "
                   "would fail to load it)" for role, name in named
                   if name.startswith(PATH_STARTS) and not os.path.isdir(folders[role] or "")]
        if missing:
            return missing
    target, draft = read_model(folders["target"]), read_model(folders["draft"])
    if target is None or draft is None:
        return []
    lines = draft_mismatches(target.config, draft.config, algorithm=speculative.algorithm,
                             extra_args=spec.extra_args, draft_shapes=map_shapes(draft.folder))
    return [f"{where}draft {speculative.draft_model} ({draft.folder}) against target {spec.model}: {line}"
            for line in lines]


def require_draft_fits(spec: ServingSpec, *, container: bool, env: Mapping[str, str] | None = None) -> None:
    """`draft_check`, refused as bad input (exit 2) before a server starts."""
    lines = draft_check(spec, container=container, env=env)
    if lines:
        raise DraftMismatch(lines)
