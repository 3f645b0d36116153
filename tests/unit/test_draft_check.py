"""The draft check (issue 41): a draft that cannot fit its target or the serving flags is refused before any
server starts, one line per mismatch; each class of mismatch has a config here, and a fitting draft none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from draft_fixtures import DRAFT, MAPS, TARGET, model_folder, write_safetensors

from sglstack.config.settings import SpeculativeSettings
from sglstack.core.errors import ConfigError
from sglstack.serving import DraftMismatch, Mount, draft_check, draft_mismatches, require_draft_fits, serving_spec
from sglstack.serving.draftfiles import host_folder, map_shapes
from sglstack.serving.spec import ServingSpec


def check(target=None, draft=None, *, algorithm="EAGLE3", extra_args=(), shapes=None):
    return draft_mismatches(TARGET if target is None else target, DRAFT if draft is None else draft,
                            algorithm=algorithm, extra_args=extra_args,
                            draft_shapes={k: v[1] for k, v in MAPS.items()} if shapes is None else shapes)


def test_a_fitting_eagle3_draft_has_no_mismatch():
    assert check() == []
    assert check(extra_args=("--context-length", "8192")) == []


def test_an_eagle3_draft_served_as_eagle_is_named_the_silent_accept_length_1_case():
    line = ("architecture LlamaForCausalLMEagle3 is an EAGLE-3 draft, but --speculative-algorithm is EAGLE: SGLang "
            "runs it without its auxiliary hidden states and accepts none of its tokens (accept length 1.0); use "
            "EAGLE3")
    assert check(algorithm="EAGLE") == [line]
    assert check(algorithm="NEXTN") == [line.replace("is EAGLE:", "is NEXTN:")]  # SGLang resolves NEXTN to EAGLE


def test_an_eagle_draft_served_as_eagle3_is_refused():
    draft = {**DRAFT, "architectures": ["LlamaForCausalLMEagle"]}
    assert check(draft=draft) == [
        "architecture LlamaForCausalLMEagle is not an EAGLE-3 draft, but --speculative-algorithm is EAGLE3 (an EAGLE "
        "draft needs EAGLE; an EAGLE-3 draft's architecture ends in Eagle3)"]
    assert check(draft={k: v for k, v in DRAFT.items() if k != "architectures"})[0].startswith(
        "architecture none is not an EAGLE-3 draft")


def test_a_hidden_size_that_is_not_the_targets_is_refused():
    assert check(draft={**DRAFT, "target_hidden_size": 5120}) == [
        "target_hidden_size 5120, but the target's hidden_size is 4096"]
    no_target_width = {k: v for k, v in DRAFT.items() if k != "target_hidden_size"}
    assert check(draft={**no_target_width, "hidden_size": 2048}) == ["hidden_size 2048, but the target's hidden_size "
                                                                      "is 4096"]
    # An EAGLE (not -3) draft runs at the target's own width.
    eagle = {**no_target_width, "architectures": ["LlamaForCausalLMEagle"], "hidden_size": 3072}
    assert check(draft=eagle, algorithm="EAGLE") == ["hidden_size 3072, but the target's hidden_size is 4096"]


def test_a_vocabulary_that_is_not_the_targets_is_refused():
    assert check(draft={**DRAFT, "vocab_size": 32000}) == [
        "vocab_size 32000, but the target's vocab_size is 128256 (the draft takes the target's embedding)"]
    assert check(draft={**DRAFT, "draft_vocab_size": 200000},
                 shapes={"d2t": (200000,), "t2d": (128256,)}) == [
        "draft_vocab_size 200000 is larger than the target's vocab_size 128256"]


def test_d2t_and_t2d_shapes_are_held_to_the_two_vocabularies():
    assert check(shapes={"d2t": (16000,), "t2d": (128256,)}) == [
        "tensor d2t has shape [16000], but draft_vocab_size is 32000"]
    assert check(shapes={"d2t": (32000,), "t2d": (152064,)}) == [
        "tensor t2d has shape [152064], but the target's vocab_size is 128256"]
    assert check(shapes={}) == [
        "draft_vocab_size 32000 is smaller than the target's vocab_size 128256, and the draft's weights hold no d2t "
        "map from draft to target token ids"]


def test_a_draft_trained_for_a_shorter_context_than_the_served_one_is_refused():
    short = {**DRAFT, "max_position_embeddings": 2048}
    line = ("max_position_embeddings 2048, but the server serves a context of {} tokens (past its trained context "
            "the draft's proposals are rejected: set --context-length 2048 in serving.extra_args, or use a draft "
            "trained for the context)")
    assert check(draft=short) == [line.format(8192)]  # the target's own context, when the flags set none
    assert check(draft=short, extra_args=("--context-length=4096",)) == [line.format(4096)]
    assert check(draft=short, extra_args=("--context-length", "2048")) == []
    # SGLang reads the value with its human_readable_int: 4k is 4000, 4Ki 4096
    assert check(draft=short, extra_args=("--context-length", "4Ki")) == [line.format(4096)]
    assert check(draft=short, extra_args=("--context-length=2.5k",)) == [line.format(2500)]
    assert check(draft=short, extra_args=("--context-length", "2.5Ki")) == []  # SGLang refuses it, in its words



@pytest.mark.parametrize("value", ["\u00b2", "9" * 5000, "9" * 5000 + "k"], ids=["superscript", "digits", "digits-k"])
def test_a_context_length_int_cannot_read_is_left_to_sglang_never_a_traceback(value):
    """'²' passes str.isdigit() and int() refuses it; int() refuses past 4300 digits: both were a ValueError
    traceback out of `smoke` and `stacks --check`."""
    short = {**DRAFT, "max_position_embeddings": 2048}
    assert check(draft=short, extra_args=("--context-length", value)) == []  # SGLang refuses it, in its words


def test_aux_layer_ids_past_the_targets_layers_are_refused():
    draft = {**DRAFT, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 31, 40]}}
    assert check(draft=draft) == [
        "eagle_aux_hidden_state_layer_ids [1, 31, 40]: 31, 40 not a layer of the target, which has 32 layers (SGLang "
        "captures id i at layer i + 1: ids run 0..30)"]
    top_level = {**{k: v for k, v in DRAFT.items() if k != "eagle_config"}, "eagle_aux_hidden_state_layer_ids": [-1]}
    assert check(draft=top_level)[0].startswith("eagle_aux_hidden_state_layer_ids [-1]: -1 not a layer")


def test_a_multimodal_target_is_read_through_its_text_config():
    target = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": TARGET}
    assert check(target=target) == []
    assert check(target=target, draft={**DRAFT, "target_hidden_size": 7168}) == [
        "target_hidden_size 7168, but the target's hidden_size is 4096"]


def test_every_mismatch_is_a_line_of_its_own():
    draft = {**DRAFT, "hidden_size": 5120, "vocab_size": 32000, "max_position_embeddings": 2048}
    assert [line.split(" ", 1)[0] for line in check(draft=draft, algorithm="EAGLE")] == [
        "architecture", "hidden_size", "vocab_size", "max_position_embeddings"]


# ---- the files: where they are, and the safetensors headers ------------------------------------------------


def _spec(tmp_path, *, algorithm="EAGLE3", mounts=()) -> ServingSpec:
    spec = serving_spec(None, _overrides(tmp_path, algorithm))
    return spec if not mounts else ServingSpec(**{**spec.__dict__, "mounts": tuple(mounts)})


def _overrides(tmp_path, algorithm):
    from sglstack.serving import ServingOverrides
    return ServingOverrides(model=str(tmp_path / "target"), draft_model=str(tmp_path / "draft"),
                            speculative_algorithm=algorithm, gpus=0)


def test_the_files_are_read_and_each_mismatch_is_refused_in_a_line_naming_the_draft(tmp_path):
    model_folder(tmp_path / "target", TARGET)
    model_folder(tmp_path / "draft", {**DRAFT, "max_position_embeddings": 2048},
                 {"midlayer.self_attn.q_proj.weight": ("F16", (4, 4)), "d2t": ("I64", (1000,)),
                  "t2d": MAPS["t2d"]})
    with pytest.raises(DraftMismatch) as err:
        require_draft_fits(_spec(tmp_path, algorithm="EAGLE"), container=False, env={})
    where = f"draft {tmp_path}/draft ({tmp_path}/draft) against target {tmp_path}/target: "
    assert err.value.exit_code == 2
    assert [line.removeprefix(where).split(" ", 1)[0] for line in err.value.lines] == [
        "architecture", "tensor", "max_position_embeddings"]
    assert all(line.startswith(where) for line in err.value.lines)


def test_a_fitting_draft_on_disk_passes_and_models_not_at_hand_are_not_checked(tmp_path):
    # no files here for a container (the image or the node may hold them): nothing to read
    assert draft_check(_spec(tmp_path), container=True, env={}) == []
    model_folder(tmp_path / "target", TARGET)
    model_folder(tmp_path / "draft", DRAFT, MAPS)
    require_draft_fits(_spec(tmp_path), container=False, env={})
    assert draft_check(_spec(tmp_path).baseline(), container=False, env={}) == []


def test_a_container_path_is_found_through_its_mount_and_a_repo_id_in_the_hf_cache(tmp_path):
    spec = _spec(tmp_path, mounts=[Mount(source=str(tmp_path / "host"), target="/models")])
    assert host_folder(spec, "/models/field/draft", container=True, env={}) == tmp_path / "host" / "field" / "draft"
    assert host_folder(spec, "/elsewhere/draft", container=True, env={}) == Path("/elsewhere/draft")
    repo = tmp_path / "hub" / "models--org--draft"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123\n")
    assert host_folder(spec, "org/draft", container=True, env={"HF_HUB_CACHE": str(tmp_path / "hub")}) == (
        repo / "snapshots" / "abc123")


def test_safetensors_headers_are_read_without_the_weights(tmp_path):
    write_safetensors(tmp_path / "a.safetensors", {"model.d2t": ("I64", (7,)), "w": ("F16", (2, 3))})
    assert map_shapes(tmp_path) == {"d2t": (7,)}
    (tmp_path / "b.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(ConfigError) as err:
        map_shapes(tmp_path)
    assert str(err.value) == f"{tmp_path}/b.safetensors: is not a safetensors file (no header length)"


def test_speculative_settings_used_here_are_the_stacks():
    assert set(SpeculativeSettings.model_fields) >= {"algorithm", "draft_model"}


# ---- files that are there but cannot be read as a model, and folders that are not there -----------------------


def test_a_draft_folder_missing_for_the_process_runner_is_refused_and_one_for_a_container_is_not(tmp_path):
    """The process runner's server loads the paths on this machine: SGLang would take a missing one for a repo id
    and fail, the draft after the target has loaded."""
    model_folder(tmp_path / "target", TARGET)
    with pytest.raises(DraftMismatch) as err:
        require_draft_fits(_spec(tmp_path), container=False, env={})
    assert err.value.lines == (f"draft {tmp_path}/draft: no folder {tmp_path}/draft on this machine (the process "
                               "runner's server would fail to load it)",)
    assert draft_check(_spec(tmp_path), container=True, env={}) == []


@pytest.mark.parametrize("names", ["LlamaForCausalLMEagle3", 5, {"a": 1}])
def test_architectures_that_are_not_a_list_is_one_line(names):
    """A string was read letter by letter ("architecture L, l, a, ..."), a number was a TypeError traceback."""
    lines = check(draft={**DRAFT, "architectures": names})
    assert lines == [f"architectures {json.dumps(names)} is not a list of class names"]


def test_a_symlink_loop_is_one_line_naming_the_file_never_a_traceback_nor_silence(tmp_path):
    model_folder(tmp_path / "target", TARGET)
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").symlink_to("config.json")  # was: not a file, so nothing checked
    with pytest.raises(ConfigError) as err:
        draft_check(_spec(tmp_path), container=False, env={})
    assert str(err.value) == f"{tmp_path}/draft/config.json: cannot be read (Too many levels of symbolic links)"
    (tmp_path / "draft" / "config.json").unlink()
    model_folder(tmp_path / "draft", DRAFT)
    (tmp_path / "draft" / "model.safetensors").symlink_to("model.safetensors")  # was: an OSError traceback
    with pytest.raises(ConfigError) as err:
        draft_check(_spec(tmp_path), container=False, env={})
    assert str(err.value) == (f"{tmp_path}/draft/model.safetensors: cannot be read (Too many levels of symbolic "
                              "links)")
