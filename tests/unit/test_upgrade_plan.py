"""The upgrade planner, report and stacks-file editor, in process (pure: fixtures, no network)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sglstack.config.matrix import load_matrix
from sglstack.lock.conflicts import check_stack_pins
from sglstack.upgrade import plan as planner
from sglstack.upgrade.argv import judge_probe
from sglstack.upgrade.inputs import UpgradeInputError, check_inputs
from sglstack.upgrade.releases import newer_releases, release_pins
from sglstack.upgrade.report import to_json, to_markdown
from sglstack.upgrade.stacksfile import upgraded_text

STACKS = """\
# the matrix (a comment that must survive)
defaults:
  python: "3.12"
  platforms: [linux/amd64]
  serving:
    model: moonshotai/Kimi-K2.5
    tp: 8
    gpus: 8

stacks:
  cu130:
    description: CUDA 13.0.1, PyTorch 2.9.1+cu130, sgl-kernel 0.3.21+cu130, FlashInfer 0.6.4, SGLang 0.5.9
    base_image: nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04   # devel: the JIT compilers need nvcc
    cuda: "13.0.1"
    cuda_arch_list: ["9.0", "10.0"]
    torch:
      version: 2.9.1+cu130
      index_url: https://download.pytorch.org/whl/cu130
      packages: ["torchvision==0.24.1+cu130", "torchaudio==2.9.1+cu130"]
    sgl_kernel:
      version: 0.3.21+cu130
      url: https://github.com/sgl-project/whl/releases/download/v0.3.21/sgl_kernel-0.3.21+cu130-cp310-abi3-manylinux2014_{arch}.whl
    flashinfer:
      version: 0.6.4
      packages: [flashinfer-python, flashinfer-cubin]
    sglang:
      version: 0.5.9
    overrides:
      - replaces: flashinfer_python==0.6.3
        pin: flashinfer-python==0.6.4
        reason: CUDA 13 fixes
      - replaces: flashinfer_cubin==0.6.3
        pin: flashinfer-cubin==0.6.4
        reason: must match flashinfer-python
      - replaces: cuda-python==12.9
        pin: cuda-python==13.0.3
        reason: CUDA 13 bindings
    patches: [kimi-k25-eagle3]
