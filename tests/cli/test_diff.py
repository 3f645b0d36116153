"""`invoke diff`: the pure comparison of records, locks and image facts, and the task on files."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import replace

from clirun import run_invoke
from rich.console import Console

from sglstack.diff.compare import (
    Change,
    Snapshot,
    StackDiff,
    diff_invocation_for,
    diff_summary,
    diff_table,
    diff_to_json,
    image_name_for_diff,
    image_snapshot,
    lock_snapshot,
    print_diff,
    record_snapshot,
    snapshot_diff,
)
from sglstack.lockfile.model import Lock, LockedPackage
from sglstack.lockfile.text import render_lock

SHA = {c: c * 64 for c in "0123456789abcdef"}


def record(**changes) -> dict:
    """A build record as build.py writes it (abridged to the fields diff reads)."""
    data = {
        "stack": "cu130", "target": "runtime", "image_id": "sha256:" + SHA["1"], "tag": "sglstack/cu130:111111111111",
        "config_hash": SHA["1"], "built_at": "2026-12-01T10:00:00+00:00",
        "pins": {"torch": "2.9.1+cu130", "flashinfer-python": "0.6.4", "sglang": "0.5.9"},
        "overrides": [],
        "patches": [{"id": "kimi-k25-eagle3", "status": "applied", "sha256_before": SHA["a"], "sha256_after": SHA["b"],
                     "file": "sglang/srt/models/kimi_k25.py"}],
        "installed": {"torch": "2.9.1+cu130", "flashinfer-python": "0.6.4", "sglang": "0.5.9", "idna": "3.7",
                      "chardet": "5.2.0", "pip": "24.0"},
        "torch": {"version": "2.9.1+cu130", "cuda": "13.0"},
        "base_image": {"name": "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04", "digest": "sha256:" + SHA["c"]},
        "sglang": {"version": "0.5.9", "git": None, "install_deps": True},
        "labels": {"io.sglstack.stack": "cu130", "io.sglstack.config-hash": SHA["1"],
                   "io.sglstack.pin.sglang": "0.5.9", "org.opencontainers.image.version": "0.5.9"},
    }
    data.update(changes)
    return data


def test_diff_between_two_records_names_every_changed_package():
    a = record()
    b = record(config_hash=SHA["2"],
               installed={**{k: v for k, v in a["installed"].items() if k != "chardet"}, "idna": "3.10",
                          "six": "1.16.0"},
               base_image={"name": a["base_image"]["name"], "digest": "sha256:" + SHA["d"]},
               patches=[{**a["patches"][0], "sha256_before": SHA["e"], "sha256_after": SHA["f"]}],
               labels={**a["labels"], "io.sglstack.config-hash": SHA["2"]})
    diff = snapshot_diff(record_snapshot(a, "a.json"), record_snapshot(b, "b.json"))
    assert {(c.name, c.kind, c.before, c.after) for c in diff.packages} == {
        ("chardet", "removed", "5.2.0", None), ("idna", "changed", "3.7", "3.10"), ("six", "added", None, "1.16.0")}
    assert [(c.name, c.after) for c in diff.base] == [("digest", "sha256:" + SHA["d"])]
    [patch] = diff.patches
    assert patch.name == "kimi-k25-eagle3" and patch.before == f"applied sha256:{SHA['a'][:16]}->{SHA['b'][:16]}"
    assert patch.after == f"applied sha256:{SHA['e'][:16]}->{SHA['f'][:16]}"
    assert diff.config_hash and diff.config_hash.after == SHA["2"]
    assert [c.name for c in diff.labels] == ["io.sglstack.config-hash"]
    assert not diff.pins and diff.sglang is None and not diff.unknown and not diff.identical


def test_two_local_bases_without_a_registry_digest_differ_by_image_id():
    # A base built here (debootstrap) has no registry digest; the record keeps the engine's id, so two
    # different local bases are still a difference (not "no difference").
    base = {"name": "sglstack/base:debian12-slim", "digest": None}
    a = record(base_image={**base, "image_id": "sha256:" + SHA["c"]})
    b = record(base_image={**base, "image_id": "sha256:" + SHA["d"]})
    diff = snapshot_diff(record_snapshot(a, "a.json"), record_snapshot(b, "b.json"))
    assert [(c.name, c.before, c.after) for c in diff.base] == [("image id", "sha256:" + SHA["c"],
                                                                  "sha256:" + SHA["d"])]
    assert not diff.identical
    same = snapshot_diff(record_snapshot(a, "a.json"), record_snapshot(record(base_image=dict(a["base_image"])), "c"))
    assert not same.base


def test_sglang_versions_and_git_commit_ranges():
    a = record(sglang={"version": None, "git": {"repo": "https://github.com/sgl-project/sglang", "ref": "1" * 40}},
               pins={})
    b = record(sglang={"version": None, "git": {"repo": "https://github.com/sgl-project/sglang", "ref": "2" * 40}},
               pins={})
    diff = snapshot_diff(record_snapshot(a, "a"), record_snapshot(b, "b"))
    assert (diff.sglang.before, diff.sglang.after) == ("git-" + "1" * 12, "git-" + "2" * 12)
    assert diff.sglang_commits == f"https://github.com/sgl-project/sglang: {'1' * 40}..{'2' * 40}"
    versions = snapshot_diff(record_snapshot(record(), "a"), record_snapshot(
        record(sglang={"version": "0.5.10"}, pins={**record()["pins"], "sglang": "0.5.10"}), "b"))
    assert (versions.sglang.before, versions.sglang.after) == ("0.5.9", "0.5.10")
    assert [(c.name, c.after) for c in versions.pins] == [("sglang", "0.5.10")]


def lock(**pins) -> Lock:
    return Lock(stack="cu130", stack_sha256=SHA["9"], resolved_at="2026-12-01T10:00:00Z", resolver="uv 0.13.9",
                python="3.12", platforms=("linux/amd64",), layers=("deps",),
                packages=tuple(LockedPackage(n, v, "deps", ("sha256:" + SHA["0"],)) for n, v in pins.items()))


def test_a_record_against_a_lock_compares_packages_and_says_what_a_lock_cannot_tell():
    diff = snapshot_diff(record_snapshot(record(), "record.json"),
                         lock_snapshot(lock(torch="2.9.1+cu130", sglang="0.5.9", idna="3.7"), "locks/cu130.txt"))
    assert {(c.name, c.kind) for c in diff.packages} == {("flashinfer-python", "removed"), ("chardet", "removed"),
                                                          ("pip", "removed")}
    assert "stack pins: not known for locks/cu130.txt" in diff.unknown
    assert "patches: not known for locks/cu130.txt" in diff.unknown


def test_image_facts_and_labels_make_a_snapshot():
    labels = {"io.sglstack.stack": "cu130", "io.sglstack.config-hash": SHA["1"],
              **{f"io.sglstack.pin.{k}": v for k, v in record()["pins"].items()},
              "io.sglstack.patch.kimi-k25-eagle3": f"applied sha256:{SHA['a'][:16]}->{SHA['b'][:16]}",
              "org.opencontainers.image.base.name": "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04",
              "org.opencontainers.image.base.digest": "sha256:" + SHA["c"], "io.sglstack.sglang": "0.5.9"}
    files = {"installed.json": json.dumps({"distributions": record()["installed"]}).encode(),
             "stack.json": json.dumps({"sglang": {"version": "0.5.9"}}).encode()}
    image = image_snapshot("reg:5000/sglstack/sglang@sha256:" + SHA["5"], labels, files)
    diff = snapshot_diff(record_snapshot(record(), "record.json"), image)
    assert not diff.packages and not diff.patches and not diff.base and not diff.pins and diff.sglang is None
    assert image.stack == "cu130" and image.config_hash == SHA["1"] and image.base_digest == "sha256:" + SHA["c"]


def test_json_output_carries_the_kind_of_every_change():
    a, b = record(), record(installed={**record()["installed"], "idna": "3.10"})
    data = diff_to_json(snapshot_diff(record_snapshot(a, "a"), record_snapshot(b, "b")))
    assert data["packages"] == [{"name": "idna", "before": "3.7", "after": "3.10", "kind": "changed"}]
    assert data["identical"] is False
    json.dumps(data)


def test_the_regression_gate_prints_the_diff_from_the_last_passing_image():
    assert diff_invocation_for("reg:5000/x@sha256:" + SHA["2"], "reg:5000/x@sha256:" + SHA["1"]) == (
        f"invoke diff reg:5000/x@sha256:{SHA['1']} reg:5000/x@sha256:{SHA['2']}")
    assert diff_invocation_for("a b", "c") == "invoke diff c 'a b'"


def test_diff_task_on_records_and_locks(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(record()))
    b.write_text(json.dumps(record(installed={**record()["installed"], "idna": "3.10"})))
    proc = run_invoke("diff", str(a), str(b), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [c["name"] for c in json.loads(proc.stdout)["packages"]] == ["idna"]
    table = run_invoke("diff", str(a), str(b), cwd=tmp_path)
    assert table.returncode == 0 and "idna" in table.stdout and "3.10" in table.stdout
    locked = tmp_path / "locks" / "cu130.txt"
    locked.parent.mkdir()
    locked.write_text(render_lock(lock(idna="3.7")))
    same = run_invoke("diff", str(locked), str(locked), cwd=tmp_path)
    assert same.returncode == 0 and "no difference" in same.stdout


def test_diff_task_errors_are_one_line(tmp_path):
    helped = run_invoke("diff", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "invoke diff BEFORE AFTER" in helped.stdout
    one = run_invoke("diff", "only-one", cwd=tmp_path)
    assert (one.returncode, one.stderr) == (
        2, "error: diff: missing argument AFTER (usage: invoke diff BEFORE AFTER [--options])\n")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    proc = run_invoke("diff", str(bad), str(bad), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {bad}: not a build record (no 'config_hash')"
    nothing = run_invoke("diff", "no-such-thing:1", str(bad), cwd=tmp_path, env={"DOCKER_HOST": "unix:///nonexistent"})
    assert nothing.returncode == 2 and len(nothing.stderr.strip().splitlines()) == 1
    assert "no-such-thing:1" in nothing.stderr


# ---- each snapshot, field by field ---------------------------------------------------------------

BASE = "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04"
PATCH_A_B = f"applied sha256:{SHA['a'][:16]}->{SHA['b'][:16]}"


def test_a_record_snapshot_is_every_field_of_the_record():
    assert record_snapshot(record(), "a.json") == Snapshot(
        ref="a.json", kind="record", stack="cu130", config_hash=SHA["1"], base_image=BASE,
        base_digest="sha256:" + SHA["c"],
        pins={"flashinfer-python": "0.6.4", "sglang": "0.5.9", "torch": "2.9.1+cu130"},
        packages={"chardet": "5.2.0", "flashinfer-python": "0.6.4", "idna": "3.7", "pip": "24.0", "sglang": "0.5.9",
                  "torch": "2.9.1+cu130"},
        patches={"kimi-k25-eagle3": PATCH_A_B}, sglang="0.5.9", sglang_git=None, labels=record()["labels"])


def test_a_sparse_record_falls_back_to_its_labels_and_pins():
    labels = {"org.opencontainers.image.base.name": "debian:bookworm-slim",
              "org.opencontainers.image.base.digest": "sha256:" + SHA["d"], "io.sglstack.sglang": "0.5.8"}
    sparse = {"stack": "cpu", "config_hash": SHA["2"], "base_image": "debian:bookworm-slim", "sglang": None,
              "pins": {"Flashinfer_Python": "0.6.4", "sglang": "0.5.7"}, "installed": {}, "labels": labels,
              "patches": {"kimi-k25-eagle3": PATCH_A_B}}  # a record written for a reused image: id -> label value
    assert record_snapshot(sparse, "b.json") == Snapshot(
        ref="b.json", kind="record", stack="cpu", config_hash=SHA["2"], base_image="debian:bookworm-slim",
        base_digest="sha256:" + SHA["d"], pins={"flashinfer-python": "0.6.4", "sglang": "0.5.7"}, packages=None,
        patches={"kimi-k25-eagle3": PATCH_A_B}, sglang="0.5.7", labels=labels)
    assert record_snapshot({**sparse, "pins": {}}, "b.json").sglang == "0.5.8"  # then the image's label
    bare = record_snapshot({"config_hash": SHA["2"]}, "c.json")
    assert bare == Snapshot(ref="c.json", kind="record", config_hash=SHA["2"])


def test_a_record_names_sglang_from_its_source_before_its_pins():
    # the source section is what the image was built from; a pin is a fallback for records without it
    by_version = record(pins={}, labels={})
    assert record_snapshot(by_version, "a").sglang == "0.5.9"
    from_git = record(sglang={"git": {"ref": "3" * 40}}, labels={})
    snap = record_snapshot(from_git, "b")
    assert (snap.sglang, snap.sglang_git) == ("git-" + "3" * 12, ("", "3" * 40))


def test_patch_entries_without_hashes_keep_one_format():
    entries = [{"id": "p1", "status": "skipped"}, "not an entry", {"id": "p2", "status": "applied",
                                                                   "sha256_before": SHA["e"], "sha256_after": SHA["f"]}]
    assert record_snapshot(record(patches=entries), "a").patches == {
        "p1": "skipped sha256:->", "p2": f"applied sha256:{SHA['e'][:16]}->{SHA['f'][:16]}"}
    assert record_snapshot(record(patches="applied"), "a").patches is None


def test_a_lock_snapshot_knows_its_packages_and_sglang_only():
    locked = lock(torch="2.9.1+cu130", sglang="0.5.9", idna="3.7")
    assert lock_snapshot(locked, "locks/cu130.txt") == Snapshot(
        ref="locks/cu130.txt", kind="lock", stack="cu130",
        packages={"idna": "3.7", "sglang": "0.5.9", "torch": "2.9.1+cu130"}, sglang="0.5.9", platform="linux/amd64")
    assert list(lock_snapshot(locked, "x").packages or {}) == ["idna", "sglang", "torch"]
    assert lock_snapshot(lock(idna="3.7"), "x").sglang is None
    from_url = replace(locked, packages=(LockedPackage("sglang", "", "deps", url="https://example.invalid/s.whl",
                                                       unhashed="url unreachable"),))
    assert lock_snapshot(from_url, "x").sglang is None


IMAGE_LABELS = {"io.sglstack.stack": "cu130", "io.sglstack.config-hash": SHA["1"], "io.sglstack.pin.torch": "2.9.1",
                "io.sglstack.patch.kimi-k25-eagle3": PATCH_A_B, "io.sglstack.sglang": "0.5.9",
                "org.opencontainers.image.base.name": BASE,
                "org.opencontainers.image.base.digest": "sha256:" + SHA["c"]}


def test_an_image_snapshot_reads_its_facts_files_before_its_labels():
    files = {"installed.json": json.dumps({"distributions": {"Torch": "2.9.1", "idna": "3.7"}}).encode(),
             "patches.json": json.dumps([{"id": "kimi-k25-eagle3", "status": "applied", "sha256_before": SHA["e"],
                                          "sha256_after": SHA["f"]}]).encode(),
             "stack.json": json.dumps({"sglang": {"git": {"repo": "r", "ref": "4" * 40}}}).encode()}
    assert image_snapshot("img", IMAGE_LABELS, files) == Snapshot(
        ref="img", kind="image", stack="cu130", config_hash=SHA["1"], base_image=BASE, base_digest="sha256:" + SHA["c"],
        pins={"torch": "2.9.1"}, packages={"idna": "3.7", "torch": "2.9.1"},
        patches={"kimi-k25-eagle3": f"applied sha256:{SHA['e'][:16]}->{SHA['f'][:16]}"}, sglang="git-" + "4" * 12,
        sglang_git=("r", "4" * 40), labels=IMAGE_LABELS)


def test_an_image_without_readable_facts_is_known_by_its_labels():
    expected = Snapshot(ref="img", kind="image", stack="cu130", config_hash=SHA["1"], base_image=BASE,
                        base_digest="sha256:" + SHA["c"], pins={"torch": "2.9.1"}, packages=None,
                        patches={"kimi-k25-eagle3": PATCH_A_B}, sglang="0.5.9", labels=IMAGE_LABELS)
    assert image_snapshot("img", IMAGE_LABELS, {}) == expected
    unreadable = {"installed.json": b"{not json", "patches.json": b"\xff", "stack.json": b"[]"}
    assert image_snapshot("img", IMAGE_LABELS, unreadable) == expected
    assert image_snapshot("img", IMAGE_LABELS, {"installed.json": b"[1]"}) == expected
    assert image_snapshot("img", IMAGE_LABELS, {"installed.json": b'{"distributions": {}}'}) == expected
    assert image_snapshot("img", {}, {}) == Snapshot(ref="img", kind="image", pins={}, patches={}, labels={})


# ---- what a diff prints and carries ----------------------------------------------------------------

def _a_bumped_diff():
    a = record()
    b = record(config_hash=SHA["2"], sglang={"version": "0.5.10"},
               pins={**a["pins"], "sglang": "0.5.10"},
               installed={**{k: v for k, v in a["installed"].items() if k != "chardet"}, "idna": "3.10",
                          "six": "1.16.0", "sglang": "0.5.10"},
               base_image={"name": "nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04", "digest": "sha256:" + SHA["d"]},
               patches=[], labels={**a["labels"], "org.opencontainers.image.version": "0.5.10"})
    return snapshot_diff(record_snapshot(a, "a.json"), record_snapshot(b, "b.json"))


def _rendered(renderable) -> list[str]:
    console = Console(file=io.StringIO(), width=240, color_system=None)
    console.print(renderable)
    return console.file.getvalue().splitlines()


def _rows(lines: list[str]) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]


def test_the_diff_table_has_one_row_per_change_in_section_order():
    lines = _rendered(diff_table(_a_bumped_diff()))
    assert [line.rstrip() for line in lines[:2]] == ["A = a.json (record)", "B = b.json (record)"]
    [header] = [[c.strip() for c in line.split("┃")[1:-1]] for line in lines if line.startswith("┃")]
    assert header == ["section", "name", "change", "A", "B"]
    assert _rows(lines) == [
        ["base image", "name", "changed", BASE, "nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04"],
        ["base image", "digest", "changed", "sha256:" + SHA["c"], "sha256:" + SHA["d"]],
        ["config hash", "config hash", "changed", SHA["1"], SHA["2"]],
        ["sglang", "sglang", "changed", "0.5.9", "0.5.10"],
        ["stack pin", "sglang", "changed", "0.5.9", "0.5.10"],
        ["package", "chardet", "removed", "5.2.0", "-"],
        ["package", "idna", "changed", "3.7", "3.10"],
        ["package", "sglang", "changed", "0.5.9", "0.5.10"],
        ["package", "six", "added", "-", "1.16.0"],
        ["patch", "kimi-k25-eagle3", "removed", PATCH_A_B, "-"],
        ["label", "org.opencontainers.image.version", "changed", "0.5.9", "0.5.10"],
    ]


def test_the_diff_table_shows_a_commit_range_of_one_repository():
    git = {"repo": "https://github.com/sgl-project/sglang"}
    a = record(sglang={"git": {**git, "ref": "1" * 40}}, pins={}, labels={})
    b = record(sglang={"git": {**git, "ref": "2" * 40}}, pins={}, labels={})
    assert _rows(_rendered(diff_table(snapshot_diff(record_snapshot(a, "a"), record_snapshot(b, "b"))))) == [
        ["sglang", "sglang", "changed", "git-" + "1" * 12, "git-" + "2" * 12],
        ["sglang", "commits", "range", f"{git['repo']}: {'1' * 40}..{'2' * 40}", ""],
    ]


def test_print_diff_says_no_difference_or_counts_the_packages():
    console = Console(file=io.StringIO(), width=240, color_system=None)
    same = snapshot_diff(record_snapshot(record(), "a"), lock_snapshot(lock(**record()["installed"]), "l"))
    print_diff(same, console)
    assert console.file.getvalue().splitlines() == [
        "no difference between a (record) and l (lock, linux/amd64)", "base image: not known for l",
        "stack pins: not known for l",
        "patches: not known for l", "labels: not known for l"]
    console = Console(file=io.StringIO(), width=240, color_system=None)
    print_diff(_a_bumped_diff(), console)
    lines = console.file.getvalue().splitlines()
    assert lines[-1] == "packages: 1 added, 1 removed, 2 changed"
    assert _rows(lines) == _rows(_rendered(diff_table(_a_bumped_diff())))


def test_the_summary_a_smoke_report_carries():
    assert diff_summary(_a_bumped_diff()) == {
        "identical": False,
        "packages": {"added": 1, "removed": 1, "changed": 2,
                     "first": ["chardet 5.2.0 -> (none)", "idna 3.7 -> 3.10", "sglang 0.5.9 -> 0.5.10",
                               "six (none) -> 1.16.0"]},
        "patches": [f"kimi-k25-eagle3 {PATCH_A_B} -> (none)"],
        "sglang": "sglang 0.5.9 -> 0.5.10",
        "sglang_commits": None,
        "base": ["name nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04 -> nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04",
                 f"digest sha256:{SHA['c']} -> sha256:{SHA['d']}"],
        "unknown": [],
    }
    many = record(installed={f"pkg{i:02d}": "1" for i in range(12)})
    summary = diff_summary(snapshot_diff(record_snapshot(record(installed={"pkg00": "0"}), "a"),
                                         record_snapshot(many, "b")))
    assert summary["packages"]["first"] == ["pkg00 0 -> 1", *(f"pkg{i:02d} (none) -> 1" for i in range(1, 10))]
    assert (summary["packages"]["added"], summary["packages"]["changed"], summary["sglang"]) == (11, 1, None)
    assert diff_summary(_a_bumped_diff(), limit=1)["packages"]["first"] == ["chardet 5.2.0 -> (none)"]
    lone = diff_summary(snapshot_diff(record_snapshot(record(), "a"), record_snapshot(record(), "b")))
    assert lone["identical"] is True and lone["packages"] == {"added": 0, "removed": 0, "changed": 0, "first": []}


def test_an_image_is_named_for_a_later_diff_by_its_registry_digest_first():
    digest = "reg:5000/x@sha256:" + SHA["2"]
    assert image_name_for_diff({"repo_digests": ["reg:5000/x:tag", digest, "reg:5000/y@sha256:" + SHA["3"]],
                                "id": "sha256:" + SHA["1"], "ref": "x:1"}) == digest
    assert image_name_for_diff({"repo_digests": ["reg:5000/x:tag"], "id": "sha256:" + SHA["1"], "ref": "x:1"}) == (
        "sha256:" + SHA["1"])
    assert image_name_for_diff({"repo_digests": None, "id": "", "ref": "x:1"}) == "x:1"
    assert image_name_for_diff({}) == ""


def test_json_output_of_single_changes_carries_their_kind():
    data = diff_to_json(_a_bumped_diff())
    assert data["config_hash"] == {"name": "config hash", "before": SHA["1"], "after": SHA["2"], "kind": "changed"}
    assert data["sglang"] == {"name": "sglang", "before": "0.5.9", "after": "0.5.10", "kind": "changed"}
    assert data["patches"] == [{"name": "kimi-k25-eagle3", "before": PATCH_A_B, "after": None, "kind": "removed"}]
    assert data["base"][0]["kind"] == "changed" and data["labels"][0]["kind"] == "changed"
    assert data["pins"] == [{"name": "sglang", "before": "0.5.9", "after": "0.5.10", "kind": "changed"}]
    same = diff_to_json(snapshot_diff(record_snapshot(record(), "a"), record_snapshot(record(), "b")))
    assert (same["config_hash"], same["sglang"], same["identical"]) == (None, None, True)


def test_the_whole_diff_of_a_record_against_a_lock():
    diff = snapshot_diff(lock_snapshot(lock(idna="3.7", sglang="0.5.9"), "l"), record_snapshot(record(), "r"))
    assert diff == StackDiff(
        a="l (lock, linux/amd64)", b="r (record)",
        packages=(Change("chardet", None, "5.2.0"), Change("flashinfer-python", None, "0.6.4"),
                  Change("pip", None, "24.0"), Change("torch", None, "2.9.1+cu130")),
        unknown=("base image: not known for l", "stack pins: not known for l", "patches: not known for l",
                 "labels: not known for l"))
    nothing = Snapshot(ref="x", kind="image")
    assert snapshot_diff(nothing, nothing).unknown == tuple(
        f"{s}: not known for x and x" for s in ("base image", "stack pins", "packages", "patches", "sglang", "labels"))


def test_a_base_known_by_name_only_and_a_source_that_moved_from_pypi_to_git():
    a = Snapshot(ref="a", kind="image", base_image="debian:12", sglang="0.5.9", config_hash=SHA["1"])
    b = Snapshot(ref="b", kind="image", base_image="debian:13", sglang="git-" + "1" * 12,
                 sglang_git=("r", "1" * 40), config_hash=SHA["1"])
    diff = snapshot_diff(a, b)
    assert (diff.base, diff.config_hash, diff.sglang, diff.sglang_commits) == (
        (Change("name", "debian:12", "debian:13"),), None, Change("sglang", "0.5.9", "git-" + "1" * 12), None)
    assert snapshot_diff(b, replace(b, sglang="git-" + "2" * 12, sglang_git=("other", "2" * 40))).sglang_commits is None
    digest_only = snapshot_diff(replace(a, base_image=None, base_digest="sha256:1"),
                                replace(a, base_image=None, base_digest="sha256:2"))
    assert digest_only.base == (Change("digest", "sha256:1", "sha256:2"),)
    assert "base image: not known for a" not in digest_only.unknown


def test_packages_known_on_one_side_only_are_not_all_added():
    image = image_snapshot("img", IMAGE_LABELS, {})  # no installed.json: its packages are unknown
    diff = snapshot_diff(record_snapshot(record(), "r"), image)
    assert diff.packages == () and "packages: not known for img" in diff.unknown


def test_a_narrow_terminal_folds_long_values_instead_of_cutting_them():
    def letters(width: int) -> Counter:
        console = Console(file=io.StringIO(), width=width, color_system=None)
        console.print(diff_table(_a_bumped_diff()))
        return Counter(c for c in console.file.getvalue() if c.isalnum())

    assert letters(60) == letters(240)  # every digit of a digest is printed, over several lines of its cell


def test_the_diff_prints_plain_words_in_a_colour_terminal():
    def printed(diff) -> list[str]:
        console = Console(file=io.StringIO(), width=240, force_terminal=True, color_system="standard")
        print_diff(diff, console)
        return console.file.getvalue().splitlines()

    locked = lock_snapshot(lock(**record()["installed"]), "locks/cu130.txt")
    same = snapshot_diff(record_snapshot(record(), "build/cu130/record.json"), locked)
    assert printed(same)[:2] == ["no difference between build/cu130/record.json (record) and locks/cu130.txt (lock, "
                                 "linux/amd64)",
                                 "\x1b[2mbase image: not known for locks/cu130.txt\x1b[0m"]
    assert printed(_a_bumped_diff())[-1] == "packages: 1 added, 1 removed, 2 changed"
