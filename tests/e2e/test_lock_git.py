"""A git-sourced SGLang's lock: the commit, and what that commit's pyproject requires, resolved by real uv.

The SGLang here is a local git repository made in the test (two commits whose pyprojects require
different `idna` releases); uv resolves from the default index, as `invoke lock` does.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from bisect_fixtures import git

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import PinMismatch
from sglstack.imagebuild.verify import check_pins
from sglstack.lock.flow import LockError, lock_stack
from sglstack.lock.plan import sglang_requirement
from sglstack.lockfile.current import is_current, source_mismatches
from sglstack.lockfile.text import parse_lock

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sglang"
version = "{version}"
requires-python = ">=3.10"
dependencies = [{deps}]
"""


def commit(repo: Path, version: str, deps: str) -> str:
    (repo / "python" / "sglang").mkdir(parents=True, exist_ok=True)
    (repo / "python" / "sglang" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (repo / "python" / "pyproject.toml").write_text(PYPROJECT.format(version=version, deps=deps))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"sglang {version}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path, monkeypatch) -> tuple[Path, list[str]]:
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "sglang-fork"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    return repo, [commit(repo, "0.5.9.dev1", '"idna==3.7"'), commit(repo, "0.5.9.dev2", '"idna==3.10"')]


def write_stacks(folder: Path, repo: Path, ref: str, *, install_deps: bool = True) -> Path:
    path = folder / "stacks.yaml"
    path.write_text(textwrap.dedent(f"""
        stacks:
          fork:
            base_image: debian:bookworm-slim
            src_image: debian:bookworm-slim
            python: "3.11"
            sglang:
              git: {{repo: "{repo}", ref: "{ref}", subdirectory: python}}
              install_deps: {str(install_deps).lower()}
            serving: {{model: test-org/tiny-model, tp: 1, gpus: 0}}
        """))
    return path


def test_a_git_sglang_needs_its_exported_tree_to_be_a_requirement(history, tmp_path):
    repo, shas = history
    stack = load_matrix(write_stacks(tmp_path, repo, shas[0])).get("fork")
    with pytest.raises(LockError, match="exported tree"):
        sglang_requirement(stack)


@pytest.mark.network
def test_the_lock_names_the_commit_and_the_requirements_of_its_pyproject(history, tmp_path):
    repo, shas = history
    stacks = write_stacks(tmp_path, repo, shas[0])
    result = lock_stack(stacks, "fork")
    lock, text = result.lock, result.path.read_text()
    assert lock.sglang_commit == shas[0]
    sglang = lock.get("sglang")
    assert sglang is not None and (sglang.version, sglang.layer, sglang.url) == ("0.5.9.dev1", "sglang", None)
    assert sglang.unhashed == f"built in the image from git commit {shas[0]}"
    idna = lock.get("idna")
    assert idna is not None and idna.version == "3.7" and idna.hashed and idna.required_by == ("sglang",)
    assert idna.layer == "sglang-requirements" and lock.installs_layer("sglang-requirements")
    assert f"# sglang-git-commit: {shas[0]}" in text
    # no machine path: neither the repository nor the temporary export
    assert str(tmp_path) not in text and "file://" not in text and "/tmp" not in text
    assert parse_lock(text) == lock

    stack = load_matrix(stacks).get("fork")
    assert is_current(lock, stack) and source_mismatches(lock, stack) == []
    check_pins(stack, {"distributions": {"sglang": "0.5.9.dev1", "idna": "3.7"}}, lock)
    with pytest.raises(PinMismatch, match=r"idna: locked 3\.7, installed 3\.10"):
        check_pins(stack, {"distributions": {"sglang": "0.5.9.dev1", "idna": "3.10"}}, lock)

    # The next commit requires another idna: a new lock follows that commit's pyproject.
    moved = load_matrix(write_stacks(tmp_path, repo, shas[1])).get("fork")
    assert not is_current(lock, moved)
    assert source_mismatches(lock, moved) == [f"sglang: locked git commit {shas[0]}, the stack builds git commit "
                                              f"{shas[1]}"]
    with pytest.raises(PinMismatch, match=f"the stack builds git commit {shas[1]}"):
        check_pins(moved, {"distributions": {"sglang": "0.5.9.dev1", "idna": "3.7"}}, lock)
    relocked = lock_stack(tmp_path / "stacks.yaml", "fork").lock
    assert relocked.sglang_commit == shas[1] and relocked.pins["idna"] == "3.10"
    assert relocked.pins["sglang"] == "0.5.9.dev2"


@pytest.mark.network
def test_without_its_dependencies_only_sglang_itself_is_locked(history, tmp_path):
    repo, shas = history
    lock = lock_stack(write_stacks(tmp_path, repo, shas[0], install_deps=False), "fork").lock
    assert [(p.name, p.version, p.layer) for p in lock.packages] == [("sglang", "0.5.9.dev1", "sglang")]
    assert lock.sglang_commit == shas[0] and "sglang-requirements" not in lock.layers


def test_a_pyproject_without_a_static_version_is_refused_naming_the_stack(history, tmp_path):
    repo, _ = history
    (repo / "python" / "pyproject.toml").write_text(
        PYPROJECT.format(version="0", deps="").replace('version = "0"', 'dynamic = ["version"]'))
    git(repo, "commit", "-q", "-am", "dynamic version")
    sha = git(repo, "rev-parse", "HEAD")
    with pytest.raises(LockError, match=r"stack 'fork': .*no static \[project\] version"):
        lock_stack(write_stacks(tmp_path, repo, sha), "fork")
