"""What changed since the last passing run: the `invoke diff` command for two images, and its short form.

The regression gate compares tokens/s with the last passing run of the same stack and settings; when
that run smoked another image, the report says how to see the difference (`invoke diff OLD NEW`) and,
when this host can still read both images (the engine has them, or build records name their ids),
what changed in packages, patches and SGLang. Nothing here asks a registry: Smoke knows none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core.errors import SglstackError
from ..diff.compare import Snapshot, diff_invocation_for, diff_summary, image_name_for_diff, snapshot_diff

# Reads one image by name from this host only; None when nothing here names it.
ReadLocal = Callable[[str], Snapshot | None]


def same_image(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.get("id") and b.get("id"):
        return a.get("id") == b.get("id")
    return bool(a.get("digest")) and a.get("digest") == b.get("digest")


def _read(image: Mapping[str, Any], read: ReadLocal) -> tuple[Snapshot | None, str | None]:
    names = [n for n in (image.get("id"), image_name_for_diff(image), image.get("ref")) if n]
    try:
        for name in dict.fromkeys(str(n) for n in names):
            found = read(name)
            if found is not None:
                return found, None
    except SglstackError as exc:
        return None, str(exc)
    return None, f"{image_name_for_diff(image)} is no longer on this host (no local image, no build record)"


def since_last_pass(reference: Mapping[str, Any] | None, image: Mapping[str, Any],
                    read: ReadLocal) -> dict[str, Any] | None:
    """None when the gate had no reference or smoked the same image; else the command and, if readable, the
    summary (`summary: null` and `unreadable` saying why when one side cannot be read here)."""
    if reference is None:
        return None
    old = reference.get("image") or {}
    if not isinstance(old, Mapping) or not old or same_image(old, image):
        return None
    old_name, new_name = image_name_for_diff(old), image_name_for_diff(image)
    out: dict[str, Any] = {"last_pass_time": reference.get("time"), "last_pass_image": old_name,
                           "command": diff_invocation_for(new_name, old_name), "summary": None, "unreadable": None}
    before, why_before = _read(old, read)
    after, why_after = _read(image, read)
    if before is None or after is None:
        out["unreadable"] = why_before or why_after
        return out
    out["summary"] = diff_summary(snapshot_diff(before, after))
    return out


def summary_lines(since: Mapping[str, Any]) -> list[str]:
    """The Markdown lines of a report's `since_last_pass`."""
    lines = [f"The last passing run ({since.get('last_pass_time')}) smoked `{since['last_pass_image']}`; "
             f"see what changed with `{since['command']}`.", ""]
    summary = since.get("summary")
    if summary is None:
        return [*lines, f"No summary: {since.get('unreadable')}.", ""]
    if summary["identical"]:
        return [*lines, "Both images hold the same packages, patches and SGLang.", ""]
    pk = summary["packages"]
    shown = "; ".join(pk["first"]) + ("; ..." if len(pk["first"]) < pk["added"] + pk["removed"] + pk["changed"] else "")
    lines.append(f"- packages: {pk['added']} added, {pk['removed']} removed, {pk['changed']} changed"
                 + (f" ({shown})" if shown else ""))
    lines.append(f"- patches: {'; '.join(summary['patches']) or 'unchanged'}")
    sglang = summary["sglang"] or "unchanged"
    lines.append(f"- SGLang: {sglang}" + (f" ({summary['sglang_commits']})" if summary.get("sglang_commits") else ""))
    if summary["base"]:
        lines.append(f"- base image: {'; '.join(summary['base'])}")
    lines += [f"- {u}" for u in summary["unknown"]]
    return [*lines, ""]
