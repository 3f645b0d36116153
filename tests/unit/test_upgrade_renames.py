"""`upgrade` names what a release renames of the flags and SGLANG_* variables a stack sets (issue 41), from the
two releases' own sources and parsers. The sources here are small stand-ins written in the shapes SGLang uses
(its `Envs` class, its `_DeprecatedEnv` table, an alias field); tests/e2e/test_upgrade_renames_wheels.py reads the
real 0.5.9, 0.5.18 and 0.5.23 wheels."""

from __future__ import annotations

import zipfile

from sglstack.upgrade.renames import (
    EnvFacts,
    FlagFacts,
    Rename,
    env_renames,
    flag_renames,
    opposite,
    source_env,
    stack_renames,
    wheel_env,
)

OLD_ENVIRON = '''
class Envs:
    SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK = EnvBool(True)
    SGLANG_KEPT = EnvInt(1)
    SGLANG_NEW_CACHE = EnvStrWithAlias("x", deprecated_name="SGLANG_OLD_CACHE")

_DEPRECATED_ENVS = {
    "SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK": _DeprecatedEnv(
        replacement="SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", transform=_invert_bool),
    "SGLANG_GONE_SOON": _DeprecatedEnv(note="Always on now."),
}
'''
OLD_USER = 'import os\nLIMIT = os.environ.get("SGLANG_DROPPED_LIMIT")\nif envs.SGLANG_KEPT.get(): pass\n'
NEW_ENVIRON = '''
class Envs:
    SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK = EnvBool(True)
    SGLANG_KEPT = EnvInt(1)
    SGLANG_NEW_CACHE = EnvStr("x")
    SGLANG_FLASH_MODE = EnvBool(False)

_DEPRECATED_ENVS = {
    "SGLANG_KEPT_SLOW": _DeprecatedEnv(replacement="SGLANG_KEPT"),
}
'''


def test_a_releases_sources_give_the_names_it_reads_and_its_own_deprecation_table():
    old = source_env([OLD_ENVIRON, OLD_USER, "x = 1\n"])
    assert old.deprecated == {
        "SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK": Rename("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", inverted=True),
        "SGLANG_GONE_SOON": Rename(None, note="Always on now."),
        "SGLANG_OLD_CACHE": Rename("SGLANG_NEW_CACHE")}
    assert old.read == {"SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "SGLANG_KEPT", "SGLANG_NEW_CACHE",
                        "SGLANG_DROPPED_LIMIT"}


def test_each_env_the_stack_sets_that_the_new_release_renames_deprecates_or_drops_is_one_line():
    old, new = source_env([OLD_ENVIRON, OLD_USER]), source_env([NEW_ENVIRON])
    keys = ["SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK", "SGLANG_OLD_CACHE", "SGLANG_DROPPED_LIMIT", "SGLANG_KEPT",
            "SGLANG_KEPT_SLOW", "HF_HUB_OFFLINE"]
    assert env_renames(keys, old, new, "0.5.23") == [
        "serving.env SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK: renamed in sglang 0.5.23: use "
        "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK, with the opposite meaning (set it to the opposite value)",
        "serving.env SGLANG_DROPPED_LIMIT: no longer read in sglang 0.5.23, with no replacement",
        "serving.env SGLANG_KEPT_SLOW: deprecated in sglang 0.5.23: use SGLANG_KEPT",
        "serving.env SGLANG_OLD_CACHE: renamed in sglang 0.5.23: use SGLANG_NEW_CACHE"]


def test_an_old_release_without_a_table_still_gets_the_opposite_name():
    old = EnvFacts(frozenset({"SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"}))
    new = EnvFacts(frozenset({"SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"}))
    assert env_renames(["SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK"], old, new, "0.5.23") == [
        "serving.env SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK: renamed in sglang 0.5.23: use "
        "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK, with the opposite meaning (set it to the opposite value)"]
    assert opposite("--disable-x") == "--enable-x" and opposite("SGLANG_ENABLE_Y") == "SGLANG_DISABLE_Y"
    assert opposite("--tp-size") is None


def test_flags_the_new_parser_deprecates_or_the_old_one_knew_and_the_new_one_lacks():
    old = FlagFacts(frozenset({"--model-path", "--disable-overlap", "--nsa-backend", "--dropped", "--old-alias"}),
                    {"--old-alias": "--renamed-by-table"})
    new = FlagFacts(frozenset({"--model-path", "--enable-overlap", "--dsa-backend", "--renamed-by-table",
                               "--cuda-graph"}), {"--model-path": ""})
    argv = ["--model-path", "m", "--disable-overlap", "--nsa-backend=x", "--dropped", "--old-alias", "v"]
    assert flag_renames(argv, old, new, "0.5.23") == [
        "serving flag --disable-overlap: renamed in sglang 0.5.23: use --enable-overlap, with the opposite meaning "
        "(set it to the opposite value)",
        "serving flag --dropped: removed in sglang 0.5.23, with no replacement",
        "serving flag --model-path: deprecated in sglang 0.5.23, with no replacement",
        "serving flag --nsa-backend: renamed in sglang 0.5.23: the closest name only it has is --dsa-backend (check "
        "its meaning)",
        "serving flag --old-alias: renamed in sglang 0.5.23: use --renamed-by-table"]
    deprecating = FlagFacts(frozenset({"--disable-cuda-graph", "--cuda-graph-mode", "--enable-dp-attention"}),
                            {"--disable-cuda-graph": "--cuda-graph-mode=disabled",
                             "--enable-dp-attention": "--attn-dp-size <dp-size>"})
    assert flag_renames(["--disable-cuda-graph", "--enable-dp-attention"], None, deprecating, "0.5.23") == [
        "serving flag --disable-cuda-graph: deprecated in sglang 0.5.23: use --cuda-graph-mode=disabled",
        "serving flag --enable-dp-attention: deprecated in sglang 0.5.23: --attn-dp-size <dp-size>"]
    told = FlagFacts(frozenset({"--metrics"}), {"--metrics": "--metrics is gone. Use --report-mode instead."})
    assert flag_renames(["--metrics"], told, FlagFacts(frozenset({"--report-mode"})), "0.5.23") == [
        "serving flag --metrics: renamed in sglang 0.5.23: --metrics is gone. Use --report-mode instead."]
    assert flag_renames(argv, old, None, "0.5.23") == []  # the new parser did not load: the argv check says so


def test_the_probes_output_and_a_wheel_are_read_as_they_come(tmp_path):
    assert FlagFacts.from_probe({"flags": ["--a"], "deprecated": {"--a": None}}) == FlagFacts(frozenset({"--a"}),
                                                                                             {"--a": ""})
    assert FlagFacts.from_probe({"skipped": "no parser"}) is None
    wheel = tmp_path / "sglang-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/srt/environ.py", NEW_ENVIRON)
        zf.writestr("sglang/broken.py", "SGLANG_X = (\n")
        zf.writestr("other/ignored.py", "SGLANG_ELSEWHERE = 1\n")
    assert wheel_env(wheel).read == {"SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "SGLANG_KEPT", "SGLANG_NEW_CACHE",
                                     "SGLANG_FLASH_MODE"}
    assert stack_renames(["--tp-size", "1"], {"SGLANG_KEPT_SLOW": "1"}, None, {"flags": ["--tp-size"]},
                         EnvFacts(), wheel_env(wheel), "9.9") == [
        "serving.env SGLANG_KEPT_SLOW: deprecated in sglang 9.9: use SGLANG_KEPT"]
