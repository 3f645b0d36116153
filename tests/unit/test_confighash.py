"""The config hash through the production path (render the context, then `build.compute_config_hash`):
whatever can change the image changes the hash, and nothing of this machine does. No Docker."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.core.resources import DEFAULT_PATCHES_DIR
from sglstack.imagebuild.context import write_build_context
from sglstack.imagebuild.plan import compute_config_hash
from sglstack.render import confighash

REPO = Path(__file__).resolve().parents[2]
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
PATCH = "kimi-k25-eagle3"


@pytest.fixture
def stack():
    return load_matrix(CPU_MATRIX).get("cpu-test")


@pytest.fixture
def patches(tmp_path) -> Path:
    """A private copy of the default patches, to edit."""
    copy = tmp_path / "patches"
    shutil.copytree(DEFAULT_PATCHES_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def hash_of(stack, out: Path, patches: Path, target: str = "runtime") -> str:
    return compute_config_hash(write_build_context(stack, out, patches), target, stack.build_platform)


def test_editing_a_patch_changes_the_production_config_hash(stack, patches, tmp_path):
    """An edited patch must be rebuilt: a hash that skipped context/patches/ would ship the old patch."""
    before = hash_of(stack, tmp_path / "a", patches)
    assert hash_of(stack, tmp_path / "a", patches) == before  # stable for one config
    methods = patches / PATCH / "methods.py"
    methods.write_text(methods.read_text() + "\n# a reviewer's edit\n")
    after_methods = hash_of(stack, tmp_path / "a", patches)
    assert after_methods != before
    toml = patches / PATCH / "patch.toml"
    toml.write_text(toml.read_text() + "\n# reworded\n")
    assert hash_of(stack, tmp_path / "a", patches) not in (before, after_methods)


def test_the_hash_covers_target_and_platform_but_not_the_build_folder(stack, patches, tmp_path):
    runtime = hash_of(stack, tmp_path / "a", patches)
    assert hash_of(stack, tmp_path / "elsewhere" / "b", patches) == runtime
    assert hash_of(stack, tmp_path / "a", patches, target="sglang-src") != runtime
    rendered = write_build_context(stack, tmp_path / "a", patches)
    assert compute_config_hash(rendered, "runtime", "linux/arm64") != compute_config_hash(rendered, "runtime", None)


def test_every_part_of_the_config_is_in_the_hash_and_none_can_pass_for_another():
    base = confighash.config_hash("FROM x\n", {"a.txt": b"1"}, build_args={"K": "v"}, target="t", platform="p")
    variants = [
        confighash.config_hash("FROM y\n", {"a.txt": b"1"}, build_args={"K": "v"}, target="t", platform="p"),
        confighash.config_hash("FROM x\n", {"a.txt": b"2"}, build_args={"K": "v"}, target="t", platform="p"),
        confighash.config_hash("FROM x\n", {"b.txt": b"1"}, build_args={"K": "v"}, target="t", platform="p"),
        confighash.config_hash("FROM x\n", {"a.txt": b"1"}, build_args={"K": "w"}, target="t", platform="p"),
        confighash.config_hash("FROM x\n", {"a.txt": b"1"}, build_args={"L": "v"}, target="t", platform="p"),
        confighash.config_hash("FROM x\n", {"a.txt": b"1"}, target="t", platform="p"),
        confighash.config_hash("FROM x\n", {"a.txt": b"1"}, build_args={"K": "v"}, target="u", platform="p"),
        confighash.config_hash("FROM x\n", {"a.txt": b"1"}, build_args={"K": "v"}, target="t", platform="q"),
        # the same bytes moved from the target to the platform: the part names keep them apart
        confighash.config_hash("FROM x\n", {"a.txt": b"1"}, build_args={"K": "v"}, target="", platform="tp"),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # the order the files are listed in is not part of the config
    assert confighash.config_hash("F", {"a": b"1", "b": b"2"}) == confighash.config_hash("F", {"b": b"2", "a": b"1"})
    assert confighash.config_hash("F", {}, target=None, platform=None) == confighash.config_hash("F", {}, target="",
                                                                                                  platform="")


def test_read_context_names_files_relative_to_the_context(tmp_path):
    (tmp_path / "patches" / "p").mkdir(parents=True)
    (tmp_path / "patches" / "p" / "methods.py").write_bytes(b"x = 1\n")
    assert confighash.read_context(tmp_path, [tmp_path / "patches" / "p" / "methods.py"]) == {
        "patches/p/methods.py": b"x = 1\n"}


def test_the_hash_of_a_config_does_not_change_between_sglstack_versions():
    """Pinned values: a change of the hash's framing would make every built and published image look
    new (the local "already built" check and the registry's config-hash tags would both miss)."""
    assert confighash.config_hash(
        "FROM debian:bookworm-slim\n",
        {"patches/p/methods.py": b"def f(self):\n    return 1\n", "stack.json": b"{}\n"},
        build_args={"A": "1"}, target="runtime", platform="linux/amd64",
    ) == "71d67918f6d36b4acf0c4c2b9e90c4213c5983064176dc91023e962594ddd7cd"
    assert confighash.config_hash("", {}) == "a836fabf6f90c580a0d1296ec1fd5be0d6c58ac22995a03c834cbcbcee12bd6f"


def test_bytes_cannot_move_from_one_file_into_another_with_the_same_hash():
    """Each part carries its length: a file whose bytes end with what would frame the next file is not
    the same config as the two files."""
    two = {"a": b"x", "b": b"y"}
    for frame in (b"file:b\0" + b"1\0", b"file:b\0None\0", b"file:b\0\0"):
        assert confighash.config_hash("F", {"a": b"x" + frame + b"y"}) != confighash.config_hash("F", two)
