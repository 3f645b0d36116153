"""The git adapter against real repositories made in the test: a local path, file://, a bare clone.

No hosting service is involved: what git on this host can clone, sglstack can build from.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from bisect_fixtures import git, make_history, stack_yaml

from sglstack.adapters.git import GitSource, GitSourceError, display_url
from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.context import write_build_context
from sglstack.imagebuild.plan import add_git_source, compute_config_hash
from sglstack.render.dockerfile import GIT_SOURCE_DIR


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def small_repo(path: Path, commits: int = 4) -> list[str]:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    shas = []
    for i in range(commits):
        (path / "python").mkdir(exist_ok=True)
        (path / "python" / "version.txt").write_text(f"{i}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(path, "rev-parse", "HEAD"))
    git(path, "tag", "v0", shas[0])
    return shas


def test_local_path_file_url_and_bare_clone_resolve_the_same_commits(tmp_path, cache):
    shas = small_repo(tmp_path / "work")
    bare = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(tmp_path / "work"), str(bare)], check=True)
    for source in (str(tmp_path / "work"), f"file://{tmp_path / 'work'}", str(bare)):
        repo = GitSource(source)
        assert repo.resolve("v0") == shas[0]
        assert repo.resolve("main") == shas[-1]
        assert repo.resolve(shas[1][:10]) == shas[1]
        assert repo.first_parent_range(shas[0], shas[-1]) == shas[1:]
        assert repo.git_dir.is_relative_to(cache / "git")
    # one cache per source, none of them inside the user's repository
    assert len(list((cache / "git").glob("*.git"))) == 3
    assert not (tmp_path / "work" / ".git" / "refs" / "sglstack").exists()


def test_relative_local_path_is_the_same_source_from_any_folder(tmp_path, cache, monkeypatch):
    shas = small_repo(tmp_path / "work")
    monkeypatch.chdir(tmp_path)
    here = GitSource("work")
    monkeypatch.chdir(tmp_path / "work" / "python")
    assert GitSource(str(tmp_path / "work")).git_dir == here.git_dir
    assert here.resolve("main") == shas[-1]


def test_a_full_sha_in_the_cache_needs_no_fetch_and_a_moved_branch_is_fetched(tmp_path, cache):
    shas = small_repo(tmp_path / "work")
    repo = GitSource(str(tmp_path / "work"))
    assert repo.resolve("main") == shas[-1]
    moved = tmp_path / "work"
    (moved / "python" / "version.txt").write_text("new\n")
    git(moved, "commit", "-qam", "commit 4")
    new = git(moved, "rev-parse", "HEAD")
    os.rename(moved, tmp_path / "gone")  # the source is unreachable now
    assert repo.resolve(shas[2]) == shas[2]  # no fetch for a known commit
    with pytest.raises(GitSourceError, match="fetch failed"):
        repo.resolve("main")  # a branch name means "what the source says now": it needs the source
    os.rename(tmp_path / "gone", moved)
    assert repo.resolve("main") == new


def test_first_parent_order_skips_the_commits_of_a_merged_branch(tmp_path, cache):
    shas = small_repo(tmp_path / "work", commits=2)
    work = tmp_path / "work"
    git(work, "checkout", "-q", "-b", "topic")
    (work / "python" / "topic.txt").write_text("topic\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "topic work")
    topic = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")
    (work / "python" / "main.txt").write_text("main\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "main work")
    main_work = git(work, "rev-parse", "HEAD")
    git(work, "merge", "-q", "--no-ff", "-m", "merge topic", "topic")
    merge = git(work, "rev-parse", "HEAD")
    repo = GitSource(str(work))
    assert repo.first_parent_range(shas[1], repo.resolve("main")) == [main_work, merge]
    assert topic not in repo.first_parent_range(shas[1], merge)
    assert repo.is_ancestor(shas[1], merge) and not repo.is_ancestor(merge, shas[1])
    assert repo.subjects([main_work, merge]) == {main_work: "main work", merge: "merge topic"}


def test_export_writes_one_commits_subdirectory_and_leaves_the_users_work_tree_alone(tmp_path, cache):
    shas = small_repo(tmp_path / "work")
    work = tmp_path / "work"
    (work / "python" / "version.txt").write_text("uncommitted edit\n")  # the user's work in progress
    repo = GitSource(str(work))
    files = repo.export(shas[1], "python", tmp_path / "out")
    assert files == [tmp_path / "out" / "version.txt"]
    assert (tmp_path / "out" / "version.txt").read_text() == "1\n"
    assert (work / "python" / "version.txt").read_text() == "uncommitted edit\n"
    assert git(work, "status", "--porcelain") == "M python/version.txt"
    # a second export replaces the first one completely
    (tmp_path / "out" / "stale.txt").write_text("x")
    repo.export(shas[2], "python", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["version.txt"]
    with pytest.raises(GitSourceError, match="has no folder 'docs'"):
        repo.export(shas[1], "docs", tmp_path / "out2")


def test_bad_refs_and_sources_are_one_line_errors_without_credentials(tmp_path, cache):
    small_repo(tmp_path / "work")
    repo = GitSource(str(tmp_path / "work"))
    with pytest.raises(GitSourceError, match="no commit, tag or branch 'nope'"):
        repo.resolve("nope")
    with pytest.raises(GitSourceError, match="not a commit"):
        repo.resolve("--upload-pack=evil")
    secret = GitSource("https://user:s3cret@127.0.0.1:1/org/sglang.git")
    assert "s3cret" not in secret.label and secret.label == "https://127.0.0.1:1/org/sglang.git"
    with pytest.raises(GitSourceError) as info:
        secret.resolve("main")
    assert "s3cret" not in str(info.value) and "\n" not in str(info.value)
    assert display_url("ssh://git@example.invalid/x.git") == "ssh://***@example.invalid/x.git"


def test_the_build_context_holds_the_exported_tree_and_the_config_hash_covers_it(tmp_path, cache):
    repo_path = tmp_path / "sglang"
    shas = make_history(repo_path, [300.0, 300.0, 270.0], with_kimi=False)
    hashes = {}
    for ref in (shas[0], shas[2]):
        matrix = tmp_path / f"stacks-{ref[:6]}.yaml"
        matrix.write_text(stack_yaml(str(repo_path), ref, patches=()))
        stack = load_matrix(matrix).get("synth")
        rendered = add_git_source(stack, write_build_context(stack, tmp_path / ref[:6]))
        src = rendered.context / GIT_SOURCE_DIR
        assert (src / "pyproject.toml").is_file() and (src / "sglang" / "launch_server.py").is_file()
        assert src / "pyproject.toml" in rendered.files
        hashes[ref] = compute_config_hash(rendered, "runtime", stack.build_platform)
        # the same stack with another tree (same ref) hashes differently: the tree is part of the config
        (src / "sglang" / "__init__.py").write_text("changed\n")
        assert compute_config_hash(rendered, "runtime", stack.build_platform) != hashes[ref]
    assert hashes[shas[0]] != hashes[shas[2]]


