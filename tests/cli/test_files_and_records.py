"""Files and records (issue 21): what a full disk, a kill mid-write, a link out of the build folder, a
foreign file in `render --out`, a read-only folder or a second task of the same stack leave behind.

The full disks are real: a small tmpfs mounted for the test (this needs root; skipped, saying so,
where mounting is not permitted). The second task is a real process: `invoke` run as a user runs it,
against a lock held by another process through the production `stack_lock`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from bisect_fixtures import make_history, stack_yaml
from clirun import REPO, run_invoke
from tmpfs_fixtures import fill, tmpfs

from sglstack.bisect.log import BisectLog
from sglstack.core import records as records_mod
from sglstack.core.clock import utc_now, utc_timestamp
from sglstack.core.errors import ConfigError
from sglstack.core.folderlock import BUSY_EXIT, StackBusy
from sglstack.core.records import OutputNotWritable, append_jsonl, read_jsonl, stack_lock
from sglstack.core.safefiles import replace_folder
from sglstack.core.signals import signals_raise
from sglstack.deploy.store import DeploymentRecord, append_record, read_records, records_path
from sglstack.lock.flow import lock_stack
from sglstack.lockfile.text import parse_lock, render_lock, write_lock
from sglstack.publish.history import append_records as append_publish
from sglstack.publish.history import read_records as read_publish
from sglstack.smoke.history import append_record as append_smoke
from sglstack.smoke.history import read_history

CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
DIGEST = "sha256:" + "a" * 64


# ---- a real small filesystem -----------------------------------------------------------------------

def remount_read_only(folder: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)


# ---- the four JSON-lines stores ---------------------------------------------------------------------

def _deploy_row(n: int, note: str = "") -> DeploymentRecord:
    return DeploymentRecord(stack="tiny", action="deploy", result="healthy", image=f"r@{DIGEST}", digest=DIGEST,
                            image_id=f"sha256:{n}", time="2026-12-03T00:00:00Z", host="h", docker_host="",
                            project="p", compose_tool="docker-compose", compose_file="compose.yaml", note=note)


class Store:
    """One JSON-lines store through its own module: where its file is, how to add a row, how to read."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.root = kind, root
        self.path = {"deployments": records_path(root, "tiny"),
                     "smoke-history": root / "tiny" / "smoke-history.jsonl",
                     "publish": root / "publish" / "records.jsonl",
                     "bisect-log": root / "tiny" / "bisect" / "log.jsonl"}[kind]

    def append(self, n: int, pad: int = 0) -> None:
        note = "x" * pad
        if self.kind == "deployments":
            append_record(self.root, _deploy_row(n, note))
        elif self.kind == "smoke-history":
            append_smoke(self.path, {"n": n, "note": note})
        elif self.kind == "publish":
            append_publish(self.path, [{"event": "published", "n": n, "note": note}])
        else:
            BisectLog(self.path.parent).append({"event": "batch", "n": n, "note": note})

    def read(self) -> list[int]:
        if self.kind == "deployments":
            return [int(r.image_id.split(":")[1]) for r in read_records(self.root, "tiny")]
        if self.kind == "smoke-history":
            return [r["n"] for r in read_history(self.path)]
        if self.kind == "publish":
            return [r["n"] for r in read_publish(self.path)]
        return [e["n"] for e in BisectLog(self.path.parent).read()]


STORES = ["deployments", "smoke-history", "publish", "bisect-log"]


