"""The constructed EAGLE-3 draft (benchmarks/field_model.py --draft constructed, benchmarks/field_draft.py): made
here for a small field target, and checked on the CPU by a re-implementation of the target's forward and of
SGLang 0.5.17's EAGLE-3 draft steps, before any GPU time: the target's greedy next token is the permutation, and
the draft proposes it at every step, 3 and 7 steps deep."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "field_model.py"


def _field_draft():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import field_draft  # benchmarks/ is not a package
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return field_draft


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("field-constructed")
    corpus = [REPO / "README.md", REPO / "sglstack" / "smoke" / "workload.py"]
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "--size", "tiny", "--seed", "4242",
                           "--draft", "constructed", "--corpus", *map(str, corpus)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_making_it_runs_the_check_and_records_it(made):
    summary = json.loads((made / "field-model.json").read_text())
    assert summary["draft"] == "constructed"
    check = summary["draft_check"]
    assert check["passed"] is True and check["wrong"] == []
    assert check["target_is_permutation"] == check["positions"] == 22 * 64
    assert check["proposals"] == {"3": [66, 66], "7": [154, 154]}


def test_the_cpu_check_passes_for_3_and_7_steps_on_random_and_repeating_contexts(made):
    fd = _field_draft()
    result = fd.check_model_dir(made, count=10, length=48, steps=(3, 7))
    assert result["passed"] is True
    assert result["proposals"] == {"3": [36, 36], "7": [84, 84]}
    assert result["target_is_permutation"] == result["positions"] == 12 * 48
    # Not by a hair: the draft's top logit leads by far more than float16 rounding could move it.
    assert result["draft_margin"] > 5 and result["max_leak"] < 0.01


def test_it_holds_even_if_the_server_ignored_norm_output(made):
    """norm_output makes the cancellation exact; without it the leftover is small and every proposal is right."""
    result = _field_draft().check_model_dir(made, count=5, length=32, norm_output=False)
    assert result["passed"] is True and result["proposals"] == {"3": [21, 21], "7": [49, 49]}


def test_the_check_fails_a_draft_whose_head_is_off_by_one_row(made):
    """The check is no tautology: a draft whose lm_head rows are rolled by one proposes the wrong token."""
    fd = _field_draft()
    cfg = json.loads((made / "target" / "config.json").read_text())
    dcfg = json.loads((made / "draft" / "config.json").read_text())
    target = load_file(str(made / "target" / "model.safetensors"))
    draft = dict(load_file(str(made / "draft" / "model.safetensors")))
    draft["lm_head.weight"] = np.roll(draft["lm_head.weight"], 1, axis=0)
    contexts = fd.field_contexts(cfg, target, [], 3, 16)
    result = fd.check(cfg, target, dcfg, draft, contexts, steps=(3,))
    assert result["passed"] is False
    assert result["target_is_permutation"] == result["positions"]  # the target is still the permutation
    assert result["proposals"] == {"3": [0, 15]}
    assert fd.summary_line(result).startswith("FAIL: target greedy = permutation at 80/80 positions of 5 contexts; "
                                              "draft proposals right: 3 steps 0/15;")


def test_the_draft_is_the_construction_sglang_loads(made):
    cfg = json.loads((made / "target" / "config.json").read_text())
    dcfg = json.loads((made / "draft" / "config.json").read_text())
    w = load_file(str(made / "draft" / "model.safetensors"))
    v, h = cfg["vocab_size"], cfg["hidden_size"]
    assert (dcfg["architectures"], dcfg["num_hidden_layers"], dcfg["draft_vocab_size"], dcfg["norm_output"]) == (
        ["LlamaForCausalLMEagle3"], 1, v, True)
    assert dcfg["tie_word_embeddings"] is False and dcfg["target_hidden_size"] == h
    # Draft vocabulary = the whole vocabulary: d2t all 0 (draft id = target id), t2d all true.
    assert w["d2t"].dtype == np.int64 and not w["d2t"].any() and w["t2d"].all() and w["t2d"].shape == (v,)
    assert w["lm_head.weight"].shape == (v, h)
    # Nothing of the target's features and no MLP: exact zeros.
    for name in ("fc.weight", "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight",
                 "midlayer.mlp.down_proj.weight"):
        assert not w[name].any(), name
    # The same KV shape as the target: the draft's attention is the target's layout (heads, head_dim).
    assert w["midlayer.self_attn.k_proj.weight"].shape == (cfg["num_key_value_heads"] * cfg["head_dim"], 2 * h)
    # Head row j is the (unit, scaled) code of the token before j in the target's permutation.
    target = load_file(str(made / "target" / "model.safetensors"))
    successor = _field_draft().successor_of(target)
    assert sorted(successor.tolist()) == list(range(v))
    head = w["lm_head.weight"].astype(np.float32)
    embed = target["model.embed_tokens.weight"].astype(np.float32)
    token = int(np.flatnonzero(successor != np.arange(v))[0])
    row = head[successor[token]]
    assert np.corrcoef(row[row != 0], embed[token][row != 0])[0, 1] > 0.999


def test_the_default_draft_stays_random(tmp_path):
    corpus = [REPO / "README.md", REPO / "sglstack" / "smoke" / "workload.py"]
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--size", "tiny", "--corpus", *map(str, corpus)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "field-model.json").read_text())
    assert summary["draft"] == "random" and "draft_check" not in summary
    assert json.loads((tmp_path / "draft" / "config.json").read_text())["draft_vocab_size"] < summary["vocab_size"]
