"""`invoke upgrade` of a stack built for several platforms: every platform's lock is resolved (the resolver of
`invoke lock`, uv stood in for by test_lock_flow's double through `compile_fn`), the platforms must agree, the
report shows each platform's lock change, and `--write` writes every lock with the stacks file, or nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from upgrade_fixtures import STACKS, World, lock_of
from uv_double import VERSIONS, Uv

from sglstack.adapters.uv import ResolutionConflict
from sglstack.cli.upgrade import upgrade_command
from sglstack.lock.flow import resolve_platforms
from sglstack.lockfile.model import lock_path
from sglstack.lockfile.text import read_lock, render_lock, write_lock

TWO = STACKS.replace("    base_image: debian:bookworm-slim\n",
                     "    base_image: debian:bookworm-slim\n    platforms: [linux/amd64, linux/arm64]\n", 1)
ARM = "linux/arm64"


@pytest.fixture()
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    (tmp_path / "stacks.yaml").write_text(TWO)
    write_lock(lock_path(tmp_path / "stacks.yaml", "s1"), lock_of("s1", sglang="0.5.9"))
    write_lock(lock_path(tmp_path / "stacks.yaml", "s1", ARM), lock_of("s1", sglang="0.5.9"))
    return tmp_path / "stacks.yaml"


class TwoWorld(World):
    """The doubles of test_upgrade_command, with the project's own resolution of every platform over `uv`."""

    def __init__(self, tmp: Path, uv: Any) -> None:
        super().__init__(tmp)
        self.uv = uv

    def engines(self, **kw: Any):
        def resolve_all(stack, previous, glibc):
            self.calls.append(("resolve_all", stack.name, tuple(stack.platforms), tuple(sorted(previous)), glibc))
            return resolve_platforms(stack, previous=previous, compile_fn=self.uv, base_glibc=glibc)
        return super().engines(resolve_platforms=resolve_all, **kw)


def _files(repo: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in [repo, *sorted((repo.parent / "locks").iterdir())]}


def _report(repo: Path) -> dict[str, Any]:
    return json.loads((repo.parent / "build" / "s1" / "upgrade" / "report.json").read_text())


def test_write_writes_every_platforms_lock_with_the_stacks_file(repo, capsys) -> None:
    world = TwoWorld(repo.parent, Uv())
    assert upgrade_command(str(repo), "s1", "0.5.10", write=True, engines=world.engines()) == 0
    assert ("resolve_all", "s1", ("linux/amd64", ARM), ("linux/amd64", ARM), "2.36") in world.calls
    assert not [c for c in world.calls if c[0] == "resolve"]  # the one-lock engine is for a one-platform stack
    amd, arm = read_lock(lock_path(repo, "s1")), read_lock(lock_path(repo, "s1", ARM))
    assert (amd.platforms, arm.platforms) == (("linux/amd64",), (ARM,))
    assert amd.get("sglang").version == arm.get("sglang").version == VERSIONS["sglang"]  # the double's answer
    assert "version: 0.5.10" in repo.read_text()
    doc = _report(repo)
    assert doc["verdict"] == "ready"
    assert doc["closure"]["lock_path"] == str(lock_path(repo, "s1"))
    assert list(doc["platform_closures"]) == [ARM]
    arm_change = doc["platform_closures"][ARM]
    assert arm_change["lock_path"] == str(lock_path(repo, "s1", ARM))
    assert {"name": "sglang", "before": "0.5.9", "after": VERSIONS["sglang"], "kind": "changed"} in \
        arm_change["packages"]
    markdown = (repo.parent / "build" / "s1" / "upgrade" / "report.md").read_text()
    assert f"## Closure (the lock of {ARM})" in markdown
    out = " ".join(capsys.readouterr().out.split())
    assert f"wrote {repo}, {lock_path(repo, 's1')} and {lock_path(repo, 's1', ARM)}" in out


