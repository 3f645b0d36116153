"""patch.toml and methods.py as data: every key's rule, and each refusal as its exact one-line message.

Pure: small patch folders under tmp_path, no wheels, no Docker.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from sglstack.inimage.patchkit import PatchDefinitionError, PatchUsageError, load_patch
from sglstack.inimage.patchkit.spec import bound_names, patch_ids

METHODS = "class Demo:\n    def added(self):\n        return 2\n"
BASE = {
    "id": '"demo"',
    "why": '"test patch"',
    "applies_to": '">=0.5"',
    "file": '"sglang/demo.py"',
    "class": '"Demo"',
    "methods": '["added"]',
}
KNOWN = ("applies_to, class, entry_class, file, fixed_in, id, methods, retire, sha256_after, sha256_before, "
         "source, upstream, why")
DIGEST = "ab" * 32


def _write(patches: Path, keys: dict[str, str | None], *, tables: str = "", source: str | bytes = METHODS,
           source_name: str = "methods.py", patch_id: str = "demo") -> Path:
    """A patch folder: BASE's keys overridden by `keys` (None drops a key), then raw `tables`."""
    folder = patches / patch_id
    folder.mkdir(parents=True, exist_ok=True)
    merged = {**BASE, **keys}
    body = "".join(f"{k} = {v}\n" for k, v in merged.items() if v is not None)
    (folder / "patch.toml").write_text(body + tables)
    if source is not None:
        (folder / source_name).write_bytes(source.encode() if isinstance(source, str) else source)
    return patches


def _refusal(patches: Path, patch_id: str = "demo") -> str:
    with pytest.raises(PatchDefinitionError) as info:
        load_patch(patches, patch_id)
    assert info.value.patch == patch_id
    return str(info.value)


def _prefix(patches: Path, patch_id: str = "demo") -> str:
    return f"patch '{patch_id}': {patches / patch_id / 'patch.toml'}: "


# ---- a good patch, field by field ------------------------------------------------------------------


def test_a_minimal_patch_has_the_defaults(tmp_path):
    spec = load_patch(_write(tmp_path, {}), "demo")
    assert (spec.id, spec.folder, spec.why, spec.upstream, spec.fixed_in) == (
        "demo", tmp_path / "demo", "test patch", "", None)
    assert (spec.file, spec.class_name, spec.source, spec.entry_class, spec.retire) == (
        "sglang/demo.py", "Demo", "methods.py", None, "")
    assert str(spec.applies_to) == ">=0.5" and spec.applies("0.5.9") and not spec.applies("0.4")
    assert spec.sha256_before == {} and spec.sha256_after == {}
    assert spec.method_names == ("added",)
    (method,) = spec.methods
    assert method.name == "added" and method.indent_unit == "    "
    assert method.lines == ("    def added(self):", "        return 2")
    assert method.in_string == (False, False)
    assert method.node.name == "added" and method.node.lineno == 2


def test_every_optional_key_is_read(tmp_path):
    patches = _write(tmp_path, {
        "why": '"""\nfirst line\n  second   line\n"""',
        "upstream": '"sgl-project/sglang#1"',
        "fixed_in": '"0.5.10"',
        "entry_class": '"Registry"',
        "source": '"other.py"',
        "retire": '"""\nmove to\n0.5.10\n"""',
        "sha256_before": f'"{DIGEST}"',
    }, tables=f'[sha256_after]\n"0.5.9" = "{"cd" * 32}"\n"*" = "{"ef" * 32}"\n', source_name="other.py")
    spec = load_patch(patches, "demo")
    assert spec.why == "first line second line" and spec.retire == "move to 0.5.10"
    assert (spec.upstream, spec.fixed_in, spec.entry_class, spec.source) == (
        "sgl-project/sglang#1", "0.5.10", "Registry", "other.py")
    assert spec.sha256_before == {"*": DIGEST}
    assert spec.sha256_after == {"0.5.9": "cd" * 32, "*": "ef" * 32}
    assert spec.declared_hash("after", "0.5.9") == "cd" * 32
    assert spec.declared_hash("after", "0.5.8") == "ef" * 32  # no row for it: the "*" row
    assert spec.declared_hash("after", None) == "ef" * 32
    assert spec.declared_hash("before", "0.5.9") == DIGEST


