"""The host commands behind `invoke patches.*`: check against real wheels, apply/verify trees, list."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from clirun import run_invoke
from patch_fixtures import KIMI, KIMI_FILE, KIMI_METHODS, PATCHES_DIR, class_members, make_tree, pristine, target
from rich.console import Console

from sglstack.cli.patches import apply_command, check_command, list_command, verify_command
from sglstack.core.errors import PatchCommandError, SglstackError
from sglstack.patches.host import check_version

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.network

STACKS = """
defaults:
  base_image: nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
  serving: {model: moonshotai/Kimi-K2.5}
stacks:
  old:
    sglang: {version: "0.5.9"}
    patches: [kimi-k25-eagle3]
  strict-new:
    sglang: {version: "0.5.10"}
    patches: [kimi-k25-eagle3]
    patch_policy: {on_upstream: error}
  lenient-new:
    sglang: {version: "0.5.10"}
    patches: [kimi-k25-eagle3]
  clean:
    sglang: {version: "0.5.10"}
"""


@pytest.fixture
def stacks_file(tmp_path) -> Path:
    path = tmp_path / "stacks.yaml"
    path.write_text(STACKS)
    return path


def _console() -> Console:
    return Console(record=True, width=200, file=io.StringIO())


@pytest.mark.parametrize(
    ("version", "outcome", "ok"),
    [
        ("0.5.9", "applied", True),
        ("0.5.10", "already upstream", True),
        ("0.5.11", "already upstream", True),
    ],
)
def test_check_version_against_real_wheels(version, outcome, ok):
    (row,) = check_version(version, [KIMI])
    assert (row.outcome, row.ok) == (outcome, ok)
    if outcome == "already upstream":
        assert "retire" in row.detail


def test_check_command_tables_and_exit_codes(stacks_file):
    out = _console()
    assert check_command(sglang="0.5.9", console=out) == 0
    assert check_command(stack="old", stacks_file=stacks_file, console=out) == 0
    assert check_command(stack="lenient-new", stacks_file=stacks_file, console=out) == 0
    assert check_command(stack="strict-new", stacks_file=stacks_file, console=out) == 1
    assert check_command(stack="clean", stacks_file=stacks_file, console=out) == 0
    text = out.export_text()
    assert "applied" in text and "already upstream" in text and "no patches to check" in text
    assert "1 of 1 patch(es) would fail" in text


def test_check_out_of_range_fails():
    out = _console()
    assert check_command(sglang="0.5.8", console=out) == 1
    assert "out of range" in out.export_text()


def test_check_needs_exactly_one_selector(stacks_file):
    with pytest.raises(PatchCommandError, match="exactly one"):
        check_command(console=_console())
    with pytest.raises(SglstackError, match="unknown stack"):
        check_command(stack="nope", stacks_file=stacks_file, console=_console())


def test_apply_and_verify_a_tree(tmp_path, stacks_file):
    root = make_tree(tmp_path / "tree", pristine("0.5.9"), version="0.5.9")
    manifest = tmp_path / "patches.json"
    with pytest.raises(PatchCommandError, match="not a member of the class"):
        verify_command(root, patch=KIMI, console=_console())
    assert apply_command(root, stack="old", stacks_file=stacks_file, manifest=manifest, console=_console()) == 0
    assert class_members(target(root))[-3:] == list(KIMI_METHODS)
    assert verify_command(root, stack="old", stacks_file=stacks_file, manifest=manifest, console=_console()) == 0
    assert verify_command(root, patch=KIMI, console=_console()) == 0


def test_apply_refuses_a_tree_of_another_version(tmp_path, stacks_file):
    root = make_tree(tmp_path / "tree", pristine("0.5.10"), version="0.5.10")
    with pytest.raises(PatchCommandError, match=r"does not match sglang 0\.5\.10"):
        apply_command(root, stack="old", stacks_file=stacks_file, console=_console())
    assert target(root) == pristine("0.5.10")


def test_list_shows_ranges_and_users(stacks_file):
    out = _console()
    assert list_command(stacks_file, console=out) == 0
    text = out.export_text()
    assert KIMI in text and ">=0.5.9,<0.5.10" in text and "old, strict-new, lenient-new" in text


def _invoke(*args: str) -> subprocess.CompletedProcess:
    return run_invoke(*args, cwd=REPO, timeout=120)


def test_invoke_tasks_exit_codes_and_one_line_errors(tmp_path):
    root = make_tree(
        tmp_path / "tree",
        pristine("0.5.9").replace(b"class KimiK25ForConditionalGeneration(", b"class KimiK25Renamed("),
    )
    failed = _invoke("patches.apply", "--root", str(root), "--patch", KIMI)
    assert failed.returncode != 0
    assert failed.stderr.strip().splitlines()[-1] == (
        f"error: patch '{KIMI}': {KIMI_FILE}: class KimiK25ForConditionalGeneration: class not found at the top "
        "level of the file"
    )
    checked = _invoke("patches.check", "--sglang", "0.5.10")
    assert checked.returncode == 0 and "already upstream" in checked.stdout
    assert PATCHES_DIR.is_dir()
