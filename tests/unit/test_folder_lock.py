"""folder_lock in process: a stack folder's lock held by one task at a time, the holder named in one line, the
same thread taking it again, another thread waiting; links out of the build folder refused (the safe writers:
test_safefiles.py)."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import threading
from pathlib import Path

import pytest
from link_refusals import _link_out, _raising

from sglstack.core import folderlock
from sglstack.core.folderlock import BUSY_EXIT, LOCK_NAME, StackBusy, folder_lock
from sglstack.core.safefiles import (
    OutputNotWritable,
)

# ---- folder_lock -----------------------------------------------------------------------------------

def _busy(name: str, who: str, lock: Path, task: str) -> str:
    return (f"{name} is busy: {who} holds {lock}; one build, deploy, bisect or render of a stack at a time: run "
            f"`invoke {task}` again when it ends")


HOLDER = re.compile(r"invoke (\w+) \(pid (\d+), since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)\n")


def _holding(lock: Path) -> tuple[str, str] | None:
    """(task, pid) of the holder line in `lock`, None when it holds no such line."""
    found = HOLDER.fullmatch(lock.read_text())
    return (found.group(1), found.group(2)) if found else None


def _held_elsewhere(lock: Path, line: bytes) -> int:
    """An flock on the lock through a descriptor of its own: what another process holding it looks like."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, line)
    return fd


def _free(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_the_holder_writes_its_line_and_clears_it_when_done(tmp_path):
    folder = tmp_path / "build" / "tiny"
    lock = folder / LOCK_NAME
    with folder_lock(folder, "build", root=tmp_path / "build", stack="tiny"):
        assert _holding(lock) == ("build", str(os.getpid()))
        assert not _free(lock)
    assert lock.read_text() == ""
    assert _free(lock)
    assert folderlock._HELD == {}


def test_the_same_thread_takes_its_lock_again_and_holds_it_until_the_outer_block_ends(tmp_path):
    folder = tmp_path / "tiny"
    lock = folder / LOCK_NAME
    with folder_lock(folder, "bisect"):
        with folder_lock(folder, "build"):
            assert _holding(lock) == ("bisect", str(os.getpid()))  # the outer holder's line
        assert not _free(lock)
        assert _holding(lock) == ("bisect", str(os.getpid()))
    assert _free(lock)
    assert lock.read_text() == ""


@pytest.mark.parametrize(("stack", "name"), [("tiny", "stack 'tiny'"), (None, "FOLDER")])
def test_a_second_holder_is_refused_at_once_naming_the_holder(tmp_path, stack, name):
    folder = tmp_path / "tiny"
    lock = folder / LOCK_NAME
    line = b"invoke bisect (pid 4242, since 2026-01-02T03:04:05Z)\n"
    fd = _held_elsewhere(lock, line)
    try:
        with pytest.raises(StackBusy) as exc, folder_lock(folder, "deploy", stack=stack):
            pytest.fail("the block ran under a lock held elsewhere")
    finally:
        os.close(fd)
    name = name.replace("FOLDER", str(folder))
    assert str(exc.value) == (f"{name} is busy: invoke bisect (pid 4242, since 2026-01-02T03:04:05Z) holds {lock}; "
                              "one build, deploy, bisect or render of a stack at a time: run `invoke deploy` again "
                              "when it ends")  # written out once whole; the others through _busy
    assert exc.value.exit_code == BUSY_EXIT == 75
    assert lock.read_bytes() == line  # the holder's line is left as it was
    assert folderlock._HELD == {}


@pytest.mark.parametrize(("line", "who"), [
    (b"", "another process"),
    (b"  \n", "another process"),
    (b"invoke build\n(pid 7)\xff\n", "invoke build\\n(pid 7)\ufffd"),
    (b"y" * 500, "y" * 400),
])
def test_the_holder_is_named_by_its_line_cut_to_400_bytes_on_one_line(tmp_path, line, who):
    folder = tmp_path / "tiny"
    fd = _held_elsewhere(folder / LOCK_NAME, line)
    try:
        with pytest.raises(StackBusy) as exc, folder_lock(folder, "render", stack="tiny"):
            pass
    finally:
        os.close(fd)
    assert str(exc.value) == _busy("stack 'tiny'", who, folder / LOCK_NAME, "render")


def test_a_holder_line_that_cannot_be_read_names_another_process(tmp_path, monkeypatch):
    folder = tmp_path / "tiny"
    fd = _held_elsewhere(folder / LOCK_NAME, b"invoke build (pid 1, since 2026-01-02T03:04:05Z)\n")
    monkeypatch.setattr(os, "pread", _raising(errno.EIO))
    try:
        with pytest.raises(StackBusy) as exc, folder_lock(folder, "render", stack="tiny"):
            pass
    finally:
        os.close(fd)
    assert str(exc.value) == _busy("stack 'tiny'", "another process", folder / LOCK_NAME, "render")


def test_a_holder_line_that_cannot_be_written_does_not_stop_the_task(tmp_path, monkeypatch):
    folder = tmp_path / "tiny"
    monkeypatch.setattr(os, "ftruncate", _raising(errno.ENOSPC))
    ran = []
    with folder_lock(folder, "build"):
        ran.append(_free(folder / LOCK_NAME))
    assert ran == [False]
    assert _free(folder / LOCK_NAME)


def test_a_lock_that_cannot_be_opened_is_one_line(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "elsewhere").write_text("")
    (folder / LOCK_NAME).symlink_to(folder / "elsewhere")  # inside the folder, but never opened through a link
    with pytest.raises(OutputNotWritable) as exc, folder_lock(folder, "build"):
        pytest.fail("the block ran without its lock")
    assert str(exc.value) == f"{folder / LOCK_NAME}: the lock cannot be opened (Too many levels of symbolic links)"
    assert (folder / "elsewhere").read_text() == ""


def test_a_lock_the_system_refuses_is_one_line_and_not_busy(tmp_path, monkeypatch):
    folder = tmp_path / "tiny"
    monkeypatch.setattr(fcntl, "flock", _raising(errno.ENOLCK))
    with pytest.raises(OutputNotWritable) as exc, folder_lock(folder, "build"):
        pytest.fail("the block ran without its lock")
    assert type(exc.value) is OutputNotWritable
    assert str(exc.value) == f"{folder / LOCK_NAME}: cannot be locked (No locks available)"
    assert folderlock._HELD == {}


def test_a_lock_folder_linked_out_of_the_root_is_refused(tmp_path):
    root = tmp_path / "build"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "tiny").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputNotWritable) as exc, folder_lock(root / "tiny", "build", root=root):
        pytest.fail("the block ran through a link")
    assert str(exc.value) == _link_out(root / "tiny", tmp_path / "elsewhere", root)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _in_thread(folder: Path, task: str, took: threading.Event) -> threading.Thread:
    def run() -> None:
        with folder_lock(folder, task):
            took.set()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_another_thread_waits_for_a_held_lock_rather_than_sharing_or_being_refused(tmp_path):
    folder = tmp_path / "tiny"
    took = threading.Event()
    with folder_lock(folder, "build"):
        thread = _in_thread(folder, "deploy", took)
        assert not took.wait(0.2)
    thread.join(timeout=10)
    assert took.is_set()
    assert _free(folder / LOCK_NAME)


def test_another_thread_takes_another_folders_lock_while_one_is_held(tmp_path):
    took = threading.Event()
    with folder_lock(tmp_path / "one", "build"):
        thread = _in_thread(tmp_path / "two", "build", took)
        assert took.wait(10)
    thread.join(timeout=10)