def test_declared_hash_without_a_star_row_is_none_for_other_versions(tmp_path):
    spec = load_patch(_write(tmp_path, {}, tables=f'[sha256_before]\n"0.5.9" = "{DIGEST}"\n'), "demo")
    assert spec.declared_hash("before", "0.5.9") == DIGEST
    assert spec.declared_hash("before", "0.5.10") is None
    assert spec.declared_hash("before", None) is None
    assert spec.declared_hash("after", "0.5.9") is None


def test_models_files_default_to_the_entryclass_registry(tmp_path):
    spec = load_patch(_write(tmp_path, {"file": '"sglang/srt/models/demo.py"'}), "demo")
    assert spec.entry_class == "EntryClass"
    # an explicit empty entry_class turns the registry check off, even under sglang/srt/models
    spec = load_patch(_write(tmp_path, {"file": '"sglang/srt/models/demo.py"', "entry_class": '""'}), "demo")
    assert spec.entry_class is None
    # only the sglang/srt/models folder has the registry
    assert load_patch(_write(tmp_path, {"file": '"sglang/srt/layers/demo.py"'}), "demo").entry_class is None


def test_empty_optional_strings_are_allowed(tmp_path):
    spec = load_patch(_write(tmp_path, {"upstream": '""', "fixed_in": '""', "retire": '""'}), "demo")
    assert (spec.upstream, spec.fixed_in, spec.retire) == ("", None, "")


def test_methods_keep_their_decorators_and_the_stub_indentation(tmp_path):
    source = (
        "import functools\n\n\nclass Demo:\n"
        "\tx = 1\n\n"
        "\t@functools.cache\n\t@staticmethod\n\tdef helper():\n\t\tx = '''a\nb'''\n\t\treturn x\n\n"
        "\tasync def added(self):  \n\t\treturn self.X\n"
    )
    spec = load_patch(_write(tmp_path, {"methods": '["added", "helper"]'}, source=source), "demo")
    added, helper = spec.methods
    assert added.lines == ("\tasync def added(self):  ", "\t\treturn self.X") and added.indent_unit == "\t"
    assert helper.lines == ("\t@functools.cache", "\t@staticmethod", "\tdef helper():", "\t\tx = '''a", "b'''",
                            "\t\treturn x")
    assert helper.in_string == (False, False, False, False, True, False)


def test_patch_ids_lists_the_folders_with_a_patch_toml(tmp_path):
    assert patch_ids(tmp_path / "none") == []
    _write(tmp_path, {"id": '"b"'}, patch_id="b")
    _write(tmp_path, {"id": '"a"'}, patch_id="a")
    (tmp_path / "c").mkdir()  # no patch.toml: not a patch
    assert patch_ids(tmp_path) == ["a", "b"]


def test_bound_names_of_class_body_statements():
    import ast

    def names(code: str) -> set[str]:
        return bound_names(ast.parse(code).body[0])

    assert names("def f(self): pass") == {"f"}
    assert names("async def g(self): pass") == {"g"}
    assert names("class Inner: pass") == {"Inner"}
    assert names("a = b, c = 1, 2") == {"a", "b", "c"}
    assert names("x: int = 1") == {"x"}
    assert names("y += 1") == {"y"}
    assert names("print(z)") == set()


# ---- refusals: patch.toml ---------------------------------------------------------------------------


