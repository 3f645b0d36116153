"""What `invoke diff` reads besides the comparison: files and build folders, the build records that name an image
id, and the task's printed answer (a registry image: test_diff_sources_registry.py). No Docker: DOCKER_HOST names a
socket that does not exist, so the engine is never what answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from diff_inputs import DOWN, IMAGE_ID, NO_ENGINE, RECORD, _write

from sglstack.core.errors import ConfigError, DockerUnavailable
from sglstack.diff.compare import Snapshot, lock_snapshot, record_snapshot
from sglstack.diff.snapshots import local_snapshot, snapshot_from_file
from sglstack.diff.sources import load_snapshot
from sglstack.lockfile.model import Lock, LockedPackage
from sglstack.lockfile.text import parse_lock, render_lock


@pytest.fixture(autouse=True)
def no_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))


def _lock_text() -> str:
    return render_lock(Lock(stack="cu130", stack_sha256="9" * 64, resolved_at="2026-12-01T10:00:00Z",
                            resolver="uv 0.13.9", python="3.12", platforms=("linux/amd64",), layers=("deps",),
                            packages=(LockedPackage("idna", "3.7", "deps", ("sha256:" + "0" * 64,)),)))


# ---- files and build folders -------------------------------------------------------------------------------

def test_a_build_folder_is_read_through_its_record(tmp_path):
    folder = tmp_path / "cu130"
    _write(folder / "record.json", RECORD)
    assert local_snapshot(str(folder)) == record_snapshot(RECORD, str(folder))
    assert load_snapshot(str(folder)).ref == str(folder)


def test_a_folder_without_a_record_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as caught:
        snapshot_from_file(tmp_path, "x")
    assert str(caught.value) == f"{tmp_path}: a folder given to diff must hold a build record (record.json)"
    assert caught.value.file == str(tmp_path)


def test_a_lock_file_is_read_as_a_lock(tmp_path):
    path = _write(tmp_path / "locks" / "cu130.txt", _lock_text())
    assert local_snapshot(str(path)) == lock_snapshot(parse_lock(_lock_text()), str(path))
    assert local_snapshot(str(path)) == Snapshot(ref=str(path), kind="lock", stack="cu130", packages={"idna": "3.7"},
                                                      platform="linux/amd64")


def test_a_damaged_lock_is_one_line_naming_the_file_and_line(tmp_path):
    path = _write(tmp_path / "cu130.txt", "# sglstack lock for stack cu130\nidna==3.7\n")
    with pytest.raises(ConfigError) as caught:
        local_snapshot(str(path))
    assert str(caught.value) == f"{path}:2: a package entry before the first '# ---- layer NAME' line"


def test_records_are_read_as_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    record = {**RECORD, "labels": {"io.sglstack.note": "caf\u00e9"}}
    path = _write(tmp_path / "build" / "cu130" / "record.json", record)
    assert local_snapshot(str(path)) == record_snapshot(record, str(path))
    assert local_snapshot(IMAGE_ID) == record_snapshot(record, IMAGE_ID)


@pytest.mark.parametrize(("text", "why"), [
    ("not json", "neither a build record (JSON: Expecting value: line 1 column 1 (char 0)) nor a lock "
                 "('# sglstack lock ...')"),
    ("[1, 2]", "not a build record (no 'config_hash')"),
    ('{"stack": "cu130"}', "not a build record (no 'config_hash')"),
    (" # sglstack lock", "neither a build record (JSON: Expecting value: line 1 column 2 (char 1)) nor a lock "
                         "('# sglstack lock ...')"),
])
def test_a_file_that_is_neither_record_nor_lock_is_one_line(tmp_path, text, why):
    path = _write(tmp_path / "x.json", text)
    with pytest.raises(ConfigError) as caught:
        local_snapshot(str(path))
    assert str(caught.value) == f"{path}: {why}"


def test_a_file_that_is_not_text_is_one_line(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b"\xff{}")
    with pytest.raises(ConfigError) as caught:
        snapshot_from_file(path, "x")
    assert str(caught.value) == f"{path}:1: is not UTF-8 text (byte 0xff cannot be decoded)"


def test_a_damaged_record_names_its_key(tmp_path):
    path = _write(tmp_path / "record.json", {**RECORD, "stack": 5})
    with pytest.raises(ConfigError) as caught:
        snapshot_from_file(path, "x")
    assert str(caught.value) == f"{path}: key 'stack': not a build record diff can read: not text"
    assert (caught.value.file, caught.value.key) == (str(path), "stack")


# ---- a bare image id, known by a build record under the build root ------------------------------------

def _records(build: Path) -> dict:
    """Records under the build root: damaged, other ids, and two that name IMAGE_ID (the first in path order
    wins); one naming a tag, and one outside any stack folder, which diff does not read."""
    (build / "a0" / "record.json").mkdir(parents=True)  # a folder where a record would be: skipped
    _write(build / "a1" / "record.json", "{not json")
    _write(build / "a2" / "record.json", [IMAGE_ID])
    _write(build / "a3" / "record.json", {**RECORD, "image_id": "sha256:" + "2" * 64, "stack": "a3"})
    _write(build / "a4" / "record.json", {**RECORD, "pins": ["torch"], "stack": "a4"})  # damaged: skipped
    first = {**RECORD, "stack": "b1"}
    _write(build / "b1" / "record-smoke.json", first)
    _write(build / "b2" / "record.json", {**RECORD, "stack": "b2"})
    _write(build / "c" / "record.json", {**RECORD, "image_id": "sglstack/cu130:tag", "stack": "c"})
    _write(build / "record.json", {**RECORD, "image_id": "sha256:" + "3" * 64})
    return first


def test_a_bare_image_id_is_read_from_the_first_build_record_naming_it(tmp_path):
    first = _records(tmp_path / "build")
    assert local_snapshot(IMAGE_ID) == record_snapshot(first, IMAGE_ID)
    assert load_snapshot(IMAGE_ID).stack == "b1"
    assert local_snapshot("sha256:" + "3" * 64) is None  # only records in a folder of the build root count
    assert local_snapshot("sglstack/cu130:tag") is None  # a tag is never looked up in the records


def test_an_id_no_record_names_is_one_line_saying_how_to_name_a_registry_image(tmp_path):
    _records(tmp_path / "build")
    unknown = "sha256:" + "4" * 64
    assert local_snapshot(unknown) is None
    with pytest.raises(ConfigError) as caught:
        load_snapshot(unknown)
    assert str(caught.value) == (f"'{unknown}': no local image and no build record under {tmp_path / 'build'} has "
                                 f"this id; name a registry image as host:port/path@{unknown}")


def test_an_engine_that_is_down_leaves_the_build_records_and_else_is_the_answer(tmp_path):
    first = _records(tmp_path / "build")
    assert local_snapshot(IMAGE_ID, docker_host=DOWN) == record_snapshot(first, IMAGE_ID)
    for spec in ("sha256:" + "4" * 64, "sglstack/cu130:tag"):
        with pytest.raises(DockerUnavailable) as caught:
            local_snapshot(spec, docker_host=DOWN)
        assert str(caught.value).startswith(f"cannot reach the Docker engine at {DOWN}: ")


def test_no_engine_and_nothing_here_is_none():
    assert local_snapshot("sglstack/cu130:tag") is None
    assert local_snapshot("sha256:" + "4" * 64) is None
