"""`invoke upgrade` and `invoke releases` on real SGLang releases from the package index.

Real: the index's release list, each release's wheel and METADATA (cached), the patch engine, uv (the
torch family and the lock), SGLang's own server argument parser from the wheel, the stacks file edit and
`invoke stacks --check`'s rules on what was written. Kernel coverage downloads gigabytes of CUDA wheels,
so these tests pass a coverage double (the real one runs in `benchmarks/upgrade/`); it speaks the real
`CoverageReport.to_dict()` shape.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from clirun import run_invoke

from sglstack.adapters.wheels import available_versions, fetch_wheel, wheel_metadata
from sglstack.cli.upgrade import upgrade_command
from sglstack.config.matrix import load_matrix
from sglstack.core.jsonreport import JsonReport
from sglstack.lock.conflicts import check_matrix, lock_findings
from sglstack.lockfile.current import is_current
from sglstack.lockfile.model import lock_path
from sglstack.lockfile.text import read_lock
from sglstack.upgrade import world as upgrade_world
from sglstack.upgrade.argv import check_argv
from sglstack.upgrade.releases import stack_releases

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.network


def coverage_double(stack):
    """Every cell native for the kernel package's main extension: no coverage change from the kernel."""
    caps = list(stack.cuda_arch_list)
    return {"complete": True, "label": ",".join(f"{c}:native" for c in caps), "violations": [],
            "packages": [{"package": stack.kernel_package, "version": stack.sgl_kernel.version, "checked": True}],
            "extensions": [{"name": "sgl_kernel.common_ops", "cells": dict.fromkeys(caps, "native")}]}


@pytest.fixture
def repo_copy(tmp_path, monkeypatch) -> Path:
    """The real matrix and its locks, in a folder of their own; outputs under tmp_path/build."""
    shutil.copy(REPO / "stacks.yaml", tmp_path / "stacks.yaml")
    shutil.copytree(REPO / "locks", tmp_path / "locks")
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    return tmp_path / "stacks.yaml"


def test_0_5_9_to_0_5_10_pins_a_write_that_cannot_confirm_every_pin_is_refused(repo_copy, tmp_path):
    """cu130's kernel comes from GitHub and its torch from PyTorch's index: where either is out of reach (here,
    and in CI), the new pins are the release's METADATA but unconfirmed, so `--write` writes nothing (exit 1);
    where both answer, the stack is moved and the lock written."""
    before = repo_copy.read_text()
    lock_before = lock_path(repo_copy, "cu130").read_bytes()
    code = upgrade_command(str(repo_copy), "cu130", "0.5.10", write=True,
                                   as_json=JsonReport(path=tmp_path / "u.json"),
                                   engines=upgrade_world.Engines(coverage=coverage_double))
    doc = json.loads((tmp_path / "u.json").read_text())
    assert doc["patches"] == {"kimi-k25-eagle3": "upstream"}  # the Kimi K2.5 patch went upstream in 0.5.10
    assert {k: doc["pins"][k] for k in ("sglang", "torch", "sglang-kernel", "flashinfer-python")} == {
        "sglang": "0.5.10", "torch": "2.9.1+cu130", "sglang-kernel": "0.4.1+cu130", "flashinfer-python": "0.6.7.post2"}
    assert {k: v["status"] for k, v in doc["overrides"].items()} == {
        "flashinfer_python==0.6.3": "dropped", "flashinfer_cubin==0.6.3": "dropped", "cuda-python==12.9": "kept"}
    assert doc["argv"]["accepted"] is True and doc["argv"]["flags"] > 100
    assert doc["bisect"] == "invoke bisect --stack cu130 --good 0.5.9 --bad 0.5.10"
    moved = {r["name"]: (r["before"], r["after"]) for r in doc["closure"]["packages"]}
    assert moved["xgrammar"] == ("0.1.27", "0.1.32") and moved["transformers"] == ("4.57.1", "5.3.0")
    if doc["guesses"]:
        assert set(doc["guesses"]) <= {"sglang-kernel", "torch", "torchvision", "torchaudio"}, doc["guesses"]
        assert (code, doc["verdict"]) == (1, "review")
        assert [r for r in doc["reasons"] if " is a guess: " in r] == [
            f"the new pin of {name} is a guess: {why}" for name, why in sorted(doc["guesses"].items())]
        assert repo_copy.read_text() == before and lock_path(repo_copy, "cu130").read_bytes() == lock_before
    else:
        assert (code, doc["verdict"]) == (0, "ready"), doc["reasons"]
        assert repo_copy.read_text() != before


