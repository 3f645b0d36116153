"""Pure: the speculative settings a smoke sweeps, STEPS:TOPK:DRAFT_TOKENS (`3:1:4,7:1:8`), read once (smoke/sweep.py
serves and ranks them)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..config.fields import MAX_COUNT
from ..config.settings import SpeculativeSettings
from ..core.errors import SmokeInputError, shown

SYNTAX = "STEPS:TOPK:DRAFT_TOKENS"
# ASCII digits only: str.isdigit() takes '²' (which int() refuses) and int() takes fullwidth digits.
_NUMBER = re.compile(r"[0-9]+")
# Each setting is one more EAGLE-3 server start (minutes on a GPU); refused at once beyond this.
MAX_SETTINGS = 256


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
    if len(items) > MAX_SETTINGS:
        raise SmokeInputError(f"smoke option sweep: {len(items)} settings, at most {MAX_SETTINGS} (each is a server "
                              "start)")
    out: list[SpecSetting] = []
    seen: set[SpecSetting] = set()
    for item in items:
        parts = [p.strip() for p in item.split(":")]
        if len(parts) != 3 or not all(_NUMBER.fullmatch(p) for p in parts):
            raise SmokeInputError(f"smoke option sweep: '{shown(item)}' is not {SYNTAX} (e.g. 3:1:4)")
        if any(len(p.lstrip("0")) > len(str(MAX_COUNT)) for p in parts):  # before int(): 5000 digits raise
            numbers = [MAX_COUNT + 1]
        else:
            numbers = [int(p) for p in parts]
        if not all(1 <= n <= MAX_COUNT for n in numbers):
            raise SmokeInputError(f"smoke option sweep: '{shown(item)}': each number must be >= 1 and <= {MAX_COUNT}")
        setting = SpecSetting(*numbers)
        if setting.eagle_topk == 1 and setting.num_draft_tokens != setting.num_steps + 1:
            # SGLang's server_args sets draft tokens to steps + 1 when topk is 1 (a warning in its log): the
            # report would name a setting that was never served.
            raise SmokeInputError(f"smoke option sweep: '{shown(item)}': with topk 1 SGLang serves "
                                  f"{setting.num_steps + 1} draft tokens (steps + 1), not {setting.num_draft_tokens}")
        if setting in seen:
            raise SmokeInputError(f"smoke option sweep: '{shown(item)}' is named twice")
        seen.add(setting)
        out.append(setting)
    if not out:
        raise SmokeInputError(f"smoke option sweep: name at least one {SYNTAX}")
    return tuple(out)
