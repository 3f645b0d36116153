"""apply on small trees (sglstack/inimage/patchkit), each refusal as its exact one-line message: line endings,
indentation, upstream methods, version ranges, declared hashes, the pip RECORD as the preimage.

Pure: our own small patches (tests/lib/patch_fixtures.make_patch) on small trees under tmp_path.
"""

from __future__ import annotations

from patch_fixtures import make_patch
from patch_trees import HEAD, TARGET, _patched, _refused, _setup, _sha, _verify_refused

from sglstack.inimage import patchkit
from sglstack.inimage.patchkit import (
    PatchAlreadyUpstream,
    PatchConflict,
    PatchDrift,
    PatchModuleLevelDef,
    PatchOutOfRange,
    PatchUnboundName,
    PatchUsageError,
    PatchVerifyError,
    apply_patches,
)

# ---- apply on small trees ----------------------------------------------------------------------------


def test_apply_inserts_after_the_class_and_keeps_everything_else(tmp_path):
    root, patches = _setup(tmp_path)
    (result,) = apply_patches(root, patches, ["demo"], "0.5.9")
    assert _patched(root) == TARGET.replace(
        "return 1\n", "return 1\n\n    def added(self):\n        return 2\n")
    assert (result.id, result.file, result.class_name, result.methods, result.status) == (
        "demo", "sglang/demo.py", "Demo", ("added",), patchkit.APPLIED)
    assert (result.inserted, result.upstream_methods, result.notice, result.sglang_version) == (
        ("added",), (), "", "0.5.9")
    assert result.sha256_before == _sha(TARGET.encode())
    assert result.sha256_after == _sha(_patched(root).encode())
    assert result.to_manifest() == {
        "id": "demo", "file": "sglang/demo.py", "class": "Demo", "methods": ["added"], "status": "applied",
        "sha256_before": result.sha256_before, "sha256_after": result.sha256_after, "sglang_version": "0.5.9",
        "inserted": ["added"], "upstream_methods": []}
    (again,) = apply_patches(root, patches, ["demo", "demo"], "0.5.9")  # one id twice is one patch
    assert again.status == patchkit.ALREADY_APPLIED and again.inserted == () and again.notice == ""
    assert again.sha256_before == again.sha256_after == result.sha256_after


def test_apply_reindents_to_the_target_and_keeps_strings(tmp_path):
    methods = "class Demo:\n  def added(self):\n    if True:\n      return '''a\n  b'''\n\n    return 2\n"
    target = "class Demo:\n\tdef first(self):\n\t\treturn 1\n"
    root, patches = _setup(tmp_path, target, methods)
    apply_patches(root, patches, ["demo"])
    assert _patched(root) == target + "\n\tdef added(self):\n\t\tif True:\n\t\t\treturn '''a\n  b'''\n\n\t\treturn 2\n"


