"""`invoke diff`: the pure comparison of records, locks and image facts, and the task on files."""

from __future__ import annotations

import json

from cli import run_invoke

from sglstack.diff import (
    diff_command_for,
    diff_to_json,
    image_snapshot,
    lock_snapshot,
    record_snapshot,
    snapshot_diff,
)
from sglstack.lockfile import Lock, LockedPackage, render_lock

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
    assert diff_command_for("reg:5000/x@sha256:" + SHA["2"], "reg:5000/x@sha256:" + SHA["1"]) == (
        f"invoke diff reg:5000/x@sha256:{SHA['1']} reg:5000/x@sha256:{SHA['2']}")
    assert diff_command_for("a b", "c") == "invoke diff c 'a b'"


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
    assert helped.returncode == 0 and "invoke diff A B" in helped.stdout
    one = run_invoke("diff", "only-one", cwd=tmp_path)
    assert one.returncode != 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    proc = run_invoke("diff", str(bad), str(bad), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"error: {bad}: not a build record (no 'config_hash')"
    nothing = run_invoke("diff", "no-such-thing:1", str(bad), cwd=tmp_path, env={"DOCKER_HOST": "unix:///nonexistent"})
    assert nothing.returncode == 1 and len(nothing.stderr.strip().splitlines()) == 1
    assert "no-such-thing:1" in nothing.stderr
