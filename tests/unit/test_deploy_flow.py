"""`deploy` in process, a healthy one: each step said, every record field, the smoke report, the kernel cache, the
start by phase (more: test_deploy_flow_failed.py, test_deploy_flow_records.py). Compose and the engine are doubles
(tests/lib/deploy_flow_world); every line said, every record field and every compose call is asserted."""

from __future__ import annotations

import pytest
from deploy_flow_world import (
    CRASHED,
    DIGEST_A,
    DOWN,
    HEALTHY,
    ID_A,
    ID_B,
    NO_REPORT,
    OPTIONS,
    PROJECT,
    PULLED,
    STARTING,
    UP,
    A,
    B,
    calls,
    deploy,
    make_world,
    rows,
)

from sglstack.core.errors import DeployError
from sglstack.deploy.deployment import DeployFailed
from sglstack.deploy.files import SAVED_SUFFIX
from sglstack.deploy.store import read_records
from sglstack.render import compose as cmp
from sglstack.serving.phases import MILESTONES, PHASES


@pytest.fixture
def world(tmp_path, monkeypatch):
    return make_world(tmp_path, monkeypatch)


# ---- a healthy deploy ---------------------------------------------------------------------------------

def test_a_healthy_deploy_says_each_step_and_records_every_field(world):
    world.answers["notices"] = ["mount sources are not checked on this host"]
    record = deploy(world, smoke_report="sha256:" + "f" * 64)
    assert world.said == [
        "compose: docker compose 2.29.0 (v2)",
        "mount sources are not checked on this host",
        "created an empty build/tiny/compose.env: put HF_TOKEN there for gated models (compose.env.example)",
        "rendered build/tiny/compose.yaml (+ compose.env.example)",
        f"deploying stack 'tiny' as project {PROJECT}: {A}",
        f"stack 'tiny' is healthy ({DIGEST_A}); recorded in build/tiny/deployments.jsonl",
    ]
    assert record.to_dict() | {"time": "T"} == {
        "stack": "tiny", "action": "deploy", "result": "healthy", "image": A, "digest": DIGEST_A, "image_id": ID_A,
        "time": "T", "host": "node-1", "docker_host": "", "project": PROJECT,
        "compose_tool": "docker compose 2.29.0 (v2)", "compose_file": "compose.yaml", "options": OPTIONS.to_record(),
        "smoke_report": "sha256:" + "f" * 64, "note": "", "target": "compose", "kernel_cache": "",
        # the service's log (empty here): every milestone unknown, none guessed, and no line said of it
        "phases": {"milestones_s": dict.fromkeys(MILESTONES), "phases_s": dict.fromkeys(p for p, _, _ in PHASES),
                   "unknown": list(MILESTONES), "resolution_s": 0.001},
    }
    assert read_records(world.dep.build_root, "tiny") == [record]
    assert record.time == "2026-12-05T03:00:02Z"  # when it was healthy, not when it started
    assert calls(world) == [(["compose.yaml"], ["config", "-q"], None), (["compose.yaml"], UP, None)]
    assert world.asked["client"] == [None]
    assert world.asked["host"] == [(True, "tiny", OPTIONS, PROJECT, True, None)]
    assert world.asked["platform"] == [("tiny", A, "the node (node-1)", ("linux/amd64",), True)]
    assert world.asked["pull"] == [(True, A, "tiny")]
    assert world.asked["http"] == ["http://127.0.0.1:30000/health"]
    assert world.asked["cache"] == []
    assert world.engine.running == {PROJECT: A}
    assert world.clock.sleeps == []
    out = world.dep.out_dir
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "compose.env", "compose.env.example", "compose.yaml", "deployments.jsonl"]
    assert (out / "compose.env").read_text() == ""
    assert (out / "compose.env").stat().st_mode & 0o777 == 0o600
    assert '"io.sglstack.smoke-report": "sha256:' + "f" * 64 in (out / "compose.yaml").read_text()


