"""`invoke upgrade`'s shell in process: every engine a double (no index, no uv, no Docker), a stand-in
SGLang wheel that carries only its METADATA, the files it writes and the lines it prints checked whole."""

from __future__ import annotations

import errno
import io
import json
import os
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from upgrade_fixtures import STACKS, World, lock_of

from sglstack.cli.upgrade import upgrade_command
from sglstack.core import console as console_mod
from sglstack.core import errors
from sglstack.core.errors import SglstackError
from sglstack.core.jsonreport import JsonReport
from sglstack.core.safefiles import OutputNotWritable
from sglstack.lockfile.model import Lock, LockedPackage, UnresolvedLayer, lock_path
from sglstack.lockfile.text import read_lock, render_lock, write_lock
from sglstack.upgrade import command, edit, engines, planning
from sglstack.upgrade import inputs as upgrade_inputs
from sglstack.upgrade import locks as upgrade_locks
from sglstack.upgrade import plan as planner
from sglstack.upgrade.releases import ReleasePins

TORCH_STACK = """
  t1:
    description: PyTorch 2.9.1, SGLang 0.5.9
    base_image: debian:bookworm-slim
    torch:
      version: 2.9.1
      packages: ["torchvision==0.24.1"]
    sglang:
      version: 0.5.9
"""


@pytest.fixture()
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    (tmp_path / "stacks.yaml").write_text(STACKS)
    return tmp_path / "stacks.yaml"


@pytest.fixture()
def clock(monkeypatch) -> None:
    """Each reading of the clock a quarter second after the last: the phases and the total are known (and
    their rounding to tenths seen)."""
    ticks = iter(range(400, 500))
    monkeypatch.setattr(command, "time", types.SimpleNamespace(monotonic=lambda: next(ticks) / 4))


PHASES = ["reading sglang 0.5.10's METADATA", "judging the patches",
          "finding sglang 0.5.10's wheel for Python 3.12", "resolving torch's family", "resolving the new lock",
          "kernel coverage before and after", "the serving argv through sglang 0.5.10's parser",
          "what sglang 0.5.10 renames of the flags and environment the stack sets"]


def _lines(capsys) -> list[str]:
    return [line.rstrip() for line in capsys.readouterr().out.splitlines()]


