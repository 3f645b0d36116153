"""Model folders for the draft check: a target's and an EAGLE-3 draft's `config.json`, and safetensors files
written by hand (8 bytes of header length, the JSON header, the tensors' bytes), so no weights library is needed."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TARGET: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "vocab_size": 128256,
                          "num_hidden_layers": 32, "max_position_embeddings": 8192}
DRAFT: dict[str, Any] = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "vocab_size": 128256,
                         "draft_vocab_size": 32000, "num_hidden_layers": 1, "max_position_embeddings": 8192,
                         "target_hidden_size": 4096, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}
MAPS = {"d2t": ("I64", (32000,)), "t2d": ("BOOL", (128256,))}
SIZES = {"I64": 8, "BOOL": 1, "F16": 2}


def write_safetensors(path: Path, tensors: Mapping[str, tuple[str, tuple[int, ...]]]) -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = SIZES[dtype]
        for n in shape:
            size *= n
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def model_folder(path: Path, config: Mapping[str, Any],
                 tensors: Mapping[str, tuple[str, tuple[int, ...]]] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if tensors is not None:
        write_safetensors(path / "model.safetensors", tensors)
    return path
