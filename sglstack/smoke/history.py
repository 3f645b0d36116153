"""Per-stack smoke history: append-only JSON lines under build/<stack>/smoke-history.jsonl."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SmokeError

FILE_NAME = "smoke-history.jsonl"
NO_STACK = "_no-stack"


def history_path(build_dir: str | Path, stack: str | None) -> Path:
    return Path(build_dir) / (stack or NO_STACK) / FILE_NAME


def read_history(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise SmokeError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
    return records


def last_passing(records: list[Mapping[str, Any]], fingerprint: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The newest passing record measured with the same settings (model, tp, tokens, concurrency...)."""
    for record in reversed(records):
        if record.get("verdict") == "pass" and record.get("fingerprint") == dict(fingerprint):
            return record
    return None


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")


def history_record(report: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The line kept for one run: the headline figures, not the per-request detail."""

    def run_summary(run: Mapping[str, Any]) -> dict[str, Any]:
        return {k: run.get(k) for k in ("tokens_per_s", "aggregate_tokens_per_s", "ttft_s", "completed")}

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
    }