def test_a_ready_upgrade_without_write_leaves_the_file_and_reports(repo, tmp_path, clock, capsys) -> None:
    write_lock(lock_path(repo, "s1"), lock_of("s1", sglang="0.5.9", xgrammar="0.1.27", gone="1.0"))
    new = lock_of("s1", sglang="0.5.10", xgrammar="0.1.30", added="2.0")
    world = World(tmp_path, lock=new)
    code = upgrade_command(str(repo), "s1", "0.5.10", as_json=JsonReport(path=tmp_path / "u.json"),
                                   engines=world.engines())
    assert code == 0
    assert repo.read_text() == STACKS and read_lock(lock_path(repo, "s1")).get("sglang").version == "0.5.9"
    out = tmp_path / "build" / "s1" / "upgrade"
    assert sorted(p.name for p in out.iterdir()) == ["lock.txt", "report.json", "report.md"]
    assert (out / "lock.txt").read_text() == render_lock(new)
    doc = json.loads((out / "report.json").read_text())
    assert (tmp_path / "u.json").read_text() == (out / "report.json").read_text()
    assert (out / "report.json").read_text() == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    assert doc["seconds"] == 2.5 and doc["phases_s"] == dict.fromkeys(PHASES, 0.2)  # 2.5 and 0.25, to tenths
    assert doc["verdict"] == "ready" and doc["reasons"] == [] and doc["conflicts"] == [] and doc["notes"] == []
    assert doc["to"] == {"stack": "s1", "sglang": "0.5.10",
                         "edits": {"description": "SGLang 0.5.10 on Debian", "sglang": {"version": "0.5.10"}}}
    assert doc["platform"] == {"wheel": "manylinux_2_28_x86_64", "glibc": "2.28"}
    assert doc["closure"] == {"before_count": 3, "after_count": 3, "lock_path": str(out / "lock.txt"),
                              "counts": {"added": 1, "removed": 1, "changed": 2},
                              "packages": [{"name": "added", "before": None, "after": "2.0", "kind": "added"},
                                           {"name": "gone", "before": "1.0", "after": None, "kind": "removed"},
                                           {"name": "sglang", "before": "0.5.9", "after": "0.5.10",
                                            "kind": "changed"},
                                           {"name": "xgrammar", "before": "0.1.27", "after": "0.1.30",
                                            "kind": "changed"}]}
    assert doc["coverage"] == {"checked": False, "changes": [], "lost": [], "new_violations": [], "complete": False,
                               "why": "the stack lists no cuda_arch_list, or cuobjdump is not available"}
    assert doc["argv"]["argv"] == ["--model-path", "org/model", "--tp-size", "1", "--host", "0.0.0.0", "--port",
                                   "30000", "--mem-fraction-static", "0.8"]
    assert doc["bisect"] == "invoke bisect --stack s1 --good 0.5.9 --bad 0.5.10"
    assert (out / "report.md").read_text().startswith("# Upgrade s1: SGLang 0.5.9 -> 0.5.10\n\n**Verdict: ready**")
    assert world.calls[:8] == [
        ("available", "sglang"), ("wheel", "0.5.10"), ("glibc", "s1"), ("platform", "s1", "0.5.10"),
        ("family", "s1", "0.5.10", "2.36"),
        ("resolve", "s1", "0.5.10", {"sglang": "0.5.9", "xgrammar": "0.1.27", "gone": "1.0"}, "2.36"),
        ("coverage", "s1", "0.5.9"), ("coverage", "s1", "0.5.10")]
    # the argv's package versions: the new lock's, else the release's exact pin, else the newest release
    (argv_call,) = [c for c in world.calls if c[0] == "argv"]
    assert argv_call[1] == "sglang-0.5.10-py3-none-any.whl" and argv_call[3:] == ("0.1.30", "0.1.11", "0.19.0")
    printed = capsys.readouterr()
    assert printed.err == ""  # the phases are a progress bar on a terminal's stderr, nothing in a pipe
    lines = [line.rstrip() for line in printed.out.splitlines()]
    assert lines[:3] == ["Upgrade s1: SGLang 0.5.9 -> 0.5.10", "",
                           "Verdict: ready (nothing needs a reviewer's decision)"]  # the report, rendered
    assert lines[-1] == f"upgrade s1 -> sglang 0.5.10: ready in 2.5 s; report {out / 'report.md'}"


def test_write_replaces_the_file_and_its_lock_together(repo, tmp_path, clock, capsys) -> None:
    new = lock_of("s1-next", sglang="0.5.10", xgrammar="0.1.27")
    world = World(tmp_path, lock=new)
    code = upgrade_command(str(repo), "s1", "0.5.10", as_name="s1-next", write=True, engines=world.engines())
    assert code == 0
    assert repo.read_text() == STACKS + "\n  s1-next:\n    description: SGLang 0.5.10 on Debian\n    inherits: s1\n" \
                                        "    sglang:\n      version: 0.5.10\n"
    assert read_lock(lock_path(repo, "s1-next")) == new
    assert lock_path(repo, "s1-next").read_text() == render_lock(new, stacks_file="stacks.yaml")
    out = tmp_path / "build" / "s1-next" / "upgrade"
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]  # the lock went to locks/
    doc = json.loads((out / "report.json").read_text())
    assert doc["closure"] == {"before_count": None, "after_count": 2, "packages": [],
                              "lock_path": str(lock_path(repo, "s1-next")), "counts": {},
                              "note": "no earlier lock to compare with"}
    assert ("resolve", "s1-next", "0.5.10", None, "2.36") in world.calls
    # no temporary file left beside either
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert [p.name for p in (tmp_path / "locks").iterdir()] == ["s1-next.txt"]
    assert _lines(capsys)[-1] == (f"upgrade s1 -> sglang 0.5.10: ready in 2.5 s; report {out / 'report.md'}; "
                                  f"wrote {repo} and {lock_path(repo, 's1-next')}")


