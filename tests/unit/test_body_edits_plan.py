"""Which earlier server pass a new image may keep the outcome of when only function bodies changed (pure:
`imagebuild/bodyedits.py`): only a pass whose inputs differ in the small layers' `.py` files (with their code
maps), their `.pyc` and RECORDs; anything else (another layer, a file added, the tools, a `.pyc` alone) is None,
and the server part runs as before."""

from __future__ import annotations

import json

import pytest

from sglstack.imagebuild.bodyedits import (
    BASIS,
    NOT_IMPORTED,
    basis,
    body_edit_plan,
    kept_server_report,
    kept_why,
    source_of_bytecode,
    watched_files,
)
from sglstack.imagebuild.verifyplan import CONTENT, FILE, CheckSpec, Pass, Scope, fingerprint
from sglstack.inimage.incontainer import codemap

SITE = "/opt/venv/lib/python3.11/site-packages"
LLAMA = f"{SITE}/sglang/srt/models/llama.py"
LLAMA_PYC = f"{SITE}/sglang/srt/models/__pycache__/llama.cpython-311.pyc"
RECORD = f"{SITE}/sglang-0.5.23.dist-info/RECORD"
SPEC = CheckSpec("server", {"argvs": []}, Scope(everything=True, outside=("/opt/sglstack/patches",),
                                                bytecode_under=("/opt/sglstack/tools",)))
DIFF_IDS = ["sha256:" + "a" * 64, "sha256:" + "b" * 64]


def _files(**content: str) -> dict[str, tuple[str, str]]:
    """An image: big layers' files by diff id, the small layers' by content (`content`: path -> a tag)."""
    files = {f"{SITE}/torch/__init__.py": (FILE, DIFF_IDS[0]), f"{SITE}/sglang/srt/server_args.py": (FILE, DIFF_IDS[0]),
             "/opt/sglstack/tools/importcheck.py": (FILE, CONTENT + "tool1"),
             "/opt/sglstack/patches/p/methods.py": (FILE, CONTENT + "patch1")}
    defaults = {LLAMA: "llama1", LLAMA_PYC: "pyc1", RECORD: "record1"}
    files.update({path: (FILE, CONTENT + tag) for path, tag in {**defaults, **content}.items()})
    return files


MAPS = {LLAMA: {"sha256": "0" * 64, "read": False, "serving": True, "code": [["1:<module>", "module", "o", "v", 0,
                                                                              True]]}}


def _pass(files: dict, image: str = "sha256:" + "1" * 64, **basis_extra) -> Pass:
    kept = {**basis(SPEC, files, MAPS, {RECORD: "listed"}), **basis_extra}
    return Pass("server", fingerprint(SPEC, DIFF_IDS, files), image, tuple(DIFF_IDS), "2026-12-05T18:00:00Z",
                {"server_help": {"returncode": 0}, "import_closure": {"unprovided": []}, BASIS: kept})


def test_the_watched_files_are_the_small_layers_py_files_and_records_not_sglstacks_own():
    assert watched_files(SPEC, _files()) == ([LLAMA], [RECORD])
    assert watched_files(SPEC, None) == ([], [])


def test_a_body_edit_of_a_patched_file_asks_the_image_with_the_pass_s_maps():
    plan = body_edit_plan(SPEC, DIFF_IDS, _files(**{LLAMA: "llama2", LLAMA_PYC: "pyc2", RECORD: "record2"}),
                          [_pass(_files())])
    assert plan is not None
    assert plan.changed == tuple(sorted((LLAMA, LLAMA_PYC, RECORD)))
    assert json.loads(plan.payload()) == {"code": {LLAMA: MAPS[LLAMA]}, "bytecode": {LLAMA_PYC: LLAMA},
                                          "records": {RECORD: "listed"}}


def test_the_newest_pass_that_fits_is_kept():
    older, newer = _pass(_files(), "sha256:" + "1" * 64), _pass(_files(**{LLAMA: "llama2"}), "sha256:" + "2" * 64)
    plan = body_edit_plan(SPEC, DIFF_IDS, _files(**{LLAMA: "llama3"}), [older, newer])
    assert plan is not None and plan.kept is newer