def test_apply_to_a_class_without_a_final_newline_and_crlf(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\r\n    x = 1")
    apply_patches(root, patches, ["demo"])
    assert (root / "sglang/demo.py").read_bytes() == (
        b"class Demo:\r\n    x = 1\r\n\r\n    def added(self):\r\n        return 2\r\n")


def test_apply_to_a_cr_file_without_a_final_newline_keeps_cr(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\r    x = 1")
    apply_patches(root, patches, ["demo"])
    assert (root / "sglang/demo.py").read_bytes() == (
        b"class Demo:\r    x = 1\r\r    def added(self):\r        return 2\r")


def test_apply_to_a_cr_file_with_lines_after_the_class(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\r    x = 1\r\r\rEntry = Demo\r")
    apply_patches(root, patches, ["demo"])
    assert (root / "sglang/demo.py").read_bytes() == (
        b"class Demo:\r    x = 1\r\r    def added(self):\r        return 2\r\r\rEntry = Demo\r")


def test_whitespace_only_lines_of_a_method_become_empty_lines(tmp_path):
    methods = "class Demo:\n  def added(self):\n    x = 1\n    \n    return x\n"
    root, patches = _setup(tmp_path, "class Demo:\n    x = 1\n", methods)
    apply_patches(root, patches, ["demo"])
    assert _patched(root) == "class Demo:\n    x = 1\n\n    def added(self):\n        x = 1\n\n        return x\n"


def test_two_patches_on_one_file_see_each_other(tmp_path):
    original = "# coding: latin-1\nclass Demo:\n    x = '\u00e9'\n".encode("latin-1")
    root, patches = _setup(tmp_path)
    (root / "sglang/demo.py").write_bytes(original)
    make_patch(patches, "more", file="sglang/demo.py", class_name="Demo", methods=("more",),
               source="class Demo:\n    def more(self):\n        return self.added()\n")
    first, second = apply_patches(root, patches, ["demo", "more"])
    data = (root / "sglang/demo.py").read_bytes()
    assert data == (b"# coding: latin-1\nclass Demo:\n    x = '\xe9'\n\n    def added(self):\n        return 2\n"
                    b"\n    def more(self):\n        return self.added()\n")
    # both results carry the file's hashes at the start and at the end of the run
    assert first.sha256_before == second.sha256_before == _sha(original)
    assert first.sha256_after == second.sha256_after == _sha(data)
    assert (first.inserted, second.inserted) == (("added",), ("more",))


def test_the_line_ending_is_the_class_last_lines(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\r\n    x = 1\n")
    apply_patches(root, patches, ["demo"])
    assert (root / "sglang/demo.py").read_bytes() == (
        b"class Demo:\r\n    x = 1\n\n    def added(self):\n        return 2\n")


def test_a_longer_class_without_a_final_newline(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    x = 1\n    y = 2")
    apply_patches(root, patches, ["demo"])
    assert _patched(root) == "class Demo:\n    x = 1\n    y = 2\n\n    def added(self):\n        return 2\n"


def test_a_class_body_on_the_class_line(tmp_path):
    root, patches = _setup(tmp_path, "class Demo: x = 1\n")
    assert _refused(PatchDrift, root, patches) == (
        HEAD + "the class body is on the class line (1): no indentation to insert methods with")


def test_a_missing_file(tmp_path):
    root, patches = _setup(tmp_path)
    (root / "sglang/demo.py").unlink()
    assert _refused(PatchDrift, root, patches) == HEAD + f"file is missing under {root}"


def test_a_target_that_does_not_compile(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    x = (\n")
    assert _refused(PatchDrift, root, patches) == HEAD + "does not compile: SyntaxError: '(' was never closed (line 2)"
    root, patches = _setup(tmp_path, "class Demo:\n    x = 1\n  y = 2\n")
    assert _refused(PatchDrift, root, patches) == HEAD + (
        "does not compile: IndentationError: unindent does not match any outer indentation level (line 3): "
        "methods appended at module level (the `cat >>` mistake)?")
    assert _verify_refused(root, patches) == HEAD + (
        "does not compile: IndentationError: unindent does not match any outer indentation level (line 3): "
        "methods appended at module level (the `cat >>` mistake)?")


def test_the_class_missing_or_twice(tmp_path):
    root, patches = _setup(tmp_path, "def Demo():\n    pass\nif True:\n    class Demo:\n        pass\n")
    assert _refused(PatchDrift, root, patches) == HEAD + "class not found at the top level of the file"
    assert _verify_refused(root, patches) == HEAD + "class not found at the top level of the file"
    root, patches = _setup(tmp_path, "class Demo:\n    pass\n\n\nclass Demo:\n    pass\n")
    assert _refused(PatchDrift, root, patches) == HEAD + "class defined 2 times (lines 1, 5)"
    assert _verify_refused(root, patches) == HEAD + "class defined 2 times (lines 1, 5)"


def test_a_module_level_function_of_that_name(tmp_path):
    root, patches = _setup(tmp_path, TARGET + "\ntry:\n    pass\nexcept Exception:\n    async def added(self):\n"
                                              "        return 2\n")
    message = (HEAD + "function 'added' is defined at module level (line 16), outside the class: the `cat >>` "
               "mistake")
    assert _refused(PatchModuleLevelDef, root, patches) == message
    assert _verify_refused(root, patches) == message


def test_a_member_bound_twice_or_not_a_method(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    added = 1\n\n    def added(self):\n        return 2\n")
    assert _refused(PatchConflict, root, patches) == HEAD + "'added' is defined 2 times in the class (lines 2, 4)"
    assert _verify_refused(root, patches) == HEAD + "'added' is defined 2 times in the class (lines 2, 4)"
    root, patches = _setup(tmp_path, "class Demo:\n    x = 1\n    added: int = 1\n")
    assert _refused(PatchConflict, root, patches) == (
        HEAD + "'added' is already a class member that is not a method (line 3)")


def test_an_incompatible_existing_method(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    def added(self, a):\n        return a\n")
    assert _refused(PatchConflict, root, patches) == HEAD + (
        "method 'added' is already in the class (line 2) with a different body and an incompatible signature "
        "(self, a), patch has (self)")
    assert _verify_refused(root, patches) == HEAD + "method 'added' has signature (self, a), expected (self)"


def test_a_compatible_different_method_is_upstream(tmp_path):
    target = "class Demo:\n    def added(self, a=1):\n        return a\n"
    root, patches = _setup(tmp_path, target)
    (result,) = apply_patches(root, patches, ["demo"], "0.5.9")
    assert (result.status, result.inserted, result.upstream_methods) == (patchkit.ALREADY_UPSTREAM, (), ("added",))
    assert result.notice == (
        "patch 'demo': sglang 0.5.9 already has added upstream; skipped them, the patch can be retired")
    assert _patched(root) == target
    (result,) = apply_patches(root, patches, ["demo"])
    assert result.notice == (
        "patch 'demo': sglang (unknown version) already has added upstream; skipped them, the patch can be retired")
    assert _refused(PatchAlreadyUpstream, root, patches, "0.5.9", "error") == HEAD + (
        "sglang 0.5.9 already has added: retire this patch from the stack (policy on_upstream=error)")
    assert _refused(PatchAlreadyUpstream, root, patches, None, "error") == HEAD + (
        "sglang (unknown version) already has added: retire this patch from the stack (policy on_upstream=error)")


def test_upstream_notice_names_fixed_in_and_retire(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    def added(self, a=1):\n        return a\n")
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + 'fixed_in = "0.5.10"\nretire = "drop it"\n')
    (result,) = apply_patches(root, patches, ["demo"], "0.5.10")
    assert result.notice == ("patch 'demo': sglang 0.5.10 already has added upstream (fixed in 0.5.10); skipped "
                             "them, the patch can be retired: drop it")
    assert _refused(PatchAlreadyUpstream, root, patches, "0.5.10", "error") == HEAD + (
        "sglang 0.5.10 already has added, fixed upstream in 0.5.10: retire this patch from the stack "
        "(policy on_upstream=error)")


def test_a_partly_applied_patch_inserts_the_rest(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self):\n        return 3\n"
    target = "class Demo:\n    def added(self):\n        return 2\n"
    root, patches = _setup(tmp_path, target, methods, names=("added", "more"))
    (result,) = apply_patches(root, patches, ["demo"])
    assert (result.status, result.inserted, result.upstream_methods) == (patchkit.APPLIED, ("more",), ())
    assert _patched(root) == target + "\n    def more(self):\n        return 3\n"


def test_identical_methods_outside_the_range_are_upstream(tmp_path):
    target = "class Demo:\n    def added(self):\n        return 2\n"
    root, patches = _setup(tmp_path, target, applies_to="<0.5")
    (result,) = apply_patches(root, patches, ["demo"], "0.5.9")
    assert (result.status, result.upstream_methods) == (patchkit.ALREADY_UPSTREAM, ("added",))


def test_outside_the_range_identical_and_differing_methods_are_all_upstream(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self):\n        return 3\n"
    target = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self, a=1):\n        return a\n"
    root, patches = _setup(tmp_path, target, methods, names=("added", "more"), applies_to="<0.5")
    (result,) = apply_patches(root, patches, ["demo"], "0.5.9")
    assert (result.status, result.upstream_methods) == (patchkit.ALREADY_UPSTREAM, ("more", "added"))
    assert result.notice == ("patch 'demo': sglang 0.5.9 already has more, added upstream; skipped them, the patch "
                             "can be retired")


def test_out_of_range(tmp_path):
    root, patches = _setup(tmp_path, applies_to="<0.5")
    assert _refused(PatchOutOfRange, root, patches, "0.5.9") == HEAD + (
        "sglang 0.5.9 is outside applies_to '<0.5' and the class lacks added")
    (root / "sglang/demo.py").unlink()
    assert _refused(PatchOutOfRange, root, patches, "0.5.9") == HEAD + (
        "sglang 0.5.9 is outside applies_to '<0.5' and has no such file")
    # in range, a missing file is drift, not out of range
    assert _refused(PatchDrift, root, patches, "0.4") == HEAD + f"file is missing under {root}"


def test_out_of_range_names_every_missing_method(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self):\n        return 3\n"
    root, patches = _setup(tmp_path, TARGET, methods, names=("added", "more"), applies_to="<0.5")
    assert _refused(PatchOutOfRange, root, patches, "0.5.9") == HEAD + (
        "sglang 0.5.9 is outside applies_to '<0.5' and the class lacks added, more")


def test_policy_error_names_every_upstream_method(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self):\n        return 3\n"
    target = "class Demo:\n    def added(self, a=1):\n        return a\n\n    def more(self, b=1):\n        return b\n"
    root, patches = _setup(tmp_path, target, methods, names=("added", "more"))
    assert _refused(PatchAlreadyUpstream, root, patches, "0.5.9", "error") == HEAD + (
        "sglang 0.5.9 already has added, more: retire this patch from the stack (policy on_upstream=error)")


def test_a_declared_after_hash_for_the_version(tmp_path):
    root, patches = _setup(tmp_path)
    before = _sha(TARGET.encode())
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + f'[sha256_before]\n"0.5.9" = "{before}"\n'
                    f'[sha256_after]\n"0.5.9" = "{"0" * 64}"\n')
    applied = TARGET.replace("return 1\n", "return 1\n\n    def added(self):\n        return 2\n")
    assert _refused(PatchVerifyError, root, patches, "0.5.9") == HEAD + (
        f"sha256 after patching {_sha(applied.encode())} is not the declared {'0' * 64}")


def test_unbound_names(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return Zeta(os, Alpha, len, __class__, Entry, x)\n"
    root, patches = _setup(tmp_path, TARGET, methods)
    assert _refused(PatchUnboundName, root, patches) == HEAD + (
        "method 'added' uses Alpha, Zeta, os, x, which the module does not import or define")
    # a star import: the engine cannot tell, and the apply goes ahead
    root, patches = _setup(tmp_path, "from os import *\n" + TARGET, methods)
    assert apply_patches(root, patches, ["demo"])[0].status == patchkit.APPLIED


def test_a_declared_after_hash_that_does_not_match(tmp_path):
    root, patches = _setup(tmp_path)
    before = _sha(TARGET.encode())
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + f'sha256_before = "{before}"\nsha256_after = "{"0" * 64}"\n')
    applied = TARGET.replace("return 1\n", "return 1\n\n    def added(self):\n        return 2\n")
    after = _sha(applied.encode())
    assert _refused(PatchVerifyError, root, patches) == HEAD + (
        f"sha256 after patching {after} is not the declared {'0' * 64}")
    # declared for this version only, the after hash is checked for it
    toml.write_text(toml.read_text().replace(f'sha256_after = "{"0" * 64}"', f'sha256_after = "{after}"'))
    assert apply_patches(root, patches, ["demo"], "0.5.9")[0].sha256_after == after


def test_an_after_hash_alone_is_not_checked(tmp_path):
    """Without a declared pre-image the result is not known exactly, so the after hash cannot be required."""
    root, patches = _setup(tmp_path)
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + f'sha256_after = "{"0" * 64}"\n')
    assert apply_patches(root, patches, ["demo"])[0].status == patchkit.APPLIED


def test_a_declared_preimage_for_the_version(tmp_path):
    root, patches = _setup(tmp_path)
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + f'[sha256_before]\n"0.5.9" = "{"0" * 64}"\n')
    sha = _sha(TARGET.encode())
    assert _refused(patchkit.PatchPreimageMismatch, root, patches, "0.5.9") == HEAD + (
        f"sha256 {sha} is not the declared pre-image {'0' * 64} for sglang 0.5.9")
    toml.write_text(toml.read_text().replace('"0.5.9"', '"*"'))
    assert _refused(patchkit.PatchPreimageMismatch, root, patches) == HEAD + (
        f"sha256 {sha} is not the declared pre-image {'0' * 64}")


def test_the_pip_record_is_the_preimage(tmp_path):
    import base64
    import hashlib

    root, patches = _setup(tmp_path)
    dist = root / "sglang-0.5.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n\nbody\n")

    def record(data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return (f"sglang/demo.pyc,sha256=x,1\nsglang/other.py,sha256={digest},1\n"
                f"sglang/demo.py,md5=abc,1\nsglang/demo.py,sha256={digest},{len(data)}\n")

    (dist / "RECORD").write_text(record(b"something else"))
    sha = _sha(TARGET.encode())
    other = hashlib.sha256(b"something else").hexdigest()
    assert _refused(patchkit.PatchPreimageMismatch, root, patches) == HEAD + (
        f"sha256 {sha} differs from {other} recorded in sglang-0.5.9.dist-info/RECORD: the file was changed "
        "after pip installed it")
    (dist / "RECORD").write_text(record(TARGET.encode()))
    (result,) = apply_patches(root, patches, ["demo"])
    assert result.sglang_version == "0.5.9" and result.status == patchkit.APPLIED
    # identical methods in a file exactly as pip installed it: upstream has them, not an earlier run
    (dist / "RECORD").write_text(record(_patched(root).encode()))
    (result,) = apply_patches(root, patches, ["demo"])
    assert (result.status, result.upstream_methods) == (patchkit.ALREADY_UPSTREAM, ("added",))


def test_an_unknown_policy(tmp_path):
    root, patches = _setup(tmp_path)
    assert _refused(PatchUsageError, root, patches, None, "warn") == (
        "unknown policy 'warn' (expected one of: notice, error)")


def test_the_entry_class_registration(tmp_path):
    root, patches = _setup(tmp_path, entry_class="Entry")
    assert apply_patches(root, patches, ["demo"])[0].status == patchkit.APPLIED
    root, patches = _setup(tmp_path / "two", TARGET.replace("Entry = Demo", "Entry = None"), entry_class="Entry")
    assert _refused(PatchVerifyError, root, patches) == HEAD + (
        "the class is not registered in Entry: SGLang would not find the architecture")