def test_a_conflict_makes_review_and_write_writes_nothing(repo, tmp_path, clock, capsys) -> None:
    world = World(tmp_path, requires="xgrammar==0.1.32", lock=lock_of("s1", sglang="0.5.10"))
    code = upgrade_command(str(repo), "s1", "0.5.10", write=True, engines=world.engines())
    assert code == 1
    assert repo.read_text() == STACKS and not lock_path(repo, "s1").exists()
    doc = json.loads((tmp_path / "build" / "s1" / "upgrade" / "report.json").read_text())
    conflict = ("pins xgrammar==0.1.27 but sglang 0.5.10 requires 'xgrammar==0.1.32': declare it under "
                "'overrides' (replaces: xgrammar==0.1.32) or change the pin")
    assert doc["conflicts"] == [conflict] and doc["reasons"] == [f"needs an override: {conflict}"]
    assert doc["notes"] == [f"--write: nothing written: the new entry would not pass `invoke stacks --check` "
                            f"({repo} is unchanged)"]
    assert sorted(p.name for p in (tmp_path / "build" / "s1" / "upgrade").iterdir()) == ["report.json", "report.md"]
    out = tmp_path / "build" / "s1" / "upgrade"
    assert _lines(capsys)[-1] == f"upgrade s1 -> sglang 0.5.10: review in 2.5 s; report {out / 'report.md'}"


def test_a_lock_that_does_not_resolve_is_review(repo, tmp_path, clock) -> None:
    world = World(tmp_path, lock_error="layer grammar: no solution")
    assert upgrade_command(str(repo), "s1", "0.5.10", write=True, engines=world.engines()) == 1
    doc = json.loads((tmp_path / "build" / "s1" / "upgrade" / "report.json").read_text())
    assert doc["lock_error"] == "layer grammar: no solution" and doc["closure"] == {}
    assert doc["reasons"] == ["the lock does not resolve: layer grammar: no solution"]
    assert doc["notes"][-1].startswith("--write: nothing written")
    assert repo.read_text() == STACKS
    # without --write there is nothing to say about writing
    assert upgrade_command(str(repo), "s1", "0.5.10", engines=world.engines()) == 1
    assert json.loads((tmp_path / "build" / "s1" / "upgrade" / "report.json").read_text())["notes"] == []


def test_plan_upgrade_judges_patches_and_coverage_with_the_engines(repo, tmp_path) -> None:
    """A stack with patches and a coverage report: the patch engine's statuses and details, the coverage
    change, an argv the serving spec refuses."""
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, World(tmp_path).available)
    stack = inputs.stack.model_copy(update={"patches": ("p-a", "kimi-k25-eagle3")})
    inputs = upgrade_inputs.Inputs(inputs.stacks_file, inputs.matrix, stack, "0.5.10", "s1", False, None)
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    judged: list[tuple[str, Any]] = []
    world.patches = lambda version, s: judged.append((version, s)) or {  # type: ignore[method-assign]
        "p-a": (planner.UPSTREAM, "upstream has it"), "kimi-k25-eagle3": (planner.DRIFTED, "hunk 1 failed")}
    reports = iter([{"complete": True, "label": "a", "violations": [], "extensions": [
        {"name": "k.so", "cells": {"9.0": "native"}}]}, {"complete": True, "label": "b", "violations": [],
                                                         "extensions": [{"name": "k.so", "cells": {"9.0": "ptx"}}]}])
    world.coverage = lambda s: next(reports)  # type: ignore[method-assign]
    messages: list[str] = []
    plan, text, lock = planning.plan_upgrade(inputs, world.engines(), progress=messages.append)
    assert messages == PHASES and lock == world.lock and judged == [("0.5.10", stack)]
    assert plan.patches == {"p-a": "upstream", "kimi-k25-eagle3": "drifted"}
    assert plan.patch_details == {"p-a": "upstream has it", "kimi-k25-eagle3": "hunk 1 failed"}
    assert plan.derivation.retired_patches == ("p-a",)
    assert plan.coverage["lost"] == [{"extension": "k.so", "capability": "9.0", "before": "native", "after": "ptx"}]
    assert "why" not in plan.coverage
    assert plan.reasons == ("patch(es) drifted against sglang 0.5.10: kimi-k25-eagle3",
                            "kernel coverage lost: k.so on 9.0 (native -> ptx)")
    assert (plan.stack, plan.new_stack, plan.from_version, plan.to_version) == ("s1", "s1", "0.5.9", "0.5.10")
    assert plan.pins_before["sglang"] == "0.5.9" and plan.pins["sglang"] == "0.5.10"
    assert plan.closure["lock_path"] == str(tmp_path / "build" / "s1" / "upgrade" / "lock.txt")
    assert "version: 0.5.10" in text and lock_path(repo, "s1").exists() is False