def test_an_unknown_patch_names_the_known_ones(tmp_path):
    with pytest.raises(PatchUsageError) as info:
        load_patch(tmp_path, "demo")
    assert str(info.value) == f"patch 'demo': unknown patch (no {tmp_path}/demo/patch.toml; known: none)"
    _write(tmp_path, {"id": '"other"'}, patch_id="other")
    _write(tmp_path, {"id": '"extra"'}, patch_id="extra")
    with pytest.raises(PatchUsageError) as info:
        load_patch(tmp_path, "demo")
    assert str(info.value) == f"patch 'demo': unknown patch (no {tmp_path}/demo/patch.toml; known: extra, other)"
    with pytest.raises(PatchUsageError) as info:
        load_patch(tmp_path, "othr")
    assert str(info.value) == (f"patch 'othr': unknown patch (no {tmp_path}/othr/patch.toml; known: extra, other); "
                               "did you mean 'other'?")


def test_invalid_toml(tmp_path):
    patches = _write(tmp_path, {"why": '"unterminated'})
    text = (patches / "demo" / "patch.toml").read_text()
    with pytest.raises(tomllib.TOMLDecodeError) as ref:
        tomllib.loads(text)
    assert _refusal(patches) == _prefix(patches) + f"invalid TOML: {ref.value}"


def test_toml_that_is_not_utf8(tmp_path):
    patches = _write(tmp_path, {})
    (patches / "demo" / "patch.toml").write_bytes(b'why = "caf\xe9"\n')
    assert _refusal(patches) == _prefix(patches) + (
        "invalid TOML: 'utf-8' codec can't decode byte 0xe9 in position 10: invalid continuation byte")


def test_an_unreadable_toml(tmp_path, monkeypatch):
    patches = _write(tmp_path, {})

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_text", denied)
    assert _refusal(patches) == _prefix(patches) + "cannot read: Permission denied"


@pytest.mark.parametrize("key", ["id", "why", "applies_to", "file", "class"])
def test_a_required_key_missing(tmp_path, key):
    patches = _write(tmp_path, {key: None})
    assert _refusal(patches) == _prefix(patches) + f"missing key '{key}'"


@pytest.mark.parametrize("value", ["3", '"  "', '""', "[]"])
def test_a_required_key_that_is_not_a_non_empty_string(tmp_path, value):
    patches = _write(tmp_path, {"why": value})
    assert _refusal(patches) == _prefix(patches) + "key 'why' must be a non-empty string"


def test_an_optional_key_that_is_not_a_string(tmp_path):
    patches = _write(tmp_path, {"upstream": "1"})
    assert _refusal(patches) == _prefix(patches) + "key 'upstream' must be a non-empty string"


def test_an_unknown_key_lists_the_known_ones(tmp_path):
    patches = _write(tmp_path, {"zeta": '"1"', "alpha": '"2"'})
    assert _refusal(patches) == _prefix(patches) + f"unknown key 'alpha' (known: {KNOWN})"


def test_the_id_must_match_the_folder(tmp_path):
    patches = _write(tmp_path, {"id": '"other"'})
    assert _refusal(patches) == _prefix(patches) + "id 'other' does not match its folder name 'demo'"


def test_a_bad_range(tmp_path):
    patches = _write(tmp_path, {"applies_to": '"=>0.5"'})
    assert _refusal(patches) == _prefix(patches) + "applies_to: '=>0.5' is not a PEP 440 specifier"


def test_a_bad_fixed_in(tmp_path):
    patches = _write(tmp_path, {"fixed_in": '"latest"'})
    assert _refusal(patches) == _prefix(patches) + "fixed_in: 'latest' is not a PEP 440 version"


@pytest.mark.parametrize("file", ["/abs/sglang/demo.py", "sglang/../x.py", "sglang/demo.txt", "sglang/demo"])
def test_a_target_outside_the_root_or_not_python(tmp_path, file):
    patches = _write(tmp_path, {"file": f'"{file}"'})
    assert _refusal(patches) == _prefix(patches) + (
        f"file '{file}' must be a relative path to a .py file inside the package root")


def test_dots_inside_a_name_are_not_a_parent_folder(tmp_path):
    assert load_patch(_write(tmp_path, {"file": '"sglang/a..b/demo.py"'}), "demo").file == "sglang/a..b/demo.py"