@pytest.mark.parametrize("kind", STORES)
def test_a_torn_last_line_is_skipped_and_the_next_append_starts_a_line_of_its_own(tmp_path, kind, capsys):
    store = Store(kind, tmp_path)
    store.append(1)
    whole = store.path.read_bytes()
    with store.path.open("ab") as fh:  # what a process killed in the middle of its write leaves
        fh.write(whole[: len(whole) // 2])

    assert store.read() == [1]
    assert f"{store.path.name}:2: skipped a torn last line" in capsys.readouterr().err

    store.append(2)
    assert store.read() == [1, 2]  # every later deploy, rollback, smoke and bisect reads on
    lines = store.path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert store.path.with_name(store.path.name + ".torn").read_bytes() == whole[: len(whole) // 2] + b"\n"
    assert "moved to" in capsys.readouterr().err


def test_a_last_line_that_only_lost_its_newline_is_kept(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"n": 1}\n{"n": 2}')
    append_jsonl(path, [{"n": 3}])
    assert read_jsonl(path, dict, ValueError) == [{"n": 1}, {"n": 2}, {"n": 3}]


@pytest.mark.parametrize("kind", STORES)
def test_a_full_disk_leaves_the_store_whole_and_the_next_append_works(tmp_path, kind):
    with tmpfs(tmp_path / "fs") as fs:
        store = Store(kind, fs)
        store.append(1)
        before = store.path.read_bytes()
        filler = fill(fs)
        # Larger than what is left of the file's last page: the kernel writes part of it, then ENOSPC.
        with pytest.raises(OutputNotWritable, match=r"the record was not written \(No space left on device\); "
                                                    r"the file is as it was$"):
            store.append(2, pad=20000)
        assert store.path.read_bytes() == before
        filler.unlink()
        store.append(3)
        assert store.read() == [1, 3]


@pytest.mark.parametrize("kind", STORES)
def test_a_store_linked_out_of_the_build_folder_is_not_appended_to(tmp_path, kind, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    store = Store(kind, tmp_path / "build")
    theirs = tmp_path / "elsewhere.jsonl"
    theirs.write_text("theirs\n")
    store.path.parent.mkdir(parents=True)
    store.path.symlink_to(theirs)
    with pytest.raises(OutputNotWritable, match=r"a link to .*elsewhere\.jsonl, outside .*: not followed"):
        store.append(1)
    assert theirs.read_text() == "theirs\n"



# ---- append_jsonl and read_jsonl, in process: each guarantee exactly ------------------------------

def test_rows_are_appended_as_sorted_keys_one_line_each_beside_a_sibling_lock(tmp_path):
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, [])
    assert not path.exists()
    append_jsonl(path, [{"b": 1, "a": "é"}, {"n": 2}])
    append_jsonl(path, iter([{"n": 3}]))
    assert path.read_bytes() == b'{"a": "\\u00e9", "b": 1}\n{"n": 2}\n{"n": 3}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == [".rows.jsonl.lock", "rows.jsonl"]
    assert (tmp_path / ".rows.jsonl.lock").stat().st_mode & 0o777 == 0o644
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_torn_line_is_moved_aside_with_its_size_named(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2')
    assert read_jsonl(path, dict, ValueError) == [{"n": 1}]
    assert capsys.readouterr().err == (f"warning: {path}:2: skipped a torn last line (a write cut short); the next "
                                       "append moves it aside\n")
    append_jsonl(path, [{"n": 3}])
    assert capsys.readouterr().err == (f"warning: {path}: a torn last line (7 bytes, a write cut short) was moved "
                                       "to rows.jsonl.torn\n")
    assert path.read_bytes() == b'{"n": 1}\n{"n": 3}\n'
    assert (tmp_path / "rows.jsonl.torn").read_bytes() == b'{"n": 2\n'


@pytest.mark.parametrize("before", [b"", b'{"n": 1}\n', b'{"n": 1}\n' * 9000])
def test_a_torn_line_longer_than_one_read_is_moved_aside_whole(tmp_path, before, capsys):
    path = tmp_path / "rows.jsonl"
    torn = b'{"pad": "' + b"x" * 140000
    path.write_bytes(before + torn)
    append_jsonl(path, [{"n": 2}])
    assert path.read_bytes() == before + b'{"n": 2}\n'
    assert (tmp_path / "rows.jsonl.torn").read_bytes() == torn + b"\n"
    assert f"({len(torn)} bytes, a write cut short)" in capsys.readouterr().err


def test_a_whole_last_value_only_gets_its_newline(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"n": 1}')
    assert read_jsonl(path, dict, ValueError) == [{"n": 1}]
    append_jsonl(path, [{"n": 2}])
    assert path.read_bytes() == b'{"n": 1}\n{"n": 2}\n'
    assert not (tmp_path / "rows.jsonl.torn").exists()
    assert capsys.readouterr().err == ""


class _BadLine(Exception):
    pass


def _parse_n(row):
    return row["n"] + 0


@pytest.mark.parametrize(("text", "line"), [
    (b'{"n": 1}\nnot json\n{"n": 3}\n', 2),  # invalid JSON before the end
    (b'{"n": 1}\n\n{"m": 3}\n', 3),  # KeyError from the parser, a blank line counted
    (b'{"n": "a"}\n', 1),  # TypeError from the parser
    (b'{"n": 1}\n[1, 2]\n', 2),  # TypeError: a list is no row
    (b'{"n": 1}\nnot json\n', 2),  # a bad last line with its newline is not torn
])
def test_any_other_bad_line_is_the_callers_error_naming_its_number(tmp_path, text, line, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(text)
    with pytest.raises(_BadLine, match=f"^{line}$"):
        read_jsonl(path, _parse_n, lambda n: _BadLine(str(n)))
    assert capsys.readouterr().err == ""


def test_blank_lines_are_skipped_and_a_missing_store_is_empty(tmp_path):
    path = tmp_path / "rows.jsonl"
    assert read_jsonl(path, _parse_n, ValueError) == []
    path.write_bytes(b'\n{"n": 1}\n   \n{"n": 2}\n\n')
    assert read_jsonl(path, _parse_n, ValueError) == [1, 2]
    path.unlink()
    path.mkdir()  # not a missing store: one that cannot be read is named, never taken for an empty one
    with pytest.raises(ConfigError) as info:
        read_jsonl(path, _parse_n, ValueError)
    assert str(info.value) == f"{path}: not a file of records (a folder)"


def test_a_lock_that_cannot_be_opened_stops_writers_only(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"n": 1}\n')
    lock = tmp_path / ".rows.jsonl.lock"
    lock.symlink_to(tmp_path / "nowhere")  # O_NOFOLLOW: the lock is never opened through a link
    assert read_jsonl(path, _parse_n, ValueError) == [1]
    with pytest.raises(OutputNotWritable) as exc:
        append_jsonl(path, [{"n": 2}])
    assert str(exc.value) == (f"{lock}: a link to {tmp_path / 'nowhere'}: not followed (sglstack writes this file "
                              "itself; remove the link)")
    assert path.read_bytes() == b'{"n": 1}\n'


def test_a_store_that_cannot_be_opened_is_one_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.mkdir()
    with pytest.raises(OutputNotWritable) as exc:
        append_jsonl(path, [{"n": 1}])
    assert str(exc.value) == f"{path}: cannot be written (Is a directory)"


def test_a_short_write_is_cut_back_and_named(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, [{"n": 1}])
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:3]))
    with pytest.raises(OutputNotWritable) as exc:
        append_jsonl(path, [{"n": 2}])
    assert str(exc.value) == (f"{path}: the record was not written (No space left on device); the file is as it "
                              "was")
    monkeypatch.undo()
    assert path.read_bytes() == b'{"n": 1}\n'


def test_a_failed_fsync_is_cut_back_and_named(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, [{"n": 1}])

    def fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OutputNotWritable, match=r"the record was not written \(Input/output error\); the file"):
        append_jsonl(path, [{"n": 2}])
    monkeypatch.undo()
    assert path.read_bytes() == b'{"n": 1}\n'


def test_the_stack_lock_is_the_stacks_folder_lock_under_the_build_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "b"))
    lock = tmp_path / "b" / "tiny" / ".lock"
    with stack_lock("tiny", "build"):
        held = lock.read_text()
    assert re.fullmatch(rf"invoke build \(pid {os.getpid()}, since \d{{4}}-[-0-9T:]+Z\)\n", held)
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another holder
        with pytest.raises(StackBusy) as exc, stack_lock("tiny", "deploy"):
            pass
    finally:
        os.close(fd)
    assert str(exc.value).startswith("stack 'tiny' is busy: ")
    assert str(exc.value).endswith(f" holds {lock}; one build, deploy, bisect or render of a stack at a time: run "
                                   "`invoke deploy` again when it ends")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "b" / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputNotWritable, match="outside"), stack_lock("linked", "build"):
        pass
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_store_reached_through_a_link_is_not_written_through(tmp_path):
    path = tmp_path / "rows.jsonl"
    (tmp_path / "real.jsonl").write_text("")
    path.symlink_to(tmp_path / "real.jsonl")  # inside the folder, so only O_NOFOLLOW stops it
    with pytest.raises(OutputNotWritable) as exc:
        append_jsonl(path, [{"n": 1}])
    assert str(exc.value) == (f"{path}: a link to {tmp_path / 'real.jsonl'}: not followed (sglstack writes this "
                              "file itself; remove the link)")
    assert (tmp_path / "real.jsonl").read_text() == ""


