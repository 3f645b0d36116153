"""The three EAGLE-3 hooks for KimiK25ForConditionalGeneration, as upstream sglang 0.5.10 has them.

Only the methods named in patch.toml are taken from the stub class below, line for line; the imports
are here so that linters see the same names the target module (sglang/srt/models/kimi_k25.py) imports.
The text mirrors upstream (black-formatted, typing generics), hence the ruff directives.
"""

# ruff: noqa: UP006, UP035, UP045
# fmt: off
from typing import List, Optional, Tuple

import torch
from torch import nn


class KimiK25ForConditionalGeneration(nn.Module):
    language_model: nn.Module

    def set_eagle3_layers_to_capture(
        self, layer_ids: Optional[List[int]] = None
    ) -> None:
        """Set the layers to capture for EAGLE3 speculative decoding."""
        if not hasattr(self.language_model, "set_eagle3_layers_to_capture"):
            raise AttributeError(
                "language_model does not support EAGLE3 speculative decoding."
            )

        self.language_model.set_eagle3_layers_to_capture(layer_ids)

    def get_embed_and_head(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """Get embedding and LM head weights for speculative decoding."""
        if not hasattr(self.language_model, "get_embed_and_head"):
            raise AttributeError(
                "language_model does not support get_embed_and_head()."
            )

        return self.language_model.get_embed_and_head()

    def set_embed_and_head(self, embed: torch.Tensor, head: torch.Tensor) -> None:
        """Set embedding and LM head weights for speculative decoding."""
        if not hasattr(self.language_model, "set_embed_and_head"):
            raise AttributeError(
                "language_model does not support set_embed_and_head()."
            )

        self.language_model.set_embed_and_head(embed, head)