def test_an_upgrade_every_pin_of_which_resolves_is_written_and_passes_stacks_check(repo_copy, tmp_path):
    """h200-field installs from PyPI alone: 0.5.17 -> 0.5.18 resolves whole, so `--write` moves the stack in
    place, writes its lock, and leaves every other line of the file as it was. The stack's `--cuda-graph-max-bs`
    is left out here: 0.5.18 deprecates it (--cuda-graph-max-bs-decode), which makes the upgrade a review
    (tests/e2e/test_upgrade_renames_wheels.py reads such renames)."""
    repo_copy.write_text(repo_copy.read_text().replace('"--cuda-graph-max-bs", "8", ', "", 1))
    before = repo_copy.read_text()
    code = upgrade_command(str(repo_copy), "h200-field", "0.5.18", write=True,
                                   as_json=JsonReport(path=tmp_path / "u.json"),
                                   engines=upgrade_world.Engines(coverage=coverage_double))
    doc = json.loads((tmp_path / "u.json").read_text())
    assert (code, doc["verdict"], doc["guesses"]) == (0, "ready", {}), doc["reasons"]
    assert doc["pins"]["sglang"] == "0.5.18"
    text = repo_copy.read_text()
    # only h200-field's lines moved: every other stack, and the comments, byte for byte
    assert text.split("\n  h200-field:")[0] == before.split("\n  h200-field:")[0]
    assert text.count("\n#") == before.count("\n#")
    matrix = load_matrix(repo_copy)
    stack = matrix.get("h200-field")
    assert stack.sglang.version == "0.5.18"
    assert is_current(read_lock(lock_path(repo_copy, "h200-field")), stack)
    findings = check_matrix(matrix) + lock_findings(matrix, str(repo_copy))
    assert [f.message for f in findings if f.is_failure and f.stack == "h200-field"] == []
    assert (tmp_path / "build" / "h200-field" / "upgrade" / "report.md").read_text().startswith(
        "# Upgrade h200-field: SGLang 0.5.17 -> 0.5.18")


def test_0_5_9_to_0_5_23_renames_the_kernel_and_moves_the_platform_tag(repo_copy, tmp_path):
    code = upgrade_command(str(repo_copy), "cu130", "0.5.23", as_name="cu130-next",
                                   as_json=JsonReport(path=tmp_path / "u.json"),
                                   engines=upgrade_world.Engines(coverage=coverage_double))
    doc = json.loads((tmp_path / "u.json").read_text())
    assert {k: doc["pins"][k] for k in ("sglang", "torch", "sglang-kernel", "flashinfer-python")} == {
        "sglang": "0.5.23", "torch": "2.14.1+cu130", "sglang-kernel": "0.4.10+cu130", "flashinfer-python": "0.7.2"}
    assert "sgl-kernel" not in doc["pins"] and "flashinfer-cubin" not in doc["pins"]
    assert doc["platform"] == {"wheel": "manylinux_2_34_x86_64", "glibc": "2.39"}
    assert doc["to"]["edits"]["glibc"] == "2.39"
    assert doc["overrides"]["cuda-python==12.9"]["status"] == "dropped"  # 0.5.23 requires cuda-python>=13.0
    assert doc["argv"]["accepted"] is True  # 0.5.23's msgspec-built parser, from the wheel
    # nothing written without --write: the file and its locks are as they were
    assert "cu130-next" not in repo_copy.read_text() and not lock_path(repo_copy, "cu130-next").exists()
    assert (tmp_path / "build" / "cu130-next" / "upgrade" / "lock.txt").is_file()
    # the PyTorch index and the GitHub kernel asset are unreachable here: the lock leaves them unresolved
    # and says so, their new pins are guesses (a review, exit 1); what the rest resolved is the release's
    assert doc["lock_error"] is None and doc["closure"]["after_count"] > 150
    guessed = [r for r in doc["reasons"] if " is a guess: " in r]
    assert (code, doc["verdict"]) == ((1, "review") if doc["guesses"] else (0, "ready")), doc["reasons"]
    assert len(guessed) == len(doc["guesses"]) and len(doc["reasons"]) == len(guessed)  # coverage: the double's


def test_a_release_whose_pins_need_an_override_is_review_and_writes_nothing(repo_copy, tmp_path):
    """A stack that pins xgrammar 0.1.27 itself: sglang 0.5.10 requires 0.1.32."""
    text = repo_copy.read_text().replace(
        "      - name: cu13-runtime-libs\n",
        "      - name: grammar\n        requirements: [\"xgrammar==0.1.27\"]\n      - name: cu13-runtime-libs\n")
    repo_copy.write_text(text)
    old_lock = read_lock(lock_path(repo_copy, "cu130"))
    # the conflict is found in METADATA, before any resolution: the earlier lock stands in for uv's (which
    # would fail on the same conflict, after half a minute)
    engines = upgrade_world.Engines(coverage=coverage_double, resolve=lambda stack, previous, glibc: old_lock)
    code = upgrade_command(str(repo_copy), "cu130", "0.5.10", write=True,
                                   as_json=JsonReport(path=tmp_path / "u.json"), engines=engines)
    doc = json.loads((tmp_path / "u.json").read_text())
    assert code == 1 and doc["verdict"] == "review"
    assert doc["conflicts"] == ["pins xgrammar==0.1.27 but sglang 0.5.10 requires 'xgrammar==0.1.32': declare it "
                                "under 'overrides' (replaces: xgrammar==0.1.32) or change the pin"]
    assert any(r.startswith("needs an override: pins xgrammar==0.1.27") for r in doc["reasons"])
    assert repo_copy.read_text() == text  # --write wrote nothing: the entry would fail `stacks --check`
    assert read_lock(lock_path(repo_copy, "cu130")).get("sglang").version == "0.5.9"


