"""The incremental verify's planner (pure): the image's files by layer, a check's fingerprint, and whether it
runs again or reuses a pass, with the reason the record shows."""

from __future__ import annotations

from sglstack.imagebuild.verifyplan import (
    CONTENT,
    ELF,
    FILE,
    LINK,
    OPAQUE,
    WHITEOUT,
    CheckSpec,
    LayerFiles,
    Pass,
    Scope,
    by_content,
    fingerprint,
    merged,
    plan,
)

SITE = "/opt/venv/lib/python3.11/site-packages"
BASE = LayerFiles("sha256:" + "b" * 64, {"/usr/lib/libc.so.6": ELF, "/etc/ld.so.conf": FILE})
TORCH = LayerFiles("sha256:" + "1" * 64, {f"{SITE}/torch/lib/libtorch_cuda.so": ELF,
                                          f"{SITE}/torch/__init__.py": FILE,
                                          f"{SITE}/torch-2.14.1.dist-info/RECORD": FILE})
SGLANG = LayerFiles("sha256:" + "5" * 64, {f"{SITE}/sglang/srt/server_args.py": FILE})
PATCH = LayerFiles("sha256:" + "a" * 64, {f"{SITE}/sglang/srt/models/kimi.py": FILE,
                                          "/opt/sglstack/patches.json": FILE})
TORCH_FILES = frozenset({f"{SITE}/torch/lib/libtorch_cuda.so", f"{SITE}/torch/__init__.py",
                         f"{SITE}/torch-2.14.1.dist-info/RECORD"})

RECORD_CHECK = CheckSpec("installed_files:torch", {}, Scope(paths=TORCH_FILES))
SHARED = CheckSpec("shared_libraries", {"policy": []}, Scope(kinds=frozenset({ELF, LINK}), under=("/etc",),
                                                             name_part=".so"))
SERVER = CheckSpec("server", {"argvs": [["--model-path", "m"]]}, Scope(everything=True))
JIT = CheckSpec("jit_toolchain", {"archs": ["9.0"]}, Scope(everything=True, outside=(f"{SITE}/sglang",
                                                                                      "/opt/sglstack/patches.json")))
SPECS = (RECORD_CHECK, SHARED, SERVER, JIT)


def _image(*layers: LayerFiles) -> tuple[list[str], dict[str, tuple[str, str]]]:
    return [layer.diff_id for layer in layers], merged(list(layers))


def _passes(diff_ids, files, specs=SPECS) -> list[Pass]:
    return [Pass(s.name, fingerprint(s, diff_ids, files), "sha256:" + "9" * 64, tuple(diff_ids),
                 "2026-12-05T03:00:00Z") for s in specs]


def test_a_later_layer_wins_and_whiteouts_and_opaque_folders_delete_below():
    lower = LayerFiles("sha256:l", {"/a/x.so": ELF, "/a/y": FILE, "/b/z": FILE, "/b/keep": FILE})
    upper = LayerFiles("sha256:u", {"/a/x.so": FILE, "/a/y": WHITEOUT, "/b": OPAQUE, "/b/new": LINK})
    assert merged([lower, upper]) == {"/a/x.so": (FILE, "sha256:u"), "/b/new": (LINK, "sha256:u")}


def test_a_whiteout_of_a_folder_deletes_everything_under_it():
    lower = LayerFiles("sha256:l", {"/a/b/c": FILE, "/a/bc": FILE})
    assert merged([lower, LayerFiles("sha256:u", {"/a/b": WHITEOUT})]) == {"/a/bc": (FILE, "sha256:l")}


def test_the_same_image_reuses_every_check_and_says_where_it_passed():
    ids, files = _image(BASE, TORCH, SGLANG)
    decisions = plan(SPECS, ids, files, _passes(ids, files))
    assert [(d.check, d.run, d.why) for d in decisions] == [
        (s.name, False, "reused: passed on the same files (by layer; a small layer's by content) in image "
                        "999999999999 at 2026-12-05T03:00:00Z") for s in SPECS]


def test_a_patch_layer_reruns_only_what_reads_the_patched_files():
    ids, files = _image(BASE, TORCH, SGLANG)
    new_ids, new_files = _image(BASE, TORCH, SGLANG, PATCH)
    ran = {d.check: d.run for d in plan(SPECS, new_ids, new_files, _passes(ids, files))}
    assert ran == {"installed_files:torch": False, "shared_libraries": False, "server": True, "jit_toolchain": False}
    why = next(d.why for d in plan(SPECS, new_ids, new_files, _passes(ids, files)) if d.check == "server")
    assert why == "ran: its files come from layers not verified before: aaaaaaaaaaaa"


