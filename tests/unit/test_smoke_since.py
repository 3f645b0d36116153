"""The smoke report's `since_last_pass`: `invoke diff OLD NEW` and the short summary of what changed.

Pure: the images are snapshots as diffsources reads them from the engine (labels + /opt/sglstack facts).
The engine path itself runs in test_smoke_e2e.py::test_a_regression_on_another_image_names_the_diff.
"""

from __future__ import annotations

import json

from sglstack.core.errors import ConfigError
from sglstack.diff.compare import image_name_for_diff, image_snapshot
from sglstack.smoke.report import markdown
from sglstack.smoke.since import since_last_pass, summary_lines

OLD_ID, NEW_ID = "sha256:" + "1" * 64, "sha256:" + "2" * 64
OLD = {"ref": "reg:5000/x:rc1", "digest": "sha256:" + "a" * 64, "id": OLD_ID,
       "repo_digests": ["reg:5000/x@sha256:" + "a" * 64]}
NEW = {"ref": "x:dev", "digest": "@" + NEW_ID, "id": NEW_ID, "repo_digests": []}
REFERENCE = {"time": "2026-12-01T10:00:00Z", "verdict": "pass", "image": OLD, "baseline": {"tokens_per_s": 89.0}}


def facts(version: str, idna: str, patch: str, commit: str) -> dict[str, bytes]:
    return {
        "installed.json": json.dumps(
            {"distributions": {"sglang": version, "idna": idna, "requests": "2.32.3"}}).encode(),
        "patches.json": json.dumps([{"id": "kimi-k25-eagle3", "status": patch, "sha256_before": "b" * 64,
                                     "sha256_after": "c" * 64}]).encode(),
        "stack.json": json.dumps({"sglang": {"git": {"repo": "https://git.example/sglang", "ref": commit}}}).encode(),
    }


SNAPSHOTS = {
    OLD_ID: image_snapshot(OLD_ID, {}, facts("0.5.9", "3.7", "applied", "d" * 40)),
    NEW_ID: image_snapshot(NEW_ID, {}, facts("0.5.10", "3.10", "already-applied", "e" * 40)),
}


def test_no_reference_or_the_same_image_has_nothing_to_diff():
    assert since_last_pass(None, NEW, SNAPSHOTS.get) is None
    assert since_last_pass({**REFERENCE, "image": NEW}, NEW, SNAPSHOTS.get) is None
    # the same digest under two refs is the same image
    same = {"digest": "sha256:x"}
    assert since_last_pass({**REFERENCE, "image": same}, {"ref": "y", **same}, SNAPSHOTS.get) is None


def test_another_image_gets_the_diff_command_and_what_changed():
    since = since_last_pass(REFERENCE, NEW, SNAPSHOTS.get)
    assert since is not None
    # the registry digest is the name that outlives the local engine; a never-pushed image goes by its id
    assert image_name_for_diff(OLD) == OLD["repo_digests"][0] and image_name_for_diff(NEW) == NEW_ID
    assert since["command"] == f"invoke diff {OLD['repo_digests'][0]} {NEW_ID}"
    summary = since["summary"]
    assert summary["packages"] == {"added": 0, "removed": 0, "changed": 2,
                                   "first": ["idna 3.7 -> 3.10", "sglang 0.5.9 -> 0.5.10"]}
    assert summary["patches"] == ["kimi-k25-eagle3 applied sha256:bbbbbbbbbbbbbbbb->cccccccccccccccc -> "
                                  "already-applied sha256:bbbbbbbbbbbbbbbb->cccccccccccccccc"]
    assert summary["sglang"] == f"sglang git-{'d' * 12} -> git-{'e' * 12}"
    assert summary["sglang_commits"] == f"https://git.example/sglang: {'d' * 40}..{'e' * 40}"
    lines = summary_lines(since)
    assert lines[0].startswith(f"The last passing run ({REFERENCE['time']}) smoked `{OLD['repo_digests'][0]}`")
    assert "- packages: 0 added, 0 removed, 2 changed (idna 3.7 -> 3.10; sglang 0.5.9 -> 0.5.10)" in lines


def test_an_image_no_longer_here_keeps_the_command_and_says_why_there_is_no_summary():
    since = since_last_pass(REFERENCE, NEW, {NEW_ID: SNAPSHOTS[NEW_ID]}.get)
    assert since is not None and since["summary"] is None and since["command"].startswith("invoke diff reg:5000/x@")
    gone = f"{OLD['repo_digests'][0]} is no longer on this host (no local image, no build record)"
    assert since["unreadable"] == gone

    def broken(name: str):
        raise ConfigError("not a build record (no 'config_hash')", file="record.json")

    assert "not a build record" in since_last_pass(REFERENCE, NEW, broken)["unreadable"]