def test_a_release_that_does_not_exist_is_one_line_and_exit_2(repo_copy):
    proc = run_invoke("upgrade", "--stack", "cu130", "--sglang", "0.5.99", "--stacks-file", str(repo_copy),
                      cwd=repo_copy.parent, timeout=120)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    # the newest release is the index's (0.5.23 today): not pinned here, so a new release keeps this green
    assert line.startswith("error: --sglang 0.5.99: no such release of sglang on the package index (newest: 0.5.")
    assert not (repo_copy.parent / "build").exists()  # decided before any work


def test_releases_lists_what_each_newer_release_requires(repo_copy):
    stack = load_matrix(repo_copy).get("cu130")
    available = [v for v in available_versions("sglang") if v in ("0.5.9", "0.5.10", "0.5.10.post1", "0.5.10rc0")]
    result = stack_releases(stack, available, lambda v: wheel_metadata(fetch_wheel("sglang", v)))
    assert [r.sglang for r in result.releases] == ["0.5.10", "0.5.10.post1"]
    first = result.releases[0]
    assert (first.torch, first.kernel_package, first.kernel, first.flashinfer) == ("2.9.1", "sglang-kernel",
                                                                                  "0.4.1", "0.6.7.post2")


def test_releases_cli_writes_json(repo_copy, tmp_path):
    out = tmp_path / "r.json"
    proc = run_invoke("releases", "--stack", "pypi-cu130", "--json-out", str(out), "--stacks-file", str(repo_copy),
                      cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(out.read_text())
    assert list(doc) == ["pypi-cu130"] and doc["pypi-cu130"]["pinned"] == "0.5.23"
    for release in doc["pypi-cu130"]["releases"]:  # none today; any later one names what it requires
        assert {"sglang", "torch", "kernel_package", "kernel", "flashinfer", "requires"} <= set(release)


def test_the_parser_from_the_wheel_names_flags_a_release_lacks_and_bad_values():
    """0.5.23's --weight-cache-mode does not exist in 0.5.9; --tp-size takes an int; a renamed flag."""
    wheel = fetch_wheel("sglang", "0.5.9")
    versions = {"packaging": "26.4", "msgspec": "0.23.0"}
    out = check_argv(wheel, ["--model-path", "m", "--tp-size", "8", "--weight-cache-mode", "x"], versions.__getitem__)
    assert out["checked"] and out["unknown"] == {"--weight-cache-mode": None} and not out["accepted"]
    bad = check_argv(wheel, ["--model-path", "m", "--tp-size", "eight"], versions.__getitem__)
    assert bad["unknown"] == {}
    assert bad["errors"] == ["argument --tensor-parallel-size/--tp-size: invalid int value: 'eight'"]
    # 0.5.9's --nsa-decode-backend is --dsa-decode-backend in 0.5.23 (a msgspec-built parser)
    renamed = check_argv(fetch_wheel("sglang", "0.5.23"), ["--model-path", "m", "--nsa-decode-backend", "x"],
                         versions.__getitem__)
    assert renamed["unknown"] == {"--nsa-decode-backend": "--dsa-decode-backend"}


def test_an_interrupt_leaves_the_stacks_file_and_its_folder_as_they_were(repo_copy):
    """Ctrl-C (or SIGTERM, which the tasks turn into the same) while the lock resolves, with --write."""
    before = sorted(p.name for p in repo_copy.parent.iterdir()), repo_copy.read_bytes()
    lock_before = lock_path(repo_copy, "cu130").read_bytes()

    def interrupted(stack, previous, glibc):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        upgrade_command(str(repo_copy), "cu130", "0.5.10", write=True,
                                engines=upgrade_world.Engines(coverage=coverage_double, resolve=interrupted))
    after = sorted(p.name for p in repo_copy.parent.iterdir() if p.name != "build"), repo_copy.read_bytes()
    assert after == before  # no temporary stacks file left beside it, the file unchanged
    assert lock_path(repo_copy, "cu130").read_bytes() == lock_before
