"""The base of every stacks.yaml model: unknown keys refused, immutable, and no yes/no taken for a number."""

from __future__ import annotations

from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_yes_no_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        # YAML reads yes/no/on/off/true/false as booleans, and pydantic's lax mode takes a boolean for 1 or 0:
        # `port: yes` would serve on port 1, `min_agreement: no` turn the gate off.
        if isinstance(value, bool) and info.field_name and _is_number(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"{str(value).lower()} is a yes/no (YAML reads yes, no, on, off, true and false so), "
                             "not a number")
        return value


def _is_number(annotation: Any) -> bool:
    """`int`, `float` or an optional one (a bool is an int to Python, but never a number of stacks.yaml)."""
    return annotation in (int, float) or (get_origin(annotation) in (Union, UnionType)
                                          and any(arg in (int, float) for arg in get_args(annotation)))

