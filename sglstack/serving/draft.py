"""Does the draft fit the target and the flags it is served with (pure)? Checked before any server starts.

A draft SGLang cannot use does not always fail: an EAGLE-3 draft served with `--speculative-algorithm EAGLE`
runs without its auxiliary hidden states and no draft token is ever accepted (accept length 1.0, slower than
no speculation: sgl-project/sglang PR#21272); a draft trained for a 2048-token context hurts past it (#6783);
a hidden size or vocabulary that does not match fails deep in start-up, after the target has loaded. The
rules are SGLang's own (0.5.x): `_resolve_speculative_algorithm_alias` (NEXTN is EAGLE), `models/*eagle3*.py`
(the draft's `target_hidden_size`, `draft_vocab_size`, the `d2t`/`t2d` maps), `eagle_utils` (the aux hidden
states read from `eagle_config`) and the target's `set_eagle3_layers_to_capture` (layer id `i` is captured at
the input of layer `i + 1`, so an id must be below the target's layer count less one).

`draft_mismatches` takes the two `config.json`s, the shapes of the draft's `d2t`/`t2d` tensors (read from
the safetensors headers, no weights loaded: `draftfiles`) and the serving flags; one line per mismatch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from ..core.errors import SglstackError, one_line, shown

EAGLE3 = "EAGLE3"
# SGLang resolves these to EAGLE before it builds a worker (arg_groups/speculative_hook.py).
EAGLE_ALIASES = {"EAGLE": "EAGLE", "NEXTN": "EAGLE"}
CONTEXT_FLAG = "--context-length"
MAP_TENSORS = ("d2t", "t2d")

Shapes = Mapping[str, tuple[int, ...]]


class DraftMismatch(SglstackError):
    """The draft does not fit its target or its flags: bad input, one line per mismatch, before a server starts."""

    exit_code = 2

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = tuple(one_line(line) for line in lines)
        super().__init__("; ".join(self.lines))


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal model keeps its language model's sizes under `text_config` (Kimi K2.5, Llama 4)."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and "hidden_size" not in config:
        return {**config, **inner}
    return config


def is_eagle3_architecture(name: str) -> bool:
    """SGLang's EAGLE-3 drafts: LlamaForCausalLMEagle3, Eagle3DeepseekV2ForCausalLM, ... (models/*eagle3*.py)."""
    return "eagle3" in name.lower()


def serving_context(extra_args: Sequence[str], target: Mapping[str, Any]) -> int | None:
    """The context the server serves: `--context-length N` (or `=N`) of the argv, else the target's own."""
    value: str | None = None
    for i, arg in enumerate(extra_args):
        if arg == CONTEXT_FLAG and i + 1 < len(extra_args):
            value = extra_args[i + 1]
        elif arg.startswith(CONTEXT_FLAG + "="):
            value = arg.split("=", 1)[1]
    if value is not None:
        return context_value(value)
    return _int(target.get("max_position_embeddings"))


# SGLang 0.5.2x reads --context-length with `human_readable_int`: 32k, 25.6k, 128Ki (SI and IEC suffixes).
_SUFFIXES = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_PLAIN = re.compile(r"[0-9]+")
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def context_value(text: str) -> int | None:
    """`--context-length`'s value as SGLang reads it; None for one its parser refuses (it says so itself)."""
    text = text.strip()
    if len(text) > 30:  # no context has 30 digits; int() and str() of a number past 4300 digits raise
        return None
    found = _HUMAN.fullmatch(text)
    if found:
        number, suffix = found.groups()
        if "." in number and suffix.endswith("i"):
            return None
        return int(Decimal(number) * _SUFFIXES[suffix])
    # ASCII digits: str.isdigit() takes '²', which int() refuses.
    return int(text) if _PLAIN.fullmatch(text) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _aux_layer_ids(draft: Mapping[str, Any]) -> list[Any] | None:
    eagle = draft.get("eagle_config")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, Mapping) else None
    if ids is None:
        ids = draft.get("eagle_aux_hidden_state_layer_ids")
    return list(ids) if isinstance(ids, list) else None


def algorithm_mismatch(algorithm: str, architectures: Sequence[str]) -> str | None:
    resolved = EAGLE_ALIASES.get(algorithm, algorithm)
    names = ", ".join(architectures) or "none"
    eagle3 = any(is_eagle3_architecture(a) for a in architectures)
    if resolved == EAGLE3 and not eagle3:
        return (f"architecture {names} is not an EAGLE-3 draft, but --speculative-algorithm is EAGLE3 "
                "(an EAGLE draft needs EAGLE; an EAGLE-3 draft's architecture ends in Eagle3)")
    if resolved == "EAGLE" and eagle3:
        return (f"architecture {names} is an EAGLE-3 draft, but --speculative-algorithm is {algorithm}: SGLang runs "
                "it without its auxiliary hidden states and accepts none of its tokens (accept length 1.0); "
                "use EAGLE3")
    return None