def test_errors_without_a_reason_name_their_kind(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, [{"n": 1}])
    real_open = os.open

    def bare_open(file, *args):
        if Path(file) == path:
            raise OSError()
        return real_open(file, *args)

    monkeypatch.setattr(os, "open", bare_open)
    with pytest.raises(OutputNotWritable) as exc:
        append_jsonl(path, [{"n": 2}])
    assert str(exc.value) == f"{path}: cannot be written (OSError)"
    monkeypatch.undo()

    def fsync(fd):
        raise OSError()

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OutputNotWritable) as exc:
        append_jsonl(path, [{"n": 2}])
    assert str(exc.value) == f"{path}: the record was not written (OSError); the file is as it was"


def test_a_failed_cut_back_still_reports_the_write(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"n": 1}')  # a whole value that lost its newline: it gets one before the write
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data if data == b"\n" else data[:3]))
    with pytest.raises(OutputNotWritable, match="the record was not written"):
        append_jsonl(path, [{"n": 2}])
    assert path.read_bytes() == b'{"n": 1}\n'  # cut back to the newline it gained, not before or past it

    def ftruncate(fd, size):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    with pytest.raises(OutputNotWritable, match=r"the record was not written \(No space left on device\)"):
        append_jsonl(path, [{"n": 3}])


