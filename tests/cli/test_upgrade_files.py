"""`invoke upgrade` refuses what it cannot write before any work, as a user runs it: one line, no traceback.

Each refusal comes before the package index is asked for anything (these tests run with no network), so the
only work an unwritable output could have wasted is never started.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from clirun import run_invoke
from tmpfs_fixtures import tmpfs

STACKS = """\
defaults:
  python: "3.12"
  serving:
    model: org/model
stacks:
  a:
    base_image: debian:bookworm-slim
    sglang: &sg
      version: 0.5.9
  b:
    inherits: a
"""


def upgrade(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_invoke("upgrade", "--sglang", "0.5.10", "--stacks-file", "stacks.yaml", *args, cwd=cwd,
                      env={"SGLSTACK_BUILD_DIR": str(cwd / "build"), **(env or {})}, timeout=120)


@pytest.fixture()
def checkout(tmp_path) -> Path:
    (tmp_path / "stacks.yaml").write_text(STACKS)
    (tmp_path / "out").mkdir()
    (tmp_path / "locks").mkdir()
    # not a lock the run can read: a run that got past the checks would stop there, never asking the index
    (tmp_path / "locks" / "a.txt").write_text("a lock\n")
    return tmp_path


@pytest.mark.parametrize(("args", "line"), [
    (("--stack", "a", "--json-out", "out"), "error: upgrade: --json-out out: is a folder (give the path of a file)"),
    (("--stack", "a", "--json-out", "stacks.yaml"),
     "error: upgrade: --json-out stacks.yaml: is the stacks file stacks.yaml, an input of `invoke upgrade` (never "
     "overwritten): give another path"),
    (("--stack", "a", "--json-out", "locks/a.txt"),
     "error: upgrade: --json-out locks/a.txt: is the lock locks/a.txt, an input of `invoke upgrade` (never "
     "overwritten): give another path"),
    (("--stack", "a", "--write"),
     "error: stacks.yaml: stack 'a': --write would also change stack 'b', which inherits it: write the upgrade as "
     "a new stack with --as NEW instead"),
])
def test_bad_outputs_and_a_shared_stack_are_one_line_before_any_work(checkout, args, line) -> None:
    proc = upgrade(checkout, *args)
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, [line])
    assert (checkout / "stacks.yaml").read_text() == STACKS and (checkout / "locks" / "a.txt").read_text() == "a lock\n"
    assert sorted(p.name for p in checkout.iterdir()) == ["locks", "out", "stacks.yaml"]


def read_only_tmpfs(folder: Path, files: dict[str, str]):
    """`folder` as a read-only tmpfs holding `files`."""
    def write(root: Path) -> None:
        for name, text in files.items():
            (root / name).write_text(text)
    return tmpfs(folder, read_only=True, fill_first=write)


def test_a_read_only_checkout_is_one_line_before_any_work(tmp_path) -> None:
    with read_only_tmpfs(tmp_path / "checkout", {"stacks.yaml": STACKS}) as checkout:
        proc = upgrade(checkout, "--stack", "b", "--write", env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})
        assert (proc.returncode, proc.stderr.strip().splitlines()) == (
            1, [f"error: --write: the stacks file {checkout / 'stacks.yaml'}: cannot be written (Read-only file "
                "system)"])
        proc = upgrade(checkout, "--stack", "b")  # the report's folder, build/ in the checkout
        assert (proc.returncode, proc.stderr.strip().splitlines()) == (
            1, [f"error: the upgrade's report {checkout / 'build' / 'b' / 'upgrade' / 'report.json'}: cannot be "
                "written (Read-only file system)"])