"""

# The lines of sglang 0.5.10's and 0.5.23's METADATA that matter here (read from the real wheels).
REQUIRES_0510 = ["cuda-python==12.9", "flashinfer_python==0.6.7.post2", "flashinfer_cubin==0.6.7.post2",
                 "sglang-kernel==0.4.1", "torch==2.9.1", "torchaudio==2.9.1", "torchvision",
                 "transformers==5.3.0", "xgrammar==0.1.32",
                 'sglang[test]; extra == "dev"']
REQUIRES_0523 = ["cuda-python>=13.0", "flashinfer_python[cu13]==0.7.2", "sglang-kernel==0.4.10", "torch==2.14.1",
                 "torchaudio==2.11.0", "torchvision", "transformers==5.19.0"]


@pytest.fixture()
def stacks_file(tmp_path: Path) -> Path:
    path = tmp_path / "stacks.yaml"
    path.write_text(STACKS, encoding="utf-8")
    return path


def _derive(stack, requires, version, **kw):
    target = release_pins(version, {"Requires-Dist": requires}, stack.python, stack.platforms)
    args = {"family": {"torch": target.torch, "torchvision": "0.24.1", "torchaudio": "2.9.1"},
            "wheel_filename": f"sglang-{version}-py3-none-any.whl", "base_glibc": "2.39",
            "patch_status": {"kimi-k25-eagle3": planner.UPSTREAM}}
    args.update(kw)
    return target, planner.derive(stack, target, requires, **args)


def _upgraded(stacks_file: Path, derivation, as_name=None, name="cu130"):
    text = upgraded_text(stacks_file.read_text(), file=str(stacks_file), stack=name, edits=derivation.edits,
                         as_name=as_name)
    out = stacks_file.with_name("upgraded.yaml")
    out.write_text(text)
    return text, load_matrix(out, patches_dir=Path("patches")).get(as_name or name)


def test_release_pins_reads_the_kernel_under_its_new_name():
    pins = release_pins("0.5.10", {"Requires-Dist": REQUIRES_0510, "Requires-Python": [">=3.10"]}, "3.12",
                        ("linux/amd64",))
    assert (pins.torch, pins.kernel_package, pins.kernel, pins.flashinfer) == ("2.9.1", "sglang-kernel", "0.4.1",
                                                                              "0.6.7.post2")
    assert "sglang" not in pins.exact  # an extra's requirement is not a plain install's


def test_newer_releases_leave_out_pre_releases_and_keep_posts():
    available = ["0.5.11", "0.5.10rc0", "0.5.10.post1", "0.5.10", "0.5.9", "0.5.8"]
    assert newer_releases(available, "0.5.9") == ["0.5.10", "0.5.10.post1", "0.5.11"]
    assert newer_releases(available, "0.5.11") == []


def test_derive_0510_keeps_labels_renames_the_kernel_and_rechecks_overrides(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0510, "0.5.10")
    assert "torch" not in d.edits  # 0.5.10 keeps torch 2.9.1 and its family: nothing to write
    assert d.edits["sgl_kernel"]["package"] == "sglang-kernel"
    assert d.edits["sgl_kernel"]["version"] == "0.4.1+cu130"
    assert d.edits["sgl_kernel"]["url"] == ("https://github.com/sgl-project/whl/releases/download/v0.4.1/"
                                            "sglang_kernel-0.4.1+cu130-cp310-abi3-manylinux2014_{arch}.whl")
    assert d.edits["flashinfer"] == {"version": "0.6.7.post2"}  # 0.5.10 still requires the cubin package
    status = {o.replaces: o.status for o in d.overrides}
    assert status == {"flashinfer_python==0.6.3": "dropped", "flashinfer_cubin==0.6.3": "dropped",
                      "cuda-python==12.9": "kept"}
    assert d.edits["overrides"] == [{"replaces": "cuda-python==12.9", "pin": "cuda-python==13.0.3",
                                     "reason": "CUDA 13 bindings"}]
    assert d.edits["patches"] == [] and d.retired_patches == ("kimi-k25-eagle3",)
    assert d.edits["description"] == ("CUDA 13.0.1, PyTorch 2.9.1+cu130, sglang-kernel 0.4.1+cu130, "
                                      "FlashInfer 0.6.7.post2, SGLang 0.5.10")
    assert "glibc" not in d.edits and d.review == ()


def test_derive_0523_moves_the_torch_family_drops_the_cubin_and_declares_glibc(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0523, "0.5.23", family={"torch": "2.14.1", "torchvision": "0.29.2"},
                   wheel_filename="sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl")
    assert d.edits["torch"] == {"version": "2.14.1+cu130",
                                "packages": ["torchvision==0.29.2+cu130", "torchaudio==2.11.0+cu130"]}
    assert d.edits["flashinfer"] == {"version": "0.7.2", "packages": ["flashinfer-python"]}
    assert {o.replaces: o.status for o in d.overrides}["cuda-python==12.9"] == "dropped"
    assert d.edits["overrides"] == []
    assert (d.wheel_tag, d.edits["glibc"], d.glibc) == ("manylinux_2_34_x86_64", "2.39", "2.39")


def test_derive_without_a_known_base_glibc_asks_for_review(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0523, "0.5.23", base_glibc=None,
                   wheel_filename="sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl")
    assert "glibc" not in d.edits
    assert d.review == ("sglang 0.5.23's wheels need glibc 2.34 (manylinux_2_34_x86_64); the base image is not "
                        "known: declare `glibc:`",)
    _, none = _derive(stack, REQUIRES_0523, "0.5.23", wheel_filename=None)
    assert none.review == ("sglang 0.5.23 has no wheel for Python 3.12 on linux/amd64 with glibc 2.39",)


def test_a_drifted_patch_stays_and_asks_for_review(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0510, "0.5.10", patch_status={"kimi-k25-eagle3": planner.DRIFTED})
    assert "patches" not in d.edits
    assert d.review == ("patch(es) drifted against sglang 0.5.10: kimi-k25-eagle3",)


def test_the_edited_file_keeps_comments_and_validates_in_place(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0510, "0.5.10")
    text, new = _upgraded(stacks_file, d)
    assert "# the matrix (a comment that must survive)" in text
    assert "base_image: nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04   # devel: the JIT compilers need nvcc" in text
    assert 'cuda_arch_list: ["9.0", "10.0"]' in text  # untouched lines keep their quoting and flow style
    assert new.pins()["sglang-kernel"] == "0.4.1+cu130" and new.pins()["sglang"] == "0.5.10"
    assert new.patches == () and [o.replaces for o in new.overrides] == ["cuda-python==12.9"]
    # only the derived lines changed
    changed = [line for line in text.splitlines() if line not in STACKS.splitlines()]
    assert len(changed) <= 8, changed
    findings = check_stack_pins(new, REQUIRES_0510, "0.5.10")
    assert [f.kind for f in findings if f.is_failure] == []


def test_the_edited_file_as_a_new_entry_inherits_the_old_one(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0523, "0.5.23", family={"torch": "2.14.1", "torchvision": "0.29.2"},
                   wheel_filename="sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl")
    text, new = _upgraded(stacks_file, d, as_name="cu130-next")
    assert text.startswith(STACKS)  # the old entry is untouched, byte for byte
    entry = yaml.safe_load(text)["stacks"]["cu130-next"]
    assert entry["inherits"] == "cu130" and entry["glibc"] == "2.39"
    assert new.base_image == stack.base_image and new.cuda_arch_list == stack.cuda_arch_list
    assert new.pins()["torch"] == "2.14.1+cu130" and new.flashinfer.packages == ("flashinfer-python",)
    assert new.overrides == () and new.glibc == "2.39"


def test_a_new_conflict_is_found_by_the_conflicts_engine(stacks_file):
    """A stack that pins xgrammar 0.1.27 itself: sglang 0.5.10 requires 0.1.32, so it needs an override."""
    text = STACKS.replace("    patches: [kimi-k25-eagle3]\n", "    patches: [kimi-k25-eagle3]\n    extra_layers:\n"
                          "      - name: grammar\n        requirements: [\"xgrammar==0.1.27\"]\n")
    stacks_file.write_text(text)
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0510, "0.5.10")
    _, new = _upgraded(stacks_file, d)
    conflicts = [f.message for f in check_stack_pins(new, REQUIRES_0510, "0.5.10") if f.kind == "conflict"]
    assert conflicts == ["pins xgrammar==0.1.27 but sglang 0.5.10 requires 'xgrammar==0.1.32': declare it under "
                         "'overrides' (replaces: xgrammar==0.1.32) or change the pin"]
    reasons = planner.review_reasons(d, conflicts, {}, {}, None)
    assert reasons == (f"needs an override: {conflicts[0]}",)


def test_coverage_change_names_lost_cells_and_ignores_rows_that_left():
    before = {"complete": True, "label": "a", "violations": [], "extensions": [
        {"name": "sgl_kernel.common_ops", "cells": {"9.0": "native", "10.3": "native"}},
        {"name": "gone.so", "cells": {"9.0": "native", "10.3": "ptx"}}]}
    after = {"complete": True, "label": "b", "packages": [], "extensions": [
        {"name": "sgl_kernel.common_ops", "cells": {"9.0": "native", "10.3": "missing"}},
        {"name": "new.so", "cells": {"9.0": "native", "10.3": "native"}}],
        "violations": [{"extension": "sgl_kernel.common_ops", "capability": "10.3", "cell": "missing"}]}
    change = planner.coverage_change(before, after)
    assert change["lost"] == [{"extension": "sgl_kernel.common_ops", "capability": "10.3", "before": "native",
                               "after": "missing"}]
    assert len(change["changes"]) == 5  # common_ops 10.3, gone.so x2 (removed), new.so x2 (added)
    reasons = planner.review_reasons(planner.Derivation({}, (), (), None, "2.39"), (), change, {}, None)
    assert reasons == ("kernel coverage lost: sgl_kernel.common_ops on 10.3 (native -> missing)",)


def test_judge_probe_names_a_renamed_flag():
    out = judge_probe({"flags": ["--model-path", "--speculative-draft-model-path", "--tp-size"],
                       "unknown": ["--speculative-draft-model"], "errors": []},
                      ["--model-path", "m", "--speculative-draft-model", "d"])
    assert out["unknown"] == {"--speculative-draft-model": "--speculative-draft-model-path"}
    assert out["accepted"] is False
    reasons = planner.review_reasons(planner.Derivation({}, (), (), None, "2.39"), (), {}, out, None)
    assert reasons == ("serving flag --speculative-draft-model is not accepted by sglang's parser (renamed to "
                       "--speculative-draft-model-path?)",)


def test_report_markdown_and_json_shape(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0510, "0.5.10")
    _, new = _upgraded(stacks_file, d)
    p = planner.Plan(stack="cu130", new_stack="cu130", from_version="0.5.9", to_version="0.5.10",
                     pins_before=stack.pins(), pins=new.pins(), derivation=d,
                     patches={"kimi-k25-eagle3": "upstream"}, patch_details={"kimi-k25-eagle3": "upstream has it"},
                     conflicts=(), closure={"before_count": 2, "after_count": 2, "counts": {"changed": 1},
                                            "packages": [{"name": "xgrammar", "before": "0.1.27",
                                                          "after": "0.1.32", "kind": "changed"}],
                                            "lock_path": "locks/cu130.txt"},
                     coverage={"checked": False, "why": "test"}, argv={"checked": True, "argv": ["--tp-size", "8"],
                                                                       "accepted": True, "unknown": {}, "errors": [],
                                                                       "flags": 300},
                     lock_error=None, bisect_command=planner.bisect_invocation("cu130", "0.5.9", "0.5.10"))
    doc = to_json(p)
    assert doc["verdict"] == "ready" and p.exit_code == 0
    assert doc["patches"] == {"kimi-k25-eagle3": "upstream"}
    assert {k: doc["pins"][k] for k in ("sglang", "torch", "sglang-kernel", "flashinfer-python")} == {
        "sglang": "0.5.10", "torch": "2.9.1+cu130", "sglang-kernel": "0.4.1+cu130", "flashinfer-python": "0.6.7.post2"}
    assert set(doc) >= {"from", "to", "pins", "patches", "overrides", "coverage", "closure", "argv", "verdict"}
    md = to_markdown(p)
    assert "**Verdict: ready**" in md
    assert "| sgl-kernel | 0.3.21+cu130 | - * |" in md and "| sglang-kernel | - | 0.4.1+cu130 * |" in md
    assert "`invoke bisect --stack cu130 --good 0.5.9 --bad 0.5.10`" in md
    assert "| xgrammar | 0.1.27 | 0.1.32 |" in md


# ---- bad input: one line, exit 2, decided before any fetch ---------------------------------------------

def _inputs(stacks_file, stack="cu130", version="0.5.10", as_name=None):
    return check_inputs(str(stacks_file), stack, version, as_name, False,
                        lambda _name: ["0.5.9", "0.5.10", "0.5.11rc0"])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"stack": "nope"}, "stack 'nope': unknown stack (known: cu130)"),
    ({"version": "0.5.99"}, "--sglang 0.5.99: no such release of sglang on the package index (newest: 0.5.10)"),
    ({"version": "banana"}, "--sglang banana: not a version"),
    ({"version": "0.5.9"}, "stack 'cu130': key 'sglang': --sglang 0.5.9: the stack already pins it"),
    ({"as_name": "cu130"}, "--as cu130: the stack already exists"),
    ({"as_name": "Bad Name"}, "--as Bad Name: stack name"),
])
def test_bad_input_is_one_line_and_exit_2(stacks_file, kwargs, message):
    with pytest.raises(UpgradeInputError) as err:
        _inputs(stacks_file, **kwargs)
    assert err.value.exit_code == 2
    assert message in str(err.value) and "\n" not in str(err.value)


def test_good_input_passes(stacks_file):
    inputs = _inputs(stacks_file, as_name="cu130-next")
    assert (inputs.stack.name, inputs.version, inputs.new_name) == ("cu130", "0.5.10", "cu130-next")


# ---- each decision's words, and the paths the two releases above do not take (issue 27) ----------


def test_each_override_decision_says_why_in_full(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, REQUIRES_0510, "0.5.10")
    assert [o.to_dict() for o in d.overrides] == [
        {"replaces": "flashinfer_python==0.6.3", "pin": "flashinfer-python==0.6.4", "status": "dropped",
         "why": "sglang 0.5.10 now requires 'flashinfer_python==0.6.7.post2'"},
        {"replaces": "flashinfer_cubin==0.6.3", "pin": "flashinfer-cubin==0.6.4", "status": "dropped",
         "why": "sglang 0.5.10 now requires 'flashinfer_cubin==0.6.7.post2'"},
        {"replaces": "cuda-python==12.9", "pin": "cuda-python==13.0.3", "status": "kept",
         "why": "sglang 0.5.10 still requires 'cuda-python==12.9'"}]
    _, d = _derive(stack, [r for r in REQUIRES_0510 if not r.startswith("flashinfer")], "0.5.10")
    assert [o.why for o in d.overrides] == ["sglang 0.5.10 no longer requires it"] * 2 + [
        "sglang 0.5.10 still requires 'cuda-python==12.9'"]


def test_a_torch_an_override_still_pins_stays_and_says_so(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    pinned = stack.model_copy(update={"overrides": (*stack.overrides, stack.overrides[0].model_copy(
        update={"replaces": "torch==2.9.1", "pin": "torch==2.9.0", "reason": "r"}))})
    _, d = _derive(pinned, REQUIRES_0510, "0.5.10")  # 0.5.10 still requires torch==2.9.1: the override stays
    assert "torch" not in d.edits
    assert d.notes[0] == "torch stays 2.9.1+cu130: an override the release still needs pins it"


def test_a_torch_family_member_without_a_version_is_kept_and_asks_for_review(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    _, d = _derive(stack, ["torch==2.14.1", "sglang-kernel==0.4.10"], "0.5.23", family={"torch": "2.14.1"})
    assert d.edits["torch"] == {"version": "2.14.1+cu130"}  # its packages kept as they were: no edit
    assert d.review == ("torchvision: no version found that goes with torch 2.14.1; kept 0.24.1+cu130",
                        "torchaudio: no version found that goes with torch 2.14.1; kept 2.9.1+cu130")


@pytest.mark.parametrize(("filename", "tag"), [
    ("sglang-0.5.23-cp312-cp312-manylinux_2_28_x86_64.manylinux_2_34_x86_64.whl", "manylinux_2_34_x86_64"),
    ("x-1-cp312-cp312-manylinux_2_34_x86_64.manylinux_2_28_x86_64.whl", "manylinux_2_34_x86_64"),
    ("x-1-cp312-abi3-manylinux2014_x86_64.whl", "manylinux2014_x86_64"),
    ("x-1-cp312-abi3-manylinux_2_5_x86_64.manylinux_2_17_x86_64.whl", "manylinux_2_17_x86_64"),  # as numbers
    ("x-1-py3-none-any.whl", "any")])
def test_the_platform_tag_of_a_wheel_is_its_newest(filename, tag):
    assert planner.wheel_platform_tag(filename) == tag


def test_glibc_of_a_tag_and_a_local_label():
    assert planner.glibc_of_tag("manylinux2014_aarch64") == "2.17"
    assert planner.glibc_of_tag("manylinux_2_39_aarch64") == "2.39"
    assert planner.glibc_of_tag("musllinux_1_2_x86_64") is None and planner.glibc_of_tag("any") is None
    assert planner.with_label("1.0", None) == "1.0" and planner.with_label("1.0", "cu130") == "1.0+cu130"


def test_every_note_and_review_line_of_a_derivation_whole(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    renamed = "the kernel package is renamed: sgl-kernel -> sglang-kernel (the import name stays sgl_kernel)"
    url = ("the kernel wheel URL was rewritten for sglang-kernel {v}: https://github.com/sgl-project/whl/releases/"
           "download/v{p}/sglang_kernel-{v}-cp310-abi3-manylinux2014_{{arch}}.whl (check it exists; the lock "
           "and coverage say if it was reachable)")
    _, d = _derive(stack, REQUIRES_0510, "0.5.10")
    assert (d.notes, d.review, d.glibc) == ((renamed, url.format(v="0.4.1+cu130", p="0.4.1")), (), "2.28")
    wheel_234 = "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl"
    _, d = _derive(stack, REQUIRES_0523, "0.5.23", wheel_filename=wheel_234,
                   family={"torch": "2.14.1", "torchvision": "0.29.2", "torchaudio": "2.11.0"})
    assert d.notes == (renamed, url.format(v="0.4.10+cu130", p="0.4.10"),
                       "flashinfer-cubin dropped: sglang 0.5.23 does not require it (FlashInfer JIT-compiles "
                       "what no cubin covers)",
                       "sglang 0.5.23's wheels need glibc 2.34 (manylinux_2_34_x86_64): glibc 2.39 (the base "
                       "image's) is declared, and the lock resolves for manylinux_2_39")
    assert d.review == () and d.glibc == d.edits["glibc"] == "2.39"
    assert d.edits["description"] == ("CUDA 13.0.1, PyTorch 2.14.1+cu130, sglang-kernel 0.4.10+cu130, "
                                      "FlashInfer 0.7.2, SGLang 0.5.23")
    # a base with exactly the glibc the wheel needs is enough; one older, or unknown, asks for review
    family = {"torch": "2.14.1", "torchvision": "0.29.2", "torchaudio": "2.11.0"}
    _, d = _derive(stack, REQUIRES_0523, "0.5.23", wheel_filename=wheel_234, family=family, base_glibc="2.34")
    assert d.glibc == d.edits["glibc"] == "2.34" and d.review == ()
    _, d = _derive(stack, REQUIRES_0523, "0.5.23", wheel_filename=wheel_234, family=family, base_glibc="2.31")
    assert d.review == ("sglang 0.5.23's wheels need glibc 2.34 (manylinux_2_34_x86_64); the base image has 2.31",)
    assert d.glibc == "2.28" and "glibc" not in d.edits
    _, d = _derive(stack, REQUIRES_0523, "0.5.23", wheel_filename=wheel_234, family=family, base_glibc=None)
    assert d.review == ("sglang 0.5.23's wheels need glibc 2.34 (manylinux_2_34_x86_64); the base image is not "
                        "known: declare `glibc:`",)
    # a wheel for the baseline itself needs nothing declared
    _, d = _derive(stack, REQUIRES_0523, "0.5.23", wheel_filename="s-1-cp312-cp312-manylinux_2_28_x86_64.whl",
                   family=family)
    assert "glibc" not in d.edits and d.glibc == "2.28" and d.review == ()


def test_a_release_without_a_known_kernel_and_drifted_patches_ask_for_review(stacks_file):
    stack = load_matrix(stacks_file, patches_dir=Path("patches")).get("cu130")
    stack = stack.model_copy(update={"patches": ("kimi-k25-eagle3", "other-patch")})
    _, d = _derive(stack, [r for r in REQUIRES_0510 if "kernel" not in r], "0.5.10",
                   patch_status={"kimi-k25-eagle3": planner.DRIFTED, "other-patch": planner.DRIFTED})
    assert d.review == ("sglang 0.5.10 requires no kernel package the stack knows; the stack pins "
                        "sgl-kernel==0.3.21+cu130",
                        "patch(es) drifted against sglang 0.5.10: kimi-k25-eagle3, other-patch")
    assert "sgl_kernel" not in d.edits and d.notes == ()
    assert d.edits["description"] == ("CUDA 13.0.1, PyTorch 2.9.1+cu130, sgl-kernel 0.3.21+cu130, "
                                      "FlashInfer 0.6.7.post2, SGLang 0.5.10")
