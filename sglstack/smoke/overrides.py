"""`smoke_options`: a stack's smoke settings with the caller's overrides (a task's options or `--smoke-opt`
pairs), every key and value checked, as one `SmokeOptions`; the value readers it uses (pairs, kinds, levels,
mounts) and the runner's check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from ..adapters.docker import is_local_docker_host
from ..config.fields import MAX_COUNT, MAX_DURATION_S, MAX_TOKENS, bound_problem
from ..config.schema import Stack
from ..config.settings import Gates, StartGates
from ..core.errors import SmokeInputError, did_you_mean, shown
from ..serving import (
    ServingError,
    ServingOverrides,
    serving_spec,
)
from .options import SPELLING, malformed_pair
from .plan import RUN_KINDS, RUNNERS, SmokeOptions
from .sweepspec import parse_sweep

_GATE_KEYS = ("min_speedup", "min_accept_length", "min_agreement", "max_regression")
_START_GATE_KEYS = tuple(StartGates.model_fields)
_IGNORED = ("stacks_file", "stack", "image")
# CLI-named overrides of the server -> their field in ServingOverrides, and how to read a string value.
_SERVING: dict[str, tuple[str, type]] = {
    "model": ("model", str),
    "draft_model": ("draft_model", str),
    "speculative_algorithm": ("speculative_algorithm", str),
    "num_steps": ("num_steps", int),
    "eagle_topk": ("eagle_topk", int),
    "num_draft_tokens": ("num_draft_tokens", int),
    "tp": ("tp", int),
    "gpus": ("gpus", int),
    "port": ("port", int),
    "timeout": ("startup_timeout_s", float),
    "shm_size": ("shm_size", str),
}
_MEASURE: dict[str, type] = {
    "concurrency": int,
    "num_prompts": int,
    "max_new_tokens": int,
    "request_timeout": float,
    "runs": int,
}


def smoke_options(stack: Stack | None, **overrides: Any) -> SmokeOptions:
    """Options from the stack's `serving:` and `smoke:` (if any) with CLI-named overrides; None = not given."""
    given = {k: v for k, v in overrides.items() if v is not None and k not in _IGNORED}
    _check_known(given)
    kinds = parse_kinds(given.pop("kinds")) if "kinds" in given else RUN_KINDS
    _require_models(stack, given, kinds)
    serving, measure, flags = _read_typed(given)
    serving.update(_read_serving_lists(given))
    labels = parse_pairs(given.pop("labels"), "--label") if "labels" in given else {}
    settings = stack.smoke if stack is not None else None
    levels = parse_levels(given.pop("concurrency_levels")) if "concurrency_levels" in given else (
        settings.concurrency_levels if settings is not None else ())
    sweep = tuple(s.key for s in parse_sweep(given.pop("sweep"))) if "sweep" in given else ()
    if sweep and "eagle3" not in kinds:
        raise SmokeInputError("smoke option sweep: the sweep serves EAGLE-3 settings; kinds leaves EAGLE-3 out")
    gates = _gates(settings.gates if settings is not None else Gates(), given)
    start_gates = _start_gates(settings.start_gates if settings is not None else StartGates(), given)
    try:
        spec = serving_spec(stack, ServingOverrides(**serving))
    except ServingError as exc:
        raise SmokeInputError(str(exc)) from None
    defaults: dict[str, Any] = {
        "concurrency": settings.concurrency if settings else 8,
        "num_prompts": settings.num_prompts if settings else 8,
        "max_new_tokens": settings.max_new_tokens if settings else 128,
        "kernel_cache": settings.kernel_cache if settings else False,
        "warm_start": settings.warm_start if settings else False,
    }
    settled: dict[str, Any] = {**defaults, **measure, **flags, **given}
    opts = SmokeOptions(serving=spec.with_speculation(), gates=gates, labels=labels, kinds=kinds,
                        start_gates=start_gates, concurrency_levels=tuple(sorted(set(levels))), sweep=sweep,
                        **settled)
    _check_bounds(opts)
    _check_warm(opts)
    check_runner(opts.runner, opts.python_env)
    return opts


def _check_known(given: Mapping[str, Any]) -> None:
    """Every option is one smoke knows (one line listing the known ones if not)."""
    known = set(_SERVING) | set(_MEASURE) | {f.name for f in fields(SmokeOptions)} | set(_GATE_KEYS)
    known = (known | {"env", "mounts", "extra_args", "kinds", *_START_GATE_KEYS}) - {"serving", "start_gates"}
    if unknown := sorted(set(given) - known):
        spelled = sorted(SPELLING.get(key, key) for key in known)  # as --smoke-opt takes them: mount=, label=
        hint = did_you_mean(unknown[0], spelled)
        raise SmokeInputError(f"unknown smoke option(s): {', '.join(unknown)} (known: {', '.join(spelled)}){hint}")