def test_a_torch_layer_rebuilt_with_one_byte_changed_reruns_its_record_check():
    ids, files = _image(BASE, TORCH, SGLANG)
    rebuilt = LayerFiles("sha256:" + "2" * 64, dict(TORCH.entries))  # same paths, other content: another diff id
    new_ids, new_files = _image(BASE, rebuilt, SGLANG)
    decisions = {d.check: d for d in plan(SPECS, new_ids, new_files, _passes(ids, files))}
    assert {k: d.run for k, d in decisions.items()} == {"installed_files:torch": True, "shared_libraries": True,
                                                        "server": True, "jit_toolchain": True}
    assert decisions["installed_files:torch"].why == ("ran: its files come from layers not verified before: "
                                                      "222222222222")


def test_a_later_layer_copying_over_a_checked_file_reruns_its_check():
    ids, files = _image(BASE, TORCH, SGLANG)
    over = LayerFiles("sha256:" + "c" * 64, {f"{SITE}/torch/lib/libtorch_cuda.so": ELF})
    new_ids, new_files = _image(BASE, TORCH, SGLANG, over)
    ran = {d.check: d.run for d in plan(SPECS, new_ids, new_files, _passes(ids, files))}
    assert ran == {"installed_files:torch": True, "shared_libraries": True, "server": True, "jit_toolchain": True}


def test_a_deleted_file_moves_the_fingerprint_though_no_new_layer_holds_it():
    ids, files = _image(BASE, TORCH, SGLANG)
    gone = LayerFiles("sha256:" + "d" * 64, {f"{SITE}/torch/__init__.py": WHITEOUT})
    new_ids, new_files = _image(BASE, TORCH, SGLANG, gone)
    decision = plan([RECORD_CHECK], new_ids, new_files, _passes(ids, files))[0]
    assert (decision.run, decision.why) == (True, "ran: its inputs differ from every earlier pass (files added, "
                                                  "removed or moved between verified layers)")


def test_other_parameters_are_another_fingerprint():
    ids, files = _image(BASE, TORCH)
    other = CheckSpec("server", {"argvs": [["--model-path", "other"]]}, Scope(everything=True))
    assert fingerprint(other, ids, files) != fingerprint(SERVER, ids, files)
    assert plan([other], ids, files, _passes(ids, files))[0].run is True


def test_full_verify_runs_everything():
    ids, files = _image(BASE, TORCH, SGLANG)
    assert [(d.run, d.why) for d in plan(SPECS, ids, files, _passes(ids, files), full=True)] == \
        [(True, "ran: --full-verify")] * len(SPECS)


def test_never_verified_says_so():
    ids, files = _image(BASE, TORCH)
    assert {d.why for d in plan(SPECS, ids, files, [])} == {"ran: no earlier pass of this check"}


def test_without_layer_listings_only_the_same_layers_reuse():
    ids, _ = _image(BASE, TORCH, SGLANG)
    passes = _passes(ids, None)
    assert {d.run for d in plan(SPECS, ids, None, passes)} == {False}
    new_ids = [*ids, PATCH.diff_id]
    decisions = plan(SPECS, new_ids, None, passes)
    assert {(d.run, d.why) for d in decisions} == {
        (True, "ran: the image's layers cannot be listed on this engine, so only the same image reuses "
               "(new layers: aaaaaaaaaaaa)")}


def test_a_pass_of_another_check_with_the_same_fingerprint_is_not_taken():
    ids, files = _image(BASE, TORCH)
    stolen = [Pass("server", fingerprint(SHARED, ids, files), "sha256:" + "9" * 64, tuple(ids), "t")]
    assert plan([SHARED], ids, files, stolen)[0].run is True


def test_the_tools_bytecode_a_build_step_leaves_is_not_read_as_an_input():
    tools = "/opt/sglstack/tools"
    for scope in (Scope(kinds=frozenset({ELF, LINK}), under=(tools,), bytecode_under=(tools,)),
                  Scope(everything=True, bytecode_under=(tools,))):
        assert scope.selects(f"{tools}/__pycache__/wheelkit.cpython-311.pyc", FILE) is False
        assert scope.selects(f"{tools}/wheelkit.py", FILE) is True
    assert Scope(everything=True, bytecode_under=(tools,)).selects(f"{SITE}/sglang/__pycache__/a.pyc", FILE) is True