def test_a_serving_spec_the_release_cannot_take_skips_the_argv(repo, tmp_path, monkeypatch) -> None:
    def refuse(spec):
        raise planning.ServingError("no serving argv: a reason")

    monkeypatch.setattr(planning, "serving_argv", refuse)
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, World(tmp_path).available)
    plan, _, _ = planning.plan_upgrade(inputs, World(tmp_path, lock=lock_of("s1")).engines())
    assert plan.argv == {"checked": False, "argv": [], "skipped": "no serving argv: a reason"}
    assert plan.reasons == ("serving argv not checked: no serving argv: a reason",)


def test_an_upgraded_entry_that_does_not_validate_leaves_the_file(repo, tmp_path, monkeypatch) -> None:
    with pytest.raises(SglstackError) as err:
        edit.load_upgraded(repo, STACKS.replace("version: 0.5.9", "version: banana"), "s1")
    assert str(err.value).startswith("the upgraded entry of stack 's1' does not validate (")
    assert str(err.value).endswith(f"); {repo} is unchanged")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stacks.yaml"]  # no temporary file left
    assert edit.load_upgraded(repo, STACKS, "s1").sglang.version == "0.5.9"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stacks.yaml"]


def test_write_upgrade_undoes_the_lock_when_the_file_cannot_be_replaced(tmp_path, monkeypatch) -> None:
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text("old\n")
    lock_file = tmp_path / "locks" / "s1.txt"
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst) == stacks:
            raise OSError(errno.EROFS, "Read-only file system")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    message = f"{stacks}: cannot be written (Read-only file system); no file was replaced"
    with pytest.raises(OutputNotWritable) as err:
        upgrade_locks.write_upgrade(stacks, "new\n", lock_file, lock_of("s1", sglang="0.5.10"))
    assert str(err.value) == message
    assert not lock_file.exists() and stacks.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["locks", "stacks.yaml"]
    lock_file.write_text("previous lock\n")
    with pytest.raises(OutputNotWritable) as err:
        upgrade_locks.write_upgrade(stacks, "new\n", lock_file, lock_of("s1", sglang="0.5.10"))
    assert str(err.value) == message
    assert lock_file.read_text() == "previous lock\n" and stacks.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["locks", "s1.txt", "stacks.yaml"]
    monkeypatch.setattr(os, "replace", real_replace)
    upgrade_locks.write_upgrade(stacks, "new\n", lock_file, lock_of("s1", sglang="0.5.10"))
    assert stacks.read_text() == "new\n"
    assert lock_file.read_text() == render_lock(lock_of("s1", sglang="0.5.10"), stacks_file="stacks.yaml")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["locks", "s1.txt", "stacks.yaml"]


# ---- bad input and the default engines -------------------------------------------------------------------

def test_check_inputs_whole(repo, tmp_path) -> None:
    available = World(tmp_path).available
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", "s1-next", True, available)
    assert (inputs.stacks_file, inputs.version, inputs.new_name, inputs.write) == (repo, "0.5.10", "s1-next", True)
    assert inputs.stack.name == "s1" and list(inputs.matrix.stacks) == ["s1"]
    plain = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, available)
    assert (plain.new_name, plain.write) == ("s1", False)