def _require_models(stack: Stack | None, given: Mapping[str, Any], kinds: tuple[str, ...]) -> None:
    """A model (and, when EAGLE-3 runs, a draft model) comes from the options or the stack."""
    where = f"stack '{stack.name}'" if stack is not None else "the options"
    for key in ("model", "draft_model") if "eagle3" in kinds else ("model",):
        has = given.get(key) or (stack is not None and _stack_has(stack, key))
        if not has:
            flag = "--" + key.replace("_", "-")
            raise SmokeInputError(f"no {key.replace('_', ' ')} for the smoke in {where}: pass {flag} or --stack")


def _read_typed(given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, bool]]:
    """The serving, measuring and on/off options, each read as its type and taken out of `given`."""
    try:
        serving = {field_name: _read(given.pop(key), kind, key) for key, (field_name, kind) in _SERVING.items()
                   if key in given}
        measure = {key: _read(given.pop(key), kind, key) for key, kind in _MEASURE.items() if key in given}
        switches = ("no_history", "pull", "skip_preflight", "flush_cache", "kernel_cache", "warm_start",
                    "precompile_deep_gemm")
        flags: dict[str, bool] = {k: _flag(given.pop(k), k) for k in switches if k in given}
    except ValueError as exc:
        raise SmokeInputError(f"invalid smoke option: {exc}") from None
    return serving, measure, flags


def _read_serving_lists(given: dict[str, Any]) -> dict[str, Any]:
    """--env, --mount and the extra server arguments, taken out of `given` as serving overrides."""
    serving: dict[str, Any] = {}
    if "env" in given:
        serving["env"] = parse_pairs(given.pop("env"), "--env")
    if "mounts" in given:
        serving["mounts"] = tuple(parse_mounts(given.pop("mounts")))
    if "extra_args" in given:
        extra = given.pop("extra_args")
        serving["extra_args"] = tuple(extra.split() if isinstance(extra, str) else extra)
    return serving


def _gates(gates: Gates, given: dict[str, Any]) -> Gates:
    """The stack's gates (or the defaults) with the gate options taken out of `given` laid over them."""
    gate_updates = {k: given.pop(k) for k in _GATE_KEYS if k in given}
    try:
        values = {k: _read(v, float, k) for k, v in gate_updates.items()}
    except ValueError as exc:
        raise SmokeInputError(f"invalid gate override: {exc}") from None
    try:
        return Gates(**{**gates.model_dump(), **values})
    except ValueError as exc:
        raise SmokeInputError(f"invalid gate override: {bound_problem(exc)}") from None


def _start_gates(gates: StartGates, given: dict[str, Any]) -> StartGates:
    """The stack's start gates with the options that set them taken out of `given` laid over them."""
    values: dict[str, Any] = {}
    try:
        for key in _START_GATE_KEYS:
            if key in given:
                value = given.pop(key)
                values[key] = _flag(value, key) if key == "no_warm_compile" else (
                    None if value in ("", "none") else _read(value, float, key))
    except ValueError as exc:
        raise SmokeInputError(f"invalid gate override: {exc}") from None
    try:
        return StartGates(**{**gates.model_dump(), **values})
    except ValueError as exc:
        raise SmokeInputError(f"invalid gate override: {bound_problem(exc)}") from None


def _check_warm(opts: SmokeOptions) -> None:
    """A warm start needs the kernel cache, and a warm-start gate a warm start (one line each, before any
    server starts); the docker runner's cache folder is bound from this machine."""
    gates = opts.start_gates
    if (gates.max_warm_start_s is not None or gates.no_warm_compile) and not opts.warm_start:
        name = "max_warm_start_s" if gates.max_warm_start_s is not None else "no_warm_compile"
        raise SmokeInputError(f"smoke gate {name} gates a warm start: pass --warm-start")
    if opts.precompile_deep_gemm and not (opts.kernel_cache or opts.warm_start):
        raise SmokeInputError("--precompile-deep-gemm compiles into the kernel cache: pass --kernel-cache or "
                              "--warm-start")
    if opts.cache_store is not None and not (opts.kernel_cache or opts.warm_start):
        raise SmokeInputError("--cache-store is where kernel caches are packed: pass --kernel-cache or --warm-start")
    caching = opts.kernel_cache or opts.warm_start
    if caching and opts.runner == "docker" and not is_local_docker_host(opts.docker_host):
        raise SmokeInputError("--kernel-cache/--warm-start with a remote Docker host: the cache folder is bound from "
                              "this machine; run the smoke on the node (or --runner process there)")


