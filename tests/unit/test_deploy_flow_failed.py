"""`deploy` in process when it fails: the previous deployment comes back, or the failed one goes; signals and engine
errors while it comes up. Compose and the engine are doubles (tests/lib/deploy_flow_world); every line said, every
record field and every compose call is asserted."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import docker.errors
import pytest
from deploy_flow_world import (
    CRASHED,
    DIGEST_A,
    DOWN,
    HEALTHY,
    ID_A,
    ID_B,
    OPTIONS,
    PROJECT,
    STARTING,
    UP,
    A,
    B,
    calls,
    deploy,
    make_world,
    rows,
)

from sglstack.core.signals import Interrupted
from sglstack.deploy import flow, health, lifecycle
from sglstack.deploy.deployment import DeployFailed
from sglstack.deploy.files import SAVED_SUFFIX
from sglstack.deploy.store import DeploymentRecord, append_record, read_records
from sglstack.render import compose as cmp


@pytest.fixture
def world(tmp_path, monkeypatch):
    return make_world(tmp_path, monkeypatch)


# ---- a failed deploy: the previous one comes back, or the failed one goes ---------------------------------

def test_an_unhealthy_update_brings_the_previous_deployment_back_with_its_options(world):
    first = cmp.ComposeOptions(gpus=0, port=31000)
    deploy(world, options=first, smoke_report="r1")
    world.engine.health[B] = [STARTING, STARTING, CRASHED]
    world.engine.log[B] = b"Traceback: boom\n"
    world.engine.init_log = b"kernel cache: copied 3 files\n"  # another service's log is not the server's
    world.compose.label = "docker-compose 1.29.2 (v1)"
    world.said.clear()
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B, wait_timeout_s=60)
    assert str(failed.value) == (f"stack 'tiny' (project {PROJECT}): exited with code 3 (restarts: 2); "
                                 f"restored {DIGEST_A} on port 31000 (healthy)")
    assert failed.value.log_tail == "Traceback: boom\n"
    assert world.said[-2:] == ["waiting for /health: starting",
                               f"restoring the previous deployment of stack 'tiny': {DIGEST_A}"]
    assert world.engine.running == {PROJECT: A}
    assert world.clock.sleeps == [1.0, 1.0]
    assert {"tail": 40, "timestamps": False} in world.engine.log_calls
    assert rows(world) == [("deploy", "healthy", A, ""), ("deploy", "failed", B, "exited with code 3 (restarts: 2)"),
                           ("restore", "healthy", A, f"after the failed deploy of {B}")]
    failed_record, restore = read_records(world.dep.build_root, "tiny")[1:]
    assert (failed_record.options, failed_record.smoke_report, failed_record.image_id) == (
        OPTIONS.to_record(), "unknown", ID_B)
    assert (restore.options, restore.smoke_report, restore.compose_tool, restore.digest) == (
        first.to_record(), "r1", "docker-compose 1.29.2 (v1)", DIGEST_A)
    assert [r.time for r in read_records(world.dep.build_root, "tiny")] == [
        "2026-12-05T03:00:02Z", "2026-12-05T03:00:04Z", "2026-12-05T03:00:05Z"]
    assert "31000:30000" in (world.dep.out_dir / "compose.yaml").read_text()
    assert world.asked["http"] == ["http://127.0.0.1:31000/health"] * 2  # the restore is asked too
    assert not [p for p in world.dep.out_dir.iterdir() if p.name.endswith((".tmp", SAVED_SUFFIX))]


def test_another_service_of_the_project_is_neither_waited_for_nor_its_log_shown(world):
    world.engine.init_log = b"kernel cache: copied 3 files\n"
    deploy(world, smoke_report="s")
    world.engine.health[B] = [CRASHED]
    world.engine.log[B] = b"Traceback: boom\n"
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert failed.value.log_tail == "Traceback: boom\n"
    assert str(failed.value).endswith(f"restored {DIGEST_A} on port 30000 (healthy)")


def test_a_log_the_engine_cannot_list_is_left_out(world):
    deploy(world, smoke_report="s")
    world.engine.health[B] = [CRASHED]
    world.engine.unlistable.add(B)
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert failed.value.log_tail == ""
    assert str(failed.value).endswith(f"restored {DIGEST_A} on port 30000 (healthy)")


def test_a_failed_up_shows_the_running_ones_log_then_compose_s_error(world):
    world.engine.log[A] = b"A serving\n"
    deploy(world, smoke_report="s")
    world.compose.fail_image[B] = "Error: pull access denied\n"
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert failed.value.log_tail == "A serving\n\nError: pull access denied"


def test_not_healthy_within_the_wait_limit(world):
    deploy(world, smoke_report="s")
    world.engine.health[B] = [STARTING]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B, wait_timeout_s=3)
    assert str(failed.value).startswith(f"stack 'tiny' (project {PROJECT}): not healthy after 3 s (starting); "
                                        f"restored {DIGEST_A}")
    assert world.clock.sleeps == [1.0] * 4


def test_a_first_deploy_that_fails_is_taken_down(world):
    world.engine.health[A] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, smoke_report="s")
    assert str(failed.value) == (f"stack 'tiny' (project {PROJECT}): exited with code 3 (restarts: 2); "
                                 "took it down (its last log lines are above)")
    assert calls(world)[-1] == (["compose.yaml"], DOWN, None)
    assert world.engine.running == {}
    assert rows(world) == [("deploy", "failed", A, "exited with code 3 (restarts: 2)")]
    assert not [p for p in world.dep.out_dir.iterdir() if p.name.endswith((".tmp", SAVED_SUFFIX))]


def test_a_first_deploy_that_fails_on_a_remote_engine_is_taken_down_there(world):
    world.dep.docker_host = "tcp://10.1.2.3:2375"
    world.engine.health[A] = [CRASHED]
    with pytest.raises(DeployFailed):
        deploy(world, smoke_report="s")
    assert calls(world)[-1] == (["compose.yaml"], DOWN, "tcp://10.1.2.3:2375")


def test_a_failed_deploy_after_an_undeploy_says_how_to_get_the_last_healthy_one_back(world):
    deploy(world, smoke_report="s")
    lifecycle.undeploy(world.dep, compose=world.compose, say=world.said.append)
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert str(failed.value).endswith(
        "took it down (its last log lines are above); `invoke rollback --stack tiny` restores the last healthy one")


@pytest.mark.parametrize(("gpus", "hint"), [
    (1, " (no NVIDIA runtime on this host: deploy with --gpus 0 for a CPU host)"), (0, "")])
def test_up_failing_is_said_with_compose_s_error_line(world, gpus, hint):
    err = 'Creating sglstack-tiny-sglang-1\nError response from daemon: could not select device driver "" with ' \
          'capabilities: [[gpu]]\n'
    world.compose.fail_image[A] = err
    with pytest.raises(DeployFailed) as failed:
        deploy(world, options=cmp.ComposeOptions(gpus=gpus), smoke_report="s")
    assert str(failed.value) == (
        f"stack 'tiny' (project {PROJECT}): `up` failed: Error response from daemon: could not select device driver "
        f"\"\" with capabilities: [[gpu]]{hint}; took it down (its last log lines are above)")
    assert failed.value.log_tail == err.strip()


def test_a_restore_that_crashes_too_leaves_it_running_and_says_nothing_healthy_serves(world):
    deploy(world, smoke_report="s")
    world.engine.health[A] = [CRASHED]
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    detail = "exited with code 3 (restarts: 2)"
    assert str(failed.value) == (
        f"stack 'tiny' (project {PROJECT}): {detail}; restoring the previous deployment ({DIGEST_A}) failed too: "
        f"{detail}; nothing healthy is serving, its container is left running, not healthy "
        "(`invoke logs --stack tiny`)")
    assert world.engine.running == {PROJECT: A}
    assert rows(world)[1:] == [("deploy", "failed", B, detail),
                               ("restore", "failed", A, f"after the failed deploy of {B}: {detail}")]


def test_a_restore_waits_the_previous_deployments_own_limit_not_the_option(world):
    deploy(world, smoke_report="s")
    world.engine.health[A] = [STARTING]
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B, wait_timeout_s=5)
    limit = flow.wait_limit(cmp.deploy_spec(world.dep.stack, OPTIONS), None)
    # the stack's start period (120), then every probe of its healthcheck (30 s apart, 3 retries), the last
    # probe's timeout (10), and 30 s to spare
    assert limit == 120 + 30 * (3 + 1) + 10 + 30
    assert str(failed.value).endswith(
        f"failed too: not healthy after {limit:.0f} s (starting); nothing healthy is serving, its container is left "
        "running, not healthy (`invoke logs --stack tiny`)")
    assert world.engine.running == {PROJECT: A}


def test_a_restore_whose_up_fails_takes_the_failed_one_down(world):
    deploy(world, smoke_report="s")
    world.engine.health[B] = [CRASHED]
    world.compose.fail_image[A] = "Error: no space left on device\n"
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert str(failed.value).endswith(
        f"restoring the previous deployment ({DIGEST_A}) failed too: `up` failed: Error: no space left on device; "
        "nothing healthy is serving, the failed one was taken down (`invoke logs --stack tiny`)")
    assert calls(world)[-1] == (["compose.yaml"], DOWN, None)
    assert world.engine.running == {}
    assert rows(world)[-1] == ("restore", "failed", A,
                               f"after the failed deploy of {B}: `up` failed: Error: no space left on device")


def test_a_restore_of_an_image_that_is_gone_says_why(world):
    world.engine.tags["sglstack-local/tiny:dev"] = ID_A
    deploy(world, "sglstack-local/tiny:dev", smoke_report="s")
    del world.engine.tags["sglstack-local/tiny:dev"], world.engine.tags[ID_A]
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    shown = f"sglstack-local/tiny:dev (image id {ID_A[:19]})"
    assert world.said[-1] == f"restoring the previous deployment of stack 'tiny': {shown}"
    assert str(failed.value).endswith(
        f"restoring the previous deployment ({shown}) failed too: sglstack-local/tiny:dev no longer points to the "
        f"image that ran ({ID_A[:19]}), and that image is gone from the engine; nothing healthy is serving, the "
        "failed one was taken down (`invoke logs --stack tiny`)")
    assert world.engine.running == {}
    assert rows(world)[-1][:3] == ("restore", "failed", "sglstack-local/tiny:dev")


def test_an_old_record_without_an_image_id_is_shown_by_its_reference(world):
    # written before records held image ids: no digest, no id; its compose file is gone too
    append_record(world.dep.build_root, DeploymentRecord(
        stack="tiny", action="deploy", result="healthy", image="sglstack-local/tiny:old", digest="", image_id="",
        time="2026-01-01T00:00:00Z", host="node-1", docker_host="", project=PROJECT, compose_tool="c",
        compose_file="compose.yaml", options=OPTIONS.to_record()))
    world.engine.tags["sglstack-local/tiny:old"] = ID_A
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert world.said[-1] == "restoring the previous deployment of stack 'tiny': sglstack-local/tiny:old"
    assert str(failed.value).endswith("restored sglstack-local/tiny:old on port 30000 (healthy)")


def test_a_moved_tag_is_restored_as_the_image_that_ran_rendered_again(world):
    world.engine.tags["sglstack-local/tiny:dev"] = ID_A
    deploy(world, "sglstack-local/tiny:dev", smoke_report="r1")
    world.engine.tags["sglstack-local/tiny:dev"] = ID_B  # rebuilt meanwhile
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert str(failed.value).endswith(
        f"restored sglstack-local/tiny:dev (image id {ID_A[:19]}) on port 30000 (healthy)")
    assert world.engine.running == {PROJECT: ID_A}
    assert rows(world)[-1] == ("restore", "healthy", ID_A, f"after the failed deploy of {B}")


def test_a_cleaned_build_folder_is_rendered_again_for_the_restore(world):
    node1 = cmp.ComposeOptions(gpus=0, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:5000")
    deploy(world, options=node1, smoke_report="r1")
    (world.dep.out_dir / "compose.node1.yaml").unlink()
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert str(failed.value).endswith(f"restored {DIGEST_A} on port 30000 (healthy)")
    assert calls(world)[-1] == (["compose.node1.yaml"], UP, None)
    assert world.engine.running == {PROJECT: A}
    text = (world.dep.out_dir / "compose.node1.yaml").read_text()
    assert '"io.sglstack.smoke-report": "r1"' in text and "10.0.0.1:5000" in text


# ---- signals and engine errors while it comes up ----------------------------------------------------------

def _interrupt_on_sleep(world, monkeypatch, exc):
    def sleep(_seconds):
        raise exc

    monkeypatch.setattr(health, "time", SimpleNamespace(monotonic=world.clock.monotonic, sleep=sleep))


@pytest.mark.parametrize(("exc", "why"), [(Interrupted(signal.SIGTERM), "interrupted (SIGTERM)"),
                                          (KeyboardInterrupt(), "interrupted")])
def test_a_signal_while_waiting_brings_the_previous_back_says_it_and_goes_on(world, monkeypatch, exc, why):
    deploy(world, smoke_report="s")
    world.engine.health[B] = [STARTING]
    _interrupt_on_sleep(world, monkeypatch, exc)
    world.engine.health[A] = [HEALTHY]
    with pytest.raises(type(exc)):
        deploy(world, B)
    assert world.said[-2:] == [f"restoring the previous deployment of stack 'tiny': {DIGEST_A}",
                               f"stack 'tiny': {why}; restored {DIGEST_A} on port 30000 (healthy)"]
    assert rows(world)[1:] == [("deploy", "failed", B, why),
                               ("restore", "healthy", A, f"after the failed deploy of {B}")]
    assert world.engine.running == {PROJECT: A}


def test_a_restore_cut_short_after_a_signal_says_it_did_not_finish(world, monkeypatch):
    deploy(world, smoke_report="s")
    world.engine.health[B] = [STARTING]
    _interrupt_on_sleep(world, monkeypatch, Interrupted(signal.SIGTERM))

    def engine_lost(*_a, **_k):
        raise docker.errors.DockerException("the engine went away")

    monkeypatch.setattr(flow, "recover", engine_lost)
    with pytest.raises(docker.errors.DockerException):
        deploy(world, B)
    assert world.said[-1] == "stack 'tiny': interrupted (SIGTERM); the restore did not finish"


def test_a_signal_on_a_first_deploy_takes_it_down(world, monkeypatch):
    world.engine.health[A] = [STARTING]
    _interrupt_on_sleep(world, monkeypatch, Interrupted(signal.SIGINT))
    with pytest.raises(Interrupted):
        deploy(world, smoke_report="s")
    assert world.said[-1] == "stack 'tiny': interrupted (SIGINT); took it down (its last log lines are above)"
    assert world.engine.running == {}


@pytest.mark.parametrize(("error", "why"), [
    (docker.errors.APIError("500 Server Error: engine gone\nmore"), "500 Server Error: engine gone"),
    (docker.errors.DockerException(), "DockerException")])
def test_an_engine_error_while_waiting_is_said_and_raised_after_the_restore(world, error, why):
    deploy(world, smoke_report="s")
    real = world.engine._inspect

    def once(cid):
        world.engine.api.inspect_container = real
        raise error

    world.engine.api.inspect_container = once
    with pytest.raises(type(error)):
        deploy(world, B)
    assert world.said[-1] == f"stack 'tiny': {why}; restored {DIGEST_A} on port 30000 (healthy)"
    assert rows(world)[1][3] == why


def test_a_container_that_disappears_is_a_crash(world):
    deploy(world, smoke_report="s")
    world.engine.api.inspect_container = lambda cid: (_ for _ in ()).throw(docker.errors.NotFound("gone"))
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert str(failed.value).startswith(f"stack 'tiny' (project {PROJECT}): container c{B[-11:]} disappeared; "
                                        f"restoring the previous deployment ({DIGEST_A}) failed too")
