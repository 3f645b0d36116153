"""`invoke diff` of indexes, pure: each platform compared with the same platform of the other side, the platforms
only one side has said as added or removed, and a side that names no platform compared with the other's first."""

from __future__ import annotations

from sglstack.diff.compare import Snapshot
from sglstack.diff.platforms import Side, index_diff, index_diff_to_json


def _snap(ref: str, sglang: str) -> Snapshot:
    return Snapshot(ref=ref, kind="image", stack="s", sglang=sglang, labels={})


def test_platforms_are_matched_by_platform_and_the_others_are_added_or_removed():
    a = Side("r/x:1", {"linux/amd64": _snap("a1", "0.5.9"), "linux/arm64": _snap("a2", "0.5.9")}, index=True)
    b = Side("r/x:2", {"linux/arm64": _snap("b2", "0.5.10"), "linux/riscv64": _snap("b3", "0.5.10")}, index=True)
    diff = index_diff(a, b)
    assert (diff.added, diff.removed) == (("linux/riscv64",), ("linux/amd64",))
    assert [(p, d.a, d.b, d.sglang.before, d.sglang.after) for p, d in diff.platforms] == [
        ("linux/arm64", "a2 (image)", "b2 (image)", "0.5.9", "0.5.10")]
    assert not diff.identical and diff.notes == ()
    data = index_diff_to_json(diff)
    assert (data["added_platforms"], data["removed_platforms"], data["index"]) == (["linux/riscv64"],
                                                                                   ["linux/amd64"], True)
    assert [p["platform"] for p in data["platforms"]] == ["linux/arm64"]


def test_the_same_index_is_identical_and_a_single_image_is_matched_by_its_platform():
    both = {"linux/amd64": _snap("a1", "0.5.9"), "linux/arm64": _snap("a2", "0.5.9")}
    assert index_diff(Side("i", both, True), Side("i", both, True)).identical
    single = Side("r/x@sha256:a", {"linux/arm64": _snap("s", "0.5.9")}, index=False)
    diff = index_diff(Side("i", both, True), single)
    assert (diff.removed, [p for p, _ in diff.platforms], diff.identical) == (("linux/amd64",), ["linux/arm64"],
                                                                             False)


def test_a_side_that_names_no_platform_is_compared_with_the_others_first_and_said_so():
    index = Side("i", {"linux/amd64": _snap("a1", "0.5.9"), "linux/arm64": _snap("a2", "0.5.9")}, True)
    diff = index_diff(Side("build/s/record.json", {None: _snap("r", "0.5.9")}, False), index)
    assert [p for p, _ in diff.platforms] == ["linux/amd64"] and diff.added == ("linux/arm64",)
    assert diff.notes == ("A (build/s/record.json) names no platform (a local image, a build record or a lock): "
                          "compared with linux/amd64, the other side's first",)


def test_a_side_of_one_platform_is_compared_with_that_platform_of_an_index_and_refused_where_it_has_none():
    """A lock (or a local image) of linux/arm64 against an index: its own platform, never the index's first; an
    index without it is bad input (a comparison across platforms would show every package as changed)."""
    import pytest

    from sglstack.core.errors import ConfigError

    index = Side("r/x:both", {"linux/amd64": _snap("a1", "0.5.9"), "linux/arm64": _snap("a2", "0.5.10")}, True)
    arm = Side("locks/s.linux-arm64.txt", {"linux/arm64": _snap("l", "0.5.10")}, False)
    diff = index_diff(arm, index)
    assert ([p for p, _ in diff.platforms], diff.added, diff.notes, diff.platforms[0][1].sglang) == (
        ["linux/arm64"], ("linux/amd64",), (), None)
    x86 = Side("r/x:x86", {"linux/amd64": _snap("a1", "0.5.9")}, True)
    for a, b, said in ((arm, x86, "A (locks/s.linux-arm64.txt) is linux/arm64, and B (r/x:x86)"),
                       (x86, arm, "B (locks/s.linux-arm64.txt) is linux/arm64, and A (r/x:x86)")):
        with pytest.raises(ConfigError) as err:
            index_diff(a, b)
        assert str(err.value) == (f"diff: {said} is an index without linux/arm64 (it has linux/amd64): nothing to "
                                  "compare")
        assert err.value.exit_code == 2


def test_a_build_record_of_arm64_is_compared_with_the_arm64_image_of_an_index(tmp_path):
    """A build record says its platform (`build/NAME.linux-arm64/record.json`), but diff read none: the arm64
    record was compared with the index's amd64 image (every shared object "changed"), with a note that it named
    no platform. The record's platform now picks the child, as a lock's and a local image's do."""
    import json

    from sglstack.diff.sources import load_side

    record = {"stack": "s", "config_hash": "c" * 64, "platform": "linux/arm64", "image_id": "sha256:" + "1" * 64,
              "base_image": {"name": "b"}, "pins": {"sglang": "0.5.9"}, "installed": {"sglang": "0.5.9"}}
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    side = load_side(str(path))
    assert list(side.platforms) == ["linux/arm64"] and not side.index
    index = Side("i", {"linux/amd64": _snap("a1", "0.5.9"), "linux/arm64": _snap("a2", "0.5.9")}, True)
    diff = index_diff(side, index)
    assert [p for p, _ in diff.platforms] == ["linux/arm64"] and diff.added == ("linux/amd64",) and diff.notes == ()
