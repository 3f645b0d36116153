"""safefiles in process: whole-file writes, links out of the build folder, replace_folder (folder_lock:
test_folder_lock.py).

tests/cli/test_files_and_records.py checks the same rules end to end (real full disks, a second `invoke`
as a child process); these call the functions themselves, so that every refusal's line, every mode and
every leftover is checked here too. Tests run as root, where a read-only folder does not stop a write: a
failing system call is stood in for by one raising the OSError the kernel would give.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from link_refusals import LINK_OUT, _link_out, _raising

from sglstack.core import safefiles
from sglstack.core.safefiles import (
    OutputNotWritable,
    check_inside,
    containing_root,
    make_folder,
    remove_file,
    replace_folder,
    write_bytes,
    write_text,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _replaces(monkeypatch, failing: tuple[int, ...] = ()) -> list[tuple[str, str]]:
    """Record each os.replace; the calls numbered in `failing` (from 1) fail with ENOSPC."""
    calls: list[tuple[str, str]] = []
    real = os.replace

    def replace(src, dst):
        calls.append((str(src), str(dst)))
        if len(calls) in failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    return calls


# ---- _reason ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("exc", "reason"), [
    (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
    (OSError(), "OSError"),
    (PermissionError(), "PermissionError"),
    # copytree's list of (src, dst, why): the first file's failure, less its errno and file name
    (shutil.Error([("a", "b", "[Errno 28] No space left on device: 'b'"),
                   ("c", "d", "[Errno 13] Permission denied: 'd'")]), "No space left on device"),
    (shutil.Error([("a", "b", "cannot copy this: it moved")]), "cannot copy this: it moved"),  # no errno: whole
    (shutil.Error([]), "Error"),
    (shutil.Error("Destination path 'x' already exists"), "Error"),
    (shutil.Error(errno.EIO, "Input/output error"), "Input/output error"),
])
def test_a_reason_is_the_strerror_or_copytrees_first_failure_or_the_errors_kind(exc, reason):
    assert safefiles.reason_of(exc) == reason


# ---- containing_root -------------------------------------------------------------------------------

def test_the_containing_root_is_the_build_root_for_a_path_under_it_else_the_paths_own_folder(tmp_path):
    build = tmp_path / "build"
    (build / "stack").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    assert containing_root(build / "stack" / "Dockerfile", build) == build
    assert containing_root(build, build) == build
    assert containing_root(Path(os.path.relpath(build / "stack", Path.cwd())), build) == build
    assert containing_root(tmp_path / "out", build) == tmp_path / "out"  # an `--out` folder
    assert containing_root(tmp_path / "out" / "compose.yaml", build) == tmp_path / "out"  # an `--out` file
    assert containing_root(tmp_path / "buildx" / "f", build) == tmp_path / "buildx"  # a name that only starts alike


# ---- check_inside ----------------------------------------------------------------------------------

def test_links_that_stay_inside_the_root_are_fine(tmp_path):
    root = tmp_path / "build"
    (root / "a" / "real").mkdir(parents=True)
    (root / "a" / "inner").symlink_to(root / "a" / "real")
    (root / "to-root").symlink_to(root)
    (root / "relative").symlink_to("a/real")
    for path in (root / "a" / "inner" / "f", root / "to-root" / "x", root / "relative", root / "missing" / "f"):
        check_inside(root, path)  # no error
    check_inside(root, tmp_path / "elsewhere" / "f")  # not under this root: not its to check


def test_a_root_reached_through_a_link_is_compared_by_its_real_folder(tmp_path):
    (tmp_path / "real" / "stack").mkdir(parents=True)
    root = tmp_path / "build"
    root.symlink_to(tmp_path / "real")
    (tmp_path / "real" / "current").symlink_to(tmp_path / "real" / "stack")
    check_inside(root, root / "current" / "Dockerfile")  # no error


@pytest.mark.parametrize("part", ["stack", "stack/context", "stack/context/Dockerfile"])
def test_a_link_out_of_the_root_at_any_part_is_refused_naming_that_part(tmp_path, part):
    root = tmp_path / "build"
    (tmp_path / "elsewhere").mkdir()
    link = root / part
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputNotWritable) as exc:
        check_inside(root, root / "stack" / "context" / "Dockerfile")
    assert str(exc.value) == f"{link}: a link to {tmp_path / 'elsewhere'}, outside {root}: not followed {LINK_OUT}"


def test_a_link_out_of_the_root_with_a_newline_in_its_target_is_still_one_line(tmp_path):
    root = tmp_path / "build"
    root.mkdir()
    (root / "ctx").symlink_to("/no\nwhere")
    with pytest.raises(OutputNotWritable) as exc:
        check_inside(root, root / "ctx")
    assert str(exc.value) == f"{root / 'ctx'}: a link to /no\\nwhere, outside {root}: not followed {LINK_OUT}"


# ---- make_folder -----------------------------------------------------------------------------------

def test_make_folder_creates_every_missing_folder(tmp_path):
    make_folder(tmp_path, tmp_path / "a" / "b" / "c")
    make_folder(tmp_path, tmp_path / "a" / "b" / "c")  # there already: fine
    assert (tmp_path / "a" / "b" / "c").is_dir()


def test_make_folder_with_a_file_in_the_way_is_one_line(tmp_path):
    (tmp_path / "stack").write_text("x")
    with pytest.raises(OutputNotWritable) as exc:
        make_folder(tmp_path, tmp_path / "stack")
    assert str(exc.value) == f"{tmp_path / 'stack'}: cannot be written (a file is in the way of this folder)"
    assert (tmp_path / "stack").read_text() == "x"


def test_make_folder_under_a_file_names_the_reason(tmp_path):
    (tmp_path / "stack").write_text("x")
    with pytest.raises(OutputNotWritable) as exc:
        make_folder(tmp_path, tmp_path / "stack" / "context")
    assert str(exc.value) == f"{tmp_path / 'stack' / 'context'}: cannot be created (Not a directory)"


def test_make_folder_refused_by_the_system_names_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(Path, "mkdir", _raising(errno.EACCES))
    with pytest.raises(OutputNotWritable) as exc:
        make_folder(tmp_path, tmp_path / "stack")
    assert str(exc.value) == f"{tmp_path / 'stack'}: cannot be created (Permission denied)"


def test_make_folder_through_a_link_out_of_the_root_creates_nothing(tmp_path):
    root = tmp_path / "build"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "stack").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputNotWritable) as exc:
        make_folder(root, root / "stack" / "context")
    assert str(exc.value) == _link_out(root / "stack", tmp_path / "elsewhere", root)
    assert list((tmp_path / "elsewhere").iterdir()) == []


# ---- write_text / write_bytes ----------------------------------------------------------------------

def test_a_written_file_is_whole_with_mode_0644_in_new_folders_and_returned(tmp_path):
    path = tmp_path / "stack" / "context" / "Dockerfile"
    assert write_text(tmp_path, path, "FROM scratch\n# é\n") == path
    assert path.read_bytes() == "FROM scratch\n# é\n".encode()
    assert _mode(path) == 0o644
    assert write_bytes(tmp_path, path, b"\x00\xff") == path  # a second write replaces the first whole
    assert path.read_bytes() == b"\x00\xff"
    assert _mode(path) == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["Dockerfile"]  # no temp file left


def test_a_written_file_gets_the_mode_asked_for(tmp_path):
    write_text(tmp_path, tmp_path / "key", "secret", mode=0o600)
    write_bytes(tmp_path, tmp_path / "run.sh", b"#!/bin/sh\n", mode=0o755)
    assert (_mode(tmp_path / "key"), _mode(tmp_path / "run.sh")) == (0o600, 0o755)


def test_the_temp_file_is_hidden_beside_the_file_and_renamed_over_it(tmp_path, monkeypatch):
    calls = _replaces(monkeypatch)
    path = tmp_path / "compose.yaml"
    write_text(tmp_path, path, "services: {}\n")
    [(tmp, dest)] = calls
    assert dest == str(path)
    assert Path(tmp).parent == tmp_path  # the same folder, so the same filesystem: the rename is atomic
    assert re.fullmatch(r"\.compose\.yaml\.\w+\.tmp", Path(tmp).name), tmp


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "Dockerfile"
    path.write_text("old\n")
    monkeypatch.setattr(os, "fsync", _raising(errno.ENOSPC))
    with pytest.raises(OutputNotWritable) as exc:
        write_text(tmp_path, path, "new\n")
    assert str(exc.value) == f"{path}: cannot be written (No space left on device)"
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Dockerfile"]


def test_a_temp_file_that_cannot_be_removed_does_not_hide_the_failed_write(tmp_path, monkeypatch):
    path = tmp_path / "Dockerfile"
    monkeypatch.setattr(os, "fsync", _raising(errno.EIO))
    monkeypatch.setattr(os, "unlink", _raising(errno.EBUSY))
    with pytest.raises(OutputNotWritable) as exc:
        write_text(tmp_path, path, "new\n")
    assert str(exc.value) == f"{path}: cannot be written (Input/output error)"


def test_a_file_name_too_long_for_its_temp_file_is_one_line(tmp_path):
    path = tmp_path / ("x" * 250)
    with pytest.raises(OutputNotWritable) as exc:
        write_text(tmp_path, path, "x")
    assert str(exc.value) == f"{path}: cannot be written (File name too long)"
    assert list(tmp_path.iterdir()) == []


def test_a_folder_in_the_way_of_a_file_is_one_line(tmp_path):
    (tmp_path / "Dockerfile").mkdir()
    with pytest.raises(OutputNotWritable) as exc:
        write_text(tmp_path, tmp_path / "Dockerfile", "x")
    assert str(exc.value) == f"{tmp_path / 'Dockerfile'}: cannot be written (it is a folder)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Dockerfile"]


@pytest.mark.parametrize("target", ["real.txt", "real-folder"])
def test_a_link_inside_the_root_at_the_path_is_replaced_never_written_through(tmp_path, target):
    (tmp_path / "real.txt").write_text("theirs")
    (tmp_path / "real-folder").mkdir()
    path = tmp_path / "out.txt"
    path.symlink_to(tmp_path / target)
    write_text(tmp_path, path, "ours")
    assert not path.is_symlink()
    assert path.read_text() == "ours"
    assert (tmp_path / "real.txt").read_text() == "theirs"
    assert list((tmp_path / "real-folder").iterdir()) == []


def test_a_link_out_of_the_root_at_the_path_is_refused(tmp_path):
    root = tmp_path / "build"
    root.mkdir()
    (tmp_path / "theirs.txt").write_text("theirs")
    (root / "out.txt").symlink_to(tmp_path / "theirs.txt")
    with pytest.raises(OutputNotWritable) as exc:
        write_bytes(root, root / "out.txt", b"ours")
    assert str(exc.value) == (f"{root / 'out.txt'}: a link to {tmp_path / 'theirs.txt'}, outside {root}: not "
                              f"followed {LINK_OUT}")
    assert (tmp_path / "theirs.txt").read_text() == "theirs"
    assert (root / "out.txt").is_symlink()


# ---- remove_file -----------------------------------------------------------------------------------

def test_remove_file_removes_a_file_or_a_link_never_its_target_and_missing_is_fine(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "target").write_text("kept")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    remove_file(tmp_path, tmp_path / "f")
    remove_file(tmp_path, tmp_path / "link")
    remove_file(tmp_path, tmp_path / "missing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]
    assert (tmp_path / "target").read_text() == "kept"


def test_remove_file_in_a_folder_linked_out_of_the_root_is_refused(tmp_path):
    root = tmp_path / "build"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("theirs")
    (root / "stack").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputNotWritable) as exc:
        remove_file(root, root / "stack" / "f")
    assert str(exc.value) == _link_out(root / "stack", tmp_path / "elsewhere", root)
    assert (tmp_path / "elsewhere" / "f").read_text() == "theirs"


def test_remove_file_that_cannot_be_removed_names_the_reason(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(OutputNotWritable) as exc:
        remove_file(tmp_path, tmp_path / "folder")
    assert str(exc.value) == f"{tmp_path / 'folder'}: cannot be removed (Is a directory)"
    assert (tmp_path / "folder").is_dir()


# ---- replace_folder --------------------------------------------------------------------------------

def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def _fill_new(new: Path) -> None:
    (new / "Dockerfile").write_text("new\n")


def _old_context(tmp_path: Path) -> Path:
    folder = tmp_path / "stack" / "context"
    (folder / "patches").mkdir(parents=True)
    (folder / "Dockerfile").write_text("old\n")
    (folder / "patches" / "a.patch").write_text("old patch\n")
    return folder


def test_a_new_folder_is_filled_hidden_beside_it_then_renamed_in_with_mode_0755(tmp_path):
    folder = tmp_path / "stack" / "context"
    filled: list[Path] = []

    def fill(new: Path) -> None:
        filled.append(new)
        (new / "Dockerfile").write_text("new\n")
    replace_folder(tmp_path, folder, fill)
    [new] = filled
    assert new.parent == folder.parent
    assert re.fullmatch(r"\.context\.\w+\.tmp", new.name), new.name
    assert _tree(folder) == {"Dockerfile": "new\n"}
    assert _mode(folder) == 0o755
    assert sorted(p.name for p in folder.parent.iterdir()) == ["context"]


def test_an_old_folder_is_moved_aside_then_the_new_one_renamed_in_and_the_old_one_removed(tmp_path, monkeypatch):
    folder = _old_context(tmp_path)
    calls = _replaces(monkeypatch)
    replace_folder(tmp_path, folder, _fill_new)
    [(old, aside), (new, dest)] = calls
    assert (old, dest) == (str(folder), str(folder))
    assert Path(aside).parent == folder.parent and Path(new).parent == folder.parent
    assert re.fullmatch(r"\.context\.\w+\.old", Path(aside).name), aside
    assert re.fullmatch(r"\.context\.\w+\.tmp", Path(new).name), new
    assert _tree(folder) == {"Dockerfile": "new\n"}
    assert sorted(p.name for p in folder.parent.iterdir()) == ["context"]


def test_an_old_folder_that_cannot_be_removed_afterwards_does_not_fail_the_replace(tmp_path, monkeypatch):
    folder = _old_context(tmp_path)
    monkeypatch.setattr(os, "rmdir", _raising(errno.EBUSY))  # a mount point in the old context, say
    replace_folder(tmp_path, folder, _fill_new)
    assert _tree(folder) == {"Dockerfile": "new\n"}


@pytest.mark.parametrize(("error", "reason"), [
    (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
    (shutil.Error([("src/a", "dst/a", "[Errno 28] No space left on device: 'dst/a'")]), "No space left on device"),
])
def test_a_failing_fill_keeps_the_old_folder_whole_and_leaves_nothing_beside_it(tmp_path, error, reason):
    folder = _old_context(tmp_path)
    before = _tree(folder)

    def fill(new: Path) -> None:
        (new / "Dockerfile").write_text("half")
        raise error
    with pytest.raises(OutputNotWritable) as exc:
        replace_folder(tmp_path, folder, fill)
    assert str(exc.value) == f"{folder}: cannot be written ({reason})"
    assert _tree(folder) == before
    assert sorted(p.name for p in folder.parent.iterdir()) == ["context"]


def test_a_file_the_fill_cannot_write_is_named_where_it_was_going(tmp_path):
    """A full disk while the build context was filled named `.context.XXXX.tmp/tools/x.py`, a folder removed
    by the time the line is read."""
    folder = _old_context(tmp_path)

    def fill(new: Path) -> None:
        write_text(tmp_path, new / "tools" / "x.py", "x")
        raise OutputNotWritable(f"{new / 'tools' / 'y.py'}: cannot be written (No space left on device)")
    with pytest.raises(OutputNotWritable) as exc:
        replace_folder(tmp_path, folder, fill)
    assert str(exc.value) == f"{folder / 'tools' / 'y.py'}: cannot be written (No space left on device)"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["context"]


def test_a_failing_first_fill_leaves_no_folder_at_all(tmp_path):
    folder = tmp_path / "stack" / "context"
    with pytest.raises(OutputNotWritable) as exc:
        replace_folder(tmp_path, folder, _raising(errno.EIO))
    assert str(exc.value) == f"{folder}: cannot be written (Input/output error)"
    assert list(folder.parent.iterdir()) == []


def test_a_failed_swap_puts_the_old_folder_back_whole(tmp_path, monkeypatch):
    folder = _old_context(tmp_path)
    before = _tree(folder)
    calls = _replaces(monkeypatch, failing=(2,))  # moving the old one aside works; renaming the new one in fails
    with pytest.raises(OutputNotWritable) as exc:
        replace_folder(tmp_path, folder, _fill_new)
    assert str(exc.value) == f"{folder}: cannot be written (No space left on device)"
    assert _tree(folder) == before
    assert sorted(p.name for p in folder.parent.iterdir()) == ["context"]
    assert calls[2] == (calls[0][1], str(folder))  # the put-back: the aside folder renamed to its name


def test_a_put_back_that_fails_too_still_reports_the_swaps_failure(tmp_path, monkeypatch):
    folder = _old_context(tmp_path)
    calls = _replaces(monkeypatch, failing=(2, 3))
    with pytest.raises(OutputNotWritable) as exc:
        replace_folder(tmp_path, folder, _fill_new)
    [aside] = [p for p in folder.parent.iterdir() if p.name.endswith(".old")]
    assert str(exc.value) == f"{folder}: cannot be written (No space left on device); the old one is kept as {aside}"
    assert len(calls) == 3  # aside, the swap, the put-back tried
    assert not folder.exists() and _tree(aside) == {"Dockerfile": "old\n", "patches/a.patch": "old patch\n"}
    assert [p.name for p in folder.parent.iterdir() if p.name.endswith(".tmp")] == []  # the new one removed


def test_a_link_at_the_folder_is_refused_and_its_target_untouched(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "f").write_text("kept")
    folder = tmp_path / "stack" / "context"
    folder.parent.mkdir()
    folder.symlink_to(tmp_path / "mine")
    with pytest.raises(OutputNotWritable) as exc:
        replace_folder(tmp_path, folder, lambda new: None)
    assert str(exc.value) == (f"{folder}: a link to {tmp_path / 'mine'}: not followed (sglstack writes this folder "
                              "itself; remove the link)")
    assert _tree(tmp_path / "mine") == {"f": "kept"}
    assert sorted(p.name for p in folder.parent.iterdir()) == ["context"]


def test_a_file_in_the_way_of_the_folder_is_refused_and_kept(tmp_path):
    folder = tmp_path / "stack" / "context"
    folder.parent.mkdir()
    folder.write_text("a file")
    with pytest.raises(OutputNotWritable) as exc:
        replace_folder(tmp_path, folder, lambda new: None)
    assert str(exc.value) == f"{folder}: cannot be written (a file is in the way of this folder)"
    assert folder.read_text() == "a file"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["context"]


def test_a_write_of_the_bytes_a_file_holds_leaves_it_alone_and_a_new_mode_is_written(tmp_path) -> None:
    path = tmp_path / "f.txt"
    safefiles.write_text(tmp_path, path, "same\n", mode=0o644)
    inode = path.stat().st_ino
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    safefiles.write_text(tmp_path, path, "same\n", mode=0o644)
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (inode, 1_000_000_000)
    safefiles.write_text(tmp_path, path, "same\n", mode=0o600)
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_ino != inode