def test_a_torn_line_right_after_a_newline_or_one_byte_past_a_read_is_moved_whole(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\n{"n": 2')
    append_jsonl(path, [{"n": 3}])
    assert path.read_bytes() == b'\n{"n": 3}\n'
    assert (tmp_path / "rows.jsonl.torn").read_bytes() == b'{"n": 2\n'
    other = tmp_path / "other.jsonl"
    torn = b"x" * 65537  # one read of 65,536 bytes and one byte more, no newline at all
    other.write_bytes(torn)
    append_jsonl(other, [{"n": 1}])
    assert other.read_bytes() == b'{"n": 1}\n'
    assert (tmp_path / "other.jsonl.torn").read_bytes() == torn + b"\n"


def test_timestamps_are_utc_whole_seconds_with_a_z():
    east = dt.timezone(dt.timedelta(hours=5, minutes=30))
    assert utc_timestamp(dt.datetime(2026, 12, 2, 23, 48, 9, 999999, tzinfo=east)) == "2026-12-02T18:18:09Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", utc_timestamp())
    assert utc_now().tzinfo is dt.UTC


def _append_rows(path: str, worker: int, rows: int) -> None:
    for n in range(rows):
        append_jsonl(Path(path), [{"worker": worker, "n": n, "pad": "y" * 3000}])


def _read_until(path: str, stop_after: float) -> int:
    reads = 0
    deadline = time.monotonic() + stop_after
    while time.monotonic() < deadline:
        read_jsonl(Path(path), dict, lambda n: ValueError(f"line {n} is not whole"))
        reads += 1
    return reads


def test_concurrent_writers_and_readers_see_only_whole_lines(tmp_path):
    path = tmp_path / "rows.jsonl"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        readers = [pool.apply_async(_read_until, (str(path), 2.0)) for _ in range(2)]
        writers = [pool.apply_async(_append_rows, (str(path), w, 100)) for w in range(2)]
        for job in writers:
            job.get(timeout=60)
        assert all(job.get(timeout=60) > 0 for job in readers)
    rows = read_jsonl(path, dict, ValueError)
    assert sorted((r["worker"], r["n"]) for r in rows) == [(w, n) for w in range(2) for n in range(100)]


# ---- render, locks and the build folder -----------------------------------------------------------

def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    return proc.stderr.strip()


def test_a_full_disk_during_render_is_one_line_and_writes_nothing_half(tmp_path):
    with tmpfs(tmp_path / "fs", "64k") as fs:  # less than one rendered context
        out = fs / "out"
        proc = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX), "--out", str(out),
                          cwd=tmp_path)
        assert "No space left on device" in _one_line_error(proc)
        # No half context, no temp file or folder: the folder was made for this render, and is gone with it.
        assert not out.exists()


