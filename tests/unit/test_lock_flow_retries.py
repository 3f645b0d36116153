"""`invoke lock` in process: the retries of the main resolution, layers out of reach together, the task's timing
and console lines, and one lock per platform read back by `stacks --check`; against a scripted resolver that
answers as uv does."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from lock_flow_fixtures import GIT_STACK, KERNEL_INDEX, REAL_LOCK_STACK, STACKS, tiny_stack, write_stacks
from uv_double import GRAPH, VERSIONS, Uv

from sglstack.adapters.uv import (
    ResolverError,
    SourceUnreachable,
)
from sglstack.cli.lock import lock_command
from sglstack.config.matrix import load_matrix
from sglstack.config.schema import TorchPin
from sglstack.core import console as console_mod
from sglstack.core import progress as progress_mod
from sglstack.core.errors import ConfigError
from sglstack.lock import flow
from sglstack.lock.conflicts import Finding
from sglstack.lock.plan import LockError
from sglstack.lockfile.model import lock_path
from sglstack.lockfile.text import read_lock


@pytest.fixture
def stacks(tmp_path) -> Path:
    return write_stacks(tmp_path)


@pytest.fixture
def tiny(stacks):
    return tiny_stack(stacks)


# ---- the retries of the main resolution ----------------------------------------------------------------

MANY = """
stacks:
  many:
    base_image: debian:bookworm-slim
    glibc: "2.36"
    python: "3.11"
    serving: {model: org/model}
    extra_layers:
      - {name: e1, requirements: ["p1==1.0+e1"], index_url: "https://e1.example/simple"}
      - {name: e2, requirements: ["p2==1.0+e2"], index_url: "https://e2.example/simple"}
      - {name: e3, requirements: ["p3==1.0+e3"], index_url: "https://e3.example/simple"}
      - {name: e4, requirements: ["LAST"], index_url: "https://e4.example/simple"}
    sglang: {version: "0.5.23"}
