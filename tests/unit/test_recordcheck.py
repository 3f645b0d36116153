"""The in-image RECORD check (stdlib, run here on a folder laid out as pip leaves it) and how the host judges
its report; which part of imagecheck's report each reusable part stores."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from sglstack.core.resources import TOOLS_DIR
from sglstack.coverage.installed import record_problems, record_sha256s
from sglstack.imagebuild.incremental import part_results

sys.path.insert(0, str(TOOLS_DIR))
import recordcheck

sys.path.remove(str(TOOLS_DIR))

from coverage_fixtures import write_site_packages


def _site(tmp_path: Path) -> Path:
    write_site_packages(tmp_path, "sgl-kernel", "0.0.1", {"sgl_kernel/a.so": b"\x7fELF one", "sgl_kernel/b.py": b"x"})
    return tmp_path


def test_files_that_are_their_record_s_pass(tmp_path):
    site = _site(tmp_path)
    report = recordcheck.check(str(site), ["sgl_kernel-0.0.1.dist-info"])
    hashed = ["sgl_kernel/a.so", "sgl_kernel/b.py", "sgl_kernel-0.0.1.dist-info/METADATA",
              "sgl_kernel-0.0.1.dist-info/WHEEL"]
    assert report == {"sgl_kernel-0.0.1.dist-info": {
        "files": 4, "bytes": sum((site / p).stat().st_size for p in hashed), "error": None, "missing": [],
        "mismatched": []}}
    assert record_problems("S/sgl_kernel-0.0.1.dist-info", report["sgl_kernel-0.0.1.dist-info"]) == []


def test_one_changed_byte_and_a_missing_file_are_named(tmp_path):
    site = _site(tmp_path)
    (site / "sgl_kernel" / "a.so").write_bytes(b"\x7fELF onE")
    (site / "sgl_kernel" / "b.py").unlink()
    result = recordcheck.check(str(site), ["sgl_kernel-0.0.1.dist-info"])["sgl_kernel-0.0.1.dist-info"]
    want = hashlib.sha256(b"\x7fELF one").hexdigest()
    got = hashlib.sha256(b"\x7fELF onE").hexdigest()
    assert result["mismatched"] == [[f"{site}/sgl_kernel/a.so", want, got]]
    assert result["missing"] == [f"{site}/sgl_kernel/b.py"]
    assert record_problems("S/sgl_kernel-0.0.1.dist-info", result) == [
        f"{site}/sgl_kernel/a.so is not the file its RECORD names (sha256 {got}, RECORD says {want})",
        f"{site}/sgl_kernel/b.py is in S/sgl_kernel-0.0.1.dist-info/RECORD but not in the image"]


def test_a_record_that_cannot_be_read_is_a_problem(tmp_path):
    result = recordcheck.check(str(tmp_path), ["gone-1.dist-info"])["gone-1.dist-info"]
    assert result["error"].startswith("FileNotFoundError: ")
    assert record_problems("S/gone-1.dist-info", result) == [f"S/gone-1.dist-info: {result['error']}"]


def test_record_hashes_are_read_as_hex_and_entries_without_one_are_left_out():
    text = "a/x.so,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\na/RECORD,,\na/y.pyc,,\n"
    assert record_sha256s(text) == {"a/x.so": hashlib.sha256(b"").hexdigest()}


def test_each_part_stores_its_own_keys_and_a_new_key_goes_with_the_server_part():
    report = {"shared_libraries": {"ok": 1}, "python": "3.11.2", "server_help": {"returncode": 0},
              "serving_argv": {"results": []}, "jit_toolchain": {"returncode": 0}, "imports": {"ok": True}}
    assert part_results(report, ["shared_libraries", "server", "jit_toolchain"]) == {
        "shared_libraries": {"shared_libraries": {"ok": 1}, "python": "3.11.2"},
        "server": {"server_help": {"returncode": 0}, "serving_argv": {"results": []}, "imports": {"ok": True}},
        "jit_toolchain": {"jit_toolchain": {"returncode": 0}}}
    assert part_results({"shared_libraries": {}, "imports": {}}, ["shared_libraries"]) == {
        "shared_libraries": {"shared_libraries": {}, "imports": {}}}