def test_a_full_disk_during_a_second_render_keeps_the_first_one_whole(tmp_path):
    with tmpfs(tmp_path / "fs", "512k") as fs:
        out = fs / "out"
        first = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX), "--out", str(out),
                           cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        # a context that differs from the render's (an identical one is left alone, needing no space)
        stale = next(p for p in sorted((out / "context").rglob("*")) if p.is_file())
        stale.write_bytes(stale.read_bytes() + b"\n")
        before = _tree(out)
        filler = fill(fs)
        proc = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX), "--out", str(out),
                          cwd=tmp_path)
        assert "No space left on device" in _one_line_error(proc)
        assert _tree(out) == before  # the previous context, Dockerfile and compose files, whole
        assert not [p.name for p in out.iterdir() if p.name.endswith((".tmp", ".old"))]
        filler.unlink()


def test_a_read_only_stacks_folder_stops_lock_before_resolving(tmp_path):
    with tmpfs(tmp_path / "ro", "64k") as folder:
        (folder / "stacks.yaml").write_bytes(CPU_MATRIX.read_bytes())
        remount_read_only(folder)

        def resolver(*args, **kwargs):
            raise AssertionError("resolved although the lock could not be written")

        with pytest.raises(OutputNotWritable, match=r"^lock .*locks/cpu-test\.txt: cannot be written "
                                                    r"\(Read-only file system\)$"):
            lock_stack(folder / "stacks.yaml", "cpu-test", compile_fn=resolver)


def test_a_full_disk_while_writing_a_lock_keeps_the_old_lock(tmp_path):
    lock = parse_lock((REPO / "tests" / "fixtures" / "locks" / "cpu-lock.txt").read_text(), file="cpu-lock.txt")
    with tmpfs(tmp_path / "fs", "64k") as fs:
        path = fs / "locks" / "cpu-test.txt"
        path.parent.mkdir()
        path.write_text("# the old lock\n")
        filler = fill(fs)
        assert len(render_lock(lock)) > 4096
        with pytest.raises(OutputNotWritable, match=r"cpu-test\.txt: cannot be written \(No space left on device\)$"):
            write_lock(path, lock)
        assert path.read_text() == "# the old lock\n"
        assert sorted(p.name for p in path.parent.iterdir()) == ["cpu-test.txt"]
        filler.unlink()


def _render(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX), *extra, cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})


def test_a_dockerfile_link_out_of_the_build_folder_is_not_written_through(tmp_path):
    precious = tmp_path / "elsewhere" / "Dockerfile"
    precious.parent.mkdir()
    precious.write_text("FROM mine\n")
    stack_dir = tmp_path / "build" / "cpu-test"
    stack_dir.mkdir(parents=True)
    (stack_dir / "Dockerfile").symlink_to(precious)

    line = _one_line_error(_render(tmp_path))
    assert f"{stack_dir / 'Dockerfile'}: a link to {precious}, outside" in line
    assert precious.read_text() == "FROM mine\n"
    assert not (stack_dir / "context").exists()  # refused before the context was touched


