"""Per-stack smoke history: append-only JSON lines under BUILD_ROOT/<stack>/smoke-history.jsonl.

Read and written through `records.read_jsonl` / `records.append_jsonl`, like every other JSON-lines
store: whole lines under a lock, so that two smoke runs of one stack never interleave their lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import SmokeError
from ..core.records import append_jsonl, read_jsonl, stack_dir
from .levels import levels_by_kind

FILE_NAME = "smoke-history.jsonl"
NO_STACK = "_no-stack"


def smoke_folder(build_dir: str | Path, stack: str | None) -> Path:
    """Where a smoke's outputs live: the stack's folder under the build root (`core.records.stack_dir`), or, for
    a smoke of no stack, `_no-stack`."""
    return stack_dir(stack or NO_STACK, Path(build_dir))


def history_path(build_dir: str | Path, stack: str | None) -> Path:
    return smoke_folder(build_dir, stack) / FILE_NAME


def _row(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError  # read_jsonl turns it into the one-line error naming the file and line
    return value


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every run recorded in `path`, oldest first ([] when there is none yet)."""
    return read_jsonl(path, _row, lambda n: SmokeError(f"{path}:{n}: not a JSON object on one line"))


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    append_jsonl(path, [dict(record)])


def comparable(records: Sequence[Mapping[str, Any]], fingerprint: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The runs measured with the same settings (model, tp, tokens, concurrency...): the only ones whose
    tokens/s can be compared (the image may differ: that is the point)."""
    return [r for r in records if r.get("fingerprint") == dict(fingerprint)]


def last_passing(records: Sequence[Mapping[str, Any]], fingerprint: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The newest passing record measured with the same settings."""
    for record in reversed(comparable(records, fingerprint)):
        if record.get("verdict") == "pass":
            return record
    return None


def history_record(report: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The line kept for one run: the headline figures, not the per-request detail."""

    def run_summary(run: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: run.get(k) for k in ("tokens_per_s", "aggregate_tokens_per_s", "ttft_s", "completed")}
        return {**out, **start_summary(run)}

    return {
        "time": report["time"],
        "verdict": report["verdict"],
        "image": report["image"],
        "baseline": run_summary(report["baseline"]),
        "eagle3": run_summary(report["eagle3"]),
        "speedup": report["speedup"],
        "accept_length": report["accept_length"],
        "agreement": report["agreement"],
        "failures": report["failures"],
        "fingerprint": dict(fingerprint),
        # Which runner measured it ("docker" for the records written before there was a choice).
        "runner": (report.get("runner") or {}).get("kind", "docker"),
        **({"warm": {kind: start_summary(run) for kind, run in report["warm"].items()}} if report.get("warm") else {}),
        # Per named concurrency level (smoke.concurrency_levels), what the regression gate compares at each.
        **({"levels": levels_by_kind(report["levels"]), "crossover": report.get("crossover")}
           if report.get("levels") else {}),
    }


def start_summary(run: Mapping[str, Any]) -> dict[str, Any]:
    """A start as the history keeps it: seconds to healthy, each phase, and the kernel-cache files it added."""
    out: dict[str, Any] = {} if run.get("startup_s") is None else {"startup_s": run["startup_s"]}
    if run.get("phases"):
        out["phases_s"] = run["phases"].get("phases_s")
    cache = run.get("kernel_cache")
    if cache:
        out["new_kernel_files"] = cache.get("new_files")
        if cache.get("rewritten_files") is not None:
            out["rewritten_kernel_files"] = cache["rewritten_files"]
        if cache.get("restore"):
            out["cache_restored"] = cache["restore"].get("matched")
    return out
