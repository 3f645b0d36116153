"""Turn one field run's output folder (what benchmarks/field_go.sh wrote under $OUT) into the checked-in recording.

    python3 benchmarks/field_record.py RUN_DIR tests/data/field/h200-eagle3.json
    python3 benchmarks/field_record.py RUN_DIR tests/data/field/h200-constructed.json   (a --sweep run)

The recording keeps the smoke report as the smoke wrote it, the steps, each gate's verdict and the server
log's milestones, with the device's own folders replaced by placeholders (no machine's paths in the repo).
tests/unit/test_field_recording.py re-derives the verdicts from the recorded figures with the gates' own code.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

# The device's folders -> placeholders (longest first).
PLACEHOLDERS = (("/root/g28/run/model/", "<field-model>/"), ("/work/main/.fieldcarry/model/", "<field-model>/"),
                ("/root/site", "<carried-site>"), ("/root/out", "<out>"))
MILESTONES = re.compile(r"Load weight end|KV Cache is allocated|CUDA graph end|max_total_num_tokens|fired up|"
                        r"server_args=")
# The warm start must save at least this share of the cold start to healthy (issue 40).
MIN_WARM_SAVING = 0.5
GATE_NAMES = ("min_speedup", "min_accept_length", "min_agreement", "max_regression")


def scrub(value: Any) -> Any:
    if isinstance(value, str):
        for old, new in PLACEHOLDERS:
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    return value


def gate_verdicts(report: dict[str, Any]) -> dict[str, str]:
    """pass / fail per gate; max_regression is 'not applied' without an earlier passing run to compare with."""
    failed = {f.split(":", 1)[0] for f in report["failures"]}
    out = {name: "fail" if name in failed else "pass" for name in GATE_NAMES}
    if report.get("regression_reference") is None:
        out["max_regression"] = "not applied (no earlier passing run)"
    return out


def warm_verdicts(report: dict[str, Any], kind: str = "baseline") -> dict[str, Any]:
    """The warm start's verdicts, from the report's figures alone: it saved >= MIN_WARM_SAVING of the cold start
    to healthy, it added no kernel cache file and rewrote none, and it restored the artifact the cold run packed
    (key matched)."""
    cold, warm = report[kind], report["warm"][kind]
    saving = 1.0 - warm["startup_s"] / cold["startup_s"]
    restore = warm["kernel_cache"]["restore"]
    packed = report["kernel_cache"]["packed"][kind]
    matched = (restore["matched"] and restore["artifact"] == packed["artifact"]
               and warm["kernel_cache"]["key_digest"] == packed["key_digest"] == cold["kernel_cache"]["key_digest"])
    return {"saving": round(saving, 4), "saving_verdict": "pass" if saving >= MIN_WARM_SAVING else "fail",
            "new_kernel_files": warm["kernel_cache"]["new_files"],
            "no_new_kernel_files": "pass" if warm["kernel_cache"]["new_files"] == 0 else "fail",
            # Files the warm start wrote again (a kernel rebuilt in place); not counted before 2026-12-05 (sixth).
            "no_rewritten_kernel_files": _rewritten_verdict(warm["kernel_cache"].get("rewritten_files")),
            "cold_kernel_files": cold["kernel_cache"]["files_after"],
            "key_matched": "pass" if matched else "fail"}


def _rewritten_verdict(rewritten: int | None) -> str:
    return "not recorded" if rewritten is None else "pass" if rewritten == 0 else "fail"


def sweep_verdicts(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Per sweep setting (STEPS:TOPK:DRAFT_TOKENS): pass / fail per gate, by the same rule (a setting of a sweep
    has no regression reference: the history is the stack's own setting's)."""
    return {entry["setting"]: gate_verdicts({**entry, "regression_reference": None})
            for entry in (report.get("sweep") or {}).get("settings", [])}


def main(run_dir: Path, target: Path) -> int:
    report = json.loads((run_dir / "report.json").read_text())
    steps = json.loads((run_dir / "steps.json").read_text())
    logs = {kind: run_dir / f"report.{kind}.log" for kind in ("baseline", "eagle3", "baseline.warm", "eagle3.warm")}
    # A sweep's other settings: report.eagle3.s7-k1-d8.log, one per setting.
    logs |= {log.name.removeprefix("report.").removesuffix(".log"): log
             for log in sorted(run_dir.glob("report.eagle3.s*.log"))}
    milestones = {
        kind: [line[:160] for line in log.read_text().splitlines() if MILESTONES.search(line)]
        for kind, log in logs.items() if log.exists()
    }
    go = (run_dir / "go.log").read_text().splitlines() if (run_dir / "go.log").exists() else []
    device = next((line for line in go if line.startswith("NVIDIA ")), None)
    recording = {
        "what": "benchmarks/field_go.sh on one GPU machine (the device line): SGLang 0.5.17 from the node's Python "
                "3.12 and torch 2.11.0+cu130 plus the carried packages, served by `smoke --runner process`",
        "device": device,
        "stack": report.get("stack"),  # the stacks.yaml entry whose serving settings were served (field_run.py --stack)
        "steps": steps,
        "gate_verdicts": gate_verdicts(report),
        **({"sweep_verdicts": sweep_verdicts(report)} if report.get("sweep") else {}),
        "server_milestones": milestones,
        "report": report,
        **({"warm_verdicts": warm_verdicts(report)} if report.get("warm") else {}),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(scrub(recording), indent=1, sort_keys=True) + "\n")
    print(f"field_record: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
