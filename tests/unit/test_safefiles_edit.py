"""The writers of the files a user owns and several tasks edit (stacks.yaml, its locks): `replacing`'s
`staged`, `replace_together` and `sibling_mode`, and safefiles' `file_lock`. Tests run as root, where a mode
does not stop a write: a failing system call is stood in for by one raising the OSError the kernel would give."""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

import pytest

from sglstack.core import replacing, safefiles
from sglstack.core.folderlock import BUSY_EXIT, FileBusy, file_lock
from sglstack.core.replacing import replace_together, sibling_mode, staged
from sglstack.core.safefiles import OutputNotWritable


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_staged_writes_whole_with_the_mode_beside_the_file_and_removes_what_is_left(tmp_path) -> None:
    path = tmp_path / "f.txt"
    with staged(path, b"new", mode=0o640) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".f.txt.") and tmp.suffix == ".tmp"
        assert tmp.read_bytes() == b"new" and stat.S_IMODE(tmp.stat().st_mode) == 0o640
        os.replace(tmp, path)
    assert path.read_bytes() == b"new" and names(tmp_path) == ["f.txt"]
    with pytest.raises(KeyboardInterrupt), staged(path, b"newer", mode=0o644):
        raise KeyboardInterrupt  # whatever stops the block: the temp file goes
    assert path.read_bytes() == b"new" and names(tmp_path) == ["f.txt"]


@pytest.mark.parametrize(("where", "call"), [
    (replacing.tempfile, "mkstemp"),  # no temp file at all (a read-only folder)
    (replacing.os, "fsync"),  # the data did not reach the disk (a full disk)
    (replacing.os, "chmod"),
])
def test_staged_that_cannot_be_written_is_one_line_and_leaves_no_temp_file(tmp_path, monkeypatch, where, call) -> None:
    def full(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(where, call, full)
    path = tmp_path / "f.txt"
    path.write_bytes(b"old")
    with pytest.raises(OutputNotWritable) as err, staged(path, b"new", mode=0o644):
        raise AssertionError("not reached")
    assert str(err.value) == f"{path}: cannot be written (No space left on device); it is as it was"
    assert path.read_bytes() == b"old" and names(tmp_path) == ["f.txt"]


def test_a_file_replaced_through_its_link_keeps_the_link_and_its_mode(tmp_path) -> None:
    real = tmp_path / "real" / "stacks.yaml"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o664)
    link = tmp_path / "stacks.yaml"
    link.symlink_to(real)
    target = Path(os.path.realpath(link))  # what write_upgrade passes for a linked stacks file
    replace_together([(target, b"new\n", sibling_mode(target, target.name))])
    assert target == real
    assert link.is_symlink() and real.read_text() == "new\n" and stat.S_IMODE(real.stat().st_mode) == 0o664
    assert names(real.parent) == ["stacks.yaml"]


def test_a_replace_that_cannot_rename_keeps_the_file_and_leaves_no_temp_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "stacks.yaml"
    path.write_text("old\n")

    def refuse(src, dst):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(replacing.os, "replace", refuse)
    with pytest.raises(OutputNotWritable) as err:
        replace_together([(path, b"new\n", sibling_mode(path, path.name))])
    assert str(err.value) == f"{path}: cannot be written (Read-only file system); it is as it was"
    assert path.read_text() == "old\n" and names(tmp_path) == ["stacks.yaml"]


def test_a_new_file_takes_its_own_mode_then_its_siblings_then_0644_under_the_umask(tmp_path) -> None:
    path = tmp_path / "locks" / "new.txt"
    old = os.umask(0o027)
    try:
        assert sibling_mode(path, "*.txt") == 0o640  # no folder yet
        path.parent.mkdir()
        (path.parent / ".hidden.txt").write_text("")
        (path.parent / ".hidden.txt").chmod(0o600)
        (path.parent / "a-dir.txt").mkdir()
        assert sibling_mode(path, "*.txt") == 0o640  # a hidden file (a temp file) and a folder are no siblings
        (path.parent / "b.txt").write_text("")
        (path.parent / "b.txt").chmod(0o664)
        assert sibling_mode(path, "*.txt") == 0o664
        path.write_text("")
        path.chmod(0o600)
        assert sibling_mode(path, "*.txt") == 0o600
    finally:
        os.umask(old)


def test_file_lock_is_exclusive_or_shared_refused_at_once_and_leaves_no_file(tmp_path) -> None:
    path = tmp_path / "stacks.yaml"
    path.write_text("x\n")
    busy = (f"{path} is busy: another task is rewriting it or writing from it: run `invoke upgrade --write` again "
            "when that one ends")
    with file_lock(path, "lock", shared=True), file_lock(path, "lock", shared=True):  # two readers at once
        with pytest.raises(FileBusy) as err, file_lock(path, "upgrade --write"):
            pass
        assert (str(err.value), err.value.exit_code) == (busy, BUSY_EXIT)
    with file_lock(path, "upgrade --write"), pytest.raises(FileBusy), file_lock(path, "lock", shared=True):
        pass
    # a link to the file shares its lock; the file is all there is
    link = tmp_path / "link.yaml"
    link.symlink_to(path)
    with file_lock(path, "upgrade --write"), pytest.raises(FileBusy), file_lock(link, "upgrade --write"):
        pass
    assert names(tmp_path) == ["link.yaml", "stacks.yaml"] and path.read_text() == "x\n"
    with file_lock(path, "upgrade --write"):
        pass  # released when the block ends


