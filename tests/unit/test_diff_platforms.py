"""`invoke diff` of the locks of a stack built for several platforms: the per-platform lock
(`locks/NAME.OS-ARCH.txt`) is read as a lock, each side is named with its platform, and two locks of different
platforms are compared (not refused), the heading saying so."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from sglstack.cli.diff import diff_command
from sglstack.core.jsonreport import JsonReport
from sglstack.diff.compare import print_diff, snapshot_diff
from sglstack.diff.sources import load_snapshot
from sglstack.lockfile.model import Lock, LockedPackage, lock_path
from sglstack.lockfile.text import write_lock

HASH = "sha256:" + "a" * 64


def _lock(platform: str, **versions: str) -> Lock:
    return Lock("gb", "0" * 64, "2026-12-01T00:00:00Z", "uv 0.9.0", "3.12", (platform,), ("sglang",),
                tuple(LockedPackage(n, v, "sglang", hashes=(HASH,)) for n, v in versions.items()))


def _printed(a: str, b: str) -> list[str]:
    console = Console(file=io.StringIO(), width=240, color_system=None)
    print_diff(snapshot_diff(load_snapshot(a), load_snapshot(b)), console)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


def test_two_platforms_locks_are_compared_and_the_heading_names_each_platform(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # short names: the heading is not wrapped
    stacks = Path("stacks.yaml")
    amd, arm = lock_path(stacks, "gb"), lock_path(stacks, "gb", "linux/arm64")
    write_lock(amd, _lock("linux/amd64", sglang="0.5.23", nvidia_x86="1.0"))
    write_lock(arm, _lock("linux/arm64", sglang="0.5.23"))
    text = " ".join(_printed(str(amd), str(arm)))  # the table's title wraps at the table's width
    assert (f"A = {amd} (lock, linux/amd64) B = {arm} (lock, linux/arm64) two platforms: A is linux/amd64, "
            "B is linux/arm64 (a package only one platform installs differs for that alone)") in text
    assert diff_command(str(amd), str(arm), as_json=JsonReport(stdout=True)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["a"] == f"{amd} (lock, linux/amd64)" and doc["b"] == f"{arm} (lock, linux/arm64)"
    assert doc["platform"] == {"name": "platform", "before": "linux/amd64", "after": "linux/arm64", "kind": "changed"}
    assert doc["packages"] == [{"name": "nvidia-x86", "before": "1.0", "after": None, "kind": "removed"}]


def test_two_locks_of_one_further_platform_name_it_and_no_platform_change(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    old, new = Path("gb.linux-arm64.txt"), Path("locks") / "gb.linux-arm64.txt"
    write_lock(old, _lock("linux/arm64", sglang="0.5.22"))
    write_lock(new, _lock("linux/arm64", sglang="0.5.23"))
    diff = snapshot_diff(load_snapshot(str(old)), load_snapshot(str(new)))
    assert diff.platform is None and (diff.a, diff.b) == (f"{old} (lock, linux/arm64)", f"{new} (lock, linux/arm64)")
    assert not [line for line in _printed(str(old), str(new)) if line.startswith("two platforms")]
    # the same packages on two platforms: no difference, and still said which platforms
    write_lock(new, _lock("linux/amd64", sglang="0.5.22"))
    assert _printed(str(old), str(new))[:2] == [
        f"no difference between {old} (lock, linux/arm64) and {new} (lock, linux/amd64)",
        "two platforms: A is linux/arm64, B is linux/amd64 (a package only one platform installs differs "
        "for that alone)"]
