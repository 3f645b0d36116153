"""`upgrade --write` edits exactly one stack, atomically.

One stack: whatever the file shares between stacks (a YAML anchor on a mapping, a list, a scalar or a whole
entry, in `defaults:` or a stack; an `inherits:` chain), every OTHER stack loads the same after the write as
before, compared as whole model dumps; what cannot be kept so is refused before any work, in one line.

Atomically: the matrix is locked for the run, written through a link with its mode, a new lock takes its
siblings' mode, a full disk (a real small tmpfs, and ENOSPC at the write) leaves both files as they were and no
temporary file; `--json` is checked before the work, never an input. The engines are the doubles of
test_upgrade_command (no package index, no resolver).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from tmpfs_fixtures import fill, tmpfs
from upgrade_fixtures import STACKS, World, lock_of

from sglstack.cli.reporting import json_report
from sglstack.cli.upgrade import UpgradeOptions, upgrade_command
from sglstack.config.matrix import load_matrix
from sglstack.core import errors, safefiles
from sglstack.core.folderlock import BUSY_EXIT, FileBusy, file_lock
from sglstack.core.jsonreport import JsonReport
from sglstack.core.options import BadOption
from sglstack.core.safefiles import OutputNotWritable
from sglstack.lockfile.model import lock_path
from sglstack.lockfile.text import render_lock
from sglstack.upgrade import edit
from sglstack.upgrade import inputs as upgrade_inputs
from sglstack.upgrade import locks as upgrade_locks
from sglstack.upgrade.stacksfile import edited

HEAD = 'defaults:\n  python: "3.12"\n  serving:\n    model: org/model\n\nstacks:\n'


def entry(name: str, body: str) -> str:
    return f"  {name}:\n" + "".join(f"    {line}\n" for line in body.splitlines())


PLAIN = "base_image: debian:bookworm-slim\nsglang:\n  version: 0.5.9"


def dumps(stacks_file: Path) -> dict[str, str]:
    """Every stack's resolved config, as the bytes a comparison sees."""
    return {name: json.dumps(stack.model_dump(mode="json"), sort_keys=True)
            for name, stack in load_matrix(stacks_file).stacks.items()}


@pytest.fixture()
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    return tmp_path


def run(stacks_file: Path, stack: str, world: World, **kw: Any) -> int:
    return upgrade_command(str(stacks_file), stack, "0.5.10", engines=world.engines(), **kw)


def report(workdir: Path, stack: str) -> dict[str, Any]:
    return json.loads((workdir / "build" / stack / "upgrade" / "report.json").read_text())


# ---- one stack: anchors -----------------------------------------------------------------------------

