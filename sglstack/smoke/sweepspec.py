"""Pure: the speculative settings a smoke sweeps, STEPS:TOPK:DRAFT_TOKENS (`3:1:4,7:1:8`), read once (smoke/sweep.py
serves and ranks them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..config.fields import MAX_COUNT
from ..config.settings import SpeculativeSettings
from ..core.errors import SmokeInputError, shown

SYNTAX = "STEPS:TOPK:DRAFT_TOKENS"


@dataclass(frozen=True, order=True)
class SpecSetting:
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int

    @property
    def key(self) -> str:
        return f"{self.num_steps}:{self.eagle_topk}:{self.num_draft_tokens}"

    @property
    def label(self) -> str:
        return f"{self.num_steps} steps, topk {self.eagle_topk}, {self.num_draft_tokens} draft tokens"

    @property
    def file_part(self) -> str:
        """For a server log's name: s3-k1-d4."""
        return f"s{self.num_steps}-k{self.eagle_topk}-d{self.num_draft_tokens}"

    def to_dict(self) -> dict[str, Any]:
        return {"setting": self.key, "num_steps": self.num_steps, "eagle_topk": self.eagle_topk,
                "num_draft_tokens": self.num_draft_tokens}


def setting_of(spec: SpeculativeSettings) -> SpecSetting:
    return SpecSetting(spec.num_steps, spec.eagle_topk, spec.num_draft_tokens)


def parse_sweep(value: str | Iterable[Any]) -> tuple[SpecSetting, ...]:
    """`3:1:4,7:1:8` (or a sequence of such items) -> settings, in the order given; one line naming a bad item."""
    items = [i.strip() for i in value.split(",")] if isinstance(value, str) else [str(i).strip() for i in value]
    out: list[SpecSetting] = []
    for item in items:
        parts = item.split(":")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise SmokeInputError(f"smoke option sweep: '{shown(item)}' is not {SYNTAX} (e.g. 3:1:4)")
        numbers = [int(p) for p in parts]
        if not all(1 <= n <= MAX_COUNT for n in numbers):
            raise SmokeInputError(f"smoke option sweep: '{item}': each number must be >= 1 and <= {MAX_COUNT}")
        setting = SpecSetting(*numbers)
        if setting in out:
            raise SmokeInputError(f"smoke option sweep: '{item}' is named twice")
        out.append(setting)
    if not out:
        raise SmokeInputError(f"smoke option sweep: name at least one {SYNTAX}")
    return tuple(out)