@pytest.mark.parametrize("changed", [
    {"/opt/sglstack/tools/importcheck.py": "tool2"},  # the check's own program
    {LLAMA_PYC: "pyc2"},  # bytecode whose source did not change
    {f"{SITE}/sglang/srt/models/other.py": "other"},  # a file added
    {LLAMA: "llama2", f"{SITE}/sglang/srt/models/data.json": "json2"},  # a file that is not code
])
def test_any_other_change_of_the_small_layers_runs_the_part(changed):
    base = _files(**{f"{SITE}/sglang/srt/models/data.json": "json1"})
    assert body_edit_plan(SPEC, DIFF_IDS, {**base, **_files(**changed)}, [_pass(base)]) is None


def test_a_change_in_a_big_layer_or_no_change_or_no_map_runs_the_part():
    kept = _pass(_files())
    moved = {**_files(**{LLAMA: "llama2"}), f"{SITE}/torch/__init__.py": (FILE, "sha256:" + "c" * 64)}
    assert body_edit_plan(SPEC, DIFF_IDS, moved, [kept]) is None
    assert body_edit_plan(SPEC, DIFF_IDS, _files(), [kept]) is None
    no_maps = Pass(kept.check, kept.fingerprint, kept.image_id, kept.layers, kept.verified_at,
                   {**kept.result, BASIS: {**kept.result[BASIS], "code_maps": {}}})
    assert body_edit_plan(SPEC, DIFF_IDS, _files(**{LLAMA: "llama2"}), [no_maps]) is None
    other_check = Pass("shared_libraries", kept.fingerprint, kept.image_id, kept.layers, kept.verified_at, kept.result)
    assert body_edit_plan(SPEC, DIFF_IDS, _files(**{LLAMA: "llama2"}), [other_check]) is None
    assert body_edit_plan(SPEC, DIFF_IDS, None, [kept]) is None


def test_other_parameters_of_the_check_run_the_part():
    other = CheckSpec("server", {"argvs": [["--tp", "8"]]}, SPEC.scope)
    assert body_edit_plan(other, DIFF_IDS, _files(**{LLAMA: "llama2"}), [_pass(_files())]) is None


def test_the_kept_report_has_the_changed_files_findings_scanned_again():
    elsewhere = {"module": "a", "importer": f"{SITE}/x.py", "line": 1, "serving": True, "conditional": False}
    before = {"module": "gone", "importer": LLAMA, "line": 3, "serving": True, "conditional": False}
    after = {"module": "new_dep", "importer": LLAMA, "line": 4, "serving": True, "conditional": False}
    kept = {"server_help": {"returncode": 0}, BASIS: {},
            "import_closure": {"unprovided": [elsewhere, before], "modules": ["m"], "seconds_imports": 40.0}}
    fresh = {"import_closure": {"unprovided": [after], "body_edits": {"reused": True, "changed": {LLAMA: ["f"]}},
                                "facts": {"files": 1}}}
    report = kept_server_report(kept, fresh)
    assert report["import_closure"]["unprovided"] == [elsewhere, after]
    assert report["import_closure"]["modules"] == ["m"] and report["server_help"] == {"returncode": 0}
    assert BASIS not in report and report["import_closure"]["body_edits"]["changed"] == {LLAMA: ["f"]}
    assert "seconds_imports" not in report["import_closure"]


def test_bytecode_names_its_source():
    assert source_of_bytecode(LLAMA_PYC) == LLAMA
    assert source_of_bytecode(LLAMA) is None


def test_the_record_says_which_code_changed_that_the_import_never_ran():
    plan = body_edit_plan(SPEC, DIFF_IDS, _files(**{LLAMA: "llama2"}), [_pass(_files())])
    assert plan is not None
    why = kept_why(plan, {"changed": {LLAMA: ["LlamaForCausalLM.probe"], f"{SITE}/other.py": [NOT_IMPORTED]}})
    assert why == ("reused: passed in image 111111111111 at 2026-12-05T18:00:00Z; since then only code its import "
                   "never ran changed (llama.py: LlamaForCausalLM.probe; other.py: not imported by it, the same "
                   "EntryClass), compared in the image; 1 file(s) scanned again")
    assert NOT_IMPORTED == codemap.NOT_IMPORTED  # the image's word for it