def test_without_write_each_platforms_new_lock_is_beside_the_report(repo) -> None:
    before = _files(repo)
    assert upgrade_command(str(repo), "s1", "0.5.10", engines=TwoWorld(repo.parent, Uv()).engines()) == 0
    assert _files(repo) == before
    out = repo.parent / "build" / "s1" / "upgrade"
    assert sorted(p.name for p in out.iterdir()) == ["lock.linux-arm64.txt", "lock.txt", "report.json", "report.md"]
    assert read_lock(out / "lock.linux-arm64.txt").platforms == (ARM,)
    assert _report(repo)["platform_closures"][ARM]["lock_path"] == str(out / "lock.linux-arm64.txt")


def test_platforms_that_disagree_are_a_review_naming_the_package_and_nothing_is_written(repo) -> None:
    before = _files(repo)
    code = upgrade_command(str(repo), "s1", "0.5.10", write=True,
                           engines=TwoWorld(repo.parent, Uv(platforms_differ=True)).engines())
    assert code == 1 and _files(repo) == before
    doc = _report(repo)
    assert doc["verdict"] == "review" and "platform_closures" not in doc
    (reason,) = [r for r in doc["reasons"] if r.startswith("the lock does not resolve")]
    assert "idna 3.11 on linux/amd64, 3.10 on linux/arm64" in reason
    assert any(n.startswith("--write: nothing written") for n in doc["notes"])


def test_a_disagreement_the_engine_lets_through_is_still_refused(repo) -> None:
    """The guard is the upgrade's own, not only the resolver's: locks that differ are never written."""
    before = _files(repo)
    world = World(repo.parent)
    locks = {"linux/amd64": lock_of("s1", sglang="0.5.10", idna="3.11"),
             ARM: lock_of("s1", sglang="0.5.10", idna="3.10")}
    code = upgrade_command(str(repo), "s1", "0.5.10", write=True,
                           engines=world.engines(resolve_platforms=lambda s, p, g: locks))
    assert code == 1 and _files(repo) == before
    assert any("idna 3.11 on linux/amd64, 3.10 on linux/arm64" in r for r in _report(repo)["reasons"])


def test_a_failure_on_the_second_platform_writes_nothing(repo) -> None:
    before = _files(repo)
    real = Uv().resolve  # the first platform resolves; the second's main resolution has no solution

    def compile_fn(requests):
        return [ResolutionConflict("sglang==0.5.10 has no wheel for aarch64")
                if r.python_platform.startswith("aarch64") and not r.no_deps else real(r) for r in requests]

    code = upgrade_command(str(repo), "s1", "0.5.10", write=True, engines=TwoWorld(repo.parent, compile_fn).engines())
    assert code == 1 and _files(repo) == before
    doc = _report(repo)
    assert any("aarch64" in r and "no wheel for aarch64" in r for r in doc["reasons"])
    assert not (repo.parent / "build" / "s1" / "upgrade" / "lock.txt").exists()


def test_a_one_platform_stack_is_resolved_by_the_one_lock_engine(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    (tmp_path / "stacks.yaml").write_text(STACKS)
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))

    def refuse(stack, previous, glibc):
        raise AssertionError("a stack of one platform has one lock")

    assert upgrade_command(str(tmp_path / "stacks.yaml"), "s1", "0.5.10", write=True,
                           engines=world.engines(resolve_platforms=refuse)) == 0
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["s1.txt"]
    assert (tmp_path / "locks" / "s1.txt").read_text() == render_lock(lock_of("s1", sglang="0.5.10"),
                                                                      stacks_file="stacks.yaml")
    assert "platform_closures" not in _report(tmp_path / "stacks.yaml")