SHAPES = {
    # an anchor on a mapping the upgrade edits, in the upgraded stack; the other stack aliases it
    "mapping, defined here": (
        entry("a", "base_image: debian:bookworm-slim\nsglang: &sg\n  version: 0.5.9   # the pin")
        + entry("b", "base_image: debian:bookworm-slim\nsglang: *sg"), "a",
        ["stack 'a': `sglang` was shared with stack 'b' through a YAML anchor: the upgrade writes 'a''s own copy, "
         "and stack 'b' keeps the old values"]),
    # the same, upgrading the stack that holds the alias
    "mapping, aliased here": (
        entry("a", "base_image: debian:bookworm-slim\nsglang: &sg\n  version: 0.5.9")
        + entry("b", "base_image: debian:bookworm-slim\nsglang: *sg") + entry("c", PLAIN.replace(
            "sglang:\n  version: 0.5.9", "sglang: *sg")), "b",
        ["stack 'b': `sglang` was shared with stacks 'a', 'c' through a YAML anchor: the upgrade writes 'b''s own "
         "copy, and stacks 'a', 'c' keep the old values"]),
    # a whole entry aliased by another
    "whole entry": (entry("a", PLAIN).replace("  a:\n", "  a: &a\n") + "  b: *a\n", "a",
                    ["stack 'a': the whole entry was shared with stack 'b' through a YAML anchor: the upgrade writes "
                     "'a''s own copy, and stack 'b' keeps the old values"]),
    "whole entry, the alias upgraded": (
        entry("a", PLAIN).replace("  a:\n", "  a: &a\n") + "  b: *a\n", "b",
        ["stack 'b': the whole entry was shared with stack 'a' through a YAML anchor: the upgrade writes 'b''s own "
         "copy, and stack 'a' keeps the old values"]),
    # a scalar the upgrade replaces (the description), anchored here
    "scalar": (entry("a", "description: &d SGLang 0.5.9 on Debian\n" + PLAIN)
               + entry("b", "description: *d\n" + PLAIN), "a", []),
    # a list anchored in the upgraded stack (the upgrade does not edit it: it stays shared)
    "list": (entry("a", PLAIN + "\nplatforms: &p [linux/amd64]") + entry("b", PLAIN + "\nplatforms: *p"), "a", []),
    # a mapping in `defaults:` that a stack aliases: defaults hold for every stack
    "defaults": (entry("a", "base_image: debian:bookworm-slim\nsglang: *sg") + entry("b", PLAIN), "a",
                 ["stack 'a': `sglang` was shared with `defaults` through a YAML anchor: the upgrade writes 'a''s own "
                  "copy, and `defaults` keeps the old values"]),
    # a child of another stack, upgraded: its parent and siblings stay
    "the child of a chain": (entry("a", PLAIN) + entry("b", "inherits: a\nsglang:\n  version: 0.5.9")
                             + entry("c", "inherits: a"), "b", []),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_write_changes_the_named_stack_and_no_other(workdir, shape) -> None:
    body, name, notes = SHAPES[shape]
    head = HEAD.replace("  python:", "  sglang: &sg\n    version: 0.5.9\n  python:") if shape == "defaults" else HEAD
    stacks_file = workdir / "stacks.yaml"
    stacks_file.write_text(head + body)
    before = dumps(stacks_file)
    assert run(stacks_file, name, World(workdir, lock=lock_of(name, sglang="0.5.10")), write=True) == 0
    after = dumps(stacks_file)
    assert {n: d for n, d in after.items() if n != name} == {n: d for n, d in before.items() if n != name}
    assert load_matrix(stacks_file).get(name).sglang.version == "0.5.10"
    assert report(workdir, name)["notes"] == notes
    assert lock_path(stacks_file, name).is_file()


def test_the_anchor_stays_with_the_others_and_the_upgraded_entry_gets_its_own_copy(workdir) -> None:
    stacks_file = workdir / "stacks.yaml"
    body, name, _ = SHAPES["mapping, defined here"]
    stacks_file.write_text(HEAD + body)
    assert run(stacks_file, name, World(workdir, lock=lock_of(name, sglang="0.5.10")), write=True) == 0
    assert stacks_file.read_text() == HEAD + (
        "  a:\n    base_image: debian:bookworm-slim\n    sglang:\n      version: 0.5.10  # the pin\n"
        "  b:\n    base_image: debian:bookworm-slim\n    sglang:\n      version: 0.5.9   # the pin\n")


# hypothesis: stacks whose `sglang` and `description` are their own, or aliases of an earlier stack's anchor, or
# whole entries aliasing an earlier one; any stack upgraded; the others load the same
@st.composite
def matrices(draw: st.DrawFn) -> tuple[str, str]:
    n = draw(st.integers(2, 5))
    text = HEAD
    anchored: list[str] = []
    for i in range(n):
        name = f"s{i}"
        if any(a.startswith("e") for a in anchored) and draw(st.booleans()):
            text += f"  {name}: *{draw(st.sampled_from([a for a in anchored if a.startswith('e')]))}\n"
            continue
        whole = draw(st.booleans())
        if whole:
            anchored.append(f"e{i}")
        lines = ["base_image: debian:bookworm-slim"]
        sglang_from = [a for a in anchored if a.startswith("v")]
        if sglang_from and draw(st.booleans()):
            lines.append(f"sglang: *{draw(st.sampled_from(sglang_from))}")
        else:
            anchor = f" &v{i}" if draw(st.booleans()) else ""
            lines += [f"sglang:{anchor}", "  version: 0.5.9"]
            if anchor:
                anchored.append(f"v{i}")
        text += f"  {name}:{' &e' + str(i) if whole else ''}\n" + "".join(f"    {line}\n" for line in lines)
        if draw(st.booleans()):
            text += "\n    # a comment between entries\n"
    return text, f"s{draw(st.integers(0, n - 1))}"


@settings(derandomize=True, max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(matrices(), st.booleans())
def test_any_sharing_of_anchors_moves_no_other_stack(tmp_path, case, describe) -> None:
    text, name = case
    original = tmp_path / "stacks.yaml"
    original.write_text(text)
    edits: dict[str, Any] = {"sglang": {"version": "0.5.10"}, **({"description": "moved"} if describe else {})}
    out = edited(text, file="stacks.yaml", stack=name, edits=edits, as_name=None)
    upgraded = tmp_path / "upgraded.yaml"
    upgraded.write_text(out.text)
    before, after = dumps(original), dumps(upgraded)
    assert {n: d for n, d in after.items() if n != name} == {n: d for n, d in before.items() if n != name}
    assert load_matrix(upgraded).get(name).sglang.version == "0.5.10"
    assert "&" not in out.text.split(f"  {name}:")[1].split("\n  s")[0]  # no anchor of its own kept: a copy


def test_an_anchored_value_inside_a_copied_node_stays_the_others_anchor(tmp_path) -> None:
    """The copy carries no anchor of its own, a scalar's included (two `&u` would not load)."""
    text = HEAD + entry("a", PLAIN + "\ntorch: &t\n  version: 2.9.1\n  index_url: &u https://x.example/whl\n"
                        "  packages: []") + entry("b", PLAIN + "\ntorch: *t") + entry(
        "c", PLAIN + "\ntorch:\n  version: 2.9.0\n  index_url: *u\n  packages: []")
    original = tmp_path / "stacks.yaml"
    original.write_text(text)
    out = edited(text, file="stacks.yaml", stack="a", edits={"torch": {"version": "2.10.0"}}, as_name=None)
    upgraded = tmp_path / "upgraded.yaml"
    upgraded.write_text(out.text)
    before, after = dumps(original), dumps(upgraded)
    assert (after["b"], after["c"]) == (before["b"], before["c"])
    assert load_matrix(upgraded).get("a").torch.version == "2.10.0"  # type: ignore[union-attr]
    assert out.text.count("&u") == 1 and out.notes == (
        "stack 'a': `torch` was shared with stack 'b' through a YAML anchor: the upgrade writes 'a''s own copy, and "
        "stack 'b' keeps the old values",)


# ---- one stack: inherits, and what cannot be edited alone -------------------------------------------------

CHAIN = HEAD + entry("a", PLAIN) + entry("b", "inherits: a") + entry("c", "inherits: b") + entry("d", PLAIN)


@pytest.mark.parametrize(("name", "message"), [
    ("a", "stack 'a': --write would also change stacks 'b', 'c', which inherit it: write the upgrade as a new stack "
          "with --as NEW instead"),
    ("b", "stack 'b': --write would also change stack 'c', which inherits it: write the upgrade as a new stack with "
          "--as NEW instead"),
])
def test_a_stack_others_inherit_is_refused_with_their_names_before_any_work(workdir, name, message) -> None:
    stacks_file = workdir / "stacks.yaml"
    stacks_file.write_text(CHAIN)
    world = World(workdir, lock=lock_of(name, sglang="0.5.10"))
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        run(stacks_file, name, world, write=True)
    assert str(err.value) == f"{stacks_file}: {message}" and err.value.exit_code == 2
    assert world.calls == [] and stacks_file.read_text() == CHAIN and not (workdir / "locks").exists()


def test_a_stack_others_inherit_upgrades_as_a_new_stack_and_reports_without_write(workdir) -> None:
    stacks_file = workdir / "stacks.yaml"
    stacks_file.write_text(CHAIN)
    before = dumps(stacks_file)
    world = World(workdir, lock=lock_of("a2", sglang="0.5.10"))
    assert run(stacks_file, "a", world, as_name="a2", write=True) == 0
    assert {n: d for n, d in dumps(stacks_file).items() if n != "a2"} == before
    # without --write the report says what --write would do
    assert run(stacks_file, "a", World(workdir, lock=lock_of("a", sglang="0.5.10"))) == 0
    assert report(workdir, "a")["notes"] == [
        "--write would be refused: the edit also changes stacks 'b', 'c' (write the upgrade as a new stack with "
        "--as NEW)"]


def test_an_edit_that_would_move_another_stack_writes_nothing(workdir, monkeypatch) -> None:
    """The last guard, whatever the editor does: any other stack that loads differently stops the write."""
    stacks_file = workdir / "stacks.yaml"
    text = HEAD + entry("a", PLAIN) + entry("b", PLAIN)
    stacks_file.write_text(text)
    real = edit.edited

    def careless(*args: Any, **kw: Any):
        out = real(*args, **kw)
        return type(out)(out.text.replace("version: 0.5.9", "version: 0.5.10"), out.notes)

    monkeypatch.setattr(edit, "edited", careless)
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        run(stacks_file, "a", World(workdir, lock=lock_of("a", sglang="0.5.10")), write=True)
    assert str(err.value) == (f"{stacks_file}: stack 'a': --write would also change stack 'b': nothing written "
                              "(write the upgrade as a new stack with --as NEW)")
    assert stacks_file.read_text() == text and not lock_path(stacks_file, "a").exists()


def test_a_merge_key_is_refused_in_one_line_before_any_work(workdir) -> None:
    stacks_file = workdir / "stacks.yaml"
    text = HEAD + entry("a", PLAIN + "\nserving: &srv\n  model: org/model") + entry("b", PLAIN + "\nserving:\n"
                                                                                  "  <<: *srv\n  port: 30001")
    stacks_file.write_text(text)
    world = World(workdir)
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        run(stacks_file, "a", world, write=True)
    assert str(err.value) == f"{stacks_file}:18: YAML merge keys (<<) are not supported" and world.calls == []
    assert stacks_file.read_text() == text


# ---- atomically: the lock, links, modes -------------------------------------------------------------

@pytest.fixture()
def repo(workdir) -> Path:
    (workdir / "stacks.yaml").write_text(STACKS)
    return workdir / "stacks.yaml"


def test_a_second_write_of_the_matrix_is_refused_at_once_and_writes_nothing(repo, workdir) -> None:
    world = World(workdir, lock=lock_of("s1", sglang="0.5.10"))
    with file_lock(repo, "upgrade --write"), pytest.raises(FileBusy) as err:
        run(repo, "s1", world, write=True)
    assert str(err.value) == (f"{repo} is busy: another task is rewriting it or writing from it: run `invoke "
                              "upgrade --write` again when that one ends")
    assert err.value.exit_code == BUSY_EXIT == 75 and world.calls == [] and repo.read_text() == STACKS
    assert sorted(p.name for p in workdir.iterdir()) == ["stacks.yaml"]  # no lock file beside it either
    # the lock is held for the whole run: a second writer during the resolution is refused
    refused: list[str] = []

    def resolve(stack, previous, glibc):
        with contextlib.suppress(FileBusy), file_lock(repo, "upgrade --write"):
            refused.append("not refused")
        refused.append("refused") if not refused else None
        return lock_of(stack.name, sglang="0.5.10")

    world.resolve = resolve  # type: ignore[method-assign]
    assert run(repo, "s1", world, write=True) == 0
    assert refused == ["refused"]


def test_an_edit_made_while_the_upgrade_ran_is_never_lost(repo, workdir) -> None:
    """A writer that takes no lock (a person's editor, a script): the upgrade writes only over the text it read."""
    world = World(workdir, lock=lock_of("s1-next", sglang="0.5.10"))
    theirs = STACKS + entry("mine", PLAIN)

    def resolve(stack, previous, glibc):
        repo.write_text(theirs)
        return lock_of(stack.name, sglang="0.5.10")

    world.resolve = resolve  # type: ignore[method-assign]
    with pytest.raises(errors.SglstackError) as err:
        run(repo, "s1", world, as_name="s1-next", write=True)
    assert str(err.value) == (f"{repo}: changed while the upgrade ran: nothing written (run the upgrade again on the "
                              "file as it is now)")
    assert repo.read_text() == theirs and not lock_path(repo, "s1-next").exists()


def test_write_goes_through_a_link_to_the_stacks_file_and_keeps_modes(workdir) -> None:
    real = workdir / "config" / "matrix.yaml"
    real.parent.mkdir()
    real.write_text(STACKS)
    real.chmod(0o640)
    link = workdir / "stacks.yaml"
    link.symlink_to("config/matrix.yaml")
    (workdir / "locks").mkdir()
    sibling = workdir / "locks" / "other.txt"
    sibling.write_text("a lock\n")
    sibling.chmod(0o664)
    assert run(link, "s1", World(workdir, lock=lock_of("s1", sglang="0.5.10")), write=True) == 0
    assert link.is_symlink() and os.readlink(link) == "config/matrix.yaml"
    assert "version: 0.5.10" in real.read_text() and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert stat.S_IMODE(lock_path(link, "s1").stat().st_mode) == 0o664  # the sibling locks' mode
    assert sorted(p.name for p in real.parent.iterdir()) == ["matrix.yaml"]
    assert sorted(p.name for p in workdir.iterdir() if p.suffix != ".whl") == ["build", "config", "locks",
                                                                                "stacks.yaml"]
    # an existing lock keeps its own mode
    lock_path(link, "s1").chmod(0o600)
    assert upgrade_command(str(link), "s1", "0.5.11rc1", engines=World(
        workdir, lock=lock_of("s1", sglang="0.5.11rc1")).engines(), write=True) == 0
    assert stat.S_IMODE(lock_path(link, "s1").stat().st_mode) == 0o600


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_a_first_lock_is_0644_under_the_umask(repo, workdir, mask, mode) -> None:
    old = os.umask(mask)
    try:
        assert run(repo, "s1", World(workdir, lock=lock_of("s1", sglang="0.5.10")), write=True) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(lock_path(repo, "s1").stat().st_mode) == mode
    assert stat.S_IMODE(repo.stat().st_mode) == 0o644  # the stacks file kept its own


# ---- atomically: full disks ------------------------------------------------------------------------

def test_a_full_disk_leaves_both_files_as_they_were_and_no_temp_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    with tmpfs(tmp_path / "fs") as fs:
        stacks_file = fs / "stacks.yaml"
        stacks_file.write_text(STACKS)
        (fs / "locks").mkdir()
        old_lock = render_lock(lock_of("s1", sglang="0.5.9"), stacks_file="stacks.yaml")
        lock_path(stacks_file, "s1").write_text(old_lock)
        world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
        world.coverage = lambda stack: fill(fs) and None  # type: ignore[method-assign]  # fills it mid-run
        with pytest.raises(OutputNotWritable) as err:
            run(stacks_file, "s1", world, write=True)
        assert str(err.value) == (f"{lock_path(stacks_file, 's1')}: cannot be written (No space left on device); no "
                                  "file was replaced")
        assert stacks_file.read_text() == STACKS and lock_path(stacks_file, "s1").read_text() == old_lock
        assert sorted(p.name for p in fs.rglob("*")) == ["filler", "locks", "s1.txt", "stacks.yaml"]


@pytest.mark.parametrize("which", [1, 2])
def test_enospc_at_either_write_leaves_no_temp_file(repo, workdir, monkeypatch, which) -> None:
    calls = []
    real = safefiles.os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == which:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(safefiles.os, "fsync", fsync)
    lock_file = lock_path(repo, "s1")
    with pytest.raises(OutputNotWritable) as err:
        upgrade_locks.write_upgrade(repo, "new\n", lock_file, lock_of("s1", sglang="0.5.10"))
    assert str(err.value) == f"{[lock_file, repo][which - 1]}: cannot be written (No space left on device); no " \
                             "file was replaced"
    assert repo.read_text() == STACKS and not lock_file.exists()
    assert sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*")) == ["locks", "stacks.yaml"]


# ---- --json-out and a read-only checkout: refused before the work ---------------------------------------

TASK = "`invoke upgrade`"


def _json_out_refused(repo: Path, path: str) -> BadOption:
    """The face's check of `upgrade --json-out`, made before the task is called (`sglstack.cli.reporting`)."""
    with pytest.raises(BadOption) as err:
        json_report(UpgradeOptions(stack="s1", sglang="0.5.10", stacks_file=str(repo), json_out=path), "upgrade")
    return err.value


def test_json_to_a_folder_or_an_input_is_refused_before_any_work(repo, workdir) -> None:
    lock_path(repo, "s1").parent.mkdir()
    lock_path(repo, "s1").write_text("a lock\n")
    (workdir / "link.json").symlink_to("stacks.yaml")
    os.link(repo, workdir / "hard.json")
    (workdir / "out").mkdir()
    cases = [
        ("out", "is a folder (give the path of a file)"),
        ("stacks.yaml", f"is the stacks file {repo}, an input of {TASK} (never overwritten): give another path"),
        ("link.json", f"is the stacks file {repo}, an input of {TASK} (never overwritten): give another path"),
        ("hard.json", f"is the stacks file {repo}, an input of {TASK} (never overwritten): give another path"),
        ("locks/s1.txt", f"is the lock {lock_path(repo, 's1')}, an input of {TASK} (never overwritten): give "
                         "another path"),
        ("locks/new.json", f"is in {workdir / 'locks'}, the folder of the stacks' locks: give another path"),
    ]
    for given_path, message in cases:
        path = str(workdir / given_path)
        err = _json_out_refused(repo, path)
        assert (str(err), err.exit_code) == (f"upgrade: --json-out {path}: {message}", 2)
        assert repo.read_text() == STACKS
    assert lock_path(repo, "s1").read_text() == "a lock\n" and not (workdir / "build").exists()


def test_a_read_only_checkout_is_refused_before_any_work(tmp_path, monkeypatch) -> None:
    with tmpfs(tmp_path / "checkout") as checkout:
        (checkout / "stacks.yaml").write_text(STACKS)
        subprocess.run(["mount", "-o", "remount,ro", str(checkout)], check=True)
        monkeypatch.chdir(checkout)
        monkeypatch.delenv("SGLSTACK_BUILD_DIR", raising=False)
        world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
        with pytest.raises(OutputNotWritable) as err:  # the report's folder, build/ in the checkout
            run(Path("stacks.yaml"), "s1", world)
        assert str(err.value) == ("the upgrade's report build/s1/upgrade/report.json: cannot be written (Read-only "
                                  "file system)")
        assert sorted(p.name for p in checkout.iterdir()) == ["stacks.yaml"]
        monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
        with pytest.raises(OutputNotWritable) as err:
            run(Path("stacks.yaml"), "s1", world, write=True)
        assert str(err.value) == "--write: the stacks file " + str(checkout / "stacks.yaml") + \
            ": cannot be written (Read-only file system)"
        out = tmp_path / "ro-out"
        out.mkdir()
        with tmpfs(out) as ro:
            subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
            err = _json_out_refused(Path("stacks.yaml"), str(ro / "u.json"))
            assert str(err) == f"upgrade: --json-out {ro / 'u.json'}: cannot be written (Read-only file system)"
        assert world.calls == []


def test_invoke_lock_and_upgrade_write_of_one_matrix_refuse_each_other(repo, workdir) -> None:
    """`invoke lock` reads the matrix, resolves for minutes, writes a lock: an `upgrade --write` in between would
    leave that lock resolved for the entry it replaced."""
    from sglstack.lock import flow

    def resolved(*args: Any, **kw: Any) -> Any:
        raise AssertionError("resolved")

    with file_lock(repo, "upgrade --write"), pytest.raises(FileBusy) as err:
        flow.lock_stack(repo, "s1", compile_fn=resolved)
    assert str(err.value) == (f"{repo} is busy: another task is rewriting it or writing from it: run `invoke lock` "
                              "again when that one ends")
    world = World(workdir, lock=lock_of("s1", sglang="0.5.10"))
    with file_lock(repo, "lock", shared=True), pytest.raises(FileBusy):
        run(repo, "s1", world, write=True)
    assert world.calls == [] and repo.read_text() == STACKS and not (workdir / "locks").exists()


def test_write_of_a_missing_stacks_file_says_so_not_that_it_cannot_be_locked(workdir) -> None:
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        run(workdir / "missing.yaml", "s1", World(workdir), write=True)
    assert str(err.value) == f"{workdir / 'missing.yaml'}: file not found"


def test_a_full_disk_while_the_upgraded_matrix_is_checked_is_one_line_and_leaves_nothing(repo, workdir,
                                                                                         monkeypatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safefiles.os, "fsync", full)
    with pytest.raises(OutputNotWritable) as err:
        edit.upgraded_matrix(repo, STACKS, "s1")
    assert str(err.value) == f"{repo}: cannot be written (No space left on device); it is as it was"
    assert sorted(p.name for p in workdir.iterdir()) == ["stacks.yaml"]


def test_the_checks_before_the_work_make_no_folder(repo, workdir) -> None:
    """A release the index does not have is refused after the output checks: they leave nothing behind."""
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        upgrade_command(str(repo), "s1", "0.5.99", engines=World(workdir).engines(), write=True,
                                as_json=JsonReport(path=workdir / "u.json"))
    assert str(err.value) == "--sglang 0.5.99: no such release of sglang on the package index (newest: 0.5.10)"
    assert sorted(p.name for p in workdir.iterdir()) == ["stacks.yaml"]


# ---- the file's own bytes: line endings, a byte-order mark, what the editor cannot read --------------------

@pytest.mark.parametrize(("prefix", "newline"), [("", "\r\n"), ("\ufeff", "\n"), ("\ufeff", "\r\n")])
def test_write_keeps_the_file_s_line_endings_and_byte_order_mark(workdir, prefix, newline) -> None:
    """A CRLF file came back LF (and a BOM dropped): every line of every stack changed in the diff."""
    stacks_file = workdir / "stacks.yaml"
    before = HEAD + entry("a", PLAIN) + entry("b", PLAIN)
    stacks_file.write_bytes((prefix + before.replace("\n", newline)).encode("utf-8"))
    assert run(stacks_file, "a", World(workdir, lock=lock_of("a", sglang="0.5.10")), write=True) == 0
    expected = HEAD + entry("a", PLAIN.replace("0.5.9", "0.5.10")) + entry("b", PLAIN)
    assert stacks_file.read_bytes() == (prefix + expected.replace("\n", newline)).encode("utf-8")


def test_a_file_the_editor_cannot_read_is_refused_before_any_work(workdir) -> None:
    """The loader takes a tab after `version:`; the round-trip editor does not: that was found after the
    release was fetched and the lock resolved."""
    stacks_file = workdir / "stacks.yaml"
    stacks_file.write_text(HEAD + entry("a", PLAIN) + entry("b", PLAIN.replace("version: 0.5.9", "version:\t0.5.9")))
    before = stacks_file.read_bytes()
    world = World(workdir, lock=lock_of("a", sglang="0.5.10"))
    for write in (True, False):
        with pytest.raises(upgrade_inputs.UpgradeInputError) as info:
            run(stacks_file, "a", world, write=write)
        assert info.value.exit_code == 2
        assert str(info.value).startswith(f"{stacks_file}:14: cannot be edited by invoke upgrade (")
        assert "\n" not in str(info.value)
    assert world.calls == []
    assert stacks_file.read_bytes() == before
    assert not (workdir / "build").exists()


def test_json_into_the_patches_is_refused_before_any_work(repo, workdir, monkeypatch) -> None:
    """The patches are an input of the upgrade (it judges each against the new release): a report written over
    `patches/NAME/patch.toml` replaced the spec with JSON."""
    from sglstack.lock import outputs

    patches = workdir / "patches"
    (patches / "p1").mkdir(parents=True)
    spec = patches / "p1" / "patch.toml"
    spec.write_text("a spec\n")
    monkeypatch.setattr(outputs, "PATCHES_DIR", patches)
    (workdir / "spec.json").symlink_to(spec)
    for path in (str(spec), str(workdir / "spec.json"), str(patches / "p1" / "new.json")):
        err = _json_out_refused(repo, path)
        assert (str(err), err.exit_code) == (
            f"upgrade: --json-out {path}: is in {patches}, the folder of the patches: give another path", 2)
    assert spec.read_text() == "a spec\n" and repo.read_text() == STACKS
