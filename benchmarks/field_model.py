"""Make a small Llama target and an EAGLE-3 draft for it, here, with random weights: no download.

    python3 benchmarks/field_model.py OUT [--size small|tiny] [--corpus FILE ...] [--seed N]
                                      [--draft random|constructed]

OUT/target  LlamaForCausalLM: config.json, model.safetensors, generation_config.json and its own tokenizer
            (byte-level BPE trained with `tokenizers` on local text: this repository's docs and sources
            unless --corpus names files), tokenizer.json + tokenizer_config.json with a Llama-3-style chat
            template.
OUT/draft   LlamaForCausalLMEagle3 as SGLang 0.5.17 loads it (sglang/srt/models/llama_eagle3.py): one
            decoder layer under the legacy name `midlayer`, whose q/k/v take 2 x hidden (token embedding
            and the fused target features), `fc` from 3 x the target's hidden size (three auxiliary hidden
            states), `hidden_norm`, `norm`, an `lm_head` over a draft vocabulary smaller than the target's,
            and the `d2t` (draft id -> target id, stored as the difference) and `t2d` (target id -> in the
            draft vocabulary) maps. No embed_tokens: SGLang gives the draft the target's embedding.

The weights are random, with one choice made on purpose: the target's head is its own embedding under a
random permutation of the ordinary tokens and the decoder layers add only a small random perturbation, so
the greedy next token has a wide logit margin. Whether EAGLE-3's output equals the baseline's token for
token then tests speculative decoding itself (draft, verify, accept, the d2t map), not which of two
near-equal logits fp16 rounding happens to favour in a decode kernel versus a verify (extend) kernel. The
draft is fully random, so its accept length is near 1, as expected.

`--draft constructed` makes instead the draft that computes the target's permutation (benchmarks/field_draft.py
says how, against SGLang 0.5.17's EAGLE-3 code): every proposal is the target's token, so the accept length is
the number of draft steps plus one. Before anything is written as done, a CPU check (numpy, field_draft.check)
re-implements the target and the EAGLE-3 draft steps and proves it on random contexts for 3 and 7 steps; a
failed check exits 1. The check's figures go into OUT/field-model.json.

Needs numpy, safetensors and tokenizers (no torch): weights are written as float16 safetensors.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import field_draft  # benchmarks/ is not a package

BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
HEADER_START, HEADER_END = "<|start_header_id|>", "<|end_header_id|>"
SPECIAL_TOKENS = [BOS, EOS, HEADER_START, HEADER_END, EOT]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Size:
    vocab_size: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    num_hidden_layers: int  # >= 8: SGLang's default EAGLE-3 capture layers [2, n//2, n-3] are then distinct
    draft_vocab_size: int
    max_position_embeddings: int = 4096


SIZES = {
    # About 3.5 MB of target weights and 0.6 MB of draft: small enough to travel with the working tree.
    "small": Size(2048, 128, 2, 1, 64, 256, 8, 512),
    # For the test: seconds to make, the same shapes and names.
    "tiny": Size(320, 64, 1, 1, 64, 64, 8, 64),
}
LAYER_STD = 0.02


def default_corpus() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "sglstack").rglob("*.py"))]
    return [f for f in files if f.is_file()]


def train_tokenizer(corpus: list[Path], vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(f) for f in corpus], trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tokenizer


def tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "pad_token": EOS,
        "add_bos_token": True,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float16)


def _ones(n: int) -> np.ndarray:
    return np.ones((n,), dtype=np.float16)


def target_weights(size: Size, special_ids: list[int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    h, hd, v = size.hidden_size, size.head_dim, size.vocab_size
    q, kv = size.num_attention_heads * hd, size.num_key_value_heads * hd
    embed = _normal(rng, (v, h), 1.0)
    # Next token = a fixed random permutation of the current one (specials map to themselves, so EOS is never
    # chosen and every request runs to max_new_tokens): the head row j is the embedding of perm^-1(j).
    ordinary = np.array([i for i in range(v) if i not in set(special_ids)])
    successor = np.arange(v)
    successor[ordinary] = rng.permutation(ordinary)
    head = np.empty_like(embed)
    head[successor] = embed
    weights = {"model.embed_tokens.weight": embed, "lm_head.weight": head, "model.norm.weight": _ones(h)}
    for i in range(size.num_hidden_layers):
        p = f"model.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": _ones(h),
            p + "post_attention_layernorm.weight": _ones(h),
            p + "self_attn.q_proj.weight": _normal(rng, (q, h), LAYER_STD),
            p + "self_attn.k_proj.weight": _normal(rng, (kv, h), LAYER_STD),
            p + "self_attn.v_proj.weight": _normal(rng, (kv, h), LAYER_STD),
            p + "self_attn.o_proj.weight": _normal(rng, (h, q), LAYER_STD),
            p + "mlp.gate_proj.weight": _normal(rng, (size.intermediate_size, h), LAYER_STD),
            p + "mlp.up_proj.weight": _normal(rng, (size.intermediate_size, h), LAYER_STD),
            p + "mlp.down_proj.weight": _normal(rng, (h, size.intermediate_size), LAYER_STD),
        }
    return weights


def draft_weights(size: Size, rng: np.random.Generator) -> dict[str, np.ndarray]:
    h, hd, v, dv = size.hidden_size, size.head_dim, size.vocab_size, size.draft_vocab_size
    q, kv = size.num_attention_heads * hd, size.num_key_value_heads * hd
    # The draft vocabulary: dv target ids, in order; d2t holds target id - draft id (SGLang adds arange back).
    hot = np.sort(rng.choice(v, size=dv, replace=False))
    t2d = np.zeros((v,), dtype=bool)
    t2d[hot] = True
    p = "midlayer."
    return {
        "d2t": (hot - np.arange(dv)).astype(np.int64),
        "t2d": t2d,
        "fc.weight": _normal(rng, (h, 3 * h), LAYER_STD),
        p + "hidden_norm.weight": _ones(h),
        p + "input_layernorm.weight": _ones(h),
        p + "post_attention_layernorm.weight": _ones(h),
        p + "self_attn.q_proj.weight": _normal(rng, (q, 2 * h), LAYER_STD),
        p + "self_attn.k_proj.weight": _normal(rng, (kv, 2 * h), LAYER_STD),
        p + "self_attn.v_proj.weight": _normal(rng, (kv, 2 * h), LAYER_STD),
        p + "self_attn.o_proj.weight": _normal(rng, (h, q), LAYER_STD),
        p + "mlp.gate_proj.weight": _normal(rng, (size.intermediate_size, h), LAYER_STD),
        p + "mlp.up_proj.weight": _normal(rng, (size.intermediate_size, h), LAYER_STD),
        p + "mlp.down_proj.weight": _normal(rng, (h, size.intermediate_size), LAYER_STD),
        "norm.weight": _ones(h),
        "lm_head.weight": _normal(rng, (dv, h), 1.0),
    }


def llama_config(size: Size, ids: dict[str, int], **extra: object) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": size.hidden_size,
        "intermediate_size": size.intermediate_size,
        "num_attention_heads": size.num_attention_heads,
        "num_key_value_heads": size.num_key_value_heads,
        "head_dim": size.head_dim,
        "num_hidden_layers": size.num_hidden_layers,
        "vocab_size": size.vocab_size,
        "max_position_embeddings": size.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOT],
        "pad_token_id": ids[EOS],
        **extra,
    }


DRAFTS = ("random", "constructed")


def make(out: Path, size_name: str, corpus: list[Path], seed: int, draft_kind: str = "random") -> dict[str, object]:
    size = SIZES[size_name]
    if not corpus:
        raise SystemExit("field_model: no corpus files to train the tokenizer on")
    tokenizer = train_tokenizer(corpus, size.vocab_size)
    if tokenizer.get_vocab_size() != size.vocab_size:
        raise SystemExit(f"field_model: the corpus gave {tokenizer.get_vocab_size()} tokens, not {size.vocab_size}")
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}
    rng = np.random.default_rng(seed)
    target, draft = out / "target", out / "draft"
    for folder in (target, draft):
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
    weights = target_weights(size, list(ids.values()), rng)
    target_config = llama_config(size, ids)
    save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    (target / "config.json").write_text(json.dumps(target_config, indent=2) + "\n")
    (target / "generation_config.json").write_text(
        json.dumps({"bos_token_id": ids[BOS], "eos_token_id": [ids[EOT], ids[EOS]]}, indent=2) + "\n")
    check: dict[str, object] | None = None
    if draft_kind == "constructed":
        draft_w = field_draft.constructed_draft(target_config, weights)
        draft_config = llama_config(size, ids, **field_draft.draft_config_extra(target_config))
        contexts = field_draft.field_contexts(target_config, weights, list(ids.values()), 20, 64)
        check = field_draft.check(target_config, weights, draft_config, draft_w, contexts)
        print(f"field_model: constructed draft: {field_draft.summary_line(check)}")
    else:
        draft_w = draft_weights(size, rng)
        draft_config = llama_config(size, ids, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                                    draft_vocab_size=size.draft_vocab_size, target_hidden_size=size.hidden_size)
    save_file(draft_w, str(draft / "model.safetensors"), metadata={"format": "pt"})
    (draft / "config.json").write_text(json.dumps(draft_config, indent=2) + "\n")
    summary = {"size": size_name, **asdict(size), "seed": seed, "draft": draft_kind, "corpus_files": len(corpus),
               "bytes": {p.parent.name + "/" + p.name: p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}}
    if check is not None:
        summary["draft_check"] = check
    (out / "field-model.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--corpus", type=Path, nargs="*", default=None)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--draft", choices=DRAFTS, default="random",
                        help="random weights, or the draft constructed to propose the target's token")
    args = parser.parse_args(argv)
    summary = make(args.out, args.size, args.corpus if args.corpus else default_corpus(), args.seed, args.draft)
    total = sum(summary["bytes"].values())  # type: ignore[union-attr]
    print(f"field_model: {args.out} ({args.size}, {args.draft} draft, {total / 1e6:.1f} MB)")
    check = summary.get("draft_check")
    return 1 if isinstance(check, dict) and not check["passed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