@pytest.mark.parametrize("value", [None, '"added"', "[]", '["added", 1]', '["added", ""]'])
def test_methods_must_be_a_non_empty_list_of_names(tmp_path, value):
    patches = _write(tmp_path, {"methods": value})
    assert _refusal(patches) == _prefix(patches) + "key 'methods' must be a non-empty list of method names"


def test_a_method_listed_twice(tmp_path):
    patches = _write(tmp_path, {"methods": '["added", "added"]'})
    assert _refusal(patches) == _prefix(patches) + "key 'methods' lists a name twice"


@pytest.mark.parametrize("key", ["sha256_before", "sha256_after"])
def test_a_hash_table_that_is_neither_a_digest_nor_a_table(tmp_path, key):
    patches = _write(tmp_path, {key: f'["{DIGEST}"]'})
    assert _refusal(patches) == _prefix(patches) + (
        f"key '{key}' must be a hex digest or a table of version = digest")


@pytest.mark.parametrize("digest", ["XX" * 32, "AB" * 32, "ab" * 31 + "a", "ab" * 32 + "a", "gg" * 32, "1"])
def test_a_digest_that_is_not_lowercase_sha256_hex(tmp_path, digest):
    patches = _write(tmp_path, {}, tables=f'[sha256_after]\n"0.5.9" = "{digest}"\n')
    assert _refusal(patches) == _prefix(patches) + "sha256_after.0.5.9: not a lowercase sha256 hex digest"
    patches = _write(tmp_path, {"sha256_before": f'"{digest}"'})
    assert _refusal(patches) == _prefix(patches) + "sha256_before.*: not a lowercase sha256 hex digest"


def test_a_digest_that_is_not_a_string(tmp_path):
    patches = _write(tmp_path, {}, tables='[sha256_before]\n"0.5.9" = 12\n')
    assert _refusal(patches) == _prefix(patches) + "sha256_before.0.5.9: not a lowercase sha256 hex digest"


# ---- refusals: methods.py ---------------------------------------------------------------------------


def test_the_methods_source_is_missing(tmp_path):
    patches = _write(tmp_path, {"source": '"other.py"'})
    assert _refusal(patches) == _prefix(patches) + "methods source other.py is missing"


def test_a_methods_source_that_does_not_compile(tmp_path):
    patches = _write(tmp_path, {}, source="class Demo:\n    def added(self):\n        return (\n")
    assert _refusal(patches) == _prefix(patches) + "methods.py:3: '(' was never closed"


def test_a_methods_source_too_deeply_nested_has_no_line(tmp_path):
    deep = "class Demo:\n    def added(self):\n        return " + "-" * 200000 + "1\n"
    patches = _write(tmp_path, {}, source=deep)
    assert _refusal(patches) in (
        _prefix(patches) + "methods.py: too deeply nested to compile (MemoryError)",
        _prefix(patches) + "methods.py: too deeply nested to compile (RecursionError)",
    )


@pytest.mark.parametrize("source", ["class Other:\n    def added(self):\n        return 2\n",
                                    METHODS + "\n\n" + METHODS])
def test_exactly_one_stub_class(tmp_path, source):
    patches = _write(tmp_path, {}, source=source)
    assert _refusal(patches) == _prefix(patches) + (
        "methods.py must define exactly one stub class Demo holding the methods")


def test_a_stub_body_on_the_class_line(tmp_path):
    patches = _write(tmp_path, {}, source="class Demo: added = 1\n")
    assert _refusal(patches) == _prefix(patches) + "methods.py: the stub class body must be on its own indented lines"


@pytest.mark.parametrize("source", [METHODS, "class Demo:\n    other = 1\n    added = 2\n"])
def test_a_listed_method_the_stub_lacks(tmp_path, source):
    patches = _write(tmp_path, {"methods": '["added", "missing"]' if source == METHODS else '["added"]'},
                     source=source)
    name = "missing" if source == METHODS else "added"
    assert _refusal(patches) == _prefix(patches) + f"methods.py: stub class Demo has no method '{name}'"
