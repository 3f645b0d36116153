"""`deploy` in process when its records cannot be written, which image a record ran, and what follows it
(`rollback`, `service_logs`, `undeploy`). Compose and the engine are doubles (tests/lib/deploy_flow_world); every
line said, every record field and every compose call is asserted."""

from __future__ import annotations

import signal
from subprocess import CompletedProcess

import pytest
from deploy_flow_world import (
    CRASHED,
    DIGEST_A,
    DIGEST_B,
    DOWN,
    HEALTHY,
    ID_A,
    ID_B,
    PROJECT,
    STARTING,
    A,
    B,
    Engine,
    calls,
    deploy,
    make_world,
    rows,
)

from sglstack.core.errors import DeployError
from sglstack.core.safefiles import OutputNotWritable
from sglstack.core.signals import Interrupted
from sglstack.deploy import flow, lifecycle
from sglstack.deploy.deployment import DeployFailed
from sglstack.deploy.restore import pinned_image
from sglstack.deploy.store import DeploymentRecord, append_record, read_records
from sglstack.render import compose as cmp


@pytest.fixture
def world(tmp_path, monkeypatch):
    return make_world(tmp_path, monkeypatch)


# ---- the records cannot be written ------------------------------------------------------------------------

def _refuse(monkeypatch, result="healthy", action="deploy"):
    def append(root, record):
        if (record.result, record.action) == (result, action):
            raise OutputNotWritable("the disk is full")
        append_record(root, record)

    monkeypatch.setattr(flow, "append_record", append)
    monkeypatch.setattr("sglstack.deploy.store.append_record", append)


def test_a_healthy_deploy_whose_record_cannot_be_written_is_undone(world, monkeypatch):
    deploy(world, smoke_report="s")
    _refuse(monkeypatch)
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    why = "healthy, but its record was not written (the disk is full)"
    assert str(failed.value) == (f"stack 'tiny' (project {PROJECT}): {why}; undone: restored {DIGEST_A} on port "
                                 "30000 (healthy)")
    assert failed.value.__suppress_context__
    assert failed.value.log_tail == ""
    assert world.engine.running == {PROJECT: A}
    assert rows(world)[1:] == [("deploy", "failed", B, why),
                               ("restore", "healthy", A, f"after the failed deploy of {B}")]


def test_a_first_deploy_whose_record_cannot_be_written_is_taken_down(world, monkeypatch):
    _refuse(monkeypatch)
    with pytest.raises(DeployFailed) as failed:
        deploy(world, smoke_report="s")
    assert str(failed.value) == (f"stack 'tiny' (project {PROJECT}): healthy, but its record was not written (the "
                                 "disk is full); undone: took it down (its last log lines are above)")
    assert world.engine.running == {}


def test_a_failure_that_cannot_be_recorded_is_undone_and_says_so(world, monkeypatch):
    deploy(world, smoke_report="s")
    _refuse(monkeypatch, result="failed")
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert str(failed.value).endswith(f"restored {DIGEST_A} on port 30000 (healthy); not recorded (the disk is full)")
    assert world.engine.running == {PROJECT: A}
    assert rows(world) == [("deploy", "healthy", A, ""), ("restore", "healthy", A, f"after the failed deploy of {B}")]


def test_a_failed_first_deploy_that_cannot_be_recorded_says_so(world, monkeypatch):
    _refuse(monkeypatch, result="failed")
    world.engine.health[A] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, smoke_report="s")
    assert str(failed.value).endswith("took it down (its last log lines are above); not recorded (the disk is full)")


def test_a_restore_that_cannot_be_recorded_says_so(world, monkeypatch):
    deploy(world, smoke_report="s")
    _refuse(monkeypatch, action="restore")
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert str(failed.value).endswith(f"restored {DIGEST_A} on port 30000 (healthy); not recorded (the disk is full)")


def test_a_signal_during_the_undo_says_what_it_left(world, monkeypatch):
    deploy(world, smoke_report="s")
    world.engine.health[B] = [CRASHED]

    def interrupted(*a, **k):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(flow, "recover", interrupted)
    with pytest.raises(Interrupted):
        deploy(world, B)
    assert world.said[-1] == "stack 'tiny': exited with code 3 (restarts: 2); the restore did not finish"
    world.engine.health[B] = [HEALTHY]
    _refuse(monkeypatch)
    with pytest.raises(Interrupted):
        deploy(world, B)
    assert world.said[-1] == ("stack 'tiny': healthy, but its record was not written (the disk is full); "
                              "the undo did not finish")


