"""Deployment records and what runs agree whatever fails, and a bad records line is named, not hidden.

In process, without Docker: compose is a double that notes what it was asked to bring up (and can fill
the disk meanwhile); health answers by the image brought up. The store lives on a small real tmpfs, so
"full" and "read-only" are the kernel's, not a mock's.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_fixtures import make_test_stack

from sglstack.cli.deploy import StatusOptions, status_command
from sglstack.core.errors import DeployError
from sglstack.deploy import deployment, flow, lifecycle, restore
from sglstack.deploy import status as status_mod
from sglstack.deploy.files import SAVED_SUFFIX
from sglstack.deploy.store import DeploymentRecord, read_records, records_path, serving_now
from sglstack.render import compose as cmp

GOOD = "sglstack-test/good@sha256:" + "a" * 64
NEW = "sglstack-test/new@sha256:" + "b" * 64
BAD = "sglstack-test/bad@sha256:" + "c" * 64  # crashes when brought up
OPTIONS = cmp.ComposeOptions(gpus=0)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs, mounted for the test and unmounted after (skipped where mounting is not permitted)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mount)],
                                           capture_output=True, check=False).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def fill(folder: Path) -> None:
    """Write until the disk is full (ENOSPC), leaving that file there. The records file is first padded
    with blank lines (which readers skip) to a whole page: tmpfs would otherwise still fit an append into
    the rest of its last page."""
    for store in folder.glob("build/*/deployments.jsonl"):
        with open(store, "ab") as fh:
            fh.write(b"\n" * (-store.stat().st_size % os.sysconf("SC_PAGE_SIZE")))
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as fh:
        while True:
            fh.write(b"x" * 65536)
            fh.flush()


class ComposeDouble:
    label = "compose double"

    def __init__(self, *, on_up=None) -> None:
        self.on_up = on_up
        self.ups: list[str] = []  # the image of each compose file brought up
        self.calls: list[str] = []

    def run(self, project, files, args, *, docker_host=None, **_):
        self.calls.append(args[0])
        if args[0] == "up":
            text = Path(next(iter(files))).read_text(encoding="utf-8")
            self.ups.append(next(line.split(":", 1)[1].strip().strip('"') for line in text.splitlines()
                                 if line.strip().startswith("image:")))
            if self.on_up:
                self.on_up()
        return subprocess.CompletedProcess(args, 0, "", "")


@pytest.fixture
def engine(monkeypatch):
    """The engine calls of `flow.deploy`, answered in process: the image up last decides health."""
    serving: dict[str, ComposeDouble] = {}
    monkeypatch.setattr(flow, "docker_client", lambda _host=None: object())
    monkeypatch.setattr(flow, "check_host", lambda *a, **k: [])
    monkeypatch.setattr(flow, "ensure_image", lambda *a, **k: None)
    # deploy refuses an image of another platform than the node's: the engine's and the image's, not asked here
    monkeypatch.setattr(flow, "check_engine_platform", lambda *a, **k: None)
    monkeypatch.setattr(flow, "image_identity", lambda _c, ref: (ref.split("@")[1], "sha256:" + "9" * 64))
    monkeypatch.setattr(flow, "smoke_report_for", lambda *a: None)
    monkeypatch.setattr(flow, "engine_name", lambda _c: "engine")
    monkeypatch.setattr(restore, "container_log_tail", lambda *a: "")
    monkeypatch.setattr(flow, "deployed_phases", lambda *a: {})  # the start by phase reads the container's log
    monkeypatch.setattr(restore, "pinned_image", lambda _c, record: record.image)
    for module in (flow, restore):  # the deploy's health wait and the restore's
        monkeypatch.setattr(module, "health_failure", lambda *a: "exited with code 3"
                            if serving["compose"].ups[-1] == BAD else None)
    return serving


def _deploy(dep: deployment.Deployment, compose: ComposeDouble, image: str) -> DeploymentRecord:
    return flow.deploy(dep, image, OPTIONS, compose=compose, wait_timeout_s=5, say=lambda _m: None)  # type: ignore[arg-type]


def _setup(tmp_path: Path, root: Path, engine: dict, monkeypatch) -> tuple[deployment.Deployment, ComposeDouble]:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(root))
    dep = deployment.Deployment(stack=make_test_stack(tmp_path / "m"), build_root=root)
    compose = engine["compose"] = ComposeDouble()
    _deploy(dep, compose, GOOD)
    return dep, compose


def _served(dep: deployment.Deployment) -> list[tuple[str, str, str]]:
    return [(r.action, r.result, r.image) for r in read_records(dep.build_root, "tiny")]


def _serving(dep: deployment.Deployment) -> str | None:
    """The image the records say serves now, and that no line records the unrecordable attempt."""
    records = read_records(dep.build_root, "tiny")
    assert {r.image for r in records} == {GOOD}
    now = serving_now(records)
    return now.image if now else None


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".probe", SAVED_SUFFIX)))


# ---- a store that cannot be written: refused before the running deployment is touched ----------------

@pytest.mark.parametrize("how", ["read-only", "full", "folder link", "file link"])
def test_a_deploy_whose_record_cannot_be_written_is_refused_with_nothing_changed(
        tmp_path, small_disk, engine, monkeypatch, how) -> None:
    dep, compose = _setup(tmp_path, small_disk / "build", engine, monkeypatch)
    store = records_path(dep.build_root, "tiny")
    compose_file = dep.out_dir / cmp.COMPOSE_FILE
    before = compose_file.read_text()
    outside = tmp_path / "outside"
    outside.mkdir()
    if how == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
        reason = f"({os.strerror(errno.EROFS)})"
    elif how == "full":
        fill(small_disk)
        reason = f"({os.strerror(errno.ENOSPC)})"
    elif how == "folder link":
        # The stack's folder moved out of the build root, a link left in its place.
        shutil.move(dep.out_dir, outside / "tiny")
        dep.out_dir.symlink_to(outside / "tiny")
        reason = (f"{dep.out_dir}: a link to {outside / 'tiny'}, outside {dep.build_root}: not followed (nothing "
                  "under the build folder is written through a link out of it; remove the link)")
    else:
        shutil.move(store, outside / "deployments.jsonl")
        store.symlink_to(outside / "deployments.jsonl")
        reason = (f"{store}: a link to {outside / 'deployments.jsonl'}, outside {dep.build_root}: not followed "
                  "(nothing under the build folder is written through a link out of it; remove the link)")
    calls = len(compose.calls)
    with pytest.raises(DeployError) as info:
        _deploy(dep, compose, NEW)
    tail = "; nothing was changed (a deployment that cannot be recorded is not started)"
    if how.endswith("link"):
        assert str(info.value) == reason + tail
    else:
        assert str(info.value) == f"stack 'tiny': the records {store}: cannot be written {reason}{tail}"
    assert compose.calls[calls:] == []  # not even `config`: nothing on the host was touched
    assert compose.ups == [GOOD]
    assert (outside / "tiny" / cmp.COMPOSE_FILE if how == "folder link" else compose_file).read_text() == before
    if how == "file link":
        assert len((outside / "deployments.jsonl").read_text().splitlines()) == 1


# ---- a disk that fills while the deploy runs: undone, so records and service agree ------------------

def test_a_healthy_deploy_whose_record_cannot_be_written_is_undone(tmp_path, small_disk, engine, monkeypatch) -> None:
    dep, compose = _setup(tmp_path, small_disk / "build", engine, monkeypatch)
    before = (dep.out_dir / cmp.COMPOSE_FILE).read_text()
    compose.on_up = lambda: fill(small_disk) if compose.ups[-1] == NEW else None
    with pytest.raises(deployment.DeployFailed) as info:
        _deploy(dep, compose, NEW)
    line = str(info.value)
    assert line.startswith(f"stack 'tiny' (project {dep.project_name}): healthy, but its record was not written ("
                           f"{records_path(dep.build_root, 'tiny')}: the record was not written ("), line
    assert f"; undone: restored {GOOD.split('@')[1]} on port 30000 (healthy); not recorded (" in line
    assert compose.ups == [GOOD, NEW, GOOD]  # the new one came up, and the recorded one is back
    assert _serving(dep) == GOOD  # which the records name (the restore's record fits once files moved back)
    assert (dep.out_dir / cmp.COMPOSE_FILE).read_text() == before
    assert _leftovers(dep.out_dir) == []


def test_a_failed_deploy_restores_the_previous_one_even_when_the_failure_cannot_be_recorded(
        tmp_path, small_disk, engine, monkeypatch) -> None:
    dep, compose = _setup(tmp_path, small_disk / "build", engine, monkeypatch)
    compose.on_up = lambda: fill(small_disk) if compose.ups[-1] == BAD else None
    with pytest.raises(deployment.DeployFailed) as info:
        _deploy(dep, compose, BAD)
    line = str(info.value)
    assert line.startswith(f"stack 'tiny' (project {dep.project_name}): exited with code 3; restored "
                           f"{GOOD.split('@')[1]} on port 30000 (healthy); not recorded ("), line
    assert compose.ups == [GOOD, BAD, GOOD]
    assert _serving(dep) == GOOD
    assert _leftovers(dep.out_dir) == []


def test_a_deploy_that_records_leaves_no_saved_copy_behind(tmp_path, engine, monkeypatch) -> None:
    dep, compose = _setup(tmp_path, tmp_path / "build", engine, monkeypatch)
    _deploy(dep, compose, NEW)
    assert _served(dep) == [("deploy", "healthy", GOOD), ("deploy", "healthy", NEW)]
    assert _leftovers(dep.out_dir) == []


# ---- a bad records line: named with why; status shows the rest; rollback refuses -------------------

def _record(image: str, **changes) -> dict:
    return DeploymentRecord(stack="tiny", action="deploy", result="healthy", image=image,
                            digest=image.split("@")[1], image_id="sha256:" + "9" * 64, time="2026-01-01T00:00:00Z",
                            host="h", docker_host="", project="sglstack-tiny", compose_tool="t",
                            compose_file=cmp.COMPOSE_FILE, options=OPTIONS.to_record()).to_dict() | changes


@pytest.mark.parametrize(("row", "why"), [
    (_record(GOOD, options="gpus=false"), "'options' is a string, not an object"),
    (_record(GOOD, options={"port": "80"}), "options: 'port' is a string, not a whole number or null"),
    (_record(GOOD, options={"gpus": "2"}), "options: 'gpus' is a string, not a whole number or true or false or null"),
    (_record(GOOD) | {"image": ["x"]}, "'image' is a list, not a string"),
    (_record(GOOD, target="k8s", options={"replicas": "2"}), "options: 'replicas' is a string, not a whole number"),
    ([1, 2], "a list, not an object"),
    ({"stack": "tiny"}, "no 'action'"),
])
def test_a_record_of_the_wrong_shape_is_named_by_file_line_and_why(tmp_path, row, why) -> None:
    path = records_path(tmp_path, "tiny")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_record(GOOD)) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DeployError) as info:
        read_records(tmp_path, "tiny")
    assert str(info.value) == f"{path}:2: not a deployment record ({why})"


def test_rollback_over_a_record_whose_options_are_not_an_object_is_one_line(tmp_path) -> None:
    dep = deployment.Deployment(stack=make_test_stack(tmp_path / "m"), build_root=tmp_path / "build")
    path = records_path(dep.build_root, "tiny")
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in (_record(GOOD, options="x"), _record(NEW))))
    with pytest.raises(DeployError) as info:
        lifecycle.rollback(dep, compose=ComposeDouble(), say=lambda _m: None)  # type: ignore[arg-type]
    assert info.value.exit_code == 2
    assert str(info.value) == f"{path}:1: not a deployment record ('options' is a string, not an object)"


class _NoContainers:
    class containers:  # the docker SDK's attribute
        @staticmethod
        def list(**_):
            return []


def test_status_shows_what_it_can_and_names_the_bad_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(status_mod, "docker_client", lambda _host=None: _NoContainers())
    root = tmp_path / "build"
    path = records_path(root, "tiny")
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in (_record(GOOD), _record(NEW, options="x"))) + "{no\n"
                    + json.dumps(_record(NEW)) + "\n")
    said: list[str] = []
    assert status_command(StatusOptions(), build_root=root, say=said.append) == 1
    assert said == [
        f"error: {path}:2: not a deployment record ('options' is a string, not an object): skipped, the rows "
        "above are what the other lines and the engine show",
        f"error: {path}:3: not a deployment record (not valid JSON): skipped, the rows above are what the other "
        "lines and the engine show",
    ]
    out = capsys.readouterr().out
    assert "nothing deployed" not in out
    row = next(line for line in out.splitlines() if line.startswith("│ tiny"))
    assert [cell.strip() for cell in row.split("│")[1:7]] == [
        "tiny", "sglstack-tiny", "not running (healthy)", "-", "-", "bbbbbbbbbbbb"]  # the last good line's


# ---- the same for a LeaderWorkerSet: refused before kubectl applies anything ----------------------------

def test_a_k8s_deploy_whose_record_cannot_be_written_applies_nothing(tmp_path, cluster) -> None:
    from k8s_deploy_fixtures import REPOSITORY, STACK, A, B, applied_image, calls, deploy

    env = cluster  # the kubectl stand-in's environment (conftest)
    assert deploy(env, tmp_path, A, "--wait-timeout", "30").returncode == 0
    store = Path(env["SGLSTACK_BUILD_DIR"]) / STACK / "deployments.jsonl"
    kept = store.with_name("kept.jsonl")
    store.rename(kept)
    store.symlink_to(kept)  # a link even within the build folder: appends never follow one
    applies = len([c for c in calls(env) if "apply" in c])
    proc = deploy(env, tmp_path, B, "--wait-timeout", "30")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1:] == [
        f"error: stack '{STACK}': the records {store}: cannot be written (deployments.jsonl is a link to {kept}; "
        "records are never written through a link); nothing was changed (a deployment that cannot be recorded is "
        "not started)"]
    assert len([c for c in calls(env) if "apply" in c]) == applies
    assert applied_image(env) == f"{REPOSITORY}@{A}"
    assert len(kept.read_text().splitlines()) == 1
