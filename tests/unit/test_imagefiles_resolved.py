"""imagefiles.py resolves each RECORD path as os.path.realpath does, a folder at a time (the size step's cost
on a serving image was mostly realpath per file): the same path and lstat for a plain file, a file in a linked
folder, a linked file, a `..` entry and a missing file."""

from __future__ import annotations

import os

import pytest

from sglstack.inimage.incontainer.imagefiles import resolved


@pytest.fixture()
def tree(tmp_path):
    (tmp_path / "real" / "pkg").mkdir(parents=True)
    (tmp_path / "real" / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "real" / "bin").mkdir()
    (tmp_path / "real" / "bin" / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "lib64").symlink_to(tmp_path / "real")  # a linked folder, as a venv's lib64
    (tmp_path / "real" / "pkg" / "alias.py").symlink_to(tmp_path / "real" / "pkg" / "mod.py")
    (tmp_path / "real" / "pkg" / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    return tmp_path


@pytest.mark.parametrize("relative", ["real/pkg/mod.py", "lib64/pkg/mod.py", "real/pkg/alias.py",
                                      "lib64/pkg/../bin/tool", "real/pkg/missing.py", "real/pkg/dangling.py",
                                      "lib64/pkg/alias.py"])
def test_a_record_path_resolves_as_realpath_does(tree, relative):
    cache: dict[str, str] = {}
    path = str(tree / relative)
    real, st = resolved(path, cache)
    assert real == os.path.realpath(path)
    if os.path.lexists(os.path.realpath(path)):
        assert st is not None and st.st_ino == os.lstat(os.path.realpath(path)).st_ino
    else:
        assert st is None
    assert resolved(path, cache)[0] == real  # through the cached folder again
