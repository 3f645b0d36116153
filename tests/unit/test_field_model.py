"""benchmarks/field_model.py makes the field run's models here: a Llama target and an EAGLE-3 draft in the
files and weight names SGLang 0.5.17 loads (its llama.py and llama_eagle3.py), with a tokenizer of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from sglstack.smoke.workload import PROMPTS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "field_model.py"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("field-model")
    serving = REPO / "sglstack" / "serving"
    corpus = [REPO / "README.md", serving / "spec.py", serving / "derive.py", REPO / "sglstack/smoke/workload.py"]
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "--size", "tiny", "--corpus", *map(str, corpus)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def _sglang_param_name(name: str) -> str:
    """The parameter a draft weight lands in, as LlamaForCausalLMEagle3.load_weights maps it (0.5.17)."""
    name = name.replace("midlayer", "layers.0")
    for shard, fused in ((".q_proj", ".qkv_proj"), (".k_proj", ".qkv_proj"), (".v_proj", ".qkv_proj"),
                         (".gate_proj", ".gate_up_proj"), (".up_proj", ".gate_up_proj")):
        name = name.replace(shard, fused)
    return name if name == "lm_head.weight" else f"model.{name}"


def test_the_draft_is_what_sglangs_eagle3_loader_takes(made):
    target_cfg = json.loads((made / "target" / "config.json").read_text())
    cfg = json.loads((made / "draft" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["vocab_size"] == target_cfg["vocab_size"] and cfg["draft_vocab_size"] < cfg["vocab_size"]
    assert cfg["tie_word_embeddings"] is False  # else SGLang would use the embedding as the draft's head
    w = load_file(str(made / "draft" / "model.safetensors"))
    h, dv, v = cfg["hidden_size"], cfg["draft_vocab_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    # The input layer's attention reads the token embedding and the fused target features side by side.
    assert w["midlayer.self_attn.q_proj.weight"].shape == (q, 2 * h)
    assert w["midlayer.self_attn.k_proj.weight"].shape == w["midlayer.self_attn.v_proj.weight"].shape == (kv, 2 * h)
    assert w["fc.weight"].shape == (h, 3 * target_cfg["hidden_size"])  # three auxiliary hidden states
    assert w["lm_head.weight"].shape == (dv, h)
    assert "embed_tokens.weight" not in w and "model.embed_tokens.weight" not in w
    mapped = {_sglang_param_name(n) for n in w if n not in ("d2t", "t2d")}
    assert mapped == {
        "model.fc.weight", "model.norm.weight", "lm_head.weight",
        *(f"model.layers.0.{p}.weight" for p in ("hidden_norm", "input_layernorm", "post_attention_layernorm",
                                                 "self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj",
                                                 "mlp.down_proj")),
    }
    # d2t: draft id + d2t[draft id] = target id (SGLang's hot_token_id); t2d marks the same target ids.
    hot = w["d2t"] + np.arange(dv)
    assert w["d2t"].dtype == np.int64 and w["t2d"].dtype == np.bool_ and w["t2d"].shape == (v,)
    assert len(set(hot.tolist())) == dv and hot.min() >= 0 and hot.max() < v
    assert set(np.flatnonzero(w["t2d"]).tolist()) == set(hot.tolist())


def test_the_target_is_a_llama_whose_greedy_token_has_a_wide_margin(made):
    cfg = json.loads((made / "target" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] >= 8
    # SGLang's default EAGLE-3 capture layers must be three distinct layers for fc's 3 x hidden input.
    n = cfg["num_hidden_layers"]
    assert len({2, n // 2, n - 3}) == 3
    w = load_file(str(made / "target" / "model.safetensors"))
    assert w["model.embed_tokens.weight"].shape == w["lm_head.weight"].shape == (cfg["vocab_size"], cfg["hidden_size"])
    assert {f"model.layers.{n - 1}.self_attn.q_proj.weight", f"model.layers.{n - 1}.mlp.down_proj.weight"} <= set(w)
    embed = w["model.embed_tokens.weight"].astype(np.float32)
    logits = (embed / np.sqrt((embed**2).mean(axis=1, keepdims=True))) @ w["lm_head.weight"].astype(np.float32).T
    top2 = np.sort(logits, axis=1)[:, -2:]
    # The head alone picks the next token by a margin far beyond fp16 noise (the layers add ~2% per layer).
    assert (top2[:, 1] - top2[:, 0]).min() > 10
    specials = [json.loads((made / "target" / "tokenizer.json").read_text())["added_tokens"][i]["id"] for i in range(5)]
    assert all(int(np.argmax(logits[s])) == s for s in specials)  # EOS is never the successor of a prompt token
    assert sorted(np.argmax(logits, axis=1).tolist()) == list(range(cfg["vocab_size"]))  # a permutation


def test_the_tokenizer_is_its_own_and_round_trips_the_smoke_prompts(made):
    tokenizer = Tokenizer.from_file(str(made / "target" / "tokenizer.json"))
    config = json.loads((made / "target" / "tokenizer_config.json").read_text())
    assert tokenizer.get_vocab_size() == json.loads((made / "target" / "config.json").read_text())["vocab_size"]
    for prompt in PROMPTS:
        encoding = tokenizer.encode(prompt)
        assert encoding.ids[0] == tokenizer.token_to_id(config["bos_token"])
        assert tokenizer.decode(encoding.ids) == prompt
    assert "<|start_header_id|>" in config["chat_template"] and "add_generation_prompt" in config["chat_template"]
    assert (made / "draft" / "tokenizer.json").read_bytes() == (made / "target" / "tokenizer.json").read_bytes()


def test_the_small_size_stays_a_few_megabytes():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import field_model  # the script itself, for its size table (benchmarks/ is not a package)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    size = field_model.SIZES["small"]
    per_layer = (size.hidden_size * (2 * size.num_attention_heads + 2 * size.num_key_value_heads) * size.head_dim
                 + 3 * size.hidden_size * size.intermediate_size)
    target_bytes = 2 * (2 * size.vocab_size * size.hidden_size + size.num_hidden_layers * per_layer)
    assert target_bytes < 8_000_000