def test_a_lock_that_cannot_be_replaced_puts_back_those_before_it(repo, monkeypatch) -> None:
    """The rename of the second platform's lock fails: the first's is put back, the stacks file never moves."""
    import os

    from sglstack.core.safefiles import OutputNotWritable
    from sglstack.upgrade import locks as upgrade_locks

    before = _files(repo)
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst) == lock_path(repo, "s1", ARM):
            raise OSError(30, "Read-only file system")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OutputNotWritable):
        upgrade_locks.write_upgrade(repo, "new\n", lock_path(repo, "s1"), lock_of("s1", sglang="0.5.10"),
                                    [(lock_path(repo, "s1", ARM), lock_of("s1", sglang="0.5.10"))])
    assert _files(repo) == before


def _cov(label: str, cell: str) -> dict[str, Any]:
    """A `CoverageReport.to_dict()` document of one extension on 10.0."""
    return {"label": label, "complete": True, "packages": [], "violations": [],
            "extensions": [{"name": "sgl_kernel/common_ops.so", "cells": {"10.0": cell}}]}


class PerPlatformWorld(TwoWorld):
    """The release's wheel and kernels, per platform: arm64's wheel or kernels may be what is missing."""

    def __init__(self, tmp: Path, *, arm_wheel: bool = True, arm_after: str = "native") -> None:
        super().__init__(tmp, Uv())
        self.arm_wheel, self.arm_after = arm_wheel, arm_after

    def platform(self, stack, version: str) -> Path | None:
        self.calls.append(("platform", stack.name, stack.platforms, version))
        if stack.platforms == (ARM,):
            return Path(f"sglang-{version}-py3-none-manylinux_2_36_aarch64.whl") if self.arm_wheel else None
        return Path(f"sglang-{version}-py3-none-manylinux_2_28_x86_64.whl")

    def coverage(self, stack) -> dict[str, Any] | None:
        self.calls.append(("coverage", stack.name, stack.platforms, stack.sglang.version))
        after = stack.sglang.version != "0.5.9"
        cell = self.arm_after if after and stack.platforms == (ARM,) else "native"
        return _cov("10.0:" + cell, cell)


def test_each_platform_is_asked_for_the_releases_wheel_and_its_kernels(repo) -> None:
    world = PerPlatformWorld(repo.parent)
    assert upgrade_command(str(repo), "s1", "0.5.10", engines=world.engines()) == 0
    asked = [c[2] for c in world.calls if c[0] == "platform"]
    assert ("linux/amd64", ARM) in asked and (ARM,) in asked
    assert {c[2] for c in world.calls if c[0] == "coverage"} >= {(ARM,)}
    doc = _report(repo)
    assert list(doc["platform_coverage"]) == [ARM]
    assert doc["platform_coverage"][ARM]["checked"] and doc["platform_coverage"][ARM]["lost"] == []
    markdown = (repo.parent / "build" / "s1" / "upgrade" / "report.md").read_text()
    assert f"## Kernel coverage ({ARM})" in markdown


def test_a_release_without_the_second_platforms_wheel_is_a_review_naming_the_platform(repo) -> None:
    world = PerPlatformWorld(repo.parent, arm_wheel=False)
    assert upgrade_command(str(repo), "s1", "0.5.10", engines=world.engines()) == 1
    assert _report(repo)["verdict"] == "review"
    assert f"sglang 0.5.10 has no wheel for Python 3.12 on {ARM}" in _report(repo)["reasons"]


def test_kernels_lost_on_the_second_platform_only_are_a_review_naming_it(repo) -> None:
    world = PerPlatformWorld(repo.parent, arm_after="ptx")
    assert upgrade_command(str(repo), "s1", "0.5.10", engines=world.engines()) == 1
    doc = _report(repo)
    assert doc["coverage"]["lost"] == []  # the first platform kept its kernels
    assert f"{ARM}: kernel coverage lost: sgl_kernel/common_ops.so on 10.0 (native -> ptx)" in doc["reasons"]
    markdown = (repo.parent / "build" / "s1" / "upgrade" / "report.md").read_text()
    assert "| sgl_kernel/common_ops.so | 10.0 | native | ptx |" in markdown.split(f"## Kernel coverage ({ARM})")[1]