# ---- which image a record ran -------------------------------------------------------------------------

def _record(image, digest="", image_id=""):
    return DeploymentRecord(stack="tiny", action="deploy", result="healthy", image=image, digest=digest,
                            image_id=image_id, time="T", host="", docker_host="", project=PROJECT,
                            compose_tool="c", compose_file="compose.yaml")


def test_pinned_image_is_exactly_the_image_that_ran():
    engine = Engine()
    engine.tags.update({"r/x:1": ID_A, ID_B: ID_B})
    assert pinned_image(engine, _record(A, DIGEST_A, ID_B)) == A  # a digest pins it
    assert pinned_image(engine, _record("r/x:1", "", ID_A)) == "r/x:1"  # the tag still points to it
    assert pinned_image(engine, _record("r/x:1")) == "r/x:1"  # an old record without an id: the tag as it is
    assert pinned_image(engine, _record("r/x:1", "", ID_B)) == ID_B  # moved: the image id, still on the engine
    assert pinned_image(engine, _record("r/z:1", DIGEST_A, ID_A)) == f"r/z@{DIGEST_A}"  # gone: pulled by digest
    with pytest.raises(DeployError) as gone:
        pinned_image(engine, _record("r/z:1", ID_A, ID_A))  # an old record's "digest" that is its image id
    assert str(gone.value) == (f"r/z:1 no longer points to the image that ran ({ID_A[:19]}), and that image is gone "
                               "from the engine")
    with pytest.raises(DeployError):
        pinned_image(engine, _record("r/y:1", "", ID_A))
    with pytest.raises(DeployError):
        pinned_image(engine, _record("r/y:1"))  # nor without an image id  # a tag the engine does not hold, no digest
    with pytest.raises(DeployError):
        pinned_image(engine, _record("Not A Ref", DIGEST_A, ID_A))  # no name to pull the digest by


# ---- rollback, logs, undeploy ---------------------------------------------------------------------------

def test_rollback_deploys_the_healthy_image_before_with_its_options_and_report(world):
    first = cmp.ComposeOptions(gpus=0, port=31000)
    deploy(world, options=first, smoke_report="r1")
    deploy(world, B, smoke_report="r2")
    world.said.clear()
    record = lifecycle.rollback(world.dep, compose=world.compose, wait_timeout_s=9, say=world.said.append)
    first_time = read_records(world.dep.build_root, "tiny")[0].time
    assert world.said[0] == f"rolling back stack 'tiny' to {A} (deployed {first_time})"
    assert (record.action, record.result, record.image, record.options, record.smoke_report) == (
        "rollback", "healthy", A, first.to_record(), "r1")
    assert world.said[1] == "compose: docker compose 2.29.0 (v2)"  # the deploy says its steps to the same `say`
    assert world.engine.running == {PROJECT: A}


def test_rollback_waits_as_long_as_it_is_told(world):
    deploy(world, smoke_report="r1")
    deploy(world, B, smoke_report="r2")
    world.engine.health[A] = [STARTING]
    with pytest.raises(DeployFailed) as failed:
        lifecycle.rollback(world.dep, compose=world.compose, wait_timeout_s=9, say=world.said.append)
    assert str(failed.value) == (f"stack 'tiny' (project {PROJECT}): not healthy after 9 s (starting); "
                                 f"restored {DIGEST_B} on port 30000 (healthy)")
    assert rows(world)[-2][:2] == ("rollback", "failed")


def test_rollback_with_nothing_before_is_refused(world):
    deploy(world, smoke_report="s")
    with pytest.raises(DeployError) as refused:
        lifecycle.rollback(world.dep, compose=world.compose, say=world.said.append)
    assert str(refused.value) == ("stack 'tiny': no earlier healthy deployment to roll back to in "
                                  "build/tiny/deployments.jsonl")


def test_service_logs_asks_compose_for_the_tail_of_the_current_file(world):
    deploy(world, smoke_report="s")
    assert lifecycle.service_logs(world.dep, compose=world.compose) == "sglang-1  | ready\n"
    assert calls(world)[-1] == (["compose.yaml"], ["logs", "--no-color", "--tail", "40"], None)
    lifecycle.service_logs(world.dep, compose=world.compose, tail=None)
    assert calls(world)[-1][1] == ["logs", "--no-color"]
    world.compose.fail["logs"] = (0, "a warning\n")
    assert lifecycle.service_logs(world.dep, compose=world.compose) == "sglang-1  | ready\n"  # stderr when it fails
    world.compose.fail["logs"] = (1, "no such service\n")
    assert lifecycle.service_logs(world.dep, compose=world.compose) == "sglang-1  | ready\nno such service\n"
    world.dep.docker_host = "ssh://node-2"
    lifecycle.service_logs(world.dep, compose=world.compose)
    assert calls(world)[-1][2] == "ssh://node-2"