def test_a_linked_context_folder_is_refused_in_one_line(tmp_path):
    theirs = tmp_path / "elsewhere"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("theirs\n")
    stack_dir = tmp_path / "build" / "cpu-test"
    stack_dir.mkdir(parents=True)
    (stack_dir / "context").symlink_to(theirs)

    assert f"{stack_dir / 'context'}: a link to {theirs}" in _one_line_error(_render(tmp_path))
    assert _tree(theirs) == {"keep.txt": hashlib.sha256(b"theirs\n").hexdigest()}


def test_a_stack_folder_linked_out_of_the_build_folder_is_refused(tmp_path):
    theirs = tmp_path / "elsewhere"
    theirs.mkdir()
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "cpu-test").symlink_to(theirs)
    assert "outside" in _one_line_error(_render(tmp_path))
    assert list(theirs.iterdir()) == []


def test_render_out_never_replaces_or_removes_a_file_it_did_not_write(tmp_path):
    out = tmp_path / "mine"
    (out / "k8s").mkdir(parents=True)
    (out / "Dockerfile").write_text("FROM my-own\n")
    (out / "compose.yaml").write_text("services: {}\n")
    (out / "k8s" / "service.yaml").write_text("kind: Service\n")

    line = _one_line_error(_render(tmp_path, "--out", str(out)))
    assert "Dockerfile, compose.yaml already there and not written by sglstack render" in line
    assert (out / "Dockerfile").read_text() == "FROM my-own\n" and not (out / "context").exists()

    (out / "Dockerfile").unlink()
    (out / "compose.yaml").unlink()
    assert _render(tmp_path, "--out", str(out)).returncode == 0
    assert "FROM" in (out / "Dockerfile").read_text()
    # Its own files it replaces on the next render; the user's k8s file (a tag render removes the
    # manifests it wrote) stays.
    again = _render(tmp_path, "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "k8s" / "service.yaml").read_text() == "kind: Service\n"


def test_ctrl_c_while_a_context_is_filled_leaves_no_temp_folder_and_the_old_context(tmp_path):
    context = tmp_path / "out" / "context"
    context.mkdir(parents=True)
    (context / "old.txt").write_text("old\n")
    script = (
        "import sys, time\nfrom pathlib import Path\nfrom sglstack.core.safefiles import replace_folder\n"
        "from sglstack.core.signals import signals_raise\n"
        "def fill(folder):\n    (folder / 'half.txt').write_text('half')\n    print('filling', flush=True)\n"
        "    time.sleep(60)\n"
        "with signals_raise():\n"
        "    try:\n        replace_folder(Path(sys.argv[1]), Path(sys.argv[2]), fill)\n"
        "    except KeyboardInterrupt:\n        sys.exit(143)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "out"), str(context)],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "filling"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["context"]
    assert _tree(context) == {"old.txt": hashlib.sha256(b"old\n").hexdigest()}
    assert replace_folder and signals_raise  # the production functions the script drives


# ---- one task per stack ---------------------------------------------------------------------------

HOLDER = (
    "import sys\nfrom sglstack.core.records import stack_lock\n"
    "with stack_lock(sys.argv[1], sys.argv[2]):\n    print('held', flush=True)\n    sys.stdin.read()\n"
)


@contextlib.contextmanager
def held(stack: str, task: str, build_dir: Path):
    """Another process holding the stack's lock, as a running build (or deploy, or bisect) holds it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, stack, task], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "SGLSTACK_BUILD_DIR": str(build_dir)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def _busy(proc: subprocess.CompletedProcess, stack: str, holder_task: str, pid: int) -> None:
    assert proc.returncode == BUSY_EXIT, proc.stdout + proc.stderr
    line = _one_line_error(proc)
    assert line.startswith(f"error: stack '{stack}' is busy: invoke {holder_task} (pid {pid}, since "), line


def test_a_second_build_of_a_stack_is_refused_before_it_renders(tmp_path, monkeypatch):
    build_dir = tmp_path / "build"
    with held("cpu-test", "build", build_dir) as pid:
        proc = run_invoke("build", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX), cwd=tmp_path,
                          env={"SGLSTACK_BUILD_DIR": str(build_dir)}, timeout=120)
        _busy(proc, "cpu-test", "build", pid)
        assert sorted(p.name for p in (build_dir / "cpu-test").iterdir()) == [".lock"]  # no context, no record
    # The holder ended: the lock is free again (the kernel drops it with its process, however it ends).
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(build_dir))
    with stack_lock("cpu-test", "test"):
        assert (build_dir / "cpu-test" / ".lock").read_text().startswith(f"invoke test (pid {os.getpid()}, ")
    again = _render(tmp_path)
    assert again.returncode == 0, again.stderr


def test_a_deploy_while_the_stack_builds_is_refused_and_records_nothing(tmp_path):
    build_dir = tmp_path / "build"
    with held("cpu-test", "build", build_dir) as pid:
        proc = run_invoke("deploy", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX),
                          "--image", f"127.0.0.1:5000/sglstack-test/sglang@{DIGEST}", "--skip-preflight",
                          cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(build_dir)}, timeout=120)
        _busy(proc, "cpu-test", "build", pid)
    assert not records_path(build_dir, "cpu-test").exists()


def test_a_second_bisect_is_refused_and_does_not_move_the_first_ones_log(tmp_path):
    build_dir = tmp_path / "build"
    repo = tmp_path / "sglang"
    shas = make_history(repo, [300.0, 300.0, 270.0])
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(stack_yaml(str(repo), shas[-1]))
    log = build_dir / "synth" / "bisect" / "log.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"event": "start", "format": 1, "key": {"first": True}, "refs": []}) + "\n")
    before = log.read_bytes()
    with held("synth", "bisect", build_dir) as pid:
        proc = run_invoke("bisect", "--stack", "synth", "--stacks-file", str(matrix), "--good", shas[0],
                          "--bad", shas[-1], "--gpus", "0", "--skip-preflight", cwd=tmp_path,
                          env={"SGLSTACK_BUILD_DIR": str(build_dir), "SGLSTACK_CACHE": str(tmp_path / "cache")},
                          timeout=120)
        _busy(proc, "synth", "bisect", pid)
    assert log.read_bytes() == before
    assert sorted(p.name for p in log.parent.iterdir()) == ["log.jsonl"]


@pytest.mark.parametrize(("hint", "value", "answer"), [
    (typing.Any, {"x": 1}, (True, "anything")),
    (object, None, (True, "anything")),
    (type(None), None, (True, "null")),
    (type(None), 0, (False, "null")),
    (bool, True, (True, "true or false")),
    (bool, 1, (False, "true or false")),
    (int, 3, (True, "a whole number")),
    (int, True, (False, "a whole number")),  # JSON true is not a number
    (int, 3.5, (False, "a whole number")),
    (float, 3, (True, "a number")),
    (float, 2.5, (True, "a number")),
    (float, False, (False, "a number")),
    (float, "1", (False, "a number")),
    (str, "s", (True, "a string")),
    (str, 1, (False, "a string")),
    (dict[str, int], {}, (True, "an object")),
    (dict, [], (False, "an object")),
    (Mapping[str, object], {"a": 1}, (True, "an object")),
    (Mapping, {}, (True, "an object")),
    (list[str], [], (True, "a list")),
    (tuple[str, ...], [], (True, "a list")),  # JSON has no tuples: a list
    (Sequence[int], {}, (False, "a list")),
    (list, "ab", (False, "a list")),
    (tuple, [], (True, "a list")),
    (str | None, None, (True, "a string or null")),
    (str | None, 3, (False, "a string or null")),
    (typing.Optional[int], 2, (True, "a whole number or null")),  # noqa: UP045 - the typing spelling too
    (Path, 3, (True, "anything")),  # a type no record field uses: not judged
])
def test_a_record_field_accepts_what_its_annotation_says(hint, value, answer):
    assert records_mod._accepts(hint, value) == answer