"""


class NoIndexUv(Uv):
    """Every extra index is out of reach, and no stand-in resolves from the default index."""

    def resolve(self, request):
        if any(r.startswith("p") and r.endswith("==1.0") for r in request.requirements):  # p1==1.0 for p1==1.0+e1
            return ResolverError("no stand-in on the default index")
        if request.indexes:
            return SourceUnreachable(f"{request.indexes[0]}/p/", "dns")
        return super().resolve(request)


@pytest.mark.parametrize("last,attempts,error", [
    # 7 failures (3 layers each out of reach, then their stand-in not resolving; the 4th has none): the 8th locks
    ("p4 @ https://e4.example/p4-1.0-py3-none-any.whl", 8, None),
    # 8 failures: after len(plan) + 1 = 7 of them, the next answer is the error
    ("p4==1.0+e4", 8, "stack 'many': no stand-in on the default index"),
])
def test_each_layer_out_of_reach_is_retried_without_it_up_to_one_retry_per_layer_and_one_more(
        tmp_path, last, attempts, error):
    (tmp_path / "stacks.yaml").write_text(MANY.replace("LAST", last))
    stack = load_matrix(tmp_path / "stacks.yaml").get("many")
    uv = NoIndexUv()
    uv.answers = []
    if error:
        with pytest.raises(LockError) as err:
            flow.resolve_stack(stack, compile_fn=uv)
        assert str(err.value) == error
    else:
        lock = flow.resolve_stack(stack, compile_fn=uv)
        assert [u.layer for u in lock.unresolved] == ["e1", "e2", "e3", "e4"]
        assert lock.notes == tuple(f"no stand-in from the default index for e{i}: no stand-in on the default index"
                                   for i in (1, 2, 3))
    assert len(uv.requests) == attempts


# ---- two layers out of reach at once -----------------------------------------------------------------

def _torch_too(tiny, monkeypatch):
    torch_index = "https://download.pytorch.org/whl/cu130"
    monkeypatch.setitem(GRAPH, "torch", [])
    monkeypatch.setitem(GRAPH, "torchvision", ["torch"])
    monkeypatch.setitem(VERSIONS, "torch", "2.9.1")
    monkeypatch.setitem(VERSIONS, "torchvision", "0.24.1")
    stack = tiny.model_copy(update={"torch": TorchPin.model_validate(
        {"version": "2.9.1+cu130", "index_url": torch_index, "packages": ["torchvision==0.24.1+cu130"]})})
    return stack, [SourceUnreachable(f"{torch_index}/torch/", "dns"), SourceUnreachable(f"{KERNEL_INDEX}/x/", "dns")]


def test_two_layers_stood_in_for_are_both_in_the_retry_and_named_in_every_note(tiny, monkeypatch):
    stack, unreachable = _torch_too(tiny, monkeypatch)
    monkeypatch.setitem(GRAPH, "requests", ["idna", "numpy"])  # numpy: also needed by the kernel's stand-in
    monkeypatch.setitem(GRAPH, "six", ["six-helper"])
    uv = Uv(*unreachable)
    lock = flow.resolve_stack(stack, compile_fn=uv)
    # the first retry stands in for torch; the second for the kernel too (its pin is already the public one)
    assert [r.requirements for r in uv.requests[2:]] == 2 * [
        ("torch==2.9.1", "torchvision==0.24.1", "sglang-kernel==0.4.10", "sglang==0.5.23", "six==1.16.0")]
    assert lock.get("numpy").note == ("also needed by the unresolved torch, sglang-kernel layer: checked against its "
                                      "stand-ins")
    assert lock.get("six-helper").layer == "late"  # after the layers out of reach, each layer still takes its own


def test_stand_ins_of_two_layers_that_do_not_resolve_are_named_together(tiny, monkeypatch):
    stack, unreachable = _torch_too(tiny, monkeypatch)
    lock = flow.resolve_stack(stack, compile_fn=Uv(*unreachable, ResolverError("no torch==2.9.1 for this platform")))
    assert lock.notes == ("no stand-in from the default index for torch, sglang-kernel: no torch==2.9.1 for this "
                          "platform",)


def test_platforms_that_resolve_differently_name_every_package_that_differs(tiny):
    from dataclasses import replace

    both = tiny.model_copy(update={"platforms": ("linux/amd64", "linux/arm64")})
    uv = Uv()
    real = uv.resolve

    def resolve(request):
        r = real(request)
        if request.python_platform.startswith("aarch64"):
            return replace(r, packages=tuple(replace(p, version="0.1") if p.name in ("numpy", "idna") else p
                                             for p in r.packages))
        return r

    uv.resolve = resolve  # type: ignore[method-assign]
    with pytest.raises(LockError) as err:
        flow.resolve_stack(both, compile_fn=uv)
    assert str(err.value) == (
        f"stack 'tiny': the platforms resolve 2 package(s) to different versions: idna {VERSIONS['idna']} on "
        f"linux/amd64, 0.1 on linux/arm64; numpy {VERSIONS['numpy']} on linux/amd64, 0.1 on linux/arm64 (a release "
        "without a wheel for one platform makes the resolver fall back to an older one): pin versions every "
        "platform has wheels for")


# ---- the base image's glibc, the task's timing and its console lines ------------------------------------

def test_resolving_for_the_base_reads_the_base_images_glibc_only_when_the_stack_has_none(tiny, monkeypatch):
    asked, resolved = [], []
    monkeypatch.setattr(flow, "base_image_glibc", lambda stack: asked.append(stack.name) or "2.39")
    monkeypatch.setattr(flow, "resolve_stack", lambda stack, **kw: resolved.append((stack.name, kw)) or "a lock")
    assert flow.resolve_for_base(tiny) == "a lock"
    assert (asked, resolved) == ([], [("tiny", {"previous": None, "base_glibc": None})])
    plain = tiny.model_copy(update={"glibc": None})
    assert flow.resolve_for_base(plain) == "a lock"
    assert (asked, resolved[1:]) == (["tiny"], [("tiny", {"previous": None, "base_glibc": "2.39"})])


def test_the_task_never_reads_the_base_image_when_the_stack_says_its_glibc(stacks, monkeypatch):
    def unexpected(stack):
        raise AssertionError("the base image was read")

    monkeypatch.setattr(flow, "base_image_glibc", unexpected)
    assert flow.lock_stack(stacks, "tiny", compile_fn=Uv()).lock.python_platforms == ("x86_64-manylinux_2_36",)


def test_the_task_takes_its_seconds_to_the_hundredth(stacks, monkeypatch):
    from types import SimpleNamespace

    clock = iter([100.0, 101.23456])
    monkeypatch.setattr(flow, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    assert flow.lock_stack(stacks, "tiny", compile_fn=Uv()).seconds == 1.23


def test_a_locks_folder_that_is_a_file_is_one_line_before_resolving(stacks):
    from sglstack.core.records import OutputNotWritable

    (stacks.parent / "locks").write_text("not a folder")
    uv = Uv()
    with pytest.raises(OutputNotWritable) as err:
        flow.lock_stack(stacks, "tiny", compile_fn=uv)
    path = lock_path(stacks, "tiny")
    assert str(err.value) == f"lock {path}: cannot be written ({path.parent} is not a folder)" and uv.requests == []


def _terminal(monkeypatch):
    import io

    from rich.console import Console

    out = io.StringIO()
    monkeypatch.setattr(console_mod, "console", lambda: Console(file=out, force_terminal=True, color_system="standard",
                                                                width=400))
    return out


def test_the_commands_lines_are_styled_but_never_highlighted(stacks, monkeypatch):
    out = _terminal(monkeypatch)
    unreachable = SourceUnreachable(f"{KERNEL_INDEX}/sglang-kernel/", "dns error")
    monkeypatch.setattr(flow, "lock_stack", functools.partial(REAL_LOCK_STACK, compile_fn=Uv(unreachable)))
    assert lock_command(str(stacks), "tiny") == 1  # partial (the error line is on stderr)
    lines = out.getvalue().splitlines()
    assert lines[1] == (f"\x1b[33mtiny\x1b[0m: not resolved: layer sglang-kernel (with dependencies): index "
                        f"{KERNEL_INDEX} unreachable: dns error")
    assert lines[2] == ("\x1b[2mtiny: layer sglang-kernel was not resolved; sglang-kernel==0.4.10 from the default "
                        "index stood in for its pins, so that what it shares with the rest of the stack is locked at "
                        "versions that satisfy that release; 1 package(s) only the stand-ins need are not locked (the "
                        "layer brings its own from its index)\x1b[0m")
    assert len(lines) == 3


def test_the_command_writes_a_lock_per_platform_and_passes_the_packages_to_upgrade(stacks, capsys, monkeypatch):
    stacks.write_text(STACKS.replace('python: "3.11"', 'python: "3.11"\n    platforms: [linux/amd64, linux/arm64]'))
    monkeypatch.setattr(flow, "lock_stack", functools.partial(REAL_LOCK_STACK, compile_fn=Uv()))
    assert lock_command(str(stacks), "tiny") == 0
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny: locked")]
    assert [line.split(" for Python ")[1].split(" in ")[0] for line in out] == ["3.11 linux/amd64", "3.11 linux/arm64"]
    assert [line.split(" -> ")[1] for line in out] == [str(stacks.parent / "locks" / "tiny.txt"),
                                                       str(stacks.parent / "locks" / "tiny.linux-arm64.txt")]
    assert [read_lock(stacks.parent / "locks" / f).platforms for f in ("tiny.txt", "tiny.linux-arm64.txt")] == [
        ("linux/amd64",), ("linux/arm64",)]
    with pytest.raises(ConfigError) as err:
        lock_command(str(stacks), "tiny", upgrade_packages=["no-such"])
    # every platform's lock is looked in (a package only arm64 installs is upgraded there)
    assert str(err.value) == (f"stack 'tiny': --upgrade-package no-such: not in {lock_path(stacks, 'tiny')} or "
                              f"{lock_path(stacks, 'tiny', 'linux/arm64')}")


def test_a_git_sglang_without_its_tree_has_no_requirement(tiny):
    from sglstack.config.schema import Stack
    from sglstack.lock.plan import sglang_requirement

    with pytest.raises(LockError) as err:
        sglang_requirement(Stack.model_validate(GIT_STACK))
    assert str(err.value) == "stack 'g': a git-sourced SGLang is resolved from its exported tree"
    assert sglang_requirement(tiny) == "sglang==0.5.23"


def test_a_stack_of_no_deps_layers_only_is_hashed_layer_by_layer(tiny):
    stack = tiny.model_copy(update={"sgl_kernel": None, "extra_layers": tiny.extra_layers[:1],
                                    "sglang": tiny.sglang.model_copy(update={"install_deps": False})})
    uv = Uv()
    lock = flow.resolve_stack(stack, compile_fn=uv)
    assert uv.requests[0].requirements == () and uv.requests[0].excludes == ("nvcc-tool", "sglang")
    assert [(p.name, p.layer, p.hashed) for p in lock.packages] == [("nvcc-tool", "jit", True),
                                                                    ("sglang", "sglang", True)]


class ExcludingUv(Uv):
    """Leaves the excluded names out even where they are asked for, as uv's --excludes does."""

    def resolve(self, request):
        r = super().resolve(request)
        if request.no_deps:
            return r
        from dataclasses import replace
        return replace(r, packages=tuple(p for p in r.packages if p.name not in request.excludes))