def test_the_markdown_report_carries_the_command_and_the_summary():
    data = {"verdict": "fail", "stack": "synth", "time": "t1", "failures": ["max_regression: baseline slower"],
            "image": NEW, "options": {"concurrency": 1}, "baseline": {}, "eagle3": {}, "speedup": None,
            "accept_length": None, "agreement": None, "since_last_pass": since_last_pass(REFERENCE, NEW, SNAPSHOTS.get)}
    text = markdown(data, [], "r.png")
    section = text.split("## Since the last passing run", 1)[1]
    assert f"`invoke diff {OLD['repo_digests'][0]} {NEW_ID}`" in section
    assert "- SGLang: sglang git-dddddddddddd -> git-eeeeeeeeeeee (https://git.example/sglang:" in section
    assert "- patches: kimi-k25-eagle3 applied" in section
    assert "## Since the last passing run" not in markdown({**data, "since_last_pass": None}, [], "r.png")


# ---- exact identities and lines (what the mutation run showed unchecked) ---------------------------


def test_same_image_trusts_ids_when_both_have_one_else_a_shared_digest():
    from sglstack.smoke.since import same_image

    assert same_image({"id": "1", "digest": "d"}, {"id": "2", "digest": "d"}) is False  # ids decide
    assert same_image({"id": "1", "digest": "d1"}, {"id": "1", "digest": "d2"}) is True
    assert same_image({"id": "1", "digest": "d"}, {"digest": "d"}) is True  # one id only: the digest decides
    assert same_image({"digest": "d"}, {"id": "1", "digest": "d"}) is True
    assert same_image({"digest": "d"}, {"digest": "e"}) is False
    assert same_image({}, {}) is False  # nothing names either: not known to be the same


def test_an_image_is_read_by_its_ref_when_neither_its_id_nor_its_registry_digest_is_here():
    old = {"ref": "reg:5000/x:rc1", "digest": "sha256:" + "a" * 64, "repo_digests": OLD["repo_digests"]}
    local = {"reg:5000/x:rc1": SNAPSHOTS[OLD_ID], NEW_ID: SNAPSHOTS[NEW_ID]}
    since = since_last_pass({**REFERENCE, "image": old}, NEW, local.get)
    assert since is not None and since["unreadable"] is None and since["summary"]["packages"]["changed"] == 2


def test_a_reference_without_an_image_record_has_nothing_to_diff():
    assert since_last_pass({**REFERENCE, "image": "reg:5000/x:rc1"}, NEW, SNAPSHOTS.get) is None
    assert since_last_pass({**REFERENCE, "image": {}}, NEW, SNAPSHOTS.get) is None


def test_an_unreadable_side_gives_the_exact_record_and_lines():
    since = since_last_pass(REFERENCE, NEW, {}.get)
    command = f"invoke diff {OLD['repo_digests'][0]} {NEW_ID}"
    gone = f"{OLD['repo_digests'][0]} is no longer on this host (no local image, no build record)"
    assert since == {"last_pass_time": REFERENCE["time"], "last_pass_image": OLD["repo_digests"][0],
                     "command": command, "summary": None, "unreadable": gone}
    head = (f"The last passing run ({REFERENCE['time']}) smoked `{OLD['repo_digests'][0]}`; "
            f"see what changed with `{command}`.")
    assert summary_lines(since) == [head, "", f"No summary: {gone}.", ""]
    identical = {**since, "summary": {"identical": True}}
    assert summary_lines(identical) == [head, "", "Both images hold the same packages, patches and SGLang.", ""]


def test_summary_lines_show_the_first_packages_and_say_when_there_are_more():
    summary = {"identical": False, "packages": {"added": 1, "removed": 1, "changed": 1, "first": ["a 1 -> 2", "b"]},
               "patches": ["p1 a -> b", "p2 (none) -> c"], "sglang": None, "sglang_commits": None,
               "base": ["base x -> y", "label z -> w"],
               "unknown": ["stack.json: unreadable"]}
    since = {"last_pass_time": "t0", "last_pass_image": "old", "command": "invoke diff old new", "summary": summary}
    assert summary_lines(since)[2:] == ["- packages: 1 added, 1 removed, 1 changed (a 1 -> 2; b; ...)",
                                        "- patches: p1 a -> b; p2 (none) -> c", "- SGLang: unchanged",
                                        "- base image: base x -> y; label z -> w",
                                        "- stack.json: unreadable", ""]
    every = {**summary, "packages": {"added": 0, "removed": 1, "changed": 1, "first": ["a 1 -> 2", "b"]},
             "patches": [], "base": [], "unknown": [], "sglang": "sglang 1 -> 2", "sglang_commits": "repo: x..y"}
    assert summary_lines({**since, "summary": every})[2:] == [
        "- packages: 0 added, 1 removed, 1 changed (a 1 -> 2; b)", "- patches: unchanged",
        "- SGLang: sglang 1 -> 2 (repo: x..y)", ""]
    none = {**every, "packages": {"added": 0, "removed": 0, "changed": 0, "first": []}}
    assert summary_lines({**since, "summary": none})[2] == "- packages: 0 added, 0 removed, 0 changed"