def _pypi_specs():
    from pathlib import Path

    from sglstack.config.matrix import load_matrix
    from sglstack.imagebuild.incremental import image_check_specs

    stack = load_matrix(Path(__file__).resolve().parents[2] / "stacks.yaml").get("pypi-cu130")
    return image_check_specs(stack, ["PATH=/opt/venv/bin:/usr/bin"], SITE, "0.5.23")


def test_the_image_checks_rerun_for_what_a_patch_changes_and_only_that():
    specs = _pypi_specs()
    ids, files = _image(BASE, TORCH, SGLANG)
    passes = _passes(ids, files, specs)
    skipped = LayerFiles("sha256:" + "e" * 64, {"/opt/sglstack/patches/p/methods.py": FILE,
                                                "/opt/sglstack/installed.json": FILE,
                                                "/opt/sglstack/tools/__pycache__/wheelkit.cpython-311.pyc": FILE})
    assert {d.check: d.run for d in plan(specs, *_image(BASE, TORCH, SGLANG, skipped), passes)} == {
        "shared_libraries": False, "server": False, "jit_toolchain": False}
    applied = LayerFiles("sha256:" + "f" * 64, {f"{SITE}/sglang/srt/models/kimi.py": FILE,
                                                f"{SITE}/sglang-0.5.23.dist-info/RECORD": FILE})
    assert {d.check: d.run for d in plan(specs, *_image(BASE, TORCH, SGLANG, applied), passes)} == {
        "shared_libraries": False, "server": True, "jit_toolchain": False}
    tool = LayerFiles("sha256:" + "7" * 64, {"/opt/sglstack/tools/imagecheck.py": FILE})
    assert {d.check: d.run for d in plan(specs, *_image(BASE, TORCH, SGLANG, tool), passes)} == {
        "shared_libraries": True, "server": True, "jit_toolchain": True}


def test_a_small_layer_rebuilt_with_the_same_bytes_reuses_and_one_other_byte_reruns():
    """The tools layer gets another diff id when a layer below it changes (its folders' mtimes); keyed by its
    files' content, the checks it is the program of are reused, and any other byte runs them again."""
    specs = _pypi_specs()
    tools = {"/opt/sglstack/tools/imagecheck.py": FILE, "/opt/sglstack/tools/elfdeps.py": FILE}
    before = LayerFiles("sha256:" + "7" * 64, tools)
    ids, files = _image(BASE, TORCH, SGLANG, before)
    same = {before.diff_id: {"/opt/sglstack/tools/imagecheck.py": "1" * 64, "/opt/sglstack/tools/elfdeps.py": "2" * 64}}
    passes = _passes(ids, by_content(files, same), specs)
    rebuilt = LayerFiles("sha256:" + "8" * 64, tools)
    new_ids, new_files = _image(BASE, TORCH, SGLANG, rebuilt)
    assert {d.check: d.run for d in plan(specs, new_ids, new_files, passes)} == {
        "shared_libraries": True, "server": True, "jit_toolchain": True}  # by layer: all three again
    keyed = by_content(new_files, {rebuilt.diff_id: same[before.diff_id]})
    assert keyed["/opt/sglstack/tools/imagecheck.py"] == (FILE, CONTENT + "1" * 64)
    assert {d.check: d.run for d in plan(specs, new_ids, keyed, passes)} == {
        "shared_libraries": False, "server": False, "jit_toolchain": False}
    other = by_content(new_files, {rebuilt.diff_id: {**same[before.diff_id],
                                                     "/opt/sglstack/tools/elfdeps.py": "3" * 64}})
    decisions = plan(specs, new_ids, other, passes)
    assert {d.check: d.run for d in decisions} == {"shared_libraries": True, "server": True, "jit_toolchain": True}
    why = decisions[0].why
    assert why.startswith("ran: its inputs differ from every earlier pass") and "keyed by its files' content" in why
    # a file the small layer does not key (a large layer's) keeps its diff id
    assert by_content(new_files, {})[f"{SITE}/torch/__init__.py"] == (FILE, TORCH.diff_id)