def test_sglang_forced_by_an_earlier_no_deps_layer_is_that_layers_entry(tiny):
    from sglstack.config.schema import PipLayer

    force = PipLayer.model_validate({"name": "force", "requirements": ["sglang==0.5.23"], "no_deps": True})
    lock = flow.resolve_stack(tiny.model_copy(update={"extra_layers": (force, *tiny.extra_layers)}),
                              compile_fn=ExcludingUv())
    sglang = lock.get("sglang")
    assert (sglang.layer, sglang.version, sglang.hashed) == ("force", "0.5.23", True)


def test_a_lock_that_finds_no_change_leaves_the_files_bytes_and_mtime_alone(stacks, monkeypatch):
    monkeypatch.setattr(flow, "utc_timestamp", lambda: "2026-12-01T00:00:00Z")
    first = flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    before = first.path.read_bytes()
    os.utime(first.path, ns=(1_000_000_000, 1_000_000_000))
    monkeypatch.setattr(flow, "utc_timestamp", lambda: "2026-12-02T00:00:00Z")
    second = flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    assert second.lock.resolved_at == "2026-12-01T00:00:00Z"
    assert first.path.read_bytes() == before and first.path.stat().st_mtime_ns == 1_000_000_000

    monkeypatch.setitem(VERSIONS, "numpy", "2.3.5")  # a change: written, and dated now
    third = flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    assert third.lock.resolved_at == "2026-12-02T00:00:00Z"
    assert "# resolved-at: 2026-12-02T00:00:00Z\n" in first.path.read_text()