@pytest.mark.parametrize(("args", "message"), [
    (("nope", "0.5.10", None), "{repo}: stack 'nope': unknown stack (known: s1)"),
    (("s1", "0.5.9", None), "stack 's1': key 'sglang': --sglang 0.5.9: the stack already pins it"),
    (("s1", "0.5.09", None), "stack 's1': key 'sglang': --sglang 0.5.09: the stack already pins it"),
    (("s1", "0.5.11rc1", None), None),
    (("s1", "0.5.12", None), "--sglang 0.5.12: no such release of sglang on the package index (newest: 0.5.10)"),
    (("s1", "0.5.10", "s1"), "{repo}: --as s1: the stack already exists (choose another name, or leave --as out to "
                             "upgrade s1 in place)"),
    (("s1", "0.5.10", "Bad Name"), "--as Bad Name: "),
])
def test_bad_input_whole(repo, tmp_path, args, message) -> None:
    available = World(tmp_path).available
    if message is None:  # a pre-release on the index is a release one can move to
        assert upgrade_inputs.check_inputs(str(repo), *args, False, available).version == args[1]
        return
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        upgrade_inputs.check_inputs(str(repo), *args, False, available)
    text = str(err.value)
    assert text.startswith(message.format(repo=repo)) and (message.endswith(": ") or text == message.format(repo=repo))
    assert err.value.exit_code == 2


def test_bad_input_about_the_index_and_git(repo, tmp_path) -> None:
    def unreachable(name: str) -> list[str]:
        raise engines.WheelFetchError("pip: no index")

    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, unreachable)
    assert str(err.value) == "cannot list SGLang's releases: pip: no index"
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, lambda _n: ["0.6.0rc1"])
    assert str(err.value) == "--sglang 0.5.10: no such release of sglang on the package index"
    repo.write_text(STACKS.replace("      version: 0.5.9\n", "      git:\n        repo: https://x/sglang\n"
                                   "        ref: 0123456789abcdef0123456789abcdef01234567\n"))
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, unreachable)
    assert str(err.value) == "stack 's1': key 'sglang': builds SGLang from git: `invoke upgrade` moves a release pin"
    repo.write_text(STACKS.replace('python: "3.12"', "python: 3"))
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, unreachable)
    assert str(err.value) == f"{repo}:3: stack 's1': key 'python': Input should be a valid string"
    assert (err.value.file, err.value.stack, err.value.key, err.value.line) == (str(repo), "s1", "python", 3)
    repo.write_text("stacks: [\n")
    with pytest.raises(upgrade_inputs.UpgradeInputError) as err:
        upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, unreachable)
    assert str(err.value).startswith(f"{repo}") and err.value.file == str(repo)


def test_the_version_of_a_package_for_the_parser(tmp_path) -> None:
    target = ReleasePins("0.5.10", None, None, None, None, None, {"xgrammar": "0.1.32", "outlines": "0.1.11"})
    world = World(tmp_path)
    version_of = planning._version_of(lock_of("s1", xgrammar="0.1.27"), target, world.available)
    assert (version_of("xgrammar"), version_of("outlines"), version_of("msgspec")) == ("0.1.27", "0.1.11", "0.19.0")
    no_lock = planning._version_of(None, target, world.available)
    assert no_lock("xgrammar") == "0.1.32"


def test_the_default_engines_call_the_project_engines(monkeypatch, tmp_path, repo) -> None:
    stack = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, World(tmp_path).available).stack
    asked: list[tuple[Any, ...]] = []
    monkeypatch.setattr(engines, "fetch_wheel", lambda n, v: asked.append(("fetch", n, v)) or Path("w.whl"))
    assert engines.sglang_host_wheel("0.5.10") == Path("w.whl") and asked == [("fetch", "sglang", "0.5.10")]

    def binary(requirement, *, dest, python_version, platform_tags):
        asked.append(("binary", requirement, dest, python_version, platform_tags))
        return Path("b.whl")

    monkeypatch.setattr(engines, "fetch_binary_wheel", binary)
    monkeypatch.setattr(engines, "wheel_dir", lambda s, p: Path(f"wheels/{s.name}/{p}"))
    monkeypatch.setattr(engines, "pip_platform_tags", lambda p, base, glibc: (f"tag-{p}-{base}-{glibc}",))
    assert engines.platform_wheel(stack.model_copy(update={"glibc": "2.31"}), "0.5.10") == Path("b.whl")
    assert asked[-1] == ("binary", "sglang==0.5.10", Path("wheels/s1/linux/amd64"), "3.12",
                         ("tag-linux/amd64-debian:bookworm-slim-2.31",))

    def no_wheel(*a, **kw):
        raise engines.WheelFetchError("none")

    monkeypatch.setattr(engines, "fetch_binary_wheel", no_wheel)
    assert engines.platform_wheel(stack, "0.5.10") is None

    rows = [types.SimpleNamespace(patch="a", outcome="already upstream", ok=True, detail="in 0.5.10"),
            types.SimpleNamespace(patch="b", outcome="applies", ok=True, detail="3 hunks"),
            types.SimpleNamespace(patch="c", outcome="conflict", ok=False, detail="hunk 2")]
    monkeypatch.setattr(engines, "check_version", lambda v, patches, policy: asked.append(
        ("check", v, patches, policy)) or rows)
    patched = stack.model_copy(update={"patches": ("a", "b", "c")})
    assert engines.patch_statuses("0.5.10", patched) == {"a": ("upstream", "in 0.5.10"), "b": ("applies", "3 hunks"),
                                                         "c": ("drifted", "conflict: hunk 2")}
    assert asked[-1] == ("check", "0.5.10", ("a", "b", "c"), patched.patch_policy.on_upstream)


