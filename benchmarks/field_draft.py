"""The constructed EAGLE-3 draft for the field target, and a CPU check (numpy) that it proposes the target's token.

    python3 benchmarks/field_draft.py check MODEL_DIR [--contexts N] [--length L] [--steps 3,7]

The field target (benchmarks/field_model.py) picks, greedily, a fixed permutation of the current token: its head
row j is the embedding of the token whose successor is j, and its layers add only a small perturbation. So a
draft need not be trained: it can compute the permutation. How SGLang 0.5.17 computes one EAGLE-3 draft step
(sglang/srt/models/llama_eagle3.py, its LlamaDecoderLayer on llama.py's attention and MLP):

    e = input_layernorm(embed(token))            embed: the TARGET's embed_tokens (the worker shares it)
    r = hidden                                   hidden: fc(3 aux states of the target), or the previous step's aux
    x = [e, hidden_norm(r)]                      2 x hidden wide
    a = o_proj(attention(rope(q(x)), rope(k(x)), v(x)))   over the draft's KV cache, causal
    r = r + a;  m = mlp(post_attention_layernorm(r));  r = r + m
    logits = lm_head(norm(r));  proposal = hot_token_id[argmax]  (hot_token_id = d2t + arange)
    aux (the next step's hidden) = norm(r) if config.norm_output else r

The construction (all exact zeros and identities; no random weight):
- fc = 0: at the first step (draft extend) r = 0 and hidden_norm(0) = 0; nothing of the target's features is used.
- q and k read the first `code` coordinates of e (code = the KV width, at most hidden); q is scaled by ATTN_SCALE,
  so a position attends to itself: its score a*|e'|^2 beats every other position's a*e'.R(d)e'' by many nats
  (RoPE rotates the others; a repeat of the same token nearby is the hardest case and is in the check).
- v = e' - hidden_norm(r)': the current token's code, minus the previous step's. o_proj puts the first query
  head of each KV head back on those coordinates. So r after attention = r + code(token) - hidden_norm(r).
- norm_output = true (a key SGLang's LlamaModel reads): the aux handed to the next step is norm(r), whose RMS is
  exactly 1, so hidden_norm of it is itself and the subtraction cancels it exactly: r = code(token) at every step,
  whatever the previous step left (an error of one step is not carried into the next).
- the MLP is zero; every norm weight is 1.
- lm_head row j = the unit code of the token preceding j in the permutation (perm^-1(j)), times HEAD_SCALE: the
  logit of j is the cosine between code(token) and code(perm^-1(j)), 1 only for j = perm(token).
- draft vocabulary = the whole vocabulary: d2t all 0, t2d all true.

Why not exact without norm_output: the pre-norm aux r = code(prev) has an RMS that differs per token (a code of
`code` < hidden coordinates of a normalized vector), and hidden_norm(r) divides it out; the cancelling term
would have to be multiplied back by that token's RMS, which no linear map does. With CODE_SCALE set so that a
code's RMS is 1 on average, the leftover is a few percent of the previous code and every proposal is still
right (the check runs both ways: `norm_output` as the config says, and with it off).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ATTN_SCALE = 64.0  # self-attention sharpness; q.k stays far below float16's range (see the module docstring)
HEAD_SCALE = 4.0  # logits up to 4 * sqrt(hidden): sharp, still small numbers
EPS = 1e-5


# ---- float16 as the server stores activations ------------------------------------------------------------------

def _h(x: np.ndarray) -> np.ndarray:
    """Round to float16 and back: every tensor SGLang hands from one op to the next is float16."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = EPS) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return _h(x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight.astype(np.float32))


def rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Neox-style rotary embedding (Llama's): x is (T, heads, head_dim)."""
    d = x.shape[-1]
    inv_freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    x1, x2 = x[..., : d // 2].astype(np.float64), x[..., d // 2:].astype(np.float64)
    return _h(np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1))


def _linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return _h(x @ w.astype(np.float32).T)


class KVCache:
    """The keys and values of the positions seen so far (one layer)."""

    def __init__(self) -> None:
        self.k: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.pos: list[int] = []


def attention(cfg: Mapping[str, Any], w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray,
              positions: np.ndarray, cache: KVCache) -> tuple[np.ndarray, float]:
    """Llama attention over the cache and the new positions (causal). Returns the output and the largest weight
    any query gave to a position other than its own (the self-attention leak)."""
    nq, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    t = x.shape[0]
    q = _linear(x, w[prefix + "q_proj.weight"]).reshape(t, nq, hd)
    k = _linear(x, w[prefix + "k_proj.weight"]).reshape(t, nkv, hd)
    v = _linear(x, w[prefix + "v_proj.weight"]).reshape(t, nkv, hd)
    q, k = rope(q, positions, cfg["rope_theta"]), rope(k, positions, cfg["rope_theta"])
    cache.k += list(k)
    cache.v += list(v)
    cache.pos += [int(p) for p in positions]
    keys, values, kpos = np.stack(cache.k), np.stack(cache.v), np.array(cache.pos)
    group = nq // nkv
    out = np.empty((t, nq, hd), dtype=np.float32)
    leak = 0.0
    for head in range(nq):
        scores = q[:, head, :] @ keys[:, head // group, :].T / np.sqrt(hd)  # (t, cached)
        scores = np.where(kpos[None, :] <= positions[:, None], scores, -np.inf)
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        own = kpos[None, :] == positions[:, None]
        leak = max(leak, float(np.where(own, 0.0, p).sum(axis=1).max()))
        out[:, head, :] = p @ values[:, head // group, :]
    return _linear(_h(out.reshape(t, nq * hd)), w[prefix + "o_proj.weight"]), leak


def mlp(w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray) -> np.ndarray:
    gate, up = _linear(x, w[prefix + "gate_proj.weight"]), _linear(x, w[prefix + "up_proj.weight"])
    return _linear(_h(gate / (1.0 + np.exp(-gate)) * up), w[prefix + "down_proj.weight"])


# ---- the target ------------------------------------------------------------------------------------------------

def aux_layers(cfg: Mapping[str, Any]) -> list[int]:
    """SGLang's default EAGLE-3 capture layers (LlamaForCausalLM.set_eagle3_layers_to_capture)."""
    n = cfg["num_hidden_layers"]
    return [2, n // 2, n - 3]


def target_forward(cfg: Mapping[str, Any], w: Mapping[str, np.ndarray], ids: Sequence[int] | np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Logits at every position and the three auxiliary hidden states EAGLE-3 reads (the residual stream entering
    each capture layer), for one context."""
    ids_a = np.asarray(ids)
    positions = np.arange(len(ids_a))
    r = _h(w["model.embed_tokens.weight"][ids_a].astype(np.float32))
    captured: list[np.ndarray] = []
    for i in range(cfg["num_hidden_layers"]):
        if i in aux_layers(cfg):
            captured.append(r)
        p = f"model.layers.{i}."
        a, _ = attention(cfg, w, p + "self_attn.", rms_norm(r, w[p + "input_layernorm.weight"]), positions, KVCache())
        r = _h(r + a)
        r = _h(r + mlp(w, p + "mlp.", rms_norm(r, w[p + "post_attention_layernorm.weight"])))
    logits = rms_norm(r, w["model.norm.weight"]) @ w["lm_head.weight"].astype(np.float32).T
    return logits, np.concatenate(captured, axis=-1)


def successor_of(target: Mapping[str, np.ndarray]) -> np.ndarray:
    """The permutation the target's head was built from: head row j is the embedding of the token preceding j."""
    embed, head = target["model.embed_tokens.weight"], target["lm_head.weight"]
    row_of = {row.tobytes(): j for j, row in enumerate(head)}
    return np.array([row_of[row.tobytes()] for row in embed])


# ---- the draft -------------------------------------------------------------------------------------------------

def code_width(cfg: Mapping[str, Any]) -> int:
    return min(cfg["hidden_size"], cfg["num_key_value_heads"] * cfg["head_dim"])


def constructed_draft(cfg: Mapping[str, Any], target: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The draft weights (names as SGLang 0.5.17's EAGLE-3 loader takes them), for the target `target` whose config
    is `cfg`. The draft's config is the target's with num_hidden_layers 1, draft_vocab_size = vocab_size and
    norm_output true (see `draft_config_extra`)."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    nq, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    c = code_width(cfg)
    embed = target["model.embed_tokens.weight"].astype(np.float32)
    normed = embed / np.sqrt((embed * embed).mean(axis=1, keepdims=True) + EPS)
    code = normed[:, :c]
    # A code's RMS over the hidden width is 1 on average (exactly 1 when the code is the whole hidden width).
    code_scale = float(np.sqrt(h / c))
    eye = np.eye(c, dtype=np.float32)
    k = np.zeros((nkv * hd, 2 * h), dtype=np.float32)
    k[:c, :c] = eye  # kv head g reads code coordinates g*hd .. g*hd + hd
    vw = np.zeros((nkv * hd, 2 * h), dtype=np.float32)
    vw[:c, :c] = code_scale * eye  # + the current token's code
    vw[:c, h:h + c] = -eye  # - hidden_norm(the previous step's aux)
    q = np.zeros((nq * hd, 2 * h), dtype=np.float32)
    o = np.zeros((h, nq * hd), dtype=np.float32)
    group = nq // nkv
    for head in range(nq):
        g = head // group
        rows = slice(head * hd, (head + 1) * hd)
        q[rows] = ATTN_SCALE * k[g * hd:(g + 1) * hd]
        if head % group == 0:  # one query head per KV head writes the residual
            width = min(hd, c - g * hd)
            if width > 0:
                o[g * hd:g * hd + width, head * hd:head * hd + width] = np.eye(width)
    successor = successor_of(target)
    precedes = np.empty_like(successor)
    precedes[successor] = np.arange(v)
    unit = code / np.linalg.norm(code, axis=1, keepdims=True)
    head_w = np.zeros((v, h), dtype=np.float32)
    head_w[:, :c] = HEAD_SCALE * unit[precedes]
    inter = cfg["intermediate_size"]
    p = "midlayer."
    f16 = np.float16
    return {
        "d2t": np.zeros((v,), dtype=np.int64),
        "t2d": np.ones((v,), dtype=bool),
        "fc.weight": np.zeros((h, 3 * h), dtype=f16),
        p + "hidden_norm.weight": np.ones((h,), dtype=f16),
        p + "input_layernorm.weight": np.ones((h,), dtype=f16),
        p + "post_attention_layernorm.weight": np.ones((h,), dtype=f16),
        p + "self_attn.q_proj.weight": q.astype(f16),
        p + "self_attn.k_proj.weight": k.astype(f16),
        p + "self_attn.v_proj.weight": vw.astype(f16),
        p + "self_attn.o_proj.weight": o.astype(f16),
        p + "mlp.gate_proj.weight": np.zeros((inter, h), dtype=f16),
        p + "mlp.up_proj.weight": np.zeros((inter, h), dtype=f16),
        p + "mlp.down_proj.weight": np.zeros((h, inter), dtype=f16),
        "norm.weight": np.ones((h,), dtype=f16),
        "lm_head.weight": head_w.astype(f16),
    }


def draft_config_extra(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What the constructed draft's config.json adds to (or changes in) the target's."""
    return {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
            "draft_vocab_size": cfg["vocab_size"], "target_hidden_size": cfg["hidden_size"], "norm_output": True}


def draft_step(cfg: Mapping[str, Any], dcfg: Mapping[str, Any], w: Mapping[str, np.ndarray], embed: np.ndarray,
               ids: np.ndarray, positions: np.ndarray, hidden: np.ndarray, cache: KVCache
               ) -> tuple[np.ndarray, np.ndarray, float]:
    """One draft forward (LlamaModel + LlamaForCausalLMEagle3 of llama_eagle3.py): draft logits (in the draft
    vocabulary), the aux hidden state handed to the next step, and the attention leak."""
    if hidden.shape[-1] != cfg["hidden_size"]:
        hidden = _linear(hidden, w["fc.weight"])
    p = "midlayer."
    e = rms_norm(_h(embed[ids].astype(np.float32)), w[p + "input_layernorm.weight"])
    x = np.concatenate([e, rms_norm(hidden, w[p + "hidden_norm.weight"])], axis=-1)
    a, leak = attention(dcfg, w, p + "self_attn.", x, positions, cache)
    r = _h(hidden + a)
    r = _h(r + mlp(w, p + "mlp.", rms_norm(r, w[p + "post_attention_layernorm.weight"])))
    normed = rms_norm(r, w["norm.weight"])
    logits = normed @ w["lm_head.weight"].astype(np.float32).T
    return logits, (normed if dcfg.get("norm_output") else r), leak


def _margin(row: np.ndarray) -> float:
    top2 = np.partition(row, -2)[-2:]
    return float(top2[1] - top2[0])


def check(cfg: Mapping[str, Any], target: Mapping[str, np.ndarray], dcfg: Mapping[str, Any],
          draft: Mapping[str, np.ndarray], contexts: Iterable[Sequence[int]], steps: Sequence[int] = (3, 7)
          ) -> dict[str, Any]:
    """For each context: the target's greedy next token at every position is the permutation, and EAGLE-3 with
    this draft (a draft extend over the context, then single-token draft steps, topk 1) proposes the target's
    next max(steps) tokens, each one. Returns counts, the smallest logit margins and the largest attention leak."""
    successor = successor_of(target)
    embed = target["model.embed_tokens.weight"]
    hot = draft["d2t"].astype(np.int64) + np.arange(draft["d2t"].shape[0])
    depth = max(steps)
    out: dict[str, Any] = {"contexts": 0, "positions": 0, "target_is_permutation": 0, "target_margin": None,
                           "draft_margin": None, "max_leak": 0.0, "proposals": {str(s): [0, 0] for s in steps},
                           "wrong": []}
    for ctx in contexts:
        ids = np.asarray(ctx)
        logits, aux = target_forward(cfg, target, ids)
        greedy = logits.argmax(axis=1)
        out["contexts"] += 1
        out["positions"] += len(ids)
        out["target_is_permutation"] += int((greedy == successor[ids]).sum())
        tm = min(_margin(row) for row in logits)
        out["target_margin"] = tm if out["target_margin"] is None else min(out["target_margin"], tm)
        # Draft extend: position i reads the target's features at i and the token after it (the last: the token
        # the target just chose); then the draft runs on its own proposals.
        nxt = int(greedy[-1])
        cache = KVCache()
        dlogits, hidden, leak = draft_step(cfg, dcfg, draft, embed, np.append(ids[1:], nxt), np.arange(len(ids)),
                                           aux, cache)
        row, hidden = dlogits[-1], hidden[-1:]
        expected, proposals = nxt, []
        for k in range(depth):
            out["max_leak"] = max(out["max_leak"], leak)
            proposal = int(hot[int(row.argmax())])
            expected = int(successor[expected])
            proposals.append((proposal, expected))
            dm = _margin(row)
            out["draft_margin"] = dm if out["draft_margin"] is None else min(out["draft_margin"], dm)
            if k + 1 < depth:
                dl, hidden, leak = draft_step(cfg, dcfg, draft, embed, np.array([proposal]),
                                              np.array([len(ids) + k]), hidden, cache)
                row = dl[-1]
        for s in steps:
            right = sum(p == e for p, e in proposals[:s])
            out["proposals"][str(s)][0] += right
            out["proposals"][str(s)][1] += s
            if right < s and len(out["wrong"]) < 5:
                out["wrong"].append({"steps": s, "context_length": len(ids), "proposals": proposals[:s]})
    out["passed"] = (out["target_is_permutation"] == out["positions"]
                     and all(right == total for right, total in out["proposals"].values()))
    return out


def field_contexts(cfg: Mapping[str, Any], target: Mapping[str, np.ndarray], special_ids: Iterable[int],
                   count: int, length: int, seed: int = 0) -> list[list[int]]:
    """Random contexts of ordinary tokens, and the hard ones for self-attention: a context of one token repeated,
    and one that ends in the target's own continuation through the shortest cycle of its permutation."""
    rng = np.random.default_rng(seed)
    specials = set(special_ids)
    ordinary = np.array([i for i in range(cfg["vocab_size"]) if i not in specials])
    contexts = [rng.choice(ordinary, size=length).tolist() for _ in range(count)]
    contexts.append([int(ordinary[0])] * length)
    successor = successor_of(target)
    cycle = _shortest_cycle(successor, ordinary)
    tail = [cycle[i % len(cycle)] for i in range(length // 2)]
    contexts.append(rng.choice(ordinary, size=length // 2).tolist() + tail)
    return contexts


def _shortest_cycle(successor: np.ndarray, ordinary: np.ndarray) -> list[int]:
    best: list[int] = []
    seen: set[int] = set()
    for start in ordinary.tolist():
        if start in seen:
            continue
        cycle, t = [], start
        while t not in seen:
            seen.add(t)
            cycle.append(t)
            t = int(successor[t])
        if t == start and (not best or len(cycle) < len(best)):
            best = cycle
    return best


def check_model_dir(model: Path, count: int = 20, length: int = 64, steps: Sequence[int] = (3, 7),
                    norm_output: bool | None = None) -> dict[str, Any]:
    """check() on a folder made by field_model.py (MODEL/target, MODEL/draft)."""
    from safetensors.numpy import load_file  # only the command needs it; the check itself is numpy

    cfg = json.loads((model / "target" / "config.json").read_text())
    dcfg = json.loads((model / "draft" / "config.json").read_text())
    if norm_output is not None:
        dcfg["norm_output"] = norm_output
    target = load_file(str(model / "target" / "model.safetensors"))
    draft = load_file(str(model / "draft" / "model.safetensors"))
    tok = json.loads((model / "target" / "tokenizer.json").read_text())
    specials = [t["id"] for t in tok.get("added_tokens", [])]
    return check(cfg, target, dcfg, draft, field_contexts(cfg, target, specials, count, length), steps)


def summary_line(result: Mapping[str, Any]) -> str:
    props = ", ".join(f"{s} steps {r}/{t}" for s, (r, t) in result["proposals"].items())
    return (f"{'PASS' if result['passed'] else 'FAIL'}: target greedy = permutation at "
            f"{result['target_is_permutation']}/{result['positions']} positions of {result['contexts']} contexts; "
            f"draft proposals right: {props}; smallest margins: target {result['target_margin']:.2f}, draft "
            f"{result['draft_margin']:.2f}; largest attention leak {result['max_leak']:.1e}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["check"])
    parser.add_argument("model", type=Path)
    parser.add_argument("--contexts", type=int, default=20)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", default="3,7")
    args = parser.parse_args(argv)
    steps = [int(s) for s in args.steps.split(",")]
    result = check_model_dir(args.model, args.contexts, args.length, steps)
    print(f"field_draft: {summary_line(result)}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
