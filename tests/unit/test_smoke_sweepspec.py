"""`--sweep STEPS:TOPK:DRAFT_TOKENS,...` read once (smoke/sweepspec.py): every bad value is one SmokeInputError
line, decided at once, never a traceback or minutes of work before the refusal."""

from __future__ import annotations

import time

import pytest

from sglstack.core.errors import SmokeInputError
from sglstack.smoke.sweepspec import MAX_SETTINGS, parse_sweep


def test_settings_in_the_order_given_with_white_space_around_them():
    assert [s.key for s in parse_sweep(" 7:1:8 , 3:1:4,5:4:8 ")] == ["7:1:8", "3:1:4", "5:4:8"]


@pytest.mark.parametrize(("value", "message"), [
    # int() reads these, Python's digit classes say yes: no server flag does
    ("²:1:4", "smoke option sweep: '²:1:4' is not STEPS:TOPK:DRAFT_TOKENS (e.g. 3:1:4)"),
    ("\uff13:1:4", "smoke option sweep: '\uff13:1:4' is not STEPS:TOPK:DRAFT_TOKENS (e.g. 3:1:4)"),
    # past int()'s 4300-digit limit (a ValueError, which was a traceback)
    ("9" * 5000 + ":1:4", "smoke option sweep: '" + "9" * 40),
    ("3:0:4", "smoke option sweep: '3:0:4': each number must be >= 1 and <= 65536"),
    # SGLang serves topk 1 with steps+1 draft tokens whatever is asked: the report would name a setting not served
    ("3:1:2", "smoke option sweep: '3:1:2': with topk 1 SGLang serves 4 draft tokens (steps + 1), not 2"),
    ("3:1:8", "smoke option sweep: '3:1:8': with topk 1 SGLang serves 4 draft tokens (steps + 1), not 8"),
    ("3:1:4,03:1:04", "smoke option sweep: '03:1:04' is named twice"),
], ids=["superscript", "fullwidth", "5000-digits", "topk-0", "topk-1-fewer", "topk-1-more", "twice"])
def test_a_bad_setting_is_one_line(value, message):
    with pytest.raises(SmokeInputError) as info:
        parse_sweep(value)
    text = str(info.value)
    assert "\n" not in text and text.startswith(message) and len(text) < 300


def test_a_huge_list_is_refused_at_once():
    settings = ",".join(f"{n}:2:{n + 1}" for n in range(1, 20001))
    started = time.monotonic()
    with pytest.raises(SmokeInputError) as info:
        parse_sweep(settings)
    assert time.monotonic() - started < 2
    assert str(info.value) == f"smoke option sweep: 20000 settings, at most {MAX_SETTINGS} (each is a server start)"
    assert len(parse_sweep(",".join(f"{n}:2:{n + 1}" for n in range(1, MAX_SETTINGS + 1)))) == MAX_SETTINGS