def test_the_default_glibc_coverage_and_lock_engines(monkeypatch, tmp_path, repo) -> None:
    stack = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, World(tmp_path).available).stack
    assert engines.known_base_glibc(stack.model_copy(update={"glibc": "2.31"})) == "2.31"
    monkeypatch.setattr(engines, "base_image_glibc", lambda s: "2.36" if s is stack else None)
    assert engines.known_base_glibc(stack) == "2.36"
    monkeypatch.setattr(engines, "base_image_glibc", lambda s: None)
    assert engines.known_base_glibc(stack) is None  # debian: not an Ubuntu base whose glibc is known
    assert engines.known_base_glibc(stack.model_copy(update={"base_image": "ubuntu:24.04"})) == "2.39"

    assert engines.coverage_document(stack) is None  # no cuda_arch_list
    cuda = stack.model_copy(update={"cuda_arch_list": ("9.0",)})
    monkeypatch.setattr(engines, "check_wheels", lambda s, p: types.SimpleNamespace(
        to_dict=lambda: {"p": p, "arch": s.cuda_arch_list}))
    assert engines.coverage_document(cuda) == {"p": "linux/amd64", "arch": ("9.0",)}

    def no_tool(s, p):
        raise engines.CuobjdumpError("no cuobjdump")

    monkeypatch.setattr(engines, "check_wheels", no_tool)
    assert engines.coverage_document(cuda) is None

    monkeypatch.setattr(upgrade_locks, "resolve_stack",
                        lambda s, previous, base_glibc: (s.name, previous, base_glibc))
    previous = lock_of("s1")
    assert upgrade_locks.resolve_lock(stack, previous, "2.36") == ("s1", previous, "2.36")  # type: ignore[comparison-overlap]
    monkeypatch.setattr(upgrade_locks, "resolve_platforms",
                        lambda s, previous, base_glibc: (s.name, previous, base_glibc))
    assert upgrade_locks.resolve_locks(stack, {"linux/amd64": previous}, None) == (  # type: ignore[comparison-overlap]
        "s1", {"linux/amd64": previous}, None)


def test_the_torch_family_through_the_resolver(monkeypatch, tmp_path, repo) -> None:
    stack = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, World(tmp_path).available).stack
    target = ReleasePins("0.5.10", "2.9.1", None, None, None, None, {"torch": "2.9.1", "torchaudio": "2.9.1"})
    assert engines.torch_family(stack, target, "2.28") == {}  # the stack pins no torch
    torch = stack.model_copy(update={"torch": types.SimpleNamespace(packages=("TorchVision==0.24.1",
                                                                              "torchaudio==2.9.0"))})
    assert engines.torch_family(torch, ReleasePins("0.5.10", None, None, None, None, None, {}), "2.28") == {}
    requests = []

    def compile_requirements(request):
        requests.append(request)
        return types.SimpleNamespace(packages=[types.SimpleNamespace(name=n, version=v) for n, v in (
            ("torch", "2.9.1"), ("torchvision", "0.24.1"), ("torchaudio", "2.9.1"), ("numpy", "2.0"))])

    monkeypatch.setattr(engines, "compile_requirements", compile_requirements)
    assert engines.torch_family(torch, target, "2.34") == {"torch": "2.9.1", "torchvision": "0.24.1",
                                                           "torchaudio": "2.9.1"}
    (request,) = requests
    assert request == engines.ResolveRequest(("torch==2.9.1", "TorchVision", "torchaudio==2.9.1"), "3.12",
                                             engines.python_platform("linux/amd64", "2.34"))

    def no_solution(request):
        raise engines.ResolverError("no solution")

    monkeypatch.setattr(engines, "compile_requirements", no_solution)
    assert engines.torch_family(torch, target, "2.34") == {}


