"""The smoke report: JSON for machines, Markdown + a PNG chart (this run and the history) for people."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.imageref import image_name
from ..core.jsonreport import write_json
from ..core.records import build_root
from ..core.safefiles import containing_root, write_bytes
from .chart import smoke_chart
from .since import summary_lines
from .startreport import start_lines


@dataclass(frozen=True)
class SmokeReport:
    """The outcome of one smoke run. `data` is the JSON document (see `to_dict`)."""

    data: Mapping[str, Any]
    history: Sequence[Mapping[str, Any]] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.data["verdict"] == "pass"

    @property
    def failures(self) -> list[str]:
        return list(self.data["failures"])

    @property
    def verdict(self) -> str:
        return str(self.data["verdict"])

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.data))


def write_report(report: SmokeReport, json_path: Path) -> dict[str, Path]:
    """Write PATH (JSON), PATH with .md (summary) and .png (chart); return the three paths.

    Each file appears whole or not at all (written aside, then renamed), the JSON last: a report whose
    JSON exists is complete.
    """
    json_path.parent.mkdir(parents=True, exist_ok=True)
    md_path, png_path = json_path.with_suffix(".md"), json_path.with_suffix(".png")
    data = report.to_dict()
    _write_whole(png_path, smoke_chart(data, report.history))
    _write_whole(md_path, markdown(data, report.history, png_path.name).encode("utf-8"))
    write_json(json_path, data)
    return {"json": json_path, "markdown": md_path, "chart": png_path}


def _write_whole(path: Path, data: bytes) -> None:
    write_bytes(containing_root(path.parent, build_root()), path, data)


def _runner_line(runner: Mapping[str, Any] | None) -> str:
    if not runner or runner.get("kind") in (None, "docker"):
        return ""
    return f" Served by the {runner['kind']} runner from `{runner.get('python_env')}`."


def _fmt(value: Any, spec: str = ".1f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def markdown(data: Mapping[str, Any], history: Sequence[Mapping[str, Any]], chart_name: str) -> str:
    b, e = data["baseline"], data["eagle3"]
    image = data["image"]
    lines = [
        f"# Smoke {data['verdict'].upper()}: {data.get('stack') or 'no stack'}",
        "",
        f"Image `{image['ref']}` ({_identity(image)}), {data['time']}."
        + _runner_line(data.get("runner")),
        "",
        f"![baseline (grey) vs EAGLE-3 (blue) output tokens/s at concurrency 1, and the history]({chart_name})",
        "",
        "| | baseline | EAGLE-3 |",
        "|---|---|---|",
        f"| tokens/s per stream (concurrency 1) | {_fmt(b.get('tokens_per_s'))} | {_fmt(e.get('tokens_per_s'))} |",
        f"| aggregate tokens/s (concurrency {data['options']['concurrency']}) | "
        f"{_fmt(b.get('aggregate_tokens_per_s'))} | {_fmt(e.get('aggregate_tokens_per_s'))} |",
        f"| TTFT (s, median) | {_fmt(b.get('ttft_s'), '.3f')} | {_fmt(e.get('ttft_s'), '.3f')} |",
        f"| completed requests | {b.get('completed')}/{b.get('requests')} | {e.get('completed')}/{e.get('requests')} |",
        "",
        f"Speedup {_fmt(data.get('speedup'), '.2f', 'x')}, accept length {_fmt(data.get('accept_length'), '.2f')}"
        f" (meta_info {_fmt(e.get('accept_length_meta'), '.2f')}, server {_fmt(e.get('accept_length_server'), '.2f')}),"
        f" greedy agreement {_fmt(data.get('agreement'), '.0%')}.",
        "",
    ]
    lines += level_lines(data)
    lines += sweep_lines(data.get("sweep"))
    if data["failures"]:
        lines += ["## Failures", "", *[f"- {f}" for f in data["failures"]], ""]
    lines += start_lines(data)
    if data.get("since_last_pass"):
        lines += ["## Since the last passing run", "", *summary_lines(data["since_last_pass"])]
    if history:
        lines += [
            "## History of this stack",
            "",
            "| time | verdict | image | baseline tok/s | EAGLE-3 tok/s | speedup | accept length |",
            "|---|---|---|---|---|---|---|",
        ]
        for rec in list(history)[-20:]:
            served = rec.get("image") or {}
            digest = image_name(served.get("digest"), served.get("id")) or ""
            lines.append(
                f"| {rec.get('time')} | {rec.get('verdict')} | `{digest[:19]}` | "
                f"{_fmt((rec.get('baseline') or {}).get('tokens_per_s'))} | "
                f"{_fmt((rec.get('eagle3') or {}).get('tokens_per_s'))} | "
                f"{_fmt(rec.get('speedup'), '.2f', 'x')} | {_fmt(rec.get('accept_length'), '.2f')} |"
            )
        lines.append("")
    return "\n".join(lines)


def level_lines(data: Mapping[str, Any]) -> list[str]:
    """The speedup at each named concurrency level, and the crossover (none without smoke.concurrency_levels)."""
    if not data.get("levels"):
        return []
    lines = ["## Speedup per concurrency level", "",
             "| concurrency | measure | baseline tok/s | EAGLE-3 tok/s | speedup | pays |", "|---|---|---|---|---|---|"]
    for row in data["levels"]:
        lines.append(f"| {row['concurrency']} | {row['measure']} | {_fmt(row['baseline_tokens_per_s'])} | "
                     f"{_fmt(row['eagle3_tokens_per_s'])} | {_fmt(row['speedup'], '.2f', 'x')} | "
                     f"{'yes' if row['pays'] else 'no'} |")
    return [*lines, "", str(data.get("crossover_line") or ""), ""]


def sweep_lines(sweep: Mapping[str, Any] | None) -> list[str]:
    """Each swept setting's verdict and speedup per level, and the best setting per level."""
    if not sweep:
        return []
    levels = list(sweep["levels"])
    lines = ["## Sweep of speculative settings", "",
             "| setting (steps:topk:draft tokens) | verdict | accept length | "
             + " | ".join(f"speedup at {n}" for n in levels) + " |",
             "|---|---|---|" + "---|" * len(levels)]
    for entry in sweep["settings"]:
        speedups = {row["concurrency"]: row["speedup"] for row in entry["levels"]}
        own = " (the stack's)" if entry["configured"] else ""
        lines.append(f"| {entry['setting']}{own} | {entry['verdict']} | {_fmt(entry['accept_length'], '.2f')} | "
                     + " | ".join(_fmt(speedups.get(n), ".2f", "x") for n in levels) + " |")
    return [*lines, "", "Best setting per level:", "", *[f"- {line}" for line in sweep["recommendation"]], ""]


def _identity(image: Mapping[str, Any]) -> str:
    """The registry digest; a local build has none, so its image id (an older report kept it as the digest)."""
    if image.get("digest"):
        return f"digest `{image['digest']}`"
    if image.get("runner") == "process" and image.get("id"):
        return f"environment id `{image['id']}`"
    return f"image id `{image['id']}`" if image.get("id") else "digest `unknown`"
