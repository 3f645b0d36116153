"""Every platform's lock of a stack of several platforms is checked, not the first alone (issue 35, planted bug
P28): `platform_locks` (what the build and `stacks --check` read) refuses the arm64 lock edited by hand, or
reports it missing, while the amd64 lock beside it is sound. Locks written by `invoke lock`'s own flow with the
scripted resolver (`uv_double`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from uv_double import Uv

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError
from sglstack.lock import flow
from sglstack.lock.trust import UntrustedLock, lock_for_build, platform_locks

STACKS = """
defaults:
  serving: {model: org/model}
stacks:
  tiny:
    base_image: debian:bookworm-slim
    glibc: "2.36"
    python: "3.11"
    platforms: [linux/amd64, linux/arm64]
    sglang: {version: "0.5.23"}
"""


@pytest.fixture
def locked(tmp_path) -> tuple[Path, Path]:
    """(the stacks file, the arm64 lock) with both platforms' locks as `invoke lock` wrote them."""
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(STACKS)
    flow.lock_stack(stacks, "tiny", compile_fn=Uv())
    arm = tmp_path / "locks" / "tiny.linux-arm64.txt"
    assert arm.is_file() and (tmp_path / "locks" / "tiny.txt").is_file()
    return stacks, arm


def test_both_platforms_locks_are_read(locked):
    stacks, _ = locked
    whole = load_matrix(stacks).get("tiny")
    locks = platform_locks(stacks, whole)
    assert sorted(locks) == ["linux/amd64", "linux/arm64"]
    assert locks["linux/arm64"].platforms == ("linux/arm64",)


def test_the_second_platforms_lock_edited_by_hand_is_refused(locked):
    stacks, arm = locked
    arm.write_text(arm.read_text().replace("idna==", "idna==9", 1))
    whole = load_matrix(stacks).get("tiny")
    assert lock_for_build(stacks, whole) is not None  # the first platform's own lock is sound
    with pytest.raises(UntrustedLock) as err:
        platform_locks(stacks, whole)
    assert str(err.value).startswith(f"{arm}: stack 'tiny': ")
    seen: list[tuple[Path, ConfigError | None]] = []
    locks = platform_locks(stacks, whole, lambda path, exc: seen.append((path, exc)))
    assert sorted(locks) == ["linux/amd64"]
    assert [(path, type(exc)) for path, exc in seen] == [(arm, UntrustedLock)]


def test_the_second_platforms_lock_missing_is_reported(locked):
    stacks, arm = locked
    arm.unlink()
    seen: list[tuple[Path, ConfigError | None]] = []
    locks = platform_locks(stacks, load_matrix(stacks).get("tiny"), lambda path, exc: seen.append((path, exc)))
    assert sorted(locks) == ["linux/amd64"] and seen == [(arm, None)]