def test_a_torch_stack_moves_its_family_with_the_release(repo, tmp_path) -> None:
    repo.write_text(STACKS + TORCH_STACK)
    world = World(tmp_path, requires="torch==2.10.0", lock=lock_of("t1", sglang="0.5.10"))
    world.family = lambda stack, target, glibc: {"torch": "2.10.0", "torchvision": "0.25.0"}  # type: ignore[method-assign]
    inputs = upgrade_inputs.check_inputs(str(repo), "t1", "0.5.10", None, False, world.available)
    plan, text, _ = planning.plan_upgrade(inputs, world.engines())
    assert plan.derivation.edits["torch"] == {"version": "2.10.0", "packages": ["torchvision==0.25.0"]}
    assert plan.pins["torchvision"] == "0.25.0" and plan.reasons == ()
    assert "    torch:\n      version: 2.10.0\n      packages: [torchvision==0.25.0]\n" in text


def test_pins_of_a_layer_the_lock_could_not_reach_are_guesses_and_write_refuses_them(repo, tmp_path, capsys) -> None:
    repo.write_text(STACKS + TORCH_STACK)
    why = "index https://download.pytorch.org/whl/cu130 unreachable: dns error"
    base = lock_of("t1", sglang="0.5.10")
    unreached = Lock(**{**base.__dict__, "packages": (
        *base.packages, LockedPackage("torch", "2.10.0", "torch", unhashed=why),
        LockedPackage("torchvision", "0.25.0", "torch", unhashed=why)),
        "unresolved": (UnresolvedLayer("torch", True, why),)})
    world = World(tmp_path, requires="torch==2.10.0", lock=unreached)
    world.family = lambda stack, target, glibc: {"torch": "2.10.0", "torchvision": "0.25.0"}  # type: ignore[method-assign]
    code = upgrade_command(str(repo), "t1", "0.5.10", write=True, engines=world.engines())
    assert code == 1
    assert repo.read_text() == STACKS + TORCH_STACK and not lock_path(repo, "t1").exists()  # no guess written
    assert capsys.readouterr().err.splitlines() == [
        f"error: --write: nothing written: the new pin(s) of torch, torchvision are guesses (see the report); {repo} "
        "is unchanged"]
    out = tmp_path / "build" / "t1" / "upgrade"
    doc = json.loads((out / "report.json").read_text())
    assert doc["guesses"] == {"torch": f"layer torch not resolved: {why}",
                              "torchvision": f"layer torch not resolved: {why}"}
    assert doc["reasons"] == [f"the new pin of torch is a guess: layer torch not resolved: {why}",
                              f"the new pin of torchvision is a guess: layer torch not resolved: {why}"]
    assert doc["verdict"] == "review"
    assert f"| torch | 2.9.1 | 2.10.0 * (guess: layer torch not resolved: {why}) |" in (out / "report.md").read_text()


@pytest.mark.parametrize(("wheel", "glibc", "edits", "reasons"), [
    ("sglang-0.5.10-cp312-cp312-manylinux_2_34_x86_64.whl", "2.36", {"glibc": "2.36"}, ()),
    ("sglang-0.5.10-cp312-cp312-manylinux_2_34_x86_64.whl", None, {},
     ("sglang 0.5.10's wheels need glibc 2.34 (manylinux_2_34_x86_64); the base image is not known: declare "
      "`glibc:`",)),
    (None, "2.36", {}, ("sglang 0.5.10 has no wheel for Python 3.12 on linux/amd64 with glibc 2.36",)),
])
def test_the_release_wheel_and_the_base_glibc_reach_the_planner(repo, tmp_path, wheel, glibc, edits, reasons) -> None:
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    world.platform = lambda stack, version: Path(wheel) if wheel else None  # type: ignore[method-assign]
    world.glibc = lambda stack: glibc  # type: ignore[method-assign]
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, world.available)
    plan, _, _ = planning.plan_upgrade(inputs, world.engines())
    assert {k: v for k, v in plan.derivation.edits.items() if k == "glibc"} == edits
    assert plan.reasons == reasons


