"""The patch engine against real SGLang wheels (0.5.9, 0.5.10, 0.5.11 from PyPI, cached) and drift
fixtures derived from the real kimi_k25.py."""

from __future__ import annotations

import ast
import hashlib

import pytest
from patch_fixtures import (
    KIMI,
    KIMI_CLASS,
    KIMI_FILE,
    KIMI_METHODS,
    PATCHES_DIR,
    cat_appended,
    class_members,
    copy_patch,
    drop_hash_tables,
    make_tree,
    module_functions,
    pristine,
    target,
    without_methods,
)

from sglstack.inimage import patchkit
from sglstack.inimage.patchkit import (
    PatchAlreadyUpstream,
    PatchConflict,
    PatchDrift,
    PatchError,
    PatchModuleLevelDef,
    PatchOutOfRange,
    PatchPreimageMismatch,
    PatchUnboundName,
    PatchUsageError,
    PatchVerifyError,
    apply_patches,
    verify_patches,
)

pytestmark = pytest.mark.network


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _apply(root, version="0.5.9", policy="notice", patches=PATCHES_DIR, ids=(KIMI,)):
    return apply_patches(root, patches, list(ids), version, policy)


def _one_line(exc: PatchError) -> str:
    msg = str(exc)
    assert "\n" not in msg
    assert msg.startswith(f"patch '{KIMI}': {KIMI_FILE}: class {KIMI_CLASS}: "), msg
    return msg


# ---- the real wheels -------------------------------------------------------------------------------


