"""The upgrade's rename finder and sweep check where their tests leave a branch to chance (issue 35, mutation of
`upgrade-edits`): a name holding its polarity word twice, a deprecation table reached through an attribute or
a subscript, an opposite name the new release lacks, a name only somewhat like a new one, a sweep row's setting
of another type. Pure, in process."""

from __future__ import annotations

from typing import Any

import pytest

from sglstack.upgrade.renames import FlagFacts, Rename, flag_renames, opposite, source_env
from sglstack.upgrade.speculative import sweep_problem


def test_only_the_first_polarity_word_is_flipped():
    assert opposite("--enable-x-enable") == "--disable-x-enable"
    assert opposite("--disable-y-disable") == "--enable-y-disable"
    assert opposite("SGLANG_ENABLE_Z_ENABLE") == "SGLANG_DISABLE_Z_ENABLE"


def test_a_deprecation_table_of_attribute_calls_is_read_and_a_subscript_call_is_not_one():
    source = '''
_DEPRECATED_ENVS = {
    "SGLANG_OLD_A": envs._DeprecatedEnv(replacement="SGLANG_NEW_A"),
    "SGLANG_OLD_B": makers["DeprecatedEnv"](replacement="SGLANG_NEW_B"),
    "SGLANG_OLD_C": (lambda: None)(),
}
'''
    assert source_env([source]).deprecated == {"SGLANG_OLD_A": Rename("SGLANG_NEW_A")}


def test_an_opposite_name_the_new_release_lacks_is_no_rename():
    old = FlagFacts(frozenset({"--enable-thing"}))
    new = FlagFacts(frozenset({"--model-path"}))
    assert flag_renames(["--enable-thing"], old, new, "0.5.23") == [
        "serving flag --enable-thing: removed in sglang 0.5.23, with no replacement"]


@pytest.mark.parametrize(("fresh", "said"), [
    ("--abcdefghi", "renamed in sglang 0.5.23: the closest name only it has is --abcdefghi (check its meaning)"),
    ("--abcdefxyz", "removed in sglang 0.5.23, with no replacement"),  # 0.76 alike: under the 0.8 cutoff
])
def test_a_guess_is_only_a_name_at_least_four_fifths_alike(fresh, said):
    old = FlagFacts(frozenset({"--abcdefgh"}))
    new = FlagFacts(frozenset({fresh}))
    assert flag_renames(["--abcdefgh"], old, new, "0.5.23") == [f"serving flag --abcdefgh: {said}"]


def _sweep(row: dict[str, Any]) -> dict[str, Any]:
    return {"best": [{"concurrency": 1, "speedup": 1.2, **row}]}


@pytest.mark.parametrize(("setting", "problem"), [
    (None, None),
    ("steps=3,topk=1,draft=4", None),
    (5, "a row of 'best' is not a concurrency, a setting and a speedup"),
    (["steps=3"], "a row of 'best' is not a concurrency, a setting and a speedup"),
])
def test_a_best_rows_setting_is_text_or_absent(setting, problem):
    assert sweep_problem(_sweep({"setting": setting})) == problem
