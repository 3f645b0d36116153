"""The pure parts of `core/records.py`, each on its own line: the build root and stack folders, the one UTC
timestamp format and time parser, the typed reader of recorded rows (`check_field_types`), and the lenient
JSON-lines reader's verdict on each kind of bad line. The stores' behaviour under a full disk, a kill or a
second writer is tests/cli/test_files_and_records.py's."""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sglstack.core import clock as clock_mod
from sglstack.core import records as records_mod
from sglstack.core.clock import parse_local_stamp, parse_utc, utc_now, utc_timestamp, utc_today
from sglstack.core.records import (
    BadLine,
    BadStore,
    OutputNotWritable,
    append_jsonl,
    build_root,
    check_field_types,
    json_type,
    read_jsonl,
    read_jsonl_lenient,
    require_store_writable,
    require_writable,
    stack_dir,
    write_output,
)


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    (tmp_path / "build").mkdir()
    return tmp_path / "build"


# ---- the build root and the stack folders ------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [(None, "build"), ("", "build"), ("/srv/out", "/srv/out")])
def test_the_build_root_is_build_unless_the_environment_names_one(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("SGLSTACK_BUILD_DIR", raising=False)
    else:
        monkeypatch.setenv("SGLSTACK_BUILD_DIR", value)
    assert build_root() == Path(expected)


def test_a_stack_folder_is_its_name_and_a_further_platforms_carries_os_and_arch(monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", "/x/root")
    assert stack_dir("tiny") == Path("/x/root/tiny")
    assert stack_dir("tiny", platform="linux/arm64") == Path("/x/root/tiny.linux-arm64")
    assert stack_dir("tiny", Path("/elsewhere")) == Path("/elsewhere/tiny")
    assert stack_dir("tiny", Path("/elsewhere"), platform="linux/arm64/v8") == Path("/elsewhere/tiny.linux-arm64-v8")


# ---- time ----------------------------------------------------------------------------------------------------


def test_now_is_in_utc():
    assert utc_now().utcoffset() == dt.timedelta(0)


def test_a_timestamp_is_utc_to_the_second_with_a_z():
    east = dt.timezone(dt.timedelta(hours=5, minutes=30))
    assert utc_timestamp(dt.datetime(2026, 12, 2, 23, 48, 9, 999999, tzinfo=east)) == "2026-12-02T18:18:09Z"
    assert utc_timestamp(dt.datetime(2026, 1, 3, 4, 5, 6, tzinfo=dt.UTC)) == "2026-01-03T04:05:06Z"


def test_a_timestamp_of_now_is_of_the_clock_utc_now_reads(monkeypatch):
    fixed = dt.datetime(2030, 7, 8, 1, 2, 3, tzinfo=dt.UTC)
    monkeypatch.setattr(clock_mod, "utc_now", lambda: fixed)  # the one clock (core/clock), records re-exports it
    assert utc_timestamp() == "2030-07-08T01:02:03Z"
    assert utc_today() == dt.date(2030, 7, 8)


@pytest.mark.parametrize("text, expected", [
    ("2026-12-02T18:48:09Z", dt.datetime(2026, 12, 2, 18, 48, 9, tzinfo=dt.UTC)),
    ("2026-12-02T18:48:09z", dt.datetime(2026, 12, 2, 18, 48, 9, tzinfo=dt.UTC)),
    ("  2026-12-02T18:48:09Z\n", dt.datetime(2026, 12, 2, 18, 48, 9, tzinfo=dt.UTC)),
    ("2026-12-02T20:48:09+02:00", dt.datetime(2026, 12, 2, 18, 48, 9, tzinfo=dt.UTC)),
    ("2026-12-02T18:48:09", dt.datetime(2026, 12, 2, 18, 48, 9, tzinfo=dt.UTC)),  # no zone: UTC
    # the engine's nanoseconds, cut to microseconds (not rounded)
    ("2026-12-02T18:48:09.123456789Z", dt.datetime(2026, 12, 2, 18, 48, 9, 123456, tzinfo=dt.UTC)),
    ("2026-12-02T18:48:09.1234567-01:00", dt.datetime(2026, 12, 2, 19, 48, 9, 123456, tzinfo=dt.UTC)),
    ("2026-12-02T18:48:09.5Z", dt.datetime(2026, 12, 2, 18, 48, 9, 500000, tzinfo=dt.UTC)),
])
def test_a_time_as_the_engine_a_registry_or_a_record_writes_it_is_read_in_utc(text, expected):
    parsed = parse_utc(text)
    assert parsed == expected
    assert parsed.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize("text", [None, 1733165289, "", "Z", "yesterday", "2026-13-02T18:48:09Z", b"2026-12-02"])
def test_anything_else_is_no_time(text):
    assert parse_utc(text) is None


def test_a_local_stamp_is_read_in_this_machines_local_time():
    assert parse_local_stamp("2026-12-02 18:48:09") == dt.datetime(2026, 12, 2, 18, 48, 9).timestamp()
    assert parse_local_stamp("2026-12-02 18:48:10") - parse_local_stamp("2026-12-02 18:48:09") == 1.0


@pytest.mark.parametrize("text", ["", "2026-12-02T18:48:09", "2026-12-02 18:48", "[2026-12-02 18:48:09]",
                                  "2026-02-30 00:00:00"])
def test_a_local_stamp_of_another_form_is_none(text):
    assert parse_local_stamp(text) is None


# ---- the typed reader of recorded rows -------------------------------------------------------------------------


@pytest.mark.parametrize("value, words", [
    (True, "true or false"), (False, "true or false"), (3, "a whole number"), (2.5, "a number"),
    ("x", "a string"), ({}, "an object"), ([], "a list"), (None, "null"), ((1,), "tuple"), (b"x", "bytes"),
])
def test_a_json_value_is_named_in_words(value, words):
    assert json_type(value) == words


@dataclass
class Row:
    anything: Any = None
    whatever: object = None
    flag: bool = False
    count: int = 0
    ratio: float = 0.0
    name: str = ""
    options: dict[str, str] | None = None
    labels: Mapping[str, str] | None = None
    plain_dict: dict | None = None
    items: list[str] | None = None
    pair: tuple[str, ...] | None = None
    seq: Sequence[int] | None = None
    plain_list: list | None = None
    maybe: typing.Optional[int] = None  # noqa: UP045 - the typing spelling is read as well
    either: int | str = 0
    path: Path | None = None  # a type no record uses: not judged
    nothing: None = None


@pytest.mark.parametrize("field, value", [
    ("anything", [1]), ("whatever", {"a": 1}), ("flag", True), ("flag", False), ("count", 0), ("count", -4),
    ("ratio", 1), ("ratio", 0.5), ("name", ""), ("options", {"a": "b"}), ("options", None), ("labels", {}),
    ("plain_dict", {}), ("items", []), ("pair", ["a"]), ("seq", [1]), ("plain_list", [1]), ("maybe", 3),
    ("maybe", None), ("either", 1), ("either", "x"), ("path", 12), ("path", None), ("nothing", None),
])
def test_a_row_whose_fields_have_their_types_passes(field, value):
    check_field_types(Row, {field: value})


@pytest.mark.parametrize("field, value, message", [
    ("flag", 1, "'flag' is a whole number, not true or false"),
    ("flag", "true", "'flag' is a string, not true or false"),
    ("count", True, "'count' is true or false, not a whole number"),  # JSON true is not a number of workers
    ("count", 1.5, "'count' is a number, not a whole number"),
    ("count", None, "'count' is null, not a whole number"),
    ("ratio", False, "'ratio' is true or false, not a number"),
    ("ratio", "1", "'ratio' is a string, not a number"),
    ("name", 3, "'name' is a whole number, not a string"),
    ("options", "a=b", "'options' is a string, not an object or null"),
    ("options", [], "'options' is a list, not an object or null"),
    ("labels", [], "'labels' is a list, not an object or null"),
    ("plain_dict", "x", "'plain_dict' is a string, not an object or null"),
    ("items", {}, "'items' is an object, not a list or null"),
    ("items", "abc", "'items' is a string, not a list or null"),
    ("pair", "ab", "'pair' is a string, not a list or null"),
    ("seq", {}, "'seq' is an object, not a list or null"),
    ("plain_list", 1, "'plain_list' is a whole number, not a list or null"),
    ("maybe", "3", "'maybe' is a string, not a whole number or null"),
    ("either", None, "'either' is null, not a whole number or a string"),
    ("either", [1], "'either' is a list, not a whole number or a string"),
    ("nothing", 0, "'nothing' is a whole number, not null"),
])
def test_the_first_field_of_a_wrong_type_is_named_with_what_it_is_and_what_it_should_be(field, value, message):
    with pytest.raises(TypeError) as caught:
        check_field_types(Row, {field: value})
    assert str(caught.value) == message


def test_fields_are_judged_in_their_order_and_missing_or_unknown_keys_are_the_callers():
    check_field_types(Row, {})
    check_field_types(Row, {"not_a_field": object(), "name": "x"})
    with pytest.raises(TypeError, match=r"^'count' is"):
        check_field_types(Row, {"name": 1, "count": "1", "flag": False})  # count comes before name in Row


# ---- the lenient reader ---------------------------------------------------------------------------------------


def test_a_bad_line_names_its_file_and_line_and_line_0_is_the_whole_store():
    assert str(BadLine(Path("/b/s.jsonl"), 3, "not valid JSON")) == "/b/s.jsonl:3: not valid JSON"
    assert str(BadLine(Path("/b/s.jsonl"), 0, "not a file")) == "/b/s.jsonl: not a file"


def _parse(value: Any) -> int:
    """A record kind: an object with an integer `n`; its own errors for the rest."""
    if not isinstance(value, dict):
        raise TypeError("not an object")
    if value.get("bad") == "value":
        raise ValueError("n is\nout of range")
    if value.get("bad") == "empty":
        raise ValueError()
    if value.get("bad") == "keyerror":
        raise KeyError()
    return int(value["n"])


def test_every_bad_line_is_named_with_why_and_the_good_ones_are_read(root, capsys):
    store = root / "s.jsonl"
    store.write_text("\n".join([
        '{"n": 1}', "", "   ", "{not json", '{"n": 2}', '{"m": 1}', "[1]", '{"bad": "value"}', '{"bad": "empty"}',
        '{"bad": "keyerror"}', '{"n": 3}', "",
    ]))
    rows, bad = read_jsonl_lenient(store, _parse)
    assert rows == [1, 2, 3]
    assert [(b.path, b.line, b.why) for b in bad] == [
        (store, 4, "not valid JSON"), (store, 6, "no 'n'"), (store, 7, "not an object"),
        (store, 8, r"n is\nout of range"), (store, 9, "not a record of this file"), (store, 10, "a key is missing"),
    ]
    assert capsys.readouterr().err == ""


def test_a_torn_last_line_is_skipped_with_a_warning_and_a_bad_line_before_it_is_not(root, capsys):
    store = root / "s.jsonl"
    store.write_text('{"n": 1}\n{"n": 2\n{"n": 3}\n{"n": 4, "na')
    rows, bad = read_jsonl_lenient(store, _parse)
    assert rows == [1, 3]
    assert [(b.line, b.why) for b in bad] == [(2, "not valid JSON")]
    err = capsys.readouterr().err
    assert err == f"warning: {store}:4: skipped a torn last line (a write cut short); the next append moves it aside\n"


def test_a_last_line_that_is_whole_but_lacks_its_newline_is_read(root, capsys):
    store = root / "s.jsonl"
    store.write_text('{"n": 1}\n{"n": 2}')
    assert read_jsonl_lenient(store, _parse) == ([1, 2], [])
    assert capsys.readouterr().err == ""


def test_a_store_not_there_yet_is_empty_and_one_that_is_no_file_is_line_0(root):
    assert read_jsonl_lenient(root / "none.jsonl", _parse) == ([], [])
    (root / "dir.jsonl").mkdir()
    rows, bad = read_jsonl_lenient(root / "dir.jsonl", _parse)
    assert rows == []
    assert [(b.line, b.why) for b in bad] == [(0, "not a file of records (a folder)")]
    (root / "dangling.jsonl").symlink_to(root / "nowhere")
    rows, bad = read_jsonl_lenient(root / "dangling.jsonl", _parse)
    assert [b.line for b in bad] == [0]


def test_the_strict_reader_raises_the_callers_error_for_the_first_bad_line_and_bad_store_for_line_0(root):
    store = root / "s.jsonl"
    store.write_text('{"n": 1}\n{"m": 2}\nnope\n')
    with pytest.raises(LookupError, match=r"^line 2$"):
        read_jsonl(store, _parse, lambda n: LookupError(f"line {n}"))
    store.write_text('{"n": 1}\n\n{"n": 5}\n')
    assert read_jsonl(store, _parse, lambda n: LookupError(f"line {n}")) == [1, 5]
    (root / "dir.jsonl").mkdir()
    with pytest.raises(BadStore) as caught:
        read_jsonl(root / "dir.jsonl", _parse, lambda n: LookupError(f"line {n}"))
    assert str(caught.value) == f"{root / 'dir.jsonl'}: not a file of records (a folder)"


# ---- appends ---------------------------------------------------------------------------------------------------


def test_an_append_writes_whole_lines_with_sorted_keys_and_nothing_for_no_rows(root):
    store = root / "stack" / "s.jsonl"
    append_jsonl(store, [])
    assert not store.parent.exists()  # nothing to write: no folder made either
    append_jsonl(store, [{"b": 1, "a": {"d": 2, "c": 3}}, {"z": None}])
    append_jsonl(store, iter([{"n": "é"}]))
    assert store.read_bytes() == b'{"a": {"c": 3, "d": 2}, "b": 1}\n{"z": null}\n{"n": "\\u00e9"}\n'
    assert (root / "stack" / ".s.jsonl.lock").is_file()


def test_a_whole_last_line_without_its_newline_gets_one_before_the_next_append(root, capsys):
    store = root / "s.jsonl"
    store.write_bytes(b'{"n": 1}\n{"n": 2}')
    append_jsonl(store, [{"n": 3}])
    assert store.read_bytes() == b'{"n": 1}\n{"n": 2}\n{"n": 3}\n'
    assert not (root / "s.jsonl.torn").exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("before, kept", [
    (b'{"n": 1}\n{"n": 2, "x', b'{"n": 1}\n'),
    (b'{"n": 2, "x', b""),  # the only line torn
    (b'{"n": 1}\n' + b"x" * 70000, b'{"n": 1}\n'),  # a tail longer than one read of the backwards scan
])
def test_a_torn_last_line_is_moved_aside_with_a_warning_before_the_next_append(root, capsys, before, kept):
    store = root / "s.jsonl"
    store.write_bytes(before)
    append_jsonl(store, [{"n": 3}])
    assert store.read_bytes() == kept + b'{"n": 3}\n'
    tail = before[len(kept):]
    assert (root / "s.jsonl.torn").read_bytes() == tail + b"\n"
    assert capsys.readouterr().err == (
        f"warning: {store}: a torn last line ({len(tail)} bytes, a write cut short) was moved to s.jsonl.torn\n")


def test_a_torn_line_is_dropped_even_where_its_keeping_file_cannot_be_written(root, capsys):
    store = root / "s.jsonl"
    store.write_bytes(b'{"n": 1}\n{"n"')
    (root / "s.jsonl.torn").mkdir()  # cannot be appended to
    append_jsonl(store, [{"n": 3}])
    assert store.read_bytes() == b'{"n": 1}\n{"n": 3}\n'
    assert "moved to s.jsonl.torn" in capsys.readouterr().err


def test_an_append_cut_short_is_cut_back_and_said_in_one_line(root, monkeypatch):
    store = root / "s.jsonl"
    store.write_bytes(b'{"n": 1}\n')
    real_write = os.write

    def short_write(fd, data):
        return real_write(fd, data[:3])

    monkeypatch.setattr(records_mod.os, "write", short_write)
    with pytest.raises(OutputNotWritable) as caught:
        append_jsonl(store, [{"n": 2}])
    assert str(caught.value) == f"{store}: the record was not written (No space left on device); the file is as it was"
    monkeypatch.undo()
    assert store.read_bytes() == b'{"n": 1}\n'


def test_an_append_whose_fsync_fails_is_cut_back_naming_the_error(root, monkeypatch):
    store = root / "s.jsonl"
    store.write_bytes(b'{"n": 1}\n')

    def fail(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(records_mod.os, "fsync", fail)
    with pytest.raises(OutputNotWritable, match=r"\(Input/output error\); the file is as it was$"):
        append_jsonl(store, [{"n": 2}])
    assert store.read_bytes() == b'{"n": 1}\n'


# ---- outputs and the writable checks ------------------------------------------------------------------------------


def test_an_output_is_written_whole_from_text_or_bytes(root):
    assert write_output(root / "a" / "t.txt", "é\n") == root / "a" / "t.txt"
    assert (root / "a" / "t.txt").read_bytes() == "é\n".encode()
    write_output(root / "b.bin", b"\x00\xff")
    assert (root / "b.bin").read_bytes() == b"\x00\xff"


def test_a_path_that_is_a_folder_or_under_a_file_cannot_be_written(root):
    (root / "dir").mkdir()
    with pytest.raises(OutputNotWritable) as caught:
        require_writable(root / "dir", what="the record")
    assert str(caught.value) == f"the record {root / 'dir'}: cannot be written (it is a folder)"
    (root / "file").write_text("x")
    with pytest.raises(OutputNotWritable) as caught:
        require_writable(root / "file" / "deeper" / "out.json", what="the record")
    assert str(caught.value) == (f"the record {root / 'file' / 'deeper' / 'out.json'}: cannot be written "
                                 f"({root / 'file'} is not a folder)")


def test_a_writable_path_makes_its_folders_unless_asked_not_to(root):
    require_writable(root / "x" / "y" / "out.json", what="the record", create=False)
    assert not (root / "x").exists()
    require_writable(root / "x" / "y" / "out.json", what="the record")
    assert (root / "x" / "y").is_dir()
    assert list((root / "x" / "y").iterdir()) == []  # the probe is gone
    (root / "x" / "y" / "out.json").write_text("{}")
    require_writable(root / "x" / "y" / "out.json", what="the record")  # an existing file is fine


def test_a_store_that_is_a_link_or_whose_lock_is_one_is_refused(root):
    (root / "elsewhere.jsonl").write_text("")
    store = root / "s.jsonl"
    store.symlink_to(root / "elsewhere.jsonl")
    with pytest.raises(OutputNotWritable) as caught:
        require_store_writable(store, what="the records")
    assert str(caught.value) == (f"the records {store}: cannot be written (s.jsonl is a link to "
                                 f"{root / 'elsewhere.jsonl'}; records are never written through a link)")
    store.unlink()
    store.write_text("")
    (root / ".s.jsonl.lock").symlink_to(root / "elsewhere.jsonl")
    with pytest.raises(OutputNotWritable, match=r"\(\.s\.jsonl\.lock is a link to "):
        require_store_writable(store, what="the records")


def test_a_first_record_is_probed_where_its_folder_will_be_and_nothing_is_made(root):
    store = root / "stack" / "deep" / "s.jsonl"
    require_store_writable(store, what="the records")
    assert list(root.iterdir()) == []
    store.parent.mkdir(parents=True)
    store.write_text(json.dumps({"n": 1}) + "\n")
    require_store_writable(store, what="the records")
    assert store.read_text() == '{"n": 1}\n'
    assert sorted(p.name for p in store.parent.iterdir()) == [".s.jsonl.lock", "s.jsonl"]


# ---- what the checks and the writers do on the way ----------------------------------------------------------------


@pytest.fixture
def local_time_not_utc(monkeypatch):
    """This process's local time zone is five and a half hours east of UTC for the test (then put back)."""
    monkeypatch.setenv("TZ", "IST-5:30")
    time.tzset()
    assert time.timezone == -19800
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_time_without_a_zone_is_utc_and_the_answer_is_in_utc_whatever_the_local_zone(local_time_not_utc):
    assert parse_utc("2026-12-02T18:48:09") == dt.datetime(2026, 12, 2, 18, 48, 9, tzinfo=dt.UTC)
    parsed = parse_utc("2026-12-02T20:48:09+02:00")
    assert parsed.utcoffset() == dt.timedelta(0)
    assert parsed.hour == 18


def test_a_second_torn_line_is_kept_after_the_first_not_over_it(root, capsys):
    store = root / "s.jsonl"
    store.write_bytes(b'{"n": 1}\n{"first')
    append_jsonl(store, [{"n": 2}])
    with store.open("ab") as fh:
        fh.write(b'{"second')
    append_jsonl(store, [{"n": 3}])
    assert store.read_bytes() == b'{"n": 1}\n{"n": 2}\n{"n": 3}\n'
    assert (root / "s.jsonl.torn").read_bytes() == b'{"first\n{"second\n'


def _watch_probes(monkeypatch, folder: Path) -> list[tuple[str, int]]:
    """(name, size) of each probe file in `folder` at the moment it is fsynced."""
    seen: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def fsync(fd):
        real_fsync(fd)
        seen.extend((p.name, p.stat().st_size) for p in folder.iterdir() if p.name.endswith(".probe"))

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


@pytest.mark.parametrize("first", [True, False])
def test_a_store_probe_is_record_sized_and_named_after_the_store(root, monkeypatch, first):
    store = root / "st" / "deploy.jsonl"
    probed = root if first else store.parent
    if not first:
        store.parent.mkdir()
        store.write_text("")
    seen = _watch_probes(monkeypatch, probed)
    require_store_writable(store, what="the records")
    assert len(seen) == 1
    name, size = seen[0]
    assert name.startswith(".deploy.jsonl.") and size == records_mod.STORE_PROBE_BYTES == 16384
    assert not any(p.name.endswith(".probe") for p in probed.iterdir())


def test_a_first_record_whose_probe_fails_says_why_in_one_line(root, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)
    store = root / "st" / "deploy.jsonl"
    with pytest.raises(OutputNotWritable) as caught:
        require_store_writable(store, what="the records")
    assert str(caught.value) == f"the records {store}: cannot be written (No space left on device)"


def test_the_store_check_takes_the_writers_exclusive_lock_and_opens_the_store_to_append(root, monkeypatch):
    store = root / "s.jsonl"
    store.write_text('{"n": 1}\n')
    locks: list[int] = []
    opens: list[tuple[str, int]] = []
    real_flock, real_open = records_mod.fcntl.flock, records_mod.open_nofollow

    def flock(fd, op):
        locks.append(op)
        return real_flock(fd, op)

    def open_nofollow(at, path, flags, *args, **kwargs):
        opens.append((Path(path).name, flags))
        return real_open(at, path, flags, *args, **kwargs)

    monkeypatch.setattr(records_mod.fcntl, "flock", flock)
    monkeypatch.setattr(records_mod, "open_nofollow", open_nofollow)
    require_store_writable(store, what="the records")
    assert locks == [records_mod.fcntl.LOCK_EX]
    assert ("s.jsonl", os.O_WRONLY | os.O_APPEND) in opens
    assert store.read_text() == '{"n": 1}\n'
