"""How a report shows each start by phase, its kernel cache, and the warm start (Markdown lines and the chart's
panel), from the report's JSON fields alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PHASE_NAMES = ("imports", "weights", "cuda_graphs", "to_healthy", "first_token")
PHASE_LABELS = {"imports": "imports", "weights": "weights", "cuda_graphs": "CUDA graphs",
                "to_healthy": "warm-up to ready", "first_token": "first token"}
PHASE_COLORS = {"imports": "#90a4ae", "weights": "#8d6e63", "cuda_graphs": "#e53935", "to_healthy": "#fdd835",
                "first_token": "#43a047"}
KIND_LABELS = {"baseline": "baseline", "eagle3": "EAGLE-3"}


def starts(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, run) of each start the report holds phases of: cold starts, then warm ones."""
    out = [(f"{KIND_LABELS.get(kind, kind)}, cold" if data.get("warm") else KIND_LABELS.get(kind, kind), data[kind])
           for kind in ("baseline", "eagle3") if (data.get(kind) or {}).get("phases")]
    out += [(f"{KIND_LABELS.get(kind, kind)}, warm", run) for kind, run in (data.get("warm") or {}).items()
            if run.get("phases")]
    return out


EMPTY_CACHE_NOTE = ("the restored cache was empty: the cold start put no file in the kernel cache folder (a compiler "
                    "writing where no cache variable points?), so no saving is the cache's")


def empty_cache_note(run: Mapping[str, Any]) -> str | None:
    """Said beside a warm start restored from an artifact of no files that added none either: whatever it
    saved, a deployment restoring that artifact gets nothing (a server whose kernels go to a folder of its
    own, outside the one the cache variables name, is warm from that folder, on this machine only)."""
    cache = run.get("kernel_cache") or {}
    restore = cache.get("restore") or {}
    if restore.get("matched") and not restore.get("files") and not cache.get("new_files"):
        return EMPTY_CACHE_NOTE
    return None


def _s(value: Any) -> str:
    return "unknown" if value is None else f"{value:.1f}"


def start_lines(data: Mapping[str, Any]) -> list[str]:
    """The Markdown section "Start by phase" (nothing when no start was read)."""
    rows = starts(data)
    if not rows:
        return []
    lines = ["## Start by phase", "",
             "Seconds, from the server's own log lines (unknown: the line is missing). Kernel files: in the cache "
             "folder after the start (new: added by it; rewritten: there before and written again, a kernel rebuilt "
             "in place).", "",
             "| start | " + " | ".join(PHASE_LABELS[p] for p in PHASE_NAMES)
             + " | start to healthy | kernel files (new, rewritten) | cache |", "|---" * (len(PHASE_NAMES) + 4) + "|"]
    for label, run in rows:
        phases = run["phases"].get("phases_s") or {}
        cache = run.get("kernel_cache") or {}
        files = (f"{cache.get('files_after')} ({cache.get('new_files')}, {cache.get('rewritten_files', 0)})"
                 if cache else "n/a")
        restore = cache.get("restore")
        state = ("restored" if restore["matched"] else "cold: " + restore["line"].split(": ", 1)[-1]) \
            if restore else ("empty at start" if cache else "not managed")
        lines.append(f"| {label} | " + " | ".join(_s(phases.get(p)) for p in PHASE_NAMES)
                     + f" | {_s(run.get('startup_s'))} | {files} | {state} |")
    lines.append("")
    for kind, run in (data.get("warm") or {}).items():
        if run.get("saving") is not None:
            note = empty_cache_note(run)
            lines.append(f"The {KIND_LABELS.get(kind, kind)} warm start saved {run['saving']:.0%} of the cold start "
                         "to healthy" + (f"; {note}." if note else "."))
    packed = (data.get("kernel_cache") or {}).get("packed") or {}
    for kind, art in packed.items():
        lines.append(f"Kernel cache of {KIND_LABELS.get(kind, kind)}: `{art['artifact']}` ({art['files']} files, "
                     f"{art['layer_bytes']} bytes packed) in `{data['kernel_cache']['store']}`.")
    return [*lines, ""]


def draw_phases(ax: Any, data: Mapping[str, Any]) -> None:
    """Horizontal stacked bars: one per start, one segment per known phase (an unknown one is left out)."""
    rows = starts(data)
    ax.set_title("start by phase (from the server's log)", fontsize=12)
    ax.set_xlabel("seconds since the process started")
    for y, (_label, run) in enumerate(reversed(rows)):
        left = 0.0
        for phase in PHASE_NAMES:
            width = (run["phases"].get("phases_s") or {}).get(phase)
            if width is None:
                continue
            ax.barh(y, width, left=left, color=PHASE_COLORS[phase], edgecolor="white",
                    label=PHASE_LABELS[phase] if y == 0 else None)
            left += width
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)], fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="lower right", fontsize=9, framealpha=0.9)