def test_a_release_without_requirements(repo, tmp_path) -> None:
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    wheel = tmp_path / "bare.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang-0.5.10.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.10\n")
    world.wheel = lambda version: wheel  # type: ignore[method-assign]
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, world.available)
    plan, _, _ = planning.plan_upgrade(inputs, world.engines())
    assert plan.conflicts == () and plan.reasons == () and plan.pins["sglang"] == "0.5.10"


def test_a_stacks_file_changed_under_the_upgrade_is_named(repo, tmp_path) -> None:
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, world.available)
    repo.write_text("stacks: [\n")
    with pytest.raises(errors.ConfigError) as err:
        planning.plan_upgrade(inputs, world.engines())
    assert str(err.value) == (f"{repo}:2: cannot be edited by invoke upgrade (while parsing a flow node): write that "
                              "line as plain block YAML (spaces, no tabs)")
    repo.write_bytes(b"stacks: \xff\n")
    with pytest.raises(errors.ConfigError) as err:
        planning.plan_upgrade(inputs, world.engines())
    assert str(err.value) == f"{repo}: cannot be read: UnicodeDecodeError"


def test_the_upgraded_entry_is_read_from_a_hidden_file_beside_the_real_one(repo, monkeypatch) -> None:
    read: list[Path] = []
    real = edit.load_matrix

    def load_matrix(path):
        read.append(Path(path))
        matrix = real(path)
        Path(path).unlink()  # gone before the cleanup: not an error
        return matrix

    monkeypatch.setattr(edit, "load_matrix", load_matrix)
    assert edit.load_upgraded(repo, STACKS, "s1").name == "s1"
    (path,) = read
    assert path.parent == repo.parent and path.name.startswith(".stacks.yaml.") and path.suffix == ".tmp"
    assert sorted(p.name for p in repo.parent.iterdir()) == ["stacks.yaml"]


def test_write_upgrade_stages_beside_each_file_and_makes_the_lock_folder(tmp_path, monkeypatch) -> None:
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text("old\n")
    lock_file = tmp_path / "deep" / "locks" / "s1.txt"
    moved: list[tuple[Path, Path]] = []
    real_replace = os.replace

    def replace(src, dst):
        moved.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    upgrade_locks.write_upgrade(stacks, "new\n", lock_file, lock_of("s1", sglang="0.5.10"))
    assert [dst for _, dst in moved] == [lock_file, stacks]
    assert [src.parent for src, _ in moved] == [lock_file.parent, stacks.parent]
    assert moved[0][0].name.startswith(".s1.txt.") and moved[1][0].name.startswith(".stacks.yaml.")
    assert stacks.read_text() == "new\n" and lock_file.is_file()


def test_a_second_run_reuses_its_report_folder(repo, tmp_path, clock) -> None:
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    assert upgrade_command(str(repo), "s1", "0.5.10", engines=world.engines()) == 0
    assert upgrade_command(str(repo), "s1", "0.5.10", engines=world.engines()) == 0
    assert sorted(p.name for p in (tmp_path / "build" / "s1" / "upgrade").iterdir()) == [
        "lock.txt", "report.json", "report.md"]


def test_the_last_line_is_not_highlighted(repo, tmp_path, clock, monkeypatch) -> None:
    """On a terminal: the verdict is bold, and nothing else of the line is coloured (numbers, paths)."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", width=400)
    monkeypatch.setattr(console_mod, "console", lambda: console)
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    assert upgrade_command(str(repo), "s1", "0.5.10", engines=world.engines()) == 0
    report = tmp_path / "build" / "s1" / "upgrade" / "report.md"
    assert out.getvalue().splitlines()[-1] == (f"upgrade s1 -> sglang 0.5.10: \x1b[1mready\x1b[0m in 2.5 s; "
                                               f"report {report}")