def test_lock_command_refuses_a_stack_typo_before_its_progress_starts(tmp_path, monkeypatch):
    (tmp_path / "stacks.yaml").write_text(STACKS)

    def no_progress(*args, **kwargs):
        raise AssertionError("the progress started before the stack name was checked")

    monkeypatch.setattr(progress_mod, "progress", no_progress)
    with pytest.raises(ConfigError) as err:
        lock_command(str(tmp_path / "stacks.yaml"), "tinyy")
    assert str(err.value).endswith("stack 'tinyy': unknown stack (known: tiny); did you mean 'tiny'?")


# ---- one lock per platform: stacks --check reads each, and refuses platforms that disagree -------------------

def _two_platforms(stacks: Path) -> None:
    stacks.write_text(STACKS.replace('python: "3.11"', 'python: "3.11"\n    platforms: [linux/amd64, linux/arm64]'))


def test_the_platforms_locks_are_replaced_together_or_not_at_all(stacks, monkeypatch):
    """They were written one by one: a rename refused (or a signal) after the first left the new amd64 lock beside
    the old arm64 one. Now a failure at the second puts the first back: both stay as they were."""
    import os

    from sglstack.core.errors import SglstackError

    _two_platforms(stacks)
    flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    locks = stacks.parent / "locks"
    before = {p.name: p.read_bytes() for p in locks.glob("*.txt")}
    assert sorted(before) == ["tiny.linux-arm64.txt", "tiny.txt"]
    stacks.write_text(stacks.read_text().replace('"six==1.16.0"', '"six==1.17.0"'))
    real = os.replace

    def refuse_arm64(src, dst, *args, **kwargs):
        if str(dst).endswith("tiny.linux-arm64.txt"):
            raise OSError(28, "No space left on device")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", refuse_arm64)
    with pytest.raises(SglstackError) as err:
        flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    assert "tiny.linux-arm64.txt" in str(err.value)
    monkeypatch.setattr(os, "replace", real)
    assert {p.name: p.read_bytes() for p in locks.glob("*.txt")} == before
    assert not [p for p in locks.iterdir() if p.name not in before]  # no temp file left