def test_logs_before_any_deploy_say_to_deploy_first(world):
    with pytest.raises(DeployError) as refused:
        lifecycle.service_logs(world.dep, compose=world.compose)
    assert str(refused.value) == "stack 'tiny': build/tiny/compose.yaml not found (deploy it first)"


def test_undeploy_takes_the_project_down_and_records_it(world):
    deploy(world, options=cmp.ComposeOptions(gpus=0, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:5000"),
           smoke_report="s")
    assert world.said[2] == "rendered build/tiny/compose.node1.yaml (+ compose.node0.yaml, compose.env.example)"
    world.said.clear()
    assert lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append) == 0
    assert calls(world)[-1] == (["compose.node1.yaml"], DOWN, None)
    assert world.said == ["compose: docker compose 2.29.0 (v2)", f"stack 'tiny' (project {PROJECT}) removed"]
    last = read_records(world.dep.build_root, "tiny")[-1]
    assert (last.action, last.result, last.note, last.image) == ("undeploy", "removed", "", A)
    assert last.time == "2026-12-05T03:00:03Z"


def test_undeploy_after_a_restore_records_no_note(world):
    deploy(world, smoke_report="s")
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed):
        deploy(world, B)
    lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append)
    assert rows(world)[-1] == ("undeploy", "removed", A, "")
    assert world.engine.running == {}


def test_undeploy_on_a_remote_engine_asks_that_engine(world):
    world.dep.docker_host = "ssh://node-2"
    deploy(world, smoke_report="s")
    lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append)
    assert world.asked["client"] == ["ssh://node-2", "ssh://node-2"]
    assert calls(world)[-1] == (["compose.yaml"], DOWN, "ssh://node-2")


def test_undeploy_of_another_stacks_project_is_refused(world):
    deploy(world, smoke_report="s")
    world.engine.owner = "audit"
    with pytest.raises(DeployError) as refused:
        lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append)
    assert str(refused.value).startswith("stack 'tiny': ")
    assert "audit" in str(refused.value)
    assert world.engine.running == {PROJECT: A}
    assert [c[1][0] for c in calls(world)] == ["config", "up"]


def test_undeploy_whose_record_cannot_be_written_changes_nothing(world):
    deploy(world, smoke_report="s")
    records = world.dep.out_dir / "deployments.jsonl"
    records.unlink()
    records.mkdir()  # not a file: no record can be appended there
    with pytest.raises(DeployError) as refused:
        lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append)
    assert str(refused.value).endswith("nothing was changed (a deployment that cannot be recorded is not started)")
    assert world.engine.running == {PROJECT: A}


def test_undeploy_without_its_build_folder_removes_what_carries_the_project_label(world):
    deploy(world, smoke_report="s")
    for p in world.dep.out_dir.iterdir():
        p.unlink()
    assert lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append) == 0
    assert world.engine.removed == [f"c{A[-11:]}"] and world.engine.networks_removed == ["default"]
    assert [c[1][0] for c in calls(world)] == ["config", "up"]
    assert read_records(world.dep.build_root, "tiny") == []  # the records went with the folder: none to add to


def test_undeploy_that_compose_cannot_finish_is_refused(world):
    deploy(world, smoke_report="s")
    world.compose.fail["down"] = (1, "Error: removal in progress\n")
    with pytest.raises(DeployError) as refused:
        lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append)
    assert str(refused.value) == f"project {PROJECT}: compose down failed: Error: removal in progress"
    assert rows(world) == [("deploy", "healthy", A, "")]


def test_undeploy_that_leaves_a_container_behind_is_refused(world):
    deploy(world, smoke_report="s")
    world.compose.run = lambda *a, **k: CompletedProcess(a, 0, "", "")  # says done, removes nothing
    with pytest.raises(DeployError) as refused:
        lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append)
    assert str(refused.value) == f"project {PROJECT}: 1 container(s) still present after down"


def test_the_default_say_prints_each_line_to_stderr_with_control_characters_shown(capsys):
    flow.say_stderr("healthy\x1b[2J reply")
    out, err = capsys.readouterr()
    assert out == ""
    assert err.endswith(" reply\n") and err.startswith("healthy")
    assert "\x1b" not in err