def test_an_image_with_no_known_smoke_report_is_labelled_unknown(world):
    record = deploy(world)
    assert world.said[1] == NO_REPORT.format(DIGEST_A)
    assert record.smoke_report == "unknown"
    assert '"io.sglstack.smoke-report": "unknown"' in (world.dep.out_dir / "compose.yaml").read_text()
    world.engine.tags["sglstack-local/tiny:dev"] = ID_B  # a local build: no registry digest
    world.said.clear()
    record = deploy(world, "sglstack-local/tiny:dev")
    assert world.said[1] == NO_REPORT.format("sglstack-local/tiny:dev")
    assert world.said[-1] == ("stack 'tiny' is healthy (sglstack-local/tiny:dev); recorded in "
                              "build/tiny/deployments.jsonl")
    assert (record.digest, record.image_id) == ("", ID_B)
    world.said.clear()
    deploy(world, smoke_report="unknown")  # a rollback's target recorded before any report was known
    assert world.said[1] == NO_REPORT.format(DIGEST_A)


def test_an_absolute_env_file_is_used_as_it_is(world, tmp_path):
    env = tmp_path / "secrets.env"
    env.write_text("HF_TOKEN=x\n")
    options = cmp.ComposeOptions(gpus=0, env_file=str(env))
    deploy(world, options=options, smoke_report="s")
    assert not any(line.startswith("created an empty") for line in world.said)
    assert not (world.dep.out_dir / "compose.env").exists()
    assert env.read_text() == "HF_TOKEN=x\n"


def test_waiting_is_said_once_per_state_on_the_tests_clock(world):
    world.engine.health[A] = [STARTING, STARTING, {"State": {"Status": "running"}, "RestartCount": 0}, HEALTHY]
    deploy(world, smoke_report="s")
    assert [line for line in world.said if line.startswith("waiting")] == [
        "waiting for /health: starting", "waiting for /health: running (no healthcheck)"]
    assert world.clock.sleeps == [1.0, 1.0, 1.0]


def test_the_start_by_phase_is_said_and_recorded(world):
    world.engine.log[A] = (
        b"2026-12-05T03:00:38.500000000Z [2026-12-05 03:00:38] server_args=ServerArgs(model_path='m')\n"
        b"2026-12-05T03:00:40.000000000Z [2026-12-05 03:00:40 TP0] Load weight end. elapsed=1.2 s\n"
        b"2026-12-05T03:02:10.250000000Z [2026-12-05 03:02:10] The server is fired up and ready to roll!\n")
    record = deploy(world, smoke_report="s")
    assert record.phases["milestones_s"] == {"imports_done": 38.5, "weights_loaded": 40.0,
                                             "cuda_graphs_captured": None, "healthy": 130.25, "first_token": None}
    assert world.said[-2] == ("sglang: start by phase: imports 38.5s, weights 1.5s, cuda_graphs unknown, "
                              "to_healthy unknown, first_token unknown")
    assert read_records(world.dep.build_root, "tiny")[-1].phases == record.phases
    assert {"tail": None, "timestamps": True} in world.engine.log_calls


def test_a_remote_engine_is_named_checked_as_remote_and_not_asked_over_http(world, monkeypatch):
    world.dep.docker_host = "tcp://10.1.2.3:2375"
    record = deploy(world, smoke_report="s")
    assert world.asked["client"] == ["tcp://10.1.2.3:2375"]
    assert world.asked["host"][0][-2:] == (False, "tcp://10.1.2.3:2375")
    assert world.asked["http"] == []
    assert {c[2] for c in calls(world)} == {"tcp://10.1.2.3:2375"}
    assert record.docker_host == "tcp://10.1.2.3:2375"
    world.engine.health[B] = [CRASHED]
    with pytest.raises(DeployFailed) as failed:
        deploy(world, B)
    assert str(failed.value).endswith(f"restored {DIGEST_A} on port 30000 (healthy)")
    assert world.asked["http"] == []  # nor for the restore
    assert {c[2] for c in calls(world)} == {"tcp://10.1.2.3:2375"}
    world.compose.fail_image[A] = "Error: no space left on device\n"
    with pytest.raises(DeployFailed):
        deploy(world, B)
    assert calls(world)[-1] == (["compose.yaml"], DOWN, "tcp://10.1.2.3:2375")
    world.compose.fail_image.clear()
    world.dep.docker_host = None
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.9.9.9:2375")
    assert deploy(world, smoke_report="s").docker_host == "tcp://10.9.9.9:2375"


def test_an_engine_without_a_name_is_the_local_engine(world):
    world.engine.name = None
    record = deploy(world, smoke_report="s")
    assert record.host == ""
    assert world.asked["platform"][0][2] == "the node (local engine)"


