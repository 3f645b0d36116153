"""Bad patch inputs are one line naming the patch, and an apply that cannot finish changes nothing.

The patches here are our own small ones (tests/lib/patch_fixtures.make_patch) on small trees; the engine is
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

from sglstack.inimage.patchkit import (
    MAX_SOURCE_BYTES,
    PatchDefinitionError,
    PatchUnreadable,
    PatchUsageError,
    PatchWriteError,
    apply_patches,
)

PATCHKIT_SRC = Path(__file__).resolve().parents[2] / "sglstack" / "inimage" / "patchkit"

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


# ---- the same rules in process: faults injected where this machine cannot make them -----------------

def _writes(tmp_path: Path) -> tuple[Path, Path, list]:
    """An existing file (mode 0o600, owned by a patch) and a new one (the manifest), as one step."""
    from sglstack.inimage.patchkit import files, load_patch

    patches = make_patch(tmp_path / "patches", "demo", file="sglang/demo.py", class_name="Demo",
                         methods=("added",), source=METHODS)
    spec = load_patch(patches, "demo")
    root = _tree(tmp_path / "tree")
    existing = root / "sglang/demo.py"
    existing.chmod(0o600)
    new = root / "manifest.json"
    return existing, new, [files.Write(existing, b"patched\n", TARGET, spec), files.Write(new, b"[]\n", None, None)]


def test_write_all_writes_every_file_with_its_mode(tmp_path):
    from sglstack.inimage.patchkit import files

    existing, new, writes = _writes(tmp_path)
    files.write_all(writes)
    assert existing.read_bytes() == b"patched\n" and new.read_bytes() == b"[]\n"
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600  # the target's mode is kept
    assert stat.S_IMODE(new.stat().st_mode) == 0o644
    assert sorted(p.name for p in existing.parent.iterdir()) == ["demo.py"]  # no temporary file left


def test_each_file_is_staged_as_a_hidden_file_beside_it(tmp_path, monkeypatch):
    """Beside it, so the rename stays in one file system; hidden and named after it, so a file left by a
    SIGKILL between the two steps says what it was and is not imported."""
    from sglstack.inimage.patchkit import files

    existing, new, writes = _writes(tmp_path)
    real, staged = os.replace, []

    def replace(src, dst):
        staged.append((Path(src), Path(dst), Path(src).read_bytes()))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    files.write_all(writes)
    assert [(dst, data) for _, dst, data in staged] == [(existing, b"patched\n"), (new, b"[]\n")]
    for src, dst, _ in staged:
        assert src.parent == dst.parent
        assert src.name.startswith(f".{dst.name}.") and src.name.endswith(".tmp") and len(src.name) > len(dst.name) + 5


@pytest.mark.parametrize(("fault", "message"), [
    (PermissionError(13, "Permission denied"), "cannot replace the file: Permission denied"),
    (OSError("no strerror"), "cannot replace the file: no strerror"),
])
def test_a_failed_rename_puts_back_what_was_renamed(tmp_path, monkeypatch, fault, message):
    from sglstack.inimage.patchkit import files

    existing, new, writes = _writes(tmp_path)
    before = _snapshot(tmp_path / "tree")
    real = os.replace
    calls = []

    def replace(src, dst):
        calls.append(Path(dst))
        if len(calls) == 2:  # the second file of the step, after the first was renamed
            raise fault
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PatchWriteError) as info:
        files.write_all(writes[::-1])  # the new file first, so that putting it back removes it
    assert str(info.value) == f"patch 'demo': sglang/demo.py: class Demo: {message}: nothing was changed"
    assert calls[:2] == [new, existing]
    assert _snapshot(tmp_path / "tree") == before


def test_an_apply_whose_second_file_cannot_be_renamed_restores_the_first(tmp_path, monkeypatch):
    """In process, what the read-only-folder test checks as a child: the first file, already renamed into
    place, is put back with its original bytes, and the error names the patch of the second."""
    patches = make_patch(tmp_path / "patches", "one", file="sglang/a/one.py", class_name="Demo",
                         methods=("added",), source=METHODS)
    make_patch(patches, "two", file="sglang/b/two.py", class_name="Demo", methods=("added",), source=METHODS)
    root = _tree(_tree(tmp_path / "tree", "sglang/a/one.py"), "sglang/b/two.py")
    before = _snapshot(root)
    real = os.replace

    def replace(src, dst):
        if Path(dst).name == "two.py":
            raise PermissionError(13, "Permission denied")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PatchWriteError) as info:
        apply_patches(root, patches, ["one", "two"], "0.5.9")
    assert str(info.value) == ("patch 'two': sglang/b/two.py: class Demo: cannot replace the file: Permission "
                               "denied: nothing was changed")
    assert _snapshot(root) == before


def test_a_failed_rename_of_an_existing_file_restores_its_bytes(tmp_path, monkeypatch):
    from sglstack.inimage.patchkit import files

    existing, new, writes = _writes(tmp_path)
    before = _snapshot(tmp_path / "tree")
    real = os.replace

    def replace(src, dst):
        if Path(dst) == new and not str(src).endswith("demo.py"):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PatchWriteError) as info:
        files.write_all(writes)
    assert str(info.value) == f"manifest {new}: cannot replace the file: No space left on device: nothing was changed"
    assert _snapshot(tmp_path / "tree") == before
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600


def test_a_signal_while_renaming_puts_back_and_is_not_a_write_error(tmp_path, monkeypatch):
    from sglstack.inimage.patchkit import files

    _existing, new, writes = _writes(tmp_path)
    before = _snapshot(tmp_path / "tree")
    real = os.replace

    def replace(src, dst):
        if Path(dst) == new:
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        files.write_all(writes)
    assert _snapshot(tmp_path / "tree") == before


@pytest.mark.parametrize(("fault", "kind"), [(OSError(28, "No space left on device"), PatchWriteError),
                                             (KeyboardInterrupt(), KeyboardInterrupt)])
def test_a_failed_staging_write_leaves_no_temporary_file(tmp_path, monkeypatch, fault, kind):
    from sglstack.inimage.patchkit import files

    _existing, _new, writes = _writes(tmp_path)
    before = _snapshot(tmp_path / "tree")
    real = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise fault

    def fdopen(fd, *args, **kwargs):
        return Full(real(fd, *args, **kwargs))

    monkeypatch.setattr(os, "fdopen", fdopen)
    with pytest.raises(kind) as info:
        files.write_all(writes)
    if kind is PatchWriteError:
        assert str(info.value) == ("patch 'demo': sglang/demo.py: class Demo: cannot write demo.py: No space left "
                                   "on device: nothing was changed")
    assert _snapshot(tmp_path / "tree") == before


def test_put_back_is_best_effort(tmp_path, monkeypatch):
    from sglstack.inimage.patchkit import files

    existing, new, writes = _writes(tmp_path)
    files.put_back(writes[1])  # a new file that is not there (any more): nothing to do
    assert not new.exists()
    files.put_back(files.Write(tmp_path / "no-such-folder" / "x.py", b"", b"old", None))  # cannot stage: nothing
    real = os.replace

    def replace(src, dst):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "replace", replace)
    files.put_back(writes[0])
    assert existing.read_bytes() == TARGET
    assert sorted(p.name for p in existing.parent.iterdir()) == ["demo.py"]
    monkeypatch.setattr(os, "replace", real)
    existing.write_bytes(b"changed")
    files.put_back(writes[0])
    assert existing.read_bytes() == TARGET


def test_record_hash_reads_only_the_row_of_the_file(tmp_path):
    import base64
    import hashlib

    from sglstack.inimage.patchkit import files
    from sglstack.inimage.patchkit.source import SourceFile

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    assert files.record_hash(tmp_path, "sglang/demo.py") is None
    dist = tmp_path / "sglang-0.5.9.dist-info"
    dist.mkdir()
    (dist / "RECORD").write_text(
        f"sglang/demo.pyc,sha256={b64(b'pyc')},1\nx/sglang/demo.py,sha256={b64(b'x')},1\n"
        "sglang/demo.py,md5=abc,1\nsglang/demo.py\n"
        f'"sglang/demo.py",sha256={b64(b"demo")}\nsglang/demo.py,sha256={b64(b"later")},5\n')
    assert files.record_hash(tmp_path, "sglang/demo.py") == (
        hashlib.sha256(b"demo").hexdigest(), "sglang-0.5.9.dist-info/RECORD")
    assert files.record_hash(tmp_path, "sglang/other.py") is None
    src = SourceFile.from_bytes(b"demo")
    assert files.matches_record(tmp_path, "sglang/demo.py", src)
    assert not files.matches_record(tmp_path, "sglang/other.py", src)
    (dist / "RECORD").write_bytes(b"sglang/demo.py,sha256=caf\xe9,1\n")
    with pytest.raises(PatchUsageError) as info:
        files.record_hash(tmp_path, "sglang/demo.py")
    assert str(info.value) == (f"{dist / 'RECORD'}: cannot read pip's RECORD: 'utf-8' codec can't decode byte 0xe9 "
                               "in position 25: invalid continuation byte")


# ---- reading a source file -------------------------------------------------------------------------

def test_source_files_at_and_over_the_size_limit(tmp_path):
    from sglstack.inimage.patchkit.source import SourceError, SourceFile

    path = tmp_path / "demo.py"
    path.write_bytes(b"#" * (MAX_SOURCE_BYTES - 1) + b"\n")
    assert len(SourceFile.read(path).data) == MAX_SOURCE_BYTES  # at the limit: read
    with open(path, "ab") as fh:
        fh.truncate(100 * 1024 * 1024 + 1)  # sparse: refused by its size, never read
    with pytest.raises(SourceError) as info:
        SourceFile.read(path)
    assert str(info.value) == "is 100.0 MiB, over the 2 MiB limit for a patched source file"

    class Growing(type(path)):  # a file that grew between stat and read: the read itself is bounded
        def stat(self, **kwargs):
            return os.stat_result((0o100644, 0, 0, 1, 0, 0, 10, 0, 0, 0))

    with pytest.raises(SourceError) as info:
        SourceFile.read(Growing(path))
    assert str(info.value) == "is 2.0 MiB, over the 2 MiB limit for a patched source file"


def test_source_files_that_cannot_be_read(tmp_path):
    from sglstack.inimage.patchkit.source import SourceError, SourceFile

    with pytest.raises(SourceError) as info:
        SourceFile.read(tmp_path / "missing.py")
    assert str(info.value) == "cannot read: No such file or directory"
    with pytest.raises(SourceError) as info:
        SourceFile.read(tmp_path)
    assert str(info.value) == "cannot read: Is a directory"


@pytest.mark.parametrize(("data", "message"), [
    (b"\xef\xbb\xbf# coding: latin-1\nx = 1\n", "bad encoding declaration: encoding problem: utf-8"),
    (b"# caf\xe9\nx = 1\n", "line 1 is not valid utf-8 (byte 0xe9)"),
    (b"x = 1\n\n# caf\xe9\n", "line 3 is not valid utf-8 (byte 0xe9)"),
    (b"\n# caf\xe9\n", "line 2 is not valid utf-8 (byte 0xe9)"),
    # an unknown codec is named as such, even where the bytes are not UTF-8 either
    (b"# coding: no-such-codec\n# caf\xe9\n", "bad encoding declaration: unknown encoding: no-such-codec"),
    (b"# coding: ascii\nx = 1\n# \xc3\xa9\n", "line 3 is not valid ascii (byte 0xc3)"),
])
def test_source_bytes_that_are_not_their_encoding(data, message):
    from sglstack.inimage.patchkit.source import SourceError, SourceFile

    with pytest.raises(SourceError) as info:
        SourceFile.from_bytes(data)
    assert str(info.value) == message


def test_source_encodings_line_endings_and_hashes():
    import hashlib

    from sglstack.inimage.patchkit.source import SourceFile, split_lines

    latin = SourceFile.from_bytes(b"# coding: latin-1\nx = '\xe9'\n")
    assert (latin.encoding, latin.text) == ("iso-8859-1", "# coding: latin-1\nx = '\u00e9'\n")
    assert latin.with_text(latin.text + "y = '\u00e8'\n").data == b"# coding: latin-1\nx = '\xe9'\ny = '\xe8'\n"
    bom = SourceFile.from_bytes(b"\xef\xbb\xbfx = 1\n")
    assert bom.encoding == "utf-8-sig" and bom.text == "x = 1\n"
    crlf = SourceFile.from_bytes(b"a = 1\r\nb = 2\rc = 3\n")
    lf = hashlib.sha256(b"a = 1\nb = 2\nc = 3\n").hexdigest()
    assert crlf.sha256 == hashlib.sha256(b"a = 1\r\nb = 2\rc = 3\n").hexdigest() and crlf.sha256_lf == lf
    assert crlf.hash_matches(lf) and crlf.hash_matches(crlf.sha256) and not crlf.hash_matches("0" * 64)
    assert crlf.lines == ["a = 1\r\n", "b = 2\r", "c = 3\n"] and crlf.default_line_ending() == "\r\n"
    assert split_lines("a\x0cb\x1cc\nd") == ["a\x0cb\x1cc\n", "d"]  # only \r\n, \r and \n end a line
    assert SourceFile.from_bytes(b"x = 1").default_line_ending() == "\n"
    assert SourceFile.from_bytes(b"x = 1\ry = 2\n").default_line_ending() == "\r"


def test_source_parse_runs_the_compiler_checks():
    from sglstack.inimage.patchkit.source import SourceFile

    tree = SourceFile.from_bytes(b"def f():\n    return 1\n").parse("demo.py")
    assert [type(n).__name__ for n in tree.body] == ["FunctionDef"]
    with pytest.raises(SyntaxError) as info:
        SourceFile.from_bytes(b"x = (\n").parse("demo.py")
    assert (info.value.msg, info.value.filename, info.value.lineno) == ("'(' was never closed", "demo.py", 1)
    with pytest.raises(SyntaxError) as info:  # a symbol-table error: ast.parse alone accepts it
        SourceFile.from_bytes(b"def f():\n    nonlocal x\n").parse("demo.py")
    assert (info.value.msg, info.value.filename) == ("no binding for nonlocal 'x' found", "demo.py")
    with pytest.raises(SyntaxError) as info:  # a future import not at the top: compile only
        SourceFile.from_bytes(b"x = 1\nfrom __future__ import annotations\n").parse("demo.py")
    assert info.value.msg == "from __future__ imports must occur at the beginning of the file"