def test_file_lock_of_a_missing_or_unlockable_file_is_one_line(tmp_path, monkeypatch) -> None:
    with pytest.raises(OutputNotWritable) as err, file_lock(tmp_path / "nope.yaml", "lock"):
        pass
    assert str(err.value) == f"{tmp_path / 'nope.yaml'}: cannot be locked (No such file or directory)"
    path = tmp_path / "stacks.yaml"
    path.write_text("x\n")

    def nolock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(safefiles.fcntl, "flock", nolock)
    with pytest.raises(OutputNotWritable) as err, file_lock(path, "lock"):
        pass
    assert str(err.value) == f"{path}: cannot be locked (No locks available)"


def test_replace_together_puts_the_first_back_when_the_second_rename_fails(tmp_path, monkeypatch) -> None:
    first, second, new = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "new.txt"
    first.write_text("old a\n")
    second.write_text("old b\n")
    real = replacing.os.replace

    def replace(src, dst):
        if Path(dst) == second:
            raise OSError(errno.EROFS, "Read-only file system")
        real(src, dst)

    monkeypatch.setattr(replacing.os, "replace", replace)
    with pytest.raises(OutputNotWritable) as err:
        replace_together([(first, b"new a\n", 0o644), (new, b"new\n", 0o644), (second, b"new b\n", 0o644)])
    assert str(err.value) == f"{second}: cannot be written (Read-only file system); no file was replaced"
    assert (first.read_text(), second.read_text()) == ("old a\n", "old b\n") and names(tmp_path) == ["a.txt", "b.txt"]


def test_replace_together_that_cannot_put_back_says_what_is_where(tmp_path, monkeypatch) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("old a\n")
    real = replacing.os.replace

    def replace(src, dst):
        if Path(dst) == second or Path(src).name.endswith(".old"):
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(replacing.os, "replace", replace)
    with pytest.raises(OutputNotWritable) as err:
        replace_together([(first, b"new a\n", 0o644), (second, b"new b\n", 0o644)])
    assert re.fullmatch(rf"{re.escape(str(second))}: cannot be written \(Input/output error\); "
                        rf"{re.escape(str(first))} is the new one \(the old one was \.a\.txt\.\d+\.\d+\.old\)",
                        str(err.value))


def test_replace_together_replaces_a_link_itself_and_keeps_nothing_beside(tmp_path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("target\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    replace_together([(link, b"new\n", 0o600)])
    assert not link.is_symlink() and link.read_text() == "new\n" and target.read_text() == "target\n"
    assert stat.S_IMODE(link.stat().st_mode) == 0o600 and names(tmp_path) == ["link.txt", "target.txt"]


def test_replace_together_without_hard_links_keeps_a_copy_and_still_puts_back(tmp_path, monkeypatch) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("old a\n")

    def no_links(*args, **kw):
        raise OSError(errno.EPERM, "Operation not permitted")

    real = replacing.os.replace

    def replace(src, dst):
        if Path(dst) == second:
            raise OSError(errno.EROFS, "Read-only file system")
        real(src, dst)

    monkeypatch.setattr(replacing.os, "link", no_links)
    monkeypatch.setattr(replacing.os, "replace", replace)
    with pytest.raises(OutputNotWritable) as err:
        replace_together([(first, b"new a\n", 0o644), (second, b"new b\n", 0o644)])
    assert str(err.value) == f"{second}: cannot be written (Read-only file system); no file was replaced"
    assert first.read_text() == "old a\n" and names(tmp_path) == ["a.txt"]
    monkeypatch.setattr(replacing.shutil, "copy2", lambda *a, **kw: no_links())
    with pytest.raises(OutputNotWritable) as err:
        replace_together([(first, b"new a\n", 0o644)])
    assert str(err.value) == f"{first}: cannot be replaced (Operation not permitted); it is as it was"
    assert first.read_text() == "old a\n" and names(tmp_path) == ["a.txt"]


def test_replace_together_leaves_a_file_that_holds_its_data_alone_and_replaces_the_other(tmp_path) -> None:
    same, other = tmp_path / "stacks.yaml", tmp_path / "lock.txt"
    same.write_bytes(b"a: 1\n")
    other.write_bytes(b"old\n")
    os.chmod(same, 0o644)
    os.chmod(other, 0o644)
    os.utime(same, ns=(1_000_000_000, 1_000_000_000))
    inode = same.stat().st_ino
    replace_together([(same, b"a: 1\n", 0o644), (other, b"new\n", 0o644)])
    assert (same.stat().st_ino, same.stat().st_mtime_ns) == (inode, 1_000_000_000)
    assert other.read_bytes() == b"new\n"
