"""One build folder: SGLSTACK_BUILD_DIR (default build/) holds everything a task writes, and a folder
that cannot be written is found before the work starts."""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.core.records import OutputNotWritable, build_root, require_writable

REPO = Path(__file__).resolve().parents[2]
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"


def test_build_root_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SGLSTACK_BUILD_DIR", raising=False)
    assert build_root() == Path("build")
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "tree"))
    assert build_root() == tmp_path / "tree"


def test_require_writable_names_the_path(tmp_path):
    require_writable(tmp_path / "new" / "deeper" / "report.json", what="report")
    assert (tmp_path / "new" / "deeper").is_dir() and list((tmp_path / "new" / "deeper").iterdir()) == []
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(OutputNotWritable, match=r"^report .*folder\.json: cannot be written \(it is a folder\)$"):
        require_writable(tmp_path / "folder.json", what="report")
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputNotWritable, match=r"file/x/report\.json: cannot be written \(.*file is not a folder\)"):
        require_writable(tmp_path / "file" / "x" / "report.json", what="report")


def test_require_writable_without_create_probes_the_nearest_folder_and_makes_none(tmp_path, monkeypatch):
    require_writable(tmp_path / "a" / "b" / "report.json", what="report", create=False)
    assert list(tmp_path.iterdir()) == []
    probed = []

    def mkstemp(**kw):
        probed.append(kw["dir"])
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(OutputNotWritable) as err:
        require_writable(tmp_path / "a" / "b" / "report.json", what="report", create=False)
    assert str(err.value) == f"report {tmp_path / 'a' / 'b' / 'report.json'}: cannot be written (Read-only file system)"
    assert probed == [tmp_path]




def test_require_writable_in_an_existing_folder_leaves_nothing_behind(tmp_path, monkeypatch):
    require_writable(tmp_path / "report.json", what="report")
    (tmp_path / "old.json").write_text("{}")
    require_writable(tmp_path / "old.json", what="report")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]
    monkeypatch.setattr(os, "access", lambda path, mode: not (path == tmp_path / "old.json" and mode == os.W_OK))
    with pytest.raises(OutputNotWritable) as exc:
        require_writable(tmp_path / "old.json", what="report")
    assert str(exc.value) == f"report {tmp_path / 'old.json'}: cannot be written (permission denied)"


def test_require_writable_probes_the_folder_itself_with_a_hidden_named_probe(tmp_path, monkeypatch):
    """The probe is made in the target's own folder (a read-only mount there is what it must catch), named
    after the target so that one left by a killed process says what it was."""
    made = []
    real_mkstemp = tempfile.mkstemp

    def mkstemp(**kwargs):
        fd, probe = real_mkstemp(**kwargs)
        made.append(Path(probe))
        return fd, probe

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    require_writable(tmp_path / "out" / "report.json", what="report")
    (probe,) = made
    assert probe.parent == tmp_path / "out" and not probe.exists()
    assert re.fullmatch(r"\.report\.json\.[^/]+\.probe", probe.name)


@pytest.mark.parametrize(("error", "reason"), [(OSError(28, "No space left on device"), "No space left on device"),
                                               (OSError(), "OSError"), (PermissionError(), "PermissionError")])
def test_require_writable_names_why_the_probe_failed(tmp_path, monkeypatch, error, reason):
    def mkstemp(**kwargs):
        raise error

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(OutputNotWritable) as exc:
        require_writable(tmp_path / "r.json", what="the report")
    assert str(exc.value) == f"the report {tmp_path / 'r.json'}: cannot be written ({reason})"


def test_unwritable_build_folder_is_one_line_before_rendering(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_invoke("build", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX), cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(blocker), "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert proc.returncode == 1
    record = blocker / "cpu-test" / "record.json"
    assert proc.stderr.strip() == (f"error: build record (under the build folder) {record}: cannot be written "
                                   f"({blocker} is not a folder)"), proc.stderr