def hidden_size_mismatch(algorithm: str, target: Mapping[str, Any], draft: Mapping[str, Any]) -> str | None:
    want = _int(target.get("hidden_size"))
    own = _int(draft.get("hidden_size"))
    # An EAGLE-3 draft reads the target's hidden states at `target_hidden_size` (its own width may differ).
    key = "target_hidden_size" if algorithm == EAGLE3 and "target_hidden_size" in draft else "hidden_size"
    got = _int(draft.get("target_hidden_size")) if key == "target_hidden_size" else own
    if want is None or got is None or got == want:
        return None
    return f"{key} {got}, but the target's hidden_size is {want}"


def vocabulary_mismatches(target: Mapping[str, Any], draft: Mapping[str, Any], shapes: Shapes | None) -> list[str]:
    """The draft's vocabulary, its draft vocabulary and the maps between them, against the target's."""
    out = []
    vocab, own = _int(target.get("vocab_size")), _int(draft.get("vocab_size"))
    if vocab is not None and own is not None and own != vocab:
        out.append(f"vocab_size {own}, but the target's vocab_size is {vocab} (the draft takes the target's "
                   "embedding)")
    draft_vocab = _int(draft.get("draft_vocab_size"))
    if draft_vocab is not None and vocab is not None and draft_vocab > vocab:
        out.append(f"draft_vocab_size {draft_vocab} is larger than the target's vocab_size {vocab}")
    if shapes is None:  # no weights at hand: the maps cannot be read
        return out
    head = draft_vocab if draft_vocab is not None else own
    wanted = {"d2t": head, "t2d": vocab}
    for name in MAP_TENSORS:
        shape, size = shapes.get(name), wanted[name]
        if shape is not None and size is not None and tuple(shape) != (size,):
            what = "draft_vocab_size" if name == "d2t" else "the target's vocab_size"
            out.append(f"tensor {name} has shape [{', '.join(map(str, shape))}], but {what} is {size}")
    if "d2t" not in shapes and draft_vocab is not None and vocab is not None and draft_vocab < vocab:
        out.append(f"draft_vocab_size {draft_vocab} is smaller than the target's vocab_size {vocab}, and the draft's "
                   "weights hold no d2t map from draft to target token ids")
    return out


def context_mismatch(draft: Mapping[str, Any], context: int | None) -> str | None:
    trained = _int(draft.get("max_position_embeddings"))
    if trained is None or context is None or trained >= context:
        return None
    return (f"max_position_embeddings {trained}, but the server serves a context of {context} tokens (past its "
            f"trained context the draft's proposals are rejected: set {CONTEXT_FLAG} {trained} in "
            "serving.extra_args, or use a draft trained for the context)")


def aux_layer_mismatch(target: Mapping[str, Any], draft: Mapping[str, Any]) -> str | None:
    ids, layers = _aux_layer_ids(draft), _int(target.get("num_hidden_layers"))
    if ids is None or layers is None:
        return None
    bad = [i for i in ids if _int(i) is None or not 0 <= i <= layers - 2]
    if not bad:
        return None
    return (f"eagle_aux_hidden_state_layer_ids {ids}: {', '.join(map(str, bad))} not a layer of the target, which has "
            f"{layers} layers (SGLang captures id i at layer i + 1: ids run 0..{layers - 2})")


def draft_mismatches(target_config: Mapping[str, Any], draft_config: Mapping[str, Any], *, algorithm: str,
                     extra_args: Sequence[str] = (), draft_shapes: Shapes | None = None) -> list[str]:
    """One line per way the draft does not fit the target or the flags; empty when it fits."""
    target, draft = text_config(target_config), text_config(draft_config)
    names = draft.get("architectures") or []
    if isinstance(names, list):
        architectures = [str(a) for a in names]
        kind = algorithm_mismatch(algorithm, architectures)
    else:  # a string would be read letter by letter, a number not at all (SGLang reads a list of class names)
        kind = f"architectures {shown(json.dumps(names))} is not a list of class names"
    found = [kind, hidden_size_mismatch(algorithm, target, draft),
             *vocabulary_mismatches(target, draft, draft_shapes),
             context_mismatch(draft, serving_context(extra_args, target))]
    if EAGLE_ALIASES.get(algorithm, algorithm) == EAGLE3:
        found.append(aux_layer_mismatch(target, draft))
    return [line for line in found if line]