def test_stacks_check_reads_each_platforms_lock(stacks):
    from sglstack.lock.conflicts import lock_findings

    _two_platforms(stacks)
    flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    assert lock_findings(load_matrix(stacks), str(stacks)) == []
    (stacks.parent / "locks" / "tiny.linux-arm64.txt").unlink()
    # A problem (exit 1), not a notice: the build of a stack of several platforms refuses a missing lock, so a
    # `stacks --check` that said "matrix OK" passed CI for a stack that cannot be built.
    [finding] = lock_findings(load_matrix(stacks), str(stacks))
    assert finding == Finding(
        "tiny", "bad-lock", f"no lock ({stacks.parent / 'locks' / 'tiny.linux-arm64.txt'}): a stack of several "
                            "platforms builds each from its own lock; run invoke lock --stack tiny")
    assert finding.is_failure


def test_stacks_check_refuses_platform_locks_that_disagree_naming_the_package_and_both_versions(stacks,
                                                                                                 monkeypatch):
    """Locks written apart (another sglstack, a merge of two branches): each is sound, together they are not."""
    from sglstack.lock.conflicts import lock_findings

    _two_platforms(stacks)
    monkeypatch.setattr(flow, "platform_disagreements", lambda locks: [])
    flow.lock_stack(stacks, "tiny", compile_fn=Uv(platforms_differ=True))
    assert lock_findings(load_matrix(stacks), str(stacks)) == [Finding(
        "tiny", "conflict", f"the platforms resolve 1 package(s) to different versions: idna {VERSIONS['idna']} on "
                            "linux/amd64, 3.10 on linux/arm64 (a release without a wheel for one platform makes the "
                            "resolver fall back to an older one): pin versions every platform has wheels for")]


def test_a_lock_of_another_platform_is_not_taken_for_this_one(stacks):
    from sglstack.lock.trust import UntrustedLock, lock_for_build

    _two_platforms(stacks)
    flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    locks = stacks.parent / "locks"
    (locks / "tiny.txt").write_bytes((locks / "tiny.linux-arm64.txt").read_bytes())
    with pytest.raises(UntrustedLock) as err:
        lock_for_build(stacks, load_matrix(stacks).get("tiny"))
    assert str(err.value) == (f"{locks / 'tiny.txt'}: stack 'tiny': this lock is for linux/arm64, not linux/amd64 "
                              "(each platform has its own lock): run invoke lock --stack tiny")


def test_upgrade_package_reads_every_platforms_lock_and_needs_each(stacks):
    """`--upgrade-package` of a package only arm64 installs moves it there, from arm64's own pins; and with one
    platform's lock gone it is refused (that platform would be resolved afresh: every package moved, not one)."""
    from dataclasses import replace

    stacks.write_text(STACKS.replace('python: "3.11"', 'python: "3.11"\n    platforms: [linux/amd64, linux/arm64]'))

    def arm_only_idna(uv: Uv) -> Uv:
        real = uv.resolve

        def resolve(request):
            r = real(request)
            if request.python_platform.startswith("x86_64"):  # an aarch64-only dependency (a platform marker)
                return replace(r, packages=tuple(p for p in r.packages if p.name != "idna"))
            return r

        uv.resolve = resolve  # type: ignore[method-assign]
        return uv

    flow.lock_stack(stacks, "tiny", compile_fn=arm_only_idna(Uv()))
    amd, arm = lock_path(stacks, "tiny"), lock_path(stacks, "tiny", "linux/arm64")
    assert read_lock(amd).get("idna") is None and read_lock(arm).get("idna") is not None
    again = arm_only_idna(Uv())
    flow.lock_stack(stacks, "tiny", upgrade_packages=["idna"], compile_fn=again)
    mains = {r.python_platform: r for r in again.requests if not r.no_deps and r.requirements}
    assert mains["aarch64-manylinux_2_36"].upgrade_packages == ("idna",)
    assert "idna==3.11" in mains["aarch64-manylinux_2_36"].preferences  # arm64's own pins are the starting point
    assert "idna==3.11" not in mains["x86_64-manylinux_2_36"].preferences

    arm.unlink()
    refused = Uv()
    with pytest.raises(ConfigError) as err:
        flow.lock_stack(stacks, "tiny", upgrade_packages=["numpy"], compile_fn=refused)
    assert str(err.value) == (f"stack 'tiny': --upgrade-package needs an existing lock ({arm}): run invoke lock "
                              "--stack tiny")
    assert (err.value.exit_code, refused.requests, arm.exists()) == (2, [], False)
