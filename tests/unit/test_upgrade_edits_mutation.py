"""The upgrade's rename finder and sweep check where their tests leave a branch to chance (issue 35, mutation of
`upgrade-edits`): a name holding its polarity word twice, a deprecation table reached through an attribute or
a subscript, an opposite name the new release lacks, a name only somewhat like a new one, a sweep row's setting
of another type. Pure, in process."""

from __future__ import annotations

import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from sglstack.config.matrix import load_matrix
from sglstack.upgrade import splice
from sglstack.upgrade.renames import (
    EnvFacts,
    FlagFacts,
    Rename,
    flag_renames,
    opposite,
    release_renames,
    source_env,
    wheel_env,
)
from sglstack.upgrade.speculative import last_sweep_report, sweep_advice, sweep_problem


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


STACKS = """\
stacks:
  s1:
    base_image: debian:bookworm-slim
    sglang:
      version: 0.5.9
    serving:
      model: org/model
      env:
        SGLANG_OLD_X: "1"
"""


def test_both_releases_parsers_and_sources_are_compared(tmp_path, monkeypatch):
    """A flag and an environment variable the old release had and the new one lacks: one line each; both
    parsers asked with the lock's versions."""
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    (tmp_path / "stacks.yaml").write_text(STACKS)
    stack = load_matrix(tmp_path / "stacks.yaml").get("s1")
    asked: list[tuple[str, str]] = []

    def flags(wheel: Path, version_of) -> dict[str, Any]:
        asked.append((wheel.name, version_of("xgrammar")))
        return {"flags": ["--model-path", "--gone"] if wheel.name.startswith("old") else ["--model-path"]}

    engines = types.SimpleNamespace(
        sglang_wheel=lambda version: Path(f"old-{version}.whl"), flags=flags,
        env=lambda wheel: EnvFacts(frozenset({"SGLANG_OLD_X"}) if wheel.name.startswith("old") else frozenset()))
    said = release_renames(stack, stack, Path("new.whl"), ["--gone", "1"], engines, lambda name: f"{name}-1")
    assert said == ("serving flag --gone: removed in sglang 0.5.9, with no replacement",
                    "serving.env SGLANG_OLD_X: no longer read in sglang 0.5.9, with no replacement")
    assert asked == [("old-0.5.9.whl", "xgrammar-1"), ("new.whl", "xgrammar-1")]


@pytest.mark.parametrize("text", ["[1, 2]", '"a report"', "3"])
def test_a_smoke_report_that_is_not_an_object_is_no_report(tmp_path, monkeypatch, text):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    (tmp_path / "stacks.yaml").write_text(STACKS)
    stack = load_matrix(tmp_path / "stacks.yaml").get("s1")
    path = tmp_path / "build" / "s1" / "smoke-report.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert last_sweep_report(stack) == (None, str(path))
    path.write_text('{"sweep": {}}')
    assert last_sweep_report(stack) == ({"sweep": {}}, str(path))


def test_the_argv_checks_known_flags_come_before_the_probes_flags():
    assert FlagFacts.from_probe({"known": ["--a"], "flags": ["--b"]}) == FlagFacts(frozenset({"--a"}))
    assert FlagFacts.from_probe({"flags": ["--b"]}) == FlagFacts(frozenset({"--b"}))


def test_a_flag_given_with_a_value_holding_equals_signs_is_the_flag():
    old, new = FlagFacts(frozenset({"--gone"})), FlagFacts(frozenset({"--model-path"}))
    assert flag_renames(["--gone=a=b"], old, new, "0.5.23") == [
        "serving flag --gone: removed in sglang 0.5.23, with no replacement"]


def test_a_wheels_source_that_is_not_utf8_is_read_with_replacement(tmp_path):
    wheel = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/srt/environ.py", b"# caf\xe9\nSGLANG_LATIN = EnvBool(False)\n")
        zf.writestr("other/skipped.py", b"SGLANG_ELSEWHERE = 1\n")
    assert wheel_env(wheel).names == frozenset({"SGLANG_LATIN"})


SPECULATIVE = STACKS.replace("      model: org/model\n", """      model: org/model
      speculative:
        draft_model: org/draft
        num_steps: 3
        eagle_topk: 1
        num_draft_tokens: 4
""")