def test_the_smoke_report_that_passed_the_digest_is_looked_up_and_labelled(world):
    world.answers["reports"][DIGEST_A] = "sha256:" + "e" * 64
    record = deploy(world)
    assert world.asked["report"] == [("tiny", DIGEST_A, world.dep.build_root)]
    assert record.smoke_report == "sha256:" + "e" * 64
    assert not any(line.startswith("no passing smoke report") for line in world.said)
    deploy(world, smoke_report="sha256:" + "d" * 64)
    assert len(world.asked["report"]) == 1  # a report given is not looked up


def test_an_image_the_engine_lacks_is_said_to_be_pulled(world):
    world.engine.tags.pop(B)
    record = deploy(world, B, smoke_report="s")
    assert record.image_id == PULLED
    assert world.said[1:3] == [
        f"platform: {B} is neither on the engine nor in a registry named by it: not checked against the node (node-1)",
        f"pulling {B}"]


@pytest.mark.parametrize("wait", [0, -1, float("nan")])
def test_a_bad_wait_limit_is_refused_before_anything_changes(world, wait):
    with pytest.raises(DeployError) as refused:
        deploy(world, wait_timeout_s=wait, smoke_report="s")
    assert str(refused.value) == f"stack 'tiny': --wait-timeout {wait:g}: must be more than 0 seconds"
    assert world.compose.calls == [] and world.asked["client"] == []


def test_a_deploy_whose_records_cannot_be_written_is_refused_before_anything_changes(world):
    records = world.dep.out_dir / "deployments.jsonl"
    records.mkdir(parents=True)
    with pytest.raises(DeployError) as refused:
        deploy(world, smoke_report="s")
    assert str(refused.value).endswith("nothing was changed (a deployment that cannot be recorded is not started)")
    assert world.compose.calls == [] and world.engine.running == {}


def test_an_engine_that_will_not_say_its_name_is_the_local_engine(world):
    world.engine.info_fails = True
    record = deploy(world, smoke_report="s")
    assert record.host == ""
    assert world.asked["platform"][0][2] == "the node (local engine)"


def test_a_kernel_cache_deploy_restores_it_and_records_its_line(world):
    options = cmp.ComposeOptions(gpus=0, kernel_cache=True)
    record = deploy(world, options=options, smoke_report="s", verify_key="cosign.pub")
    root = world.dep.build_root
    assert world.asked["cache"] == [(root, "tiny", root / "tiny", "tiny", A, DIGEST_A, True, "cosign.pub")]
    assert record.kernel_cache == "kernel cache: restored 3 files"
    assert f"kernel cache: restoring the caches of {DIGEST_A}" in world.said
    world.engine.tags["sglstack-local/tiny:dev"] = ID_B
    deploy(world, "sglstack-local/tiny:dev", options=options, smoke_report="s")
    assert world.asked["cache"][-1][5] == ID_B  # no registry digest: the image id names it


def test_a_healthy_container_whose_port_does_not_answer_is_not_healthy(world):
    world.answers["http"] = False
    with pytest.raises(DeployFailed) as failed:
        deploy(world, options=cmp.ComposeOptions(gpus=0, port=31000), smoke_report="s")
    assert str(failed.value).startswith(
        f"stack 'tiny' (project {PROJECT}): healthy, but port 31000 does not answer /health; took it down")
    assert world.asked["http"] == ["http://127.0.0.1:31000/health"]


def test_compose_refusing_the_files_changes_nothing(world):
    deploy(world, smoke_report="s")
    before = (world.dep.out_dir / "compose.yaml").read_text()
    world.compose.fail["config"] = (1, "validating compose.yaml\nERROR: services.sglang.ports: bad port\nexit 1\n")
    with pytest.raises(DeployError) as refused:
        deploy(world, B, smoke_report="s")
    assert str(refused.value) == "build/tiny/compose.yaml: compose rejected it: services.sglang.ports: bad port"
    assert (world.dep.out_dir / "compose.yaml").read_text() == before
    assert [c[1][0] for c in calls(world)] == ["config", "up", "config"]
    assert world.engine.running == {PROJECT: A}
    assert rows(world) == [("deploy", "healthy", A, "")]
    assert not [p for p in world.dep.out_dir.iterdir() if p.name.endswith((".tmp", SAVED_SUFFIX))]
