"""Each writer named in issue 34 (and the append-mode ones), with a link planted at its target pointing out of
the build folder: a one-line refusal naming the path, and the file outside untouched. `test_writers.py`
holds every other writer to the same helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deploy_fixtures import make_test_stack
from upgrade_fixtures import STACKS, World, lock_of

from sglstack.adapters.process import running_process
from sglstack.cli.upgrade import upgrade_command
from sglstack.core.safefiles import OutputNotWritable
from sglstack.deploy import files
from sglstack.publish.release import _smoke_candidate
from sglstack.render import compose as cmp

SECRET = "HF_TOKEN=not-for-this-container\n"


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A build root under tmp_path, and a file and a folder outside it."""
    root = tmp_path / "build"
    root.mkdir()
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(root))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_text(SECRET)
    return root, outside


def _file_link(path: Path, outside: Path, root: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(outside / "file")
    return (f"{path}: a link to {outside / 'file'}, outside {root}: not followed (nothing under the build folder "
            "is written through a link out of it; remove the link)")


def _folder_link(folder: Path, outside: Path, root: Path) -> str:
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to(outside)
    return (f"{folder}: a link to {outside}, outside {root}: not followed (nothing under the build folder is "
            "written through a link out of it; remove the link)")


def _untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["file"]
    assert (outside / "file").read_text() == SECRET


# ---- the process runner's server log -----------------------------------------------------------------

def test_the_server_log_is_never_written_through_a_link(world) -> None:
    root, outside = world
    log = root / "tiny" / "smoke-report.baseline.log"
    line = _file_link(log, outside, root)
    with pytest.raises(OutputNotWritable) as info, running_process(["true"], env={}, log_path=log):
        pass
    assert str(info.value) == line
    _untouched(outside)


def test_the_server_log_s_folder_is_never_a_link_out(world) -> None:
    root, outside = world
    line = _folder_link(root / "tiny", outside, root)
    with pytest.raises(OutputNotWritable) as info, \
            running_process(["true"], env={}, log_path=root / "tiny" / "smoke-report.baseline.log"):
        pass
    assert str(info.value) == line
    _untouched(outside)


# ---- deploy's compose.env ----------------------------------------------------------------------------

@pytest.mark.parametrize("dangling", [False, True])
def test_compose_env_is_never_created_or_read_through_a_link(world, dangling) -> None:
    root, outside = world
    env = root / "tiny" / cmp.ENV_FILE
    if dangling:  # before: an empty file created wherever the link pointed
        (outside / "file").unlink()
    line = _file_link(env, outside, root)
    said: list[str] = []
    with pytest.raises(OutputNotWritable) as info:
        files.ensure_env_file(root / "tiny", cmp.ComposeOptions().env_file, said.append)
    assert str(info.value) == line
    assert said == []
    if dangling:
        assert list(outside.iterdir()) == []
    else:
        _untouched(outside)


def test_a_missing_compose_env_is_created_empty_and_private(world) -> None:
    root, _ = world
    said: list[str] = []
    files.ensure_env_file(root / "tiny", cmp.ComposeOptions().env_file, said.append)
    env = root / "tiny" / cmp.ENV_FILE
    assert env.read_text() == "" and env.stat().st_mode & 0o777 == 0o600 and len(said) == 1
    files.ensure_env_file(root / "tiny", cmp.ComposeOptions().env_file, said.append)  # kept as it is
    assert len(said) == 1


# ---- upgrade's reports -------------------------------------------------------------------------------

def _upgrade(tmp_path: Path) -> int:
    (tmp_path / "stacks.yaml").write_text(STACKS)
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10", xgrammar="0.1.27"))
    return upgrade_command(str(tmp_path / "stacks.yaml"), "s1", "0.5.10", engines=world.engines())


def test_upgrade_s_report_is_never_written_through_a_link(world, tmp_path) -> None:
    root, outside = world
    line = _file_link(root / "s1" / "upgrade" / "report.md", outside, root)
    with pytest.raises(OutputNotWritable) as info:
        _upgrade(tmp_path)
    assert str(info.value) == line
    _untouched(outside)


def test_upgrade_s_report_folder_is_never_a_link_out(world, tmp_path) -> None:
    root, outside = world
    line = _folder_link(root / "s1" / "upgrade", outside, root)
    with pytest.raises(OutputNotWritable) as info:
        _upgrade(tmp_path)
    assert str(info.value) == line
    _untouched(outside)


# ---- the release's smoke copy ------------------------------------------------------------------------

def test_the_release_s_smoke_copy_is_refused_before_the_smoke_when_its_folder_leads_out(world, tmp_path) -> None:
    root, outside = world
    line = _folder_link(root / "publish" / "smoke", outside, root)
    smoked: list[str] = []

    def smoke(stack, image, opts):
        smoked.append(image)
        return True, {}

    with pytest.raises(OutputNotWritable) as info:
        _smoke_candidate(make_test_stack(tmp_path / "m"), "r@sha256:" + "a" * 64, "sha256:" + "a" * 64, (), None,
                         None, smoke)
    assert str(info.value) == line
    assert smoked == []  # refused before the work
    _untouched(outside)


# ---- append-mode logs (a torn records tail, the local registry's log, the git cache's lock) -----------

def test_an_append_mode_log_is_never_opened_through_a_link(world) -> None:
    from sglstack.core.safefiles import open_log  # here: the other tests also run on code without it

    root, outside = world
    line = _file_link(root / "registry" / "registry.log", outside, root)
    with pytest.raises(OutputNotWritable) as info:
        open_log(root, root / "registry" / "registry.log", append=True)
    assert str(info.value) == line
    line = _folder_link(root / "cache", outside, root)
    with pytest.raises(OutputNotWritable) as info:
        open_log(root, root / "cache" / "git.lock", append=True)
    assert str(info.value) == line
    _untouched(outside)


def test_a_bisect_log_is_never_moved_aside_through_a_link(tmp_path, monkeypatch) -> None:
    """A new bisect moves the previous one's log aside by rename: with build/STACK/bisect a link out of the
    build folder, that rename moved someone else's file before the append refused the link."""
    from sglstack.bisect.log import BisectLog

    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    outside = tmp_path / "outside"
    outside.mkdir()
    theirs = outside / "log.jsonl"
    theirs.write_text(json.dumps({"event": "start", "key": {"good": "a"}, "refs": ["a", "b"]}) + "\n")
    folder = tmp_path / "build" / "tiny" / "bisect"
    folder.parent.mkdir(parents=True)
    folder.symlink_to(outside)
    with pytest.raises(OutputNotWritable) as info:
        BisectLog(folder).open({"good": "x"}, ["x", "y"])
    assert str(info.value) == (f"{folder}: a link to {outside}, outside {tmp_path / 'build'}: not followed (nothing "
                               "under the build folder is written through a link out of it; remove the link)")
    assert sorted(p.name for p in outside.iterdir()) == ["log.jsonl"]
