"""Bad patch inputs are one line naming the patch, and an apply that cannot finish changes nothing.

The patches here are our own small ones (tests/patch_fixtures.make_patch) on small trees; the engine is
run in process and as `python3 -S -m patchkit`, the command the image build runs.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from patch_fixtures import class_members, make_patch

from sglstack.patchkit import (
    MAX_SOURCE_BYTES,
    PatchDefinitionError,
    PatchUnreadable,
    PatchWriteError,
    apply_patches,
)

PATCHKIT_SRC = Path(__file__).resolve().parent.parent / "sglstack" / "patchkit"

TARGET = b'"""A module."""\n\n\nclass Demo:\n    x = 1\n\n    def first(self):\n        return 1\n\n\nEntry = Demo\n'
METHODS = "class Demo:\n    def added(self):\n        return 2\n"


def _tree(root: Path, rel: str = "sglang/demo.py", content: bytes = TARGET) -> Path:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(content)
    return root


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for folders): what 'unchanged' means."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary folder an unprivileged user can read (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="sglstack-ro-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in [path, *path.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(path)


def _patchkit_as_user(tools: Path, *args: object) -> subprocess.CompletedProcess:
    """`python3 -S -m patchkit ARGS` as a user the permission bits apply to: root ignores a read-only
    folder, so as root the command runs as nobody (with the system interpreter, which nobody can run)."""
    if os.geteuid() != 0:
        python, preexec = sys.executable, None
    else:
        python = "/usr/bin/python3"
        if not os.access(python, os.X_OK):
            pytest.skip("running as root and no /usr/bin/python3 to run patchkit as nobody")

        def preexec() -> None:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)

    return subprocess.run([python, "-S", "-m", "patchkit", *map(str, args)], cwd=tools, capture_output=True,
                          text=True, timeout=60, check=False, preexec_fn=preexec)


def _hand_to_user(root: Path) -> None:
    """As root, give the tree to nobody, so that the permission bits set next are what apply sees."""
    if os.geteuid() == 0:
        for p in [root, *root.rglob("*")]:
            os.chown(p, 65534, 65534)


def _tools(where: Path) -> Path:
    shutil.copytree(PATCHKIT_SRC, where / "tools" / "patchkit", ignore=shutil.ignore_patterns("__pycache__"))
    return where / "tools"


# ---- the patch's own files ---------------------------------------------------------------------------

def test_a_bad_coding_cookie_in_methods_py_names_the_patch(tmp_path):
    patches = make_patch(tmp_path / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("added",), source="# -*- coding: no-such-codec -*-\n" + METHODS)
    root = _tree(tmp_path / "tree")
    with pytest.raises(PatchDefinitionError) as info:
        apply_patches(root, patches, ["demo"])
    assert str(info.value) == (f"patch 'demo': {patches}/demo/patch.toml: methods.py: bad encoding declaration: "
                               "unknown encoding: no-such-codec")
    assert (root / "sglang/demo.py").read_bytes() == TARGET


def test_methods_py_that_is_not_its_declared_encoding_names_the_line(tmp_path):
    patches = make_patch(tmp_path / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("added",), source=METHODS.encode() + b"# caf\xe9\n")
    with pytest.raises(PatchDefinitionError, match=r"methods\.py: line 4 is not valid utf-8 \(byte 0xe9\)"):
        apply_patches(_tree(tmp_path / "tree"), patches, ["demo"])


def test_a_method_defined_twice_in_methods_py_is_refused(tmp_path):
    twice = METHODS + "\n    def added(self):\n        return 3\n"
    patches = make_patch(tmp_path / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("added",), source=twice)
    root = _tree(tmp_path / "tree")
    with pytest.raises(PatchDefinitionError) as info:
        apply_patches(root, patches, ["demo"])
    message = str(info.value)
    assert message.startswith("patch 'demo': ") and "\n" not in message
    assert message.endswith("methods.py: method 'added' is defined 2 times in stub class Demo (lines 2, 5): keep one")
    assert (root / "sglang/demo.py").read_bytes() == TARGET


def test_a_method_name_with_a_newline_stays_one_line(tmp_path):
    patches = make_patch(tmp_path / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("add\\ned",), source=METHODS)
    with pytest.raises(PatchDefinitionError) as info:
        apply_patches(_tree(tmp_path / "tree"), patches, ["demo"])
    assert "\n" not in str(info.value) and "'add\\ned'" in str(info.value)


# ---- the target file ---------------------------------------------------------------------------------

def test_a_target_that_is_not_utf8_names_patch_file_and_line(tmp_path):
    patches = make_patch(tmp_path / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("added",), source=METHODS)
    latin1 = TARGET.replace(b'"""A module."""', b'"""Caf\xe9."""')
    root = _tree(tmp_path / "tree", content=latin1)
    with pytest.raises(PatchUnreadable) as info:
        apply_patches(root, patches, ["demo"])
    assert str(info.value) == "patch 'demo': sglang/demo.py: class Demo: line 1 is not valid utf-8 (byte 0xe9)"
    # The same bytes under a latin-1 cookie are a valid target, and stay latin-1.
    declared = b"# -*- coding: latin-1 -*-\n" + latin1
    (root / "sglang/demo.py").write_bytes(declared)
    apply_patches(root, patches, ["demo"])
    assert class_members((root / "sglang/demo.py").read_bytes(), "Demo") == ["first", "added"]
    assert (root / "sglang/demo.py").read_bytes().startswith(declared[: declared.index(b"\n\n\nclass")])


def test_an_oversized_target_is_refused_before_it_is_read(shared_tmp):
    """50 MB of valid Python would take about 10 GB to parse; it is refused by its size, so a child
    limited to 1 GiB of address space answers with the limit instead of a MemoryError."""
    patches = make_patch(shared_tmp / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("added",), source=METHODS)
    root = _tree(shared_tmp / "tree")
    with open(root / "sglang/demo.py", "ab") as fh:
        line = b"VALUE_%08d = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]\n"
        fh.write(b"".join(line % i for i in range(50 * 1024 * 1024 // len(line % 0) + 1)))
    size = (root / "sglang/demo.py").stat().st_size
    assert size > 50 * 1024 * 1024
    tools = _tools(shared_tmp)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from patchkit.__main__ import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-S", "-c", code, "apply", "--root", str(root), "--patches-dir",
                           str(patches), "--sglang-version", "0.5.9", "demo"], cwd=tools, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"patch 'demo': sglang/demo.py: class Demo: is {size / 1024 / 1024:.1f} MiB, over the "
        f"{MAX_SOURCE_BYTES // 1024 // 1024} MiB limit for a patched source file")


# ---- writes are all or nothing ---------------------------------------------------------------------

def test_a_read_only_target_folder_fails_cleanly_and_changes_nothing(shared_tmp):
    patches = make_patch(shared_tmp / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("added",), source=METHODS)
    root = _tree(shared_tmp / "tree")
    before = _snapshot(root)
    _hand_to_user(root)
    (root / "sglang").chmod(0o555)
    done = _patchkit_as_user(_tools(shared_tmp), "apply", "--root", root, "--patches-dir", patches,
                             "--sglang-version", "0.5.9", "demo")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"patch 'demo': sglang/demo.py: class Demo: cannot write in {root}/sglang: Permission denied: "
        "nothing was changed"]
    assert _snapshot(root) == before


def test_when_the_second_file_cannot_be_written_the_first_is_not_changed_either(shared_tmp):
    patches = make_patch(shared_tmp / "patches", "one", file="sglang/a/one.py", class_name="Demo",
                         methods=("added",), source=METHODS)
    make_patch(patches, "two", file="sglang/b/two.py", class_name="Demo", methods=("added",), source=METHODS)
    root = _tree(_tree(shared_tmp / "tree", "sglang/a/one.py"), "sglang/b/two.py")
    before = _snapshot(root)
    _hand_to_user(root)
    (root / "sglang/b").chmod(0o555)
    done = _patchkit_as_user(_tools(shared_tmp), "apply", "--root", root, "--patches-dir", patches,
                             "--sglang-version", "0.5.9", "one", "two")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"patch 'two': sglang/b/two.py: class Demo: cannot write in {root}/sglang/b: Permission denied: "
        "nothing was changed"]
    assert _snapshot(root) == before  # one.py unchanged, and no temporary file left in sglang/a


def test_a_manifest_that_cannot_be_written_leaves_the_tree_unchanged(tmp_path):
    patches = make_patch(tmp_path / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("added",), source=METHODS)
    root = _tree(tmp_path / "tree")
    before = _snapshot(root)
    manifest = tmp_path / "no-such-folder" / "patches.json"
    with pytest.raises(PatchWriteError) as info:
        apply_patches(root, patches, ["demo"], manifest=manifest)
    assert str(info.value) == (f"manifest {manifest}: cannot write in {manifest.parent}: No such file or "
                               "directory: nothing was changed")
    assert _snapshot(root) == before
    # With a writable manifest, the file and the manifest are written together.
    manifest.parent.mkdir()
    (result,) = apply_patches(root, patches, ["demo"], manifest=manifest)
    assert json.loads(manifest.read_text())[0]["sha256_after"] == result.sha256_after
    assert stat.S_IMODE((root / "sglang/demo.py").stat().st_mode) == 0o644
