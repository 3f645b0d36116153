"""verify on small trees (sglstack/inimage/patchkit), with and without a manifest, and the installed version
detected and resolved; each refusal as its exact one-line message.

Pure: our own small patches (tests/lib/patch_fixtures.make_patch) on small trees under tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patch_trees import HEAD, _patched, _setup, _sha, _verify_refused

from sglstack.inimage import patchkit
from sglstack.inimage.patchkit import (
    PatchUsageError,
    apply_patches,
    verify_patches,
)

# ---- verify on small trees ---------------------------------------------------------------------------


def test_verify_without_and_with_a_manifest(tmp_path):
    root, patches = _setup(tmp_path)
    assert _verify_refused(root, patches) == HEAD + "method 'added' is not a member of the class"
    results = apply_patches(root, patches, ["demo"], "0.5.9")
    sha = results[0].sha256_after
    (plain,) = verify_patches(root, patches, ["demo", "demo"])
    assert (plain.status, plain.sha256_before, plain.sha256_after, plain.sglang_version) == (
        patchkit.VERIFIED, sha, sha, None)
    assert (plain.inserted, plain.upstream_methods, plain.methods) == ((), (), ("added",))
    manifest = [r.to_manifest() for r in results]
    (checked,) = verify_patches(root, patches, ["demo"], manifest)
    assert checked == patchkit.PatchResult(
        "demo", "sglang/demo.py", "Demo", ("added",), patchkit.APPLIED, results[0].sha256_before, sha, "0.5.9",
        ("added",), ())
    assert _verify_refused(root, patches, []) == HEAD + "not in the manifest: was it applied?"
    assert _verify_refused(root, patches, [{**manifest[0], "file": "sglang/x.py"}]) == (
        HEAD + "the manifest records file 'sglang/x.py'")
    assert _verify_refused(root, patches, [{**manifest[0], "sha256_after": "0" * 64}]) == HEAD + (
        f"sha256 {sha} is not {'0' * 64} recorded in the manifest: the file changed after patching")
    # an entry without the optional fields reads as empty
    (bare,) = verify_patches(root, patches, ["demo"], [{"id": "demo", "file": "sglang/demo.py", "sha256_after": sha}])
    assert (bare.status, bare.sha256_before, bare.sglang_version, bare.inserted, bare.upstream_methods) == (
        patchkit.VERIFIED, sha, None, (), ())


def test_verify_reads_the_upstream_methods_from_the_manifest(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    def added(self, a=1):\n        return a\n")
    manifest = [r.to_manifest() for r in apply_patches(root, patches, ["demo"], "0.5.9")]
    assert manifest[0]["upstream_methods"] == ["added"] and manifest[0]["status"] == patchkit.ALREADY_UPSTREAM
    (result,) = verify_patches(root, patches, ["demo"], manifest)
    assert (result.status, result.upstream_methods, result.inserted) == (patchkit.ALREADY_UPSTREAM, ("added",), ())


def test_verify_checks_an_inserted_method_is_ours(tmp_path):
    root, patches = _setup(tmp_path)
    manifest = [r.to_manifest() for r in apply_patches(root, patches, ["demo"])]
    (root / "sglang/demo.py").write_text(_patched(root).replace("return 2", "return 3"))
    manifest[0]["sha256_after"] = _sha(_patched(root).encode())
    assert _verify_refused(root, patches, manifest) == HEAD + "method 'added' (line 10) differs from the patch"
    # an upstream method (not inserted by us) may differ
    manifest[0]["inserted"] = []
    assert verify_patches(root, patches, ["demo"], manifest)[0].status == patchkit.APPLIED


def test_manifest_files(tmp_path):
    root, patches = _setup(tmp_path)
    results = apply_patches(root, patches, ["demo"])
    path = tmp_path / "m.json"
    patchkit.write_manifest(path, results)
    assert path.read_text() == json.dumps([r.to_manifest() for r in results], indent=2) + "\n"
    assert patchkit.read_manifest(path) == [r.to_manifest() for r in results]
    path.write_text("{}")
    with pytest.raises(PatchUsageError) as info:
        patchkit.read_manifest(path)
    assert str(info.value) == f"manifest {path}: expected a JSON list of objects"
    path.write_text("[1]")
    with pytest.raises(PatchUsageError, match=r"expected a JSON list of objects$"):
        patchkit.read_manifest(path)
    path.write_text("[")
    with pytest.raises(PatchUsageError) as info:
        patchkit.read_manifest(path)
    assert str(info.value) == f"manifest {path}: Expecting value: line 1 column 2 (char 1)"
    with pytest.raises(PatchUsageError) as info:
        patchkit.read_manifest(tmp_path / "none.json")
    assert str(info.value) == (f"manifest {tmp_path / 'none.json'}: [Errno 2] No such file or directory: "
                               f"'{tmp_path / 'none.json'}'")


# ---- the installed version ---------------------------------------------------------------------------


def _dist(root: Path, version: str, metadata: str | None = None) -> None:
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(metadata or f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\nx\n")


def test_detect_and_resolve_the_version(tmp_path):
    assert patchkit.detect_sglang_version(tmp_path) is None
    _dist(tmp_path, "0.5.9")
    assert patchkit.detect_sglang_version(tmp_path) == "0.5.9"
    assert patchkit.resolve_version(tmp_path, None) == "0.5.9"
    assert patchkit.resolve_version(tmp_path, "0.5.9") == "0.5.9"
    assert patchkit.resolve_version(tmp_path, "v0.5.9.0") == "v0.5.9.0"  # the same version, as given
    with pytest.raises(PatchUsageError) as info:
        patchkit.resolve_version(tmp_path, "0.5.10")
    assert str(info.value) == f"--sglang-version 0.5.10 does not match sglang 0.5.9 installed under {tmp_path}"
    with pytest.raises(PatchUsageError) as info:
        patchkit.resolve_version(tmp_path, "latest")
    assert str(info.value) == "sglang version: 'latest' is not a PEP 440 version"
    _dist(tmp_path, "0.5.10")  # two installs: cannot tell
    assert patchkit.detect_sglang_version(tmp_path) is None
    assert patchkit.resolve_version(tmp_path, "0.5.10") == "0.5.10"


def test_a_bad_installed_version(tmp_path):
    _dist(tmp_path, "0.5.9", "Metadata-Version: 2.1\nName: sglang\nVersion: banana\n")
    with pytest.raises(PatchUsageError) as info:
        patchkit.resolve_version(tmp_path, None)
    assert str(info.value) == "sglang version: 'banana' is not a PEP 440 version"
    meta = tmp_path / "sglang-0.5.9.dist-info" / "METADATA"
    meta.write_bytes(b"Version: caf\xe9\n")
    with pytest.raises(PatchUsageError) as info:
        patchkit.detect_sglang_version(tmp_path)
    assert str(info.value) == (f"{meta}: cannot read the installed version: 'utf-8' codec can't decode byte 0xe9 "
                               "in position 12: invalid continuation byte")
