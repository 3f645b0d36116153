"""`wheelkit keep-only`: a part copied over the venv brings setuptools again; the venv's own install is removed by
its RECORD, leaving what the kept install names (shared paths included) and nothing of the other."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sglstack.core.resources import TOOLS_DIR


@pytest.fixture
def wheelkit(monkeypatch):
    monkeypatch.syspath_prepend(str(TOOLS_DIR))
    import wheelkit

    return wheelkit


def install(site: Path, name: str, version: str, files: dict[str, str]) -> Path:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    rows = [[rel, "", ""] for rel in files] + [[f"{info.name}/METADATA", "", ""], [f"{info.name}/RECORD", "", ""]]
    with open(info / "RECORD", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return info


def test_the_other_install_goes_and_the_kept_one_stays_whole(wheelkit, tmp_path):
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    old = install(site, "setuptools", "66.1.1", {"setuptools/__init__.py": "old", "setuptools/gone.py": "old",
                                                  "pkg_resources/__init__.py": "old", "../../../bin/old-tool": "old"})
    new = install(site, "setuptools", "84.2.1", {"setuptools/__init__.py": "new", "setuptools/added.py": "new"})
    install(site, "torch", "2.14.1", {"torch/__init__.py": "t"})
    assert wheelkit.keep_only(site, "setuptools==84.2.1") == ["setuptools 66.1.1"]
    assert not old.exists() and new.is_dir()
    assert (site / "setuptools" / "__init__.py").read_text() == "new"  # a path both name is the kept one's
    assert (site / "setuptools" / "added.py").exists() and not (site / "setuptools" / "gone.py").exists()
    assert not (site / "pkg_resources").exists()  # emptied folders go too
    assert not (tmp_path / "bin" / "old-tool").exists() and (site / "torch" / "__init__.py").exists()
    assert wheelkit.keep_only(site, "setuptools==84.2.1") == []  # once is enough


def test_a_pin_with_no_such_install_is_one_line_and_exit_1(wheelkit, tmp_path, capsys):
    site = tmp_path / "site"
    install(site, "setuptools", "66.1.1", {"setuptools/__init__.py": "old"})
    with pytest.raises(wheelkit.WheelKitError, match=r"keep-only setuptools==84.2.1: installed 66.1.1 in "):
        wheelkit.keep_only(site, "setuptools==84.2.1")
    assert wheelkit.main(["keep-only", str(site), "setuptools==84.2.1"]) == 1
    assert capsys.readouterr().err.startswith("wheelkit: keep-only setuptools==84.2.1: installed 66.1.1")
    assert (site / "setuptools" / "__init__.py").exists()  # nothing removed on a refusal
