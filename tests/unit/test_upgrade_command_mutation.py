"""The upgrade command's modules where its flow tests leave a value unchecked (issue 35, mutation of
`upgrade-command`): what each helper passes on, and what it answers when the lock does not resolve. In process,
with the engines as doubles (tests/lib/upgrade_fixtures)."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from upgrade_fixtures import STACKS, World, lock_of

from sglstack.config.matrix import load_matrix
from sglstack.lock.flow import LockError
from sglstack.lockfile.model import Lock, LockedPackage, UnresolvedLayer
from sglstack.upgrade import command, planning
from sglstack.upgrade import inputs as upgrade_inputs
from sglstack.upgrade import locks as upgrade_locks

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
PHASES = ["reading sglang 0.5.10's METADATA", "judging the patches",
          "finding sglang 0.5.10's wheel for Python 3.12", "resolving torch's family", "resolving the new lock",
          "kernel coverage before and after", "the serving argv through sglang 0.5.10's parser",
          "what sglang 0.5.10 renames of the flags and environment the stack sets"]


@pytest.fixture()
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    (tmp_path / "stacks.yaml").write_text(STACKS)
    return tmp_path / "stacks.yaml"


def test_resolve_locks_passes_the_stack_the_earlier_locks_and_the_glibc_on(repo, monkeypatch) -> None:
    seen: list[tuple[Any, ...]] = []
    stack = load_matrix(repo).stacks["s1"]
    earlier = {"linux/amd64": lock_of("s1", sglang="0.5.9")}

    def resolve_platforms(s, *, previous, base_glibc):
        seen.append((s.name, previous, base_glibc))
        return {"linux/amd64": lock_of("s1", sglang="0.5.10")}

    monkeypatch.setattr(upgrade_locks, "resolve_platforms", resolve_platforms)
    assert upgrade_locks.resolve_locks(stack, earlier, "2.36") == {"linux/amd64": lock_of("s1", sglang="0.5.10")}
    assert seen == [("s1", earlier, "2.36")]


def test_a_lock_that_does_not_resolve_gives_no_lock(repo, tmp_path) -> None:
    world = World(tmp_path, lock_error="no solution: torch==9 and torch==2.9.1")
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, world.available)
    plan, text, lock = planning.plan_upgrade(inputs, world.engines())
    assert lock is None
    assert "version: 0.5.10" in text
    assert plan.lock_error == "no solution: torch==9 and torch==2.9.1"


def test_the_progress_is_titled_with_the_stack_and_told_each_phase(repo, tmp_path, monkeypatch) -> None:
    """What a terminal draws: the bar's title and each phase as it starts (the same words as the report's)."""
    drawn: list[tuple[str, str]] = []

    class Steps:
        def working_on(self, message: str) -> None:
            drawn.append(("phase", message))

    @contextlib.contextmanager
    def progress(what: str, total: int | None = None) -> Iterator[Steps]:
        drawn.append(("title", what))
        yield Steps()

    monkeypatch.setattr(command, "progress", progress)
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    outcome = command.upgrade_stack(str(repo), "s1", "0.5.10", engines=world.engines())
    assert drawn == [("title", "upgrade s1")] + [("phase", m) for m in PHASES]
    assert list(outcome.document["phases_s"]) == PHASES
    assert outcome.written is None and repo.read_text() == STACKS  # without write, nothing is written


def test_the_total_seconds_are_rounded_to_tenths(repo, tmp_path, monkeypatch) -> None:
    """Each reading of the clock an eighth of a second after the last: the total, 1.25 s, is shown as 1.2."""
    ticks = iter(range(800, 900))
    monkeypatch.setattr(command, "time", types.SimpleNamespace(monotonic=lambda: next(ticks) / 8))
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    document = command.upgrade_stack(str(repo), "s1", "0.5.10", engines=world.engines()).document
    assert document["seconds"] == 1.2
    assert set(document["phases_s"].values()) == {0.1}  # 0.125 each


def test_platforms_the_resolver_left_out_are_named(repo) -> None:
    stack = load_matrix(repo).stacks["s1"].model_copy(
        update={"platforms": ("linux/amd64", "linux/arm64", "linux/ppc64le")})

    def resolve_all(s, previous, glibc):
        return {"linux/amd64": lock_of("s1", sglang="0.5.10")}

    with pytest.raises(LockError) as err:
        upgrade_locks.new_locks(stack, {}, "2.36", lambda *a: lock_of("s1"), resolve_all)
    assert str(err.value) == "stack 's1': no lock for linux/arm64, linux/ppc64le"


def test_write_with_guessed_pins_says_so_in_the_report_notes(repo, tmp_path) -> None:
    repo.write_text(STACKS + TORCH_STACK)
    why = "index https://download.pytorch.org/whl/cu130 unreachable: dns error"
    base = lock_of("t1", sglang="0.5.10")
    unreached = Lock(**{**base.__dict__, "packages": (
        *base.packages, LockedPackage("torch", "2.10.0", "torch", unhashed=why),
        LockedPackage("torchvision", "0.25.0", "torch", unhashed=why)),
        "unresolved": (UnresolvedLayer("torch", True, why),)})
    world = World(tmp_path, requires="torch==2.10.0", lock=unreached)
    world.family = lambda stack, target, glibc: {"torch": "2.10.0", "torchvision": "0.25.0"}
    outcome = command.upgrade_stack(str(repo), "t1", "0.5.10", write=True, engines=world.engines())
    assert outcome.written is None
    assert outcome.plan.notes[-1] == (f"--write: nothing written: torch, torchvision would be written as a guess "
                                      f"({repo} is unchanged)")
    assert outcome.document["notes"][-1] == outcome.plan.notes[-1]


def test_the_renames_check_gets_the_served_argv_and_the_new_locks_versions(repo, tmp_path) -> None:
    """The release deprecates a flag the stack serves with: a reason; the parsers were asked with the
    version of each package the new lock holds."""
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10", xgrammar="0.1.99"))
    asked: list[tuple[str, ...]] = []

    def flags(wheel: Path, version_of) -> dict[str, Any]:
        # the lock's, the release's exact pin, the newest final release on the index
        asked.append((wheel.name, version_of("xgrammar"), version_of("outlines"), version_of("msgspec")))
        new = "0.5.10" in wheel.name
        return {"flags": ["--model-path", "--host", "--port", "--mem-fraction-static"],
                "deprecated": {"--mem-fraction-static": "--mem-frac"} if new else {}}

    world.flags = flags
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, world.available)
    plan, _, _ = planning.plan_upgrade(inputs, world.engines())
    assert asked == [("sglang-0.5.9-py3-none-any.whl", "0.1.99", "0.1.11", "0.19.0"),
                     ("sglang-0.5.10-py3-none-any.whl", "0.1.99", "0.1.11", "0.19.0")]
    assert [r for r in plan.reasons if "--mem-fraction-static" in r] != []
    assert "--mem-frac" in " ".join(plan.reasons)


def test_each_further_platform_is_asked_for_the_release_wheel(repo, tmp_path) -> None:
    repo.write_text(STACKS.replace("    base_image: debian:bookworm-slim\n",
                                   "    base_image: debian:bookworm-slim\n    platforms: [linux/amd64, linux/arm64]\n"))
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    inputs = upgrade_inputs.check_inputs(str(repo), "s1", "0.5.10", None, False, world.available)
    locks = {p: lock_of("s1", sglang="0.5.10") for p in inputs.stack.platforms}
    planning.plan_upgrade(inputs, world.engines(resolve_platforms=lambda s, previous, glibc: locks))
    assert [c for c in world.calls if c[0] == "platform"] == [("platform", "s1", "0.5.10")] * 2


def test_pins_moved_when_the_lock_did_not_resolve_are_guesses_saying_why(repo, tmp_path) -> None:
    repo.write_text(STACKS + TORCH_STACK)
    world = World(tmp_path, requires="torch==2.10.0", lock_error="no solution for torch==2.10.0")
    world.family = lambda stack, target, glibc: {"torch": "2.10.0", "torchvision": "0.25.0"}
    inputs = upgrade_inputs.check_inputs(str(repo), "t1", "0.5.10", None, False, world.available)
    plan, _, lock = planning.plan_upgrade(inputs, world.engines())
    assert lock is None
    assert plan.guesses == {"torch": "the lock did not resolve: no solution for torch==2.10.0",
                            "torchvision": "the lock did not resolve: no solution for torch==2.10.0"}


@pytest.mark.parametrize("write", [False, True])
def test_every_place_the_upgrade_writes_is_checked_first_by_name(repo, tmp_path, monkeypatch, write) -> None:
    """The report (not made yet), and with --write the stacks file through its link and the new stack's lock
    where its folder exists (the checks' refusals are test_upgrade_write's, on a read-only mount)."""
    (tmp_path / "locks").mkdir()
    link = tmp_path / "link.yaml"
    link.symlink_to(repo)
    checked: list[tuple[Path, dict[str, Any]]] = []
    monkeypatch.setattr(upgrade_inputs, "require_writable", lambda path, **kw: checked.append((path, kw)))
    world = World(tmp_path)
    inputs = upgrade_inputs.check_inputs(str(link), "s1", "0.5.10", "s2", write, world.available)
    assert inputs.new_name == "s2"
    report = (tmp_path / "build" / "s2" / "upgrade" / "report.json", {"what": "the upgrade's report", "create": False})
    assert checked == ([report] if not write else [
        report, (repo, {"what": "--write: the stacks file"}),
        (tmp_path / "locks" / "s2.txt", {"what": "--write: the lock"})])
