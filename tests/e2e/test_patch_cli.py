"""`python3 -m patchkit` run from a copy of the folder, as the image runs it (no sglstack, no site-packages)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from patch_fixtures import (
    KIMI,
    KIMI_CLASS,
    KIMI_FILE,
    KIMI_METHODS,
    PATCHES_DIR,
    cat_appended,
    class_members,
    make_tree,
    pristine,
    target,
)

PATCHKIT_SRC = Path(__file__).resolve().parents[2] / "sglstack" / "inimage" / "patchkit"

pytestmark = pytest.mark.network


@pytest.fixture
def tools(tmp_path) -> Path:
    dest = tmp_path / "tools"
    shutil.copytree(PATCHKIT_SRC, dest / "patchkit", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(params=["host", "python3.12"])
def python(request) -> str:
    """The host interpreter (3.11) and, where one is installed, the 3.12 of the Ubuntu 24.04 images."""
    if request.param == "host":
        return sys.executable
    found = shutil.which(request.param)
    if not found or subprocess.run([found, "-c", ""], capture_output=True, check=False).returncode:
        pytest.skip(f"no usable {request.param} on this machine")
    return found


def _patchkit(tools: Path, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    # -S: no site-packages, so neither sglstack nor any third-party package can be imported.
    return subprocess.run(
        [python, "-S", "-m", "patchkit", *map(str, args)],
        cwd=tools,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_patchkit_imports_only_the_standard_library_and_itself():
    for path in PATCHKIT_SRC.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            outside = [r for r in roots if r not in sys.stdlib_module_names and r != "__future__"]
            assert not outside, f"{path.name}:{node.lineno} imports {outside}"


def test_apply_then_verify_with_manifest(tools, tmp_path, python):
    root = make_tree(tmp_path / "tree", pristine("0.5.9"), version="0.5.9")
    manifest = tmp_path / "patches.json"
    done = _patchkit(
        tools,
        "apply",
        "--root",
        root,
        "--patches-dir",
        PATCHES_DIR,
        "--sglang-version",
        "0.5.9",
        "--policy",
        "notice",
        "--manifest",
        manifest,
        KIMI,
        python=python,
    )
    assert done.returncode == 0, done.stderr
    assert class_members(target(root))[-3:] == list(KIMI_METHODS)
    (entry,) = json.loads(manifest.read_text())
    assert entry["id"] == KIMI and entry["file"] == KIMI_FILE and entry["class"] == KIMI_CLASS
    assert entry["status"] == "applied" and entry["sglang_version"] == "0.5.9"
    assert entry["sha256_after"] != entry["sha256_before"]

    checked = _patchkit(
        tools, "verify", "--root", root, "--patches-dir", PATCHES_DIR, "--manifest", manifest, KIMI, python=python
    )
    assert checked.returncode == 0, checked.stderr

    (root / KIMI_FILE).write_bytes(target(root) + b"\n")
    changed = _patchkit(tools, "verify", "--root", root, "--patches-dir", PATCHES_DIR, "--manifest", manifest, KIMI)
    assert changed.returncode != 0 and "changed after patching" in changed.stderr


def test_already_upstream_is_a_notice_or_an_error_by_policy(tools, tmp_path):
    root = make_tree(tmp_path / "tree", pristine("0.5.10"), version="0.5.10")
    manifest = tmp_path / "patches.json"
    notice = _patchkit(
        tools,
        "apply",
        "--root",
        root,
        "--patches-dir",
        PATCHES_DIR,
        "--sglang-version",
        "0.5.10",
        "--manifest",
        manifest,
        KIMI,
    )
    assert notice.returncode == 0 and "retired" in notice.stderr
    assert json.loads(manifest.read_text())[0]["status"] == "already-upstream"
    assert target(root) == pristine("0.5.10")
    verified = _patchkit(tools, "verify", "--root", root, "--patches-dir", PATCHES_DIR, "--manifest", manifest, KIMI)
    assert verified.returncode == 0, verified.stderr

    error = _patchkit(
        tools,
        "apply",
        "--root",
        root,
        "--patches-dir",
        PATCHES_DIR,
        "--sglang-version",
        "0.5.10",
        "--policy",
        "error",
        KIMI,
    )
    assert error.returncode != 0
    assert error.stderr.strip().splitlines() == [error.stderr.strip()]


def test_failure_is_one_line_naming_patch_file_and_class(tools, tmp_path):
    root = make_tree(tmp_path / "tree", cat_appended(pristine("0.5.9").decode(), indent="    ").encode())
    done = _patchkit(tools, "apply", "--root", root, "--patches-dir", PATCHES_DIR, "--sglang-version", "0.5.9", KIMI)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"patch '{KIMI}': {KIMI_FILE}: class {KIMI_CLASS}: does not compile: IndentationError")


def test_usage_errors(tools, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    no_tree = _patchkit(tools, "verify", "--root", empty, "--patches-dir", PATCHES_DIR, KIMI)
    assert no_tree.returncode == 2 and "holds no sglang/ package" in no_tree.stderr
    root = make_tree(tmp_path / "tree", pristine("0.5.9"))
    unknown = _patchkit(
        tools, "apply", "--root", root, "--patches-dir", PATCHES_DIR, "--sglang-version", "0.5.9", "no-such-patch"
    )
    assert unknown.returncode == 2 and "patch 'no-such-patch': unknown patch" in unknown.stderr