def test_059_gets_the_methods_inside_the_class(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.9"), version="0.5.9")
    assert not set(KIMI_METHODS) & set(class_members(pristine("0.5.9")))

    (result,) = _apply(root)

    patched = target(root)
    members = class_members(patched)
    assert members[-3:] == list(KIMI_METHODS)
    assert not set(KIMI_METHODS) & set(module_functions(patched))
    assert result.status == patchkit.APPLIED and result.inserted == KIMI_METHODS
    assert result.sha256_before == _sha(pristine("0.5.9")) and result.sha256_after == _sha(patched)
    # Nothing but inserted lines: the original lines are all there, in order, untouched.
    before, after = pristine("0.5.9").splitlines(keepends=True), patched.splitlines(keepends=True)
    cls_end = next(
        n for n in ast.parse(pristine("0.5.9")).body if isinstance(n, ast.ClassDef) and n.name == KIMI_CLASS
    ).end_lineno
    assert after[:cls_end] == before[:cls_end]
    assert after[len(after) - (len(before) - cls_end) :] == before[cls_end:]
    assert after[-1] == b"EntryClass = [KimiK25ForConditionalGeneration]\n"


def test_059_result_matches_declared_hashes(tmp_path):
    spec = patchkit.load_patch(PATCHES_DIR, KIMI)
    assert spec.declared_hash("before", "0.5.9") == _sha(pristine("0.5.9"))
    root = make_tree(tmp_path, pristine("0.5.9"), version="0.5.9")
    _apply(root)
    assert _sha(target(root)) == spec.declared_hash("after", "0.5.9")


def test_0510_is_already_upstream_and_unchanged(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.10"), version="0.5.10")
    (result,) = _apply(root, version="0.5.10")
    assert result.status == patchkit.ALREADY_UPSTREAM
    assert result.upstream_methods == KIMI_METHODS and result.inserted == ()
    assert "retire" in result.notice and "0.5.10" in result.notice
    assert target(root) == pristine("0.5.10")


def test_0511_changed_bodies_are_still_upstream(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.11"), version="0.5.11")
    (result,) = _apply(root, version="0.5.11")
    assert result.status == patchkit.ALREADY_UPSTREAM
    assert target(root) == pristine("0.5.11")


def test_0510_without_the_methods_reproduces_upstream_byte_for_byte(tmp_path):
    stripped = without_methods(pristine("0.5.10").decode())
    assert not set(KIMI_METHODS) & set(class_members(stripped))
    root = make_tree(tmp_path, stripped.encode())
    (result,) = apply_patches(root, PATCHES_DIR, [KIMI], None)  # version unknown: range not checked
    assert result.status == patchkit.APPLIED
    assert target(root) == pristine("0.5.10")


def test_0510_without_the_methods_is_out_of_range_when_the_version_is_known(tmp_path):
    root = make_tree(tmp_path, without_methods(pristine("0.5.10").decode()).encode())
    with pytest.raises(PatchOutOfRange) as err:
        _apply(root, version="0.5.10")
    assert "outside applies_to '>=0.5.9,<0.5.10'" in _one_line(err.value)


def test_idempotent(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.9"), version="0.5.9")
    _apply(root)
    once = target(root)
    (again,) = _apply(root)
    assert again.status == patchkit.ALREADY_APPLIED
    assert target(root) == once
    assert class_members(once).count("get_embed_and_head") == 1


def test_policy_error_fails_when_upstream_has_it(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.10"), version="0.5.10")
    with pytest.raises(PatchAlreadyUpstream) as err:
        _apply(root, version="0.5.10", policy="error")
    assert "retire this patch" in _one_line(err.value)
    assert target(root) == pristine("0.5.10")


def test_version_defaults_to_the_tree_and_must_agree(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.9"), version="0.5.9")
    assert patchkit.detect_sglang_version(root) == "0.5.9"
    with pytest.raises(PatchUsageError, match=r"does not match sglang 0\.5\.9"):
        _apply(root, version="0.5.10")
    (result,) = _apply(root, version=None)
    assert result.sglang_version == "0.5.9" and result.status == patchkit.APPLIED


# ---- drift fixtures derived from the real file -----------------------------------------------------


def _src059() -> str:
    return pristine("0.5.9").decode()


def test_class_renamed(tmp_path):
    root = make_tree(tmp_path, _src059().replace(f"class {KIMI_CLASS}(", "class KimiK25Model(").encode())
    with pytest.raises(PatchDrift) as err:
        _apply(root)
    assert "class not found" in _one_line(err.value)


def test_cat_appended_unindented_is_refused(tmp_path):
    content = cat_appended(_src059(), indent="").encode()
    compile(content, "kimi_k25.py", "exec")  # the trap: it still compiles
    root = make_tree(tmp_path, content)
    with pytest.raises(PatchModuleLevelDef) as err:
        _apply(root)
    assert "module level" in _one_line(err.value) and "cat >>" in str(err.value)
    assert target(root) == content


def test_cat_appended_indented_fails_loudly(tmp_path):
    content = cat_appended(_src059(), indent="    ").encode()
    with pytest.raises(IndentationError):
        compile(content, "kimi_k25.py", "exec")
    root = make_tree(tmp_path, content)
    with pytest.raises(PatchDrift) as err:
        _apply(root)
    assert "IndentationError" in _one_line(err.value)
    with pytest.raises(PatchVerifyError, match="IndentationError"):
        verify_patches(root, PATCHES_DIR, [KIMI])


def test_verify_catches_the_unindented_cat_block(tmp_path):
    root = make_tree(tmp_path, cat_appended(_src059(), indent="").encode())
    with pytest.raises(PatchVerifyError) as err:
        verify_patches(root, PATCHES_DIR, [KIMI])
    assert "module level" in str(err.value)


def test_duplicate_class(tmp_path):
    src = _src059()
    tree = ast.parse(src)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == KIMI_CLASS)
    lines = src.splitlines(keepends=True)
    block = "".join(lines[cls.lineno - 1 : cls.end_lineno])
    root = make_tree(tmp_path, (src + "\n\n" + block).encode())
    with pytest.raises(PatchDrift) as err:
        _apply(root)
    assert "defined 2 times" in _one_line(err.value)


def test_crlf_copy_keeps_crlf(tmp_path):
    lf_root = make_tree(tmp_path / "lf", pristine("0.5.9"))
    crlf = pristine("0.5.9").replace(b"\n", b"\r\n")
    crlf_root = make_tree(tmp_path / "crlf", crlf)
    _apply(lf_root)
    _apply(crlf_root)
    patched = target(crlf_root)
    assert patched == target(lf_root).replace(b"\n", b"\r\n")
    assert b"\n" not in patched.replace(b"\r\n", b"")
    assert class_members(patched)[-3:] == list(KIMI_METHODS)


def test_tab_indented_class_gets_tabs(tmp_path):
    src = _src059()
    # Re-indent the whole file with tabs (leading groups of four spaces), as a tab-indented fork would be.
    tabbed = "".join(
        "\t" * ((len(ln) - len(ln.lstrip(" "))) // 4) + ln.lstrip(" ") if ln.startswith("    ") else ln
        for ln in src.splitlines(keepends=True)
    )
    compile(tabbed, "kimi_k25.py", "exec")
    root = make_tree(tmp_path, tabbed.encode())
    with pytest.raises(PatchPreimageMismatch):  # not 0.5.9's file any more
        _apply(root)
    _apply(root, version=None)
    patched = target(root).decode()
    assert "\tdef get_embed_and_head(self)" in patched
    assert "\n    def get_embed_and_head" not in patched
    assert "\t\treturn self.language_model.get_embed_and_head()" in patched
    assert class_members(patched)[-3:] == list(KIMI_METHODS)


def test_conflict_with_a_different_body_and_signature(tmp_path):
    src = _src059().replace(
        "\n\nEntryClass", "\n\n    def get_embed_and_head(self, layer: int):\n        return layer\n\n\nEntryClass"
    )
    root = make_tree(tmp_path, src.encode())
    with pytest.raises(PatchConflict) as err:
        _apply(root)
    assert "'get_embed_and_head'" in _one_line(err.value) and "incompatible signature" in str(err.value)
    assert target(root) == src.encode()


def test_conflict_with_a_non_method_member(tmp_path):
    src = _src059().replace("\n\nEntryClass", "\n\n    get_embed_and_head = None\n\n\nEntryClass")
    root = make_tree(tmp_path, src.encode())
    with pytest.raises(PatchConflict, match="not a method"):
        _apply(root)


def test_out_of_range(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.9"))
    with pytest.raises(PatchOutOfRange) as err:
        _apply(root, version="0.5.8")
    assert "sglang 0.5.8 is outside" in _one_line(err.value)
    assert target(root) == pristine("0.5.9")


def test_declared_preimage_mismatch(tmp_path):
    edited = pristine("0.5.9").replace(b"import logging\n", b"import logging  # local edit\n", 1)
    root = make_tree(tmp_path, edited)
    with pytest.raises(PatchPreimageMismatch) as err:
        _apply(root)
    assert "declared pre-image" in _one_line(err.value)


def test_record_preimage_mismatch(tmp_path):
    # No declared hash for this version: pip's RECORD is the pre-image check.
    patches = copy_patch(tmp_path, applies_to=">=0.5.9,<0.5.11")
    drop_hash_tables(patches)
    edited = without_methods(pristine("0.5.10").decode()).encode()
    root = make_tree(tmp_path / "tree", edited, version="0.5.10")
    with pytest.raises(PatchPreimageMismatch) as err:
        _apply(root, version="0.5.10", patches=patches)
    assert "sglang-0.5.10.dist-info/RECORD" in _one_line(err.value)


def test_missing_file(tmp_path):
    root = make_tree(tmp_path, None)
    with pytest.raises(PatchDrift) as err:
        _apply(root)
    assert "file is missing" in _one_line(err.value)


def test_missing_import_is_caught_before_writing(tmp_path):
    src = _src059().replace(
        "from typing import Iterable, List, Optional, Sequence, Tuple",
        "from typing import Iterable, List, Optional, Sequence",
    )
    root = make_tree(tmp_path, src.replace("Tuple[", "tuple[").encode())
    with pytest.raises(PatchUnboundName) as err:
        _apply(root)
    assert "uses Tuple" in _one_line(err.value)


def test_verify_of_an_unpatched_tree_names_the_missing_class_member(tmp_path):
    """`verify` on a tree nobody patched: the first declared method is not in the class, so it fails
    (a verify that skipped the class-member check would pass this tree)."""
    root = make_tree(tmp_path, pristine("0.5.9"))
    with pytest.raises(PatchVerifyError) as info:
        verify_patches(root, PATCHES_DIR, [KIMI])
    assert _one_line(info.value).endswith(f"method '{KIMI_METHODS[0]}' is not a member of the class")
    # one method missing of three is still a failure, and it is the missing one that is named
    _apply(root)
    path = root / KIMI_FILE
    tree = ast.parse(path.read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == KIMI_CLASS)
    last = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == KIMI_METHODS[-1])
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: last.lineno - 1] + lines[last.end_lineno :]))
    with pytest.raises(PatchVerifyError, match=f"method '{KIMI_METHODS[-1]}' is not a member of the class"):
        verify_patches(root, PATCHES_DIR, [KIMI])


def test_verify_requires_entryclass_registration(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.9"))
    _apply(root)
    path = root / KIMI_FILE
    path.write_bytes(path.read_bytes().replace(b"EntryClass = [KimiK25ForConditionalGeneration]", b"EntryClass = []"))
    with pytest.raises(PatchVerifyError, match="not registered in EntryClass"):
        verify_patches(root, PATCHES_DIR, [KIMI])


def test_verify_with_manifest_detects_later_edits(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.9"), version="0.5.9")
    results = _apply(root)
    manifest = [r.to_manifest() for r in results]
    assert verify_patches(root, PATCHES_DIR, [KIMI], manifest)[0].status == patchkit.APPLIED
    path = root / KIMI_FILE
    path.write_bytes(path.read_bytes() + b"# edited\n")
    with pytest.raises(PatchVerifyError, match="changed after patching"):
        verify_patches(root, PATCHES_DIR, [KIMI], manifest)


def test_verify_detects_a_changed_body(tmp_path):
    root = make_tree(tmp_path, pristine("0.5.9"))
    manifest = [r.to_manifest() for r in _apply(root)]
    path = root / KIMI_FILE
    path.write_bytes(path.read_bytes().replace(b"return self.language_model.get_embed_and_head()", b"return None"))
    manifest[0]["sha256_after"] = _sha(path.read_bytes())
    with pytest.raises(PatchVerifyError, match="differs from the patch"):
        verify_patches(root, PATCHES_DIR, [KIMI], manifest)


def test_all_or_nothing_across_patches(tmp_path):
    # A second patch that fails (its class is missing) leaves the first one's file untouched on disk.
    patches = copy_patch(tmp_path)
    other = patches / "broken"
    other.mkdir()
    (other / "methods.py").write_text("class Missing:\n    def get_x(self):\n        return 1\n")
    (other / "patch.toml").write_text(
        'id = "broken"\nwhy = "test"\napplies_to = ">=0.5"\nfile = "sglang/srt/models/kimi_k25.py"\n'
        'class = "Missing"\nmethods = ["get_x"]\n'
    )
    root = make_tree(tmp_path / "tree", pristine("0.5.9"))
    with pytest.raises(PatchDrift, match="patch 'broken'"):
        _apply(root, patches=patches, ids=(KIMI, "broken"))
    assert target(root) == pristine("0.5.9")