def _speculative_stack(tmp_path: Path, text: str = SPECULATIVE):
    (tmp_path / "stacks.yaml").write_text(text)
    return load_matrix(tmp_path / "stacks.yaml").get("s1")


def test_the_whole_advice_of_a_stack_without_speculation(tmp_path):
    assert sweep_advice(_speculative_stack(tmp_path, STACKS), {"stack": "s1", "sweep": {}}, "r.json") == {
        "current": None, "source": "r.json", "found": False, "recommended": None, "best": [], "edits": {},
        "lines": ["The stack serves no speculative decoding: nothing to recommend."]}


def test_the_whole_advice_from_a_sweep_with_no_recommendation(tmp_path):
    best = [{"concurrency": 1, "setting": None, "speedup": None},
            {"concurrency": 4, "setting": "7:1:8", "speedup": 1.5}]
    report = {"stack": "s1", "time": "2026-12-05T04:00:00Z",
              "sweep": {"levels": [1, 4], "recommended": None, "best": best}}
    measured = "the sweep of 2026-12-05T04:00:00Z (`r.json`), measured on the image of sglang before this upgrade"
    assert sweep_advice(_speculative_stack(tmp_path), report, "r.json") == {
        "current": "3:1:4", "source": "r.json", "found": True, "recommended": None, "best": best, "edits": {},
        "time": "2026-12-05T04:00:00Z", "levels": [1, 4],
        "lines": [f"Best setting per level (steps:topk:draft tokens), from {measured}:", "",
                  "| level | best | speedup |", "| --- | --- | --- |",
                  "| concurrency 1 | no speculation | n/a |", "| concurrency 4 | 7:1:8 | 1.50x |", "",
                  "No setting passed every gate at every level: the stack keeps 3:1:4."]}
    bare = sweep_advice(_speculative_stack(tmp_path), {"stack": "s1", "sweep": {"recommended": None}}, "r.json")
    assert (bare["time"], bare["levels"], bare["best"]) == (None, [], [])


def test_every_source_is_read_past_one_without_the_prefix_or_one_that_does_not_parse():
    sources = ["x = 1\n", "def broken(:\n    'SGLANG_BROKEN'\n", 'LIMIT = "SGLANG_AFTER"\n']
    assert source_env(sources).names == frozenset({"SGLANG_AFTER"})


def test_only_a_dict_entry_of_an_env_name_and_a_deprecation_call_is_a_table_entry():
    source = '''
TABLE = {
    "SGLANG_PLAIN": "a value",
    "plain": _DeprecatedEnv(replacement="SGLANG_NOT_A_KEY"),
    "SGLANG_CALLED": other(replacement="SGLANG_X"),
    "SGLANG_REAL": _DeprecatedEnv(replacement="SGLANG_NEW_REAL"),
}
class Envs:
    SGLANG_TYPED: EnvInt = EnvInt(1, deprecated_name="SGLANG_OLD_TYPED")
'''
    assert source_env([source]).deprecated == {"SGLANG_REAL": Rename("SGLANG_NEW_REAL"),
                                               "SGLANG_OLD_TYPED": Rename("SGLANG_TYPED")}


@pytest.mark.parametrize(("a", "b"), [
    ("k: 1\n", "k: '1'\n"),  # the same value, quoted: another implicitness
    ("k: !one x\n", "k: !two x\n"),  # another tag
    ("k: []\n", "k: {}\n"),  # another kind of node
])
def test_regions_that_say_another_thing_in_yaml_are_not_the_same(a, b):
    assert splice._same([a], [a], frozenset()) is True
    assert splice._same([a], [b], frozenset()) is False


def test_a_regions_trailing_comment_is_cut_but_never_its_key_line():
    assert splice._body_end(["a: 1\n", "# said after\n", "\n"], 0, 3) == 1
    assert splice._body_end(["a: 1\n", "# said after\n"], 0, 2) == 1


def test_a_flow_mapping_written_over_lines_is_no_block():
    node = YAML().load("x: {a: 1,\n  b: 2}\ny:\n  a: 1\n  b: 2\n")
    assert splice._block(node["x"]) is False
    assert splice._block(node["y"]) is True