def _check_bounds(opts: SmokeOptions) -> None:
    """The counts are at least 1 and at most what the schema allows a stack (one bound, `config.fields`), and
    the request timeout is positive and at most a week."""
    for name, most in (("concurrency", MAX_COUNT), ("num_prompts", MAX_COUNT), ("max_new_tokens", MAX_TOKENS),
                       ("runs", MAX_COUNT)):
        if getattr(opts, name) < 1:
            raise SmokeInputError(f"smoke option {name} must be >= 1 (got {getattr(opts, name)})")
        if getattr(opts, name) > most:
            raise SmokeInputError(f"smoke option {name} must be <= {most} (got {shown(str(getattr(opts, name)))})")
    if not 0 < opts.request_timeout <= MAX_DURATION_S:
        raise SmokeInputError(f"smoke option request_timeout must be > 0 and <= {MAX_DURATION_S} (got "
                              f"{opts.request_timeout})")


def check_runner(runner: str, python_env: str | None) -> None:
    """The runner is one we have, and a Python environment is named exactly when the process runner runs."""
    if runner not in RUNNERS:
        raise SmokeInputError(f"smoke runner '{runner}': choose from {', '.join(RUNNERS)}")
    if runner == "process" and not python_env:
        raise SmokeInputError("smoke runner 'process': pass --python-env PATH (a venv or prefix holding bin/python3)")
    if runner != "process" and python_env:
        raise SmokeInputError(f"--python-env '{python_env}' is for --runner process (the {runner} runner serves "
                              "an image)")


def _stack_has(stack: Stack, key: str) -> bool:
    serving = stack.serving
    return bool(serving.model) if key == "model" else serving.speculative is not None


def _read(value: Any, kind: type, key: str) -> Any:
    """Overrides also arrive as strings (`--smoke-opt gpus=0`, invoke's untyped options)."""
    if kind is str or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    what = "a whole number" if kind is int else "a number"
    try:
        read = kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} '{shown(str(value))}' is not {what}") from None
    if kind is float and not math.isfinite(read):  # an endless timeout, a gate nothing passes
        raise ValueError(f"{key} '{value}' is not a finite number")
    return read


def _flag(value: Any, key: str) -> bool:
    """Booleans also arrive as strings (`--smoke-opt no_history=true`)."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"{key} '{shown(value)}' is not a boolean (true or false)")
    return bool(value)


def parse_pairs(values: Iterable[str] | Mapping[str, str] | str, flag: str) -> dict[str, str]:
    if isinstance(values, Mapping):
        return {str(k): str(v) for k, v in values.items()}
    if isinstance(values, str):
        values = [values]
    out: dict[str, str] = {}
    for number, item in enumerate(values, 1):
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise SmokeInputError(malformed_pair(flag, number, str(item), "KEY=VALUE"))
        out[key] = value
    return out


def parse_kinds(value: Iterable[str] | str) -> tuple[str, ...]:
    """`baseline`, `eagle3` or both (comma-separated or a sequence), in the order they run."""
    items = value.split(",") if isinstance(value, str) else list(value)
    wanted = {str(k).strip() for k in items if str(k).strip()}
    unknown = sorted(wanted - set(RUN_KINDS))
    if unknown or not wanted:
        raise SmokeInputError(f"smoke kinds '{','.join(map(str, items))}': choose from {', '.join(RUN_KINDS)}")
    return tuple(k for k in RUN_KINDS if k in wanted)


def parse_levels(value: Iterable[Any] | str) -> tuple[int, ...]:
    """`1,4,16` (or a sequence): the concurrency levels, each a whole number from 1 to the schema's bound."""
    items = [i for i in (value.split(",") if isinstance(value, str) else list(value)) if str(i).strip()]
    levels: list[int] = []
    for item in items:
        try:
            level = _read(str(item).strip(), int, "concurrency_levels")
        except ValueError as exc:
            raise SmokeInputError(f"smoke option {exc}") from None
        if not 1 <= level <= MAX_COUNT:
            raise SmokeInputError(f"smoke option concurrency_levels: {level} must be >= 1 and <= {MAX_COUNT}")
        if level in levels:
            raise SmokeInputError(f"smoke option concurrency_levels: {level} is named twice")
        levels.append(level)
    if not levels:
        raise SmokeInputError("smoke option concurrency_levels: name at least one level (e.g. 1,4)")
    return tuple(levels)


def parse_mounts(values: Iterable[str] | str) -> list[str]:
    """`--mount` values as given; their syntax and host folders are checked by the serving spec."""
    return [values] if isinstance(values, str) else [str(v) for v in values]
