"""Files a user names (diff inputs, locks, smoke reports) and JSON from outside are read bounded: a regular
file only, opened without blocking, at most a size limit, JSON nested at most a depth limit; each refusal is
one line naming the file, exit 2 (issue 34)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.core.errors import ConfigError
from sglstack.core.inputs import MAX_DEPTH, MAX_INPUT_BYTES, MalformedJSON, loads, read_json
from sglstack.core.records import read_jsonl
from sglstack.lockfile.text import read_lock


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as fh:
        fh.truncate(size)  # no disk used
    return path


def test_diff_refuses_a_fifo_at_once(tmp_path):
    fifo = tmp_path / "a.json"
    os.mkfifo(fifo)  # nobody ever writes: before the fix the diff waited for ever (the timeout fails it)
    proc = run_invoke("diff", str(fifo), str(fifo), cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, f"error: {fifo}: is not a regular file\n")


def test_diff_refuses_a_device_and_a_file_over_the_limit_unread(tmp_path):
    proc = run_invoke("diff", "/dev/zero", "/dev/zero", cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, "error: /dev/zero: is not a regular file\n")
    huge = _sparse(tmp_path / "huge.json", MAX_INPUT_BYTES + 1)
    proc = run_invoke("diff", str(huge), str(huge), cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (
        2, f"error: {huge}: is larger than the {MAX_INPUT_BYTES // 1024} KiB limit for a build record or lock\n")


def test_diff_refuses_deeply_nested_json_in_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"config_hash": ' + "[" * 100_000 + "]" * 100_000 + "}")
    proc = run_invoke("diff", str(deep), str(deep), cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (
        2, f"error: {deep}: neither a build record (JSON: nested more than {MAX_DEPTH} levels deep) "
           f"nor a lock ('# sglstack lock ...')\n")


def test_a_lock_given_by_path_that_is_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "cu130.txt"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as caught:
        read_lock(fifo)
    assert (str(caught.value), caught.value.exit_code) == (f"{fifo}: is not a regular file", 2)


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 5_000, 200_000])
def test_json_past_the_depth_limit_is_a_value_error_not_a_recursion_error(levels):
    with pytest.raises(MalformedJSON) as caught:
        loads("[" * levels + "]" * levels)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == f"nested more than {MAX_DEPTH} levels deep"
    nested = {"a": [{"b": [1]}]}
    assert loads(json.dumps(nested)) == nested
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) == json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)


def test_read_json_names_the_file_for_each_way_it_fails(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ConfigError) as caught:
        read_json(bad)
    assert str(caught.value) == f"{bad}:1: is not UTF-8 text (byte 0xff cannot be decoded)"
    with pytest.raises(ConfigError) as caught:
        read_json(tmp_path / "none.json")
    assert str(caught.value) == f"{tmp_path}/none.json: file not found"


def test_a_deeply_nested_records_line_is_the_callers_bad_line(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"a": 1}\n' + "[" * 100_000 + "]" * 100_000 + '\n{"b": 2}\n')
    with pytest.raises(ConfigError) as caught:
        read_jsonl(path, dict, lambda n: ConfigError(f"line {n}: not a record", file=str(path)))
    assert str(caught.value) == f"{path}: line 2: not a record"
