"""A FIFO, a folder or another non-file where sglstack keeps a record store or writes a log: one line naming
it, never a hang (opening a FIFO for writing waits for a reader that never comes) and never "nothing
recorded" (a store that cannot be read is not an empty one)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from sglstack.core.errors import SglstackError
from sglstack.core.records import append_jsonl, read_jsonl, require_store_writable
from sglstack.core.safefiles import open_log
from sglstack.deploy.store import read_records, read_records_lenient, records_path


def _in_thread(fn) -> BaseException | None:
    """`fn()`'s exception (None when it returned); a call still blocked after a generous wait is a hang,
    failed here rather than hanging the test run (the blocked open is then released by opening the FIFO)."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            out.append(None)
        except BaseException as exc:  # handed back to the test
            out.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "blocked on the FIFO"
    return out[0]


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    path = records_path(tmp_path / "build", "tiny")
    path.parent.mkdir(parents=True)
    return path


def _unblock(path: Path) -> None:
    """The other end for an open blocked on `path` (a FIFO), so a failing test ends."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # a reader waits
    except OSError:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a writer waits, or nobody
    os.close(fd)


@pytest.mark.parametrize("call", ["probe", "append"])
def test_a_fifo_as_the_store_is_one_line_not_a_hang(store, call) -> None:
    os.mkfifo(store)
    fn = {"probe": lambda: require_store_writable(store, what="the records"),
          "append": lambda: append_jsonl(store, [{"a": 1}])}[call]
    try:
        error = _in_thread(fn)
    finally:
        _unblock(store)
    assert isinstance(error, SglstackError)
    assert str(error) in (f"the records {store}: cannot be written (a FIFO, not a regular file)",
                          f"{store}: cannot be written (a FIFO, not a regular file)")


def test_a_log_that_is_a_fifo_is_one_line_not_a_hang(tmp_path) -> None:
    log = tmp_path / "server.log"
    os.mkfifo(log)
    try:
        error = _in_thread(lambda: open_log(tmp_path, log).close())
    finally:
        _unblock(log)
    assert isinstance(error, SglstackError)
    assert str(error) == f"{log}: cannot be written (a FIFO, not a regular file)"


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling link"])
def test_a_store_that_is_not_a_file_is_named_not_read_as_empty(store, kind) -> None:
    if kind == "fifo":
        os.mkfifo(store)
        what = "a FIFO"
    elif kind == "folder":
        store.mkdir()
        what = "a folder"
    else:
        store.symlink_to(store.parent / "gone.jsonl")
        what = f"a link to {store.parent / 'gone.jsonl'}, which does not exist"
    line = f"{store}: not a file of records ({what})"
    records, bad = read_records_lenient(store.parent.parent, "tiny")
    assert records == []
    assert [str(b) for b in bad] == [line]
    with pytest.raises(SglstackError) as info:
        read_records(store.parent.parent, "tiny")
    assert str(info.value) == line
    assert info.value.exit_code == 2
    with pytest.raises(SglstackError) as info:
        read_jsonl(store, json.loads, lambda n: ValueError(n))
    assert str(info.value) == line


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_deploy_file_that_is_a_fifo_or_folder_is_named_and_left(tmp_path, monkeypatch, kind) -> None:
    """compose.env a FIFO or a folder said "File exists"; compose.yaml a folder said "cannot be removed" (the
    undo tried to remove the user's folder, and its error hid why the write failed)."""
    from sglstack.core.safefiles import create_empty
    from sglstack.deploy.files import write_files

    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    what = {"fifo": "a FIFO", "folder": "a folder"}[kind]
    for name in ("compose.env", "compose.yaml"):
        path = tmp_path / name
        os.mkfifo(path) if kind == "fifo" else path.mkdir()
    with pytest.raises(SglstackError) as info:
        create_empty(tmp_path, tmp_path / "compose.env", mode=0o600)
    assert str(info.value) == f"{tmp_path / 'compose.env'}: cannot be written ({what}, not a regular file)"
    with pytest.raises(SglstackError) as info:
        write_files(tmp_path, {"compose.env.example": "x\n", "compose.yaml": "services: {}\n"})
    assert str(info.value) == f"{tmp_path / 'compose.yaml'}: cannot be written ({what}, not a regular file)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compose.env", "compose.yaml"]


def test_a_build_record_that_is_a_fifo_is_one_line_not_a_hang(tmp_path, monkeypatch) -> None:
    """`invoke size`, `attest` and a reused image's build read build/STACK/record.json: a FIFO there blocked
    them for ever."""
    from sglstack.attest.release import read_record
    from sglstack.size.stack import recorded_build

    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    record = tmp_path / "tiny" / "record.json"
    record.parent.mkdir()
    os.mkfifo(record)
    try:
        size_error = _in_thread(lambda: recorded_build("tiny"))
        attest_error = _in_thread(lambda: read_record(record))
    finally:
        _unblock(record)
    assert str(size_error) == f"{record}: stack 'tiny': the build record cannot be read (is not a regular file)"
    assert str(attest_error) == f"build record {record}: cannot be read (is not a regular file)"


@pytest.mark.parametrize(("content", "why"), [
    (None, "is not a regular file"),
    ("{no", "not valid JSON"),
    ("[1]", "not a JSON object"),
    ('{"kind": "process", "pid": "12"}', None),
])
def test_registry_down_over_a_bad_state_file_is_one_line(tmp_path, content, why) -> None:
    """`invoke registry-down` read its state file unbounded (a FIFO blocked it) and raw (bad JSON, or a pid that
    is not a number: a traceback)."""
    from sglstack.core.errors import RegistryError
    from sglstack.registry.local import STATE_FILE, registry_down

    state = tmp_path / STATE_FILE
    if content is None:
        os.mkfifo(state)
    else:
        state.write_text(content)
    try:
        error = _in_thread(lambda: registry_down(folder=tmp_path))
    finally:
        if content is None:
            _unblock(state)
    assert isinstance(error, RegistryError)
    if why is None:
        assert str(error) == (f"{state}: not a registry state ('pid' is not a number): stop the registry by hand, "
                              "then remove the file")
    elif why == "not valid JSON":
        assert str(error).startswith(f"{state}: not a registry state (") and "\n" not in str(error)
    else:
        assert str(error) == f"{state}: not a registry state ({why})"
    assert os.path.lexists(state)
