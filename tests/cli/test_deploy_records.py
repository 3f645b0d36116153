"""Deployment bookkeeping without Docker: records, rollback targets, health verdicts, image references."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import docker.errors
import pytest
from clirun import run_invoke
from deploy_fixtures import make_test_stack, write_test_matrix

from sglstack.adapters.compose import detect_compose
from sglstack.cli.deploy import (
    FIELDS_WITHOUT_OPTION,
    OPTION_OF_FIELD,
    DeployOptions,
    LogsOptions,
    compose_options,
    k8s_options,
)
from sglstack.cli.render import RenderOptions
from sglstack.core.errors import DeployError, DockerUnavailable
from sglstack.deploy import health as health_mod
from sglstack.deploy.health import COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, health_verdict, wait_healthy
from sglstack.deploy.images import passing_smoke_report, published_image_ref, resolve_image_ref
from sglstack.deploy.status import format_duration
from sglstack.deploy.store import (
    DeploymentRecord,
    append_record,
    read_records,
    records_path,
    rollback_target,
    serving_now,
)
from sglstack.publish import PublishedRelease
from sglstack.render import compose as cmp
from sglstack.render.k8s import K8sOptions

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def _record(image: str, digest: str, *, action: str = "deploy", result: str = "healthy") -> DeploymentRecord:
    return DeploymentRecord(
        stack="tiny",
        action=action,
        result=result,
        image=image,
        digest=digest,
        image_id=digest,
        time="2026-01-01T00:00:00Z",
        host="h",
        docker_host="",
        project="sglstack-tiny",
        compose_tool="t",
        compose_file=cmp.COMPOSE_FILE,
        options=cmp.ComposeOptions(gpus=0).to_record(),
    )


def test_rollback_goes_to_the_previous_healthy_image_skipping_failures_and_redeploys() -> None:
    a, b = _record("r@" + DIGEST_A, DIGEST_A), _record("r@" + DIGEST_B, DIGEST_B)
    bad = _record("r@sha256:" + "c" * 64, "sha256:" + "c" * 64, result="failed")
    assert rollback_target([a, b]) == a
    assert rollback_target([a, b, bad]) == b  # the failed deploy took b down: restore b
    assert rollback_target([a, bad]) == a
    assert rollback_target([a, b, b]) == a  # redeploying the same digest twice is not a version
    assert rollback_target([a, b, _record("other/name@" + DIGEST_B, DIGEST_B)]) == a  # nor by another name
    assert rollback_target([a]) is None
    assert rollback_target([]) is None
    back = _record("r@" + DIGEST_A, DIGEST_A, action="rollback")
    assert rollback_target([a, b, back]) == b  # rolling back twice undoes the rollback


def test_records_are_append_only_json_lines(tmp_path: Path) -> None:
    first, second = _record("r@" + DIGEST_A, DIGEST_A), _record("r@" + DIGEST_B, DIGEST_B)
    append_record(tmp_path, first)
    before = records_path(tmp_path, "tiny").read_text()
    append_record(tmp_path, second)
    after = records_path(tmp_path, "tiny").read_text()

    assert after.startswith(before)
    assert [json.loads(line)["digest"] for line in after.splitlines()] == [DIGEST_A, DIGEST_B]
    assert read_records(tmp_path, "tiny") == [first, second]
    assert cmp.ComposeOptions.from_record(read_records(tmp_path, "tiny")[0].options).gpus == 0


def test_a_corrupt_record_is_a_one_line_error_naming_the_file_and_line(tmp_path: Path) -> None:
    append_record(tmp_path, _record("r@" + DIGEST_A, DIGEST_A))
    with records_path(tmp_path, "tiny").open("a") as fh:
        fh.write("{not json\n")
    with pytest.raises(DeployError, match=r"deployments\.jsonl:2: not a deployment record"):
        read_records(tmp_path, "tiny")


@pytest.mark.parametrize(
    ("attrs", "verdict"),
    [
        ({"State": {"Status": "running", "Health": {"Status": "healthy"}}, "RestartCount": 0}, "healthy"),
        ({"State": {"Status": "running", "Health": {"Status": "starting"}}, "RestartCount": 0}, "starting"),
        ({"State": {"Status": "running", "Health": {"Status": "unhealthy"}}, "RestartCount": 0}, "unhealthy"),
        ({"State": {"Status": "exited", "ExitCode": 1}, "RestartCount": 0}, "crashed"),
        ({"State": {"Status": "restarting", "Restarting": True, "ExitCode": 1}, "RestartCount": 1}, "crashed"),
        # Crashed once and came back: a crash loop in the making, not a healthy deployment.
        ({"State": {"Status": "running", "Health": {"Status": "healthy"}}, "RestartCount": 2}, "crashed"),
    ],
)
def test_health_verdict(attrs: dict, verdict: str) -> None:
    assert health_verdict(attrs)[0] == verdict


def test_health_verdict_details_and_the_less_common_states() -> None:
    assert health_verdict({"State": {"Status": "dead", "ExitCode": 137}}) == (
        "crashed", "exited with code 137 (restarts: 0)")
    assert health_verdict({"State": {"Status": "running", "Restarting": True}})[0] == "crashed"
    assert health_verdict({"State": {"Status": "running"}}) == ("starting", "running (no healthcheck)")
    assert health_verdict({"State": {"Status": "created"}}) == ("starting", "created")
    # healthy by its check but not running (paused, say) is not healthy yet
    assert health_verdict({"State": {"Status": "paused", "Health": {"Status": "healthy"}}}) == ("starting", "healthy")
    assert health_verdict({"State": {"Status": "running", "Health": {"Status": "unhealthy"}}})[1] == (
        "its healthcheck on /health failed")
    assert health_verdict({})[0] == "starting"


class _Containers:
    def __init__(self, client: _EngineDouble) -> None:
        self.client = client

    def list(self, *, all: bool, filters: dict) -> list:  # the docker SDK's keyword arguments
        assert all is True
        self.client.filters.append(filters)
        return [type("Container", (), {"id": cid})() for cid in self.client.ids]


class _Api:
    def __init__(self, client: _EngineDouble) -> None:
        self.client = client

    def inspect_container(self, cid: str) -> dict:
        states = self.client.states[cid]
        state = states.pop(0) if len(states) > 1 else states[0]
        if state is None:
            raise docker.errors.NotFound(f"No such container: {cid}")
        return state


class _EngineDouble:
    """The two calls `wait_healthy` makes of docker.DockerClient, answering from scripted inspect data."""

    def __init__(self, states: dict[str, list]) -> None:
        self.ids, self.states, self.filters = list(states), states, []
        self.containers, self.api = _Containers(self), _Api(self)


def _state(status: str, health: str | None = None, restarts: int = 0) -> dict:
    state: dict = {"Status": status, "ExitCode": 0 if status == "running" else 3}
    if health:
        state["Health"] = {"Status": health}
    return {"State": state, "RestartCount": restarts}


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves only when wait_healthy sleeps: the verdicts do not depend on this machine's speed."""
    now = {"t": 1000.0, "sleeps": 0}

    def sleep(seconds: float) -> None:
        now["t"] += seconds
        now["sleeps"] += 1

    monkeypatch.setattr(health_mod.time, "monotonic", lambda: now["t"])
    monkeypatch.setattr(health_mod.time, "sleep", sleep)
    return now


def test_wait_healthy_waits_for_every_container_and_says_each_new_state_once(clock) -> None:
    engine = _EngineDouble({
        "a": [_state("running", "starting")] * 3 + [_state("running", "healthy")],
        "b": [_state("running", "starting")] * 2 + [_state("running", "healthy")],
    })
    said: list[str] = []
    assert wait_healthy(engine, "proj", "sglang", 60, said.append) == ("healthy", "healthy")  # type: ignore[arg-type]
    assert said == ["waiting for /health: starting, starting", "waiting for /health: starting, healthy"]
    assert clock["sleeps"] == 3
    assert engine.filters[0] == {"label": [f"{COMPOSE_PROJECT_LABEL}=proj", f"{COMPOSE_SERVICE_LABEL}=sglang"]}


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ({}, ("crashed", "no container is running for the service")),
        ({"c0ffee0123456789": [None]}, ("crashed", "container c0ffee012345 disappeared")),
        ({"a": [_state("running", "starting"), _state("exited")]}, ("crashed", "exited with code 3 (restarts: 0)")),
        ({"a": [_state("running", "healthy")], "b": [_state("running", "unhealthy")]},
         ("unhealthy", "its healthcheck on /health failed")),
    ],
)
def test_wait_healthy_stops_at_the_first_crash_or_failed_check(clock, states, expected) -> None:
    assert wait_healthy(_EngineDouble(states), "p", "s", 60, lambda _m: None) == expected  # type: ignore[arg-type]


def test_wait_healthy_gives_up_after_the_limit_with_the_last_state(clock) -> None:
    engine = _EngineDouble({"a": [_state("running", "starting")]})
    verdict, detail = wait_healthy(engine, "p", "s", 5, lambda _m: None)  # type: ignore[arg-type]
    assert (verdict, detail) == ("unhealthy", "not healthy after 5 s (starting)")
    # polled once a second until past the limit: 1000 -> 1006 (six sleeps), not one poll more
    assert clock["sleeps"] == 6


def test_image_reference_resolution(tmp_path: Path) -> None:
    stack = make_test_stack(tmp_path)
    build = tmp_path / "build"
    repo = stack.publish.repository
    assert resolve_image_ref(stack, digest=DIGEST_A, build_root=build) == f"{repo}@{DIGEST_A}"
    assert resolve_image_ref(stack, digest=f"other/repo@{DIGEST_A}", build_root=build) == f"other/repo@{DIGEST_A}"
    assert resolve_image_ref(stack, image="local/double:a", build_root=build) == "local/double:a"
    with pytest.raises(DeployError, match="not sha256"):
        resolve_image_ref(stack, digest="sha256:short", build_root=build)
    with pytest.raises(DeployError, match="not both"):
        resolve_image_ref(stack, digest=DIGEST_A, image="x:y", build_root=build)
    with pytest.raises(DeployError, match="stack 'tiny': no published digest"):
        resolve_image_ref(stack, build_root=build)


def test_the_current_published_digest_comes_from_the_publish_records(tmp_path: Path) -> None:
    from sglstack.publish import append_records, records_path

    build = tmp_path / "build"

    def event(event: str, stack: str, digest: str) -> dict:
        return {
            "event": event,
            "stack": stack,
            "repository": "reg/sglang",
            "tag": stack,
            "kind": "moving",
            "digest": digest,
        }

    append_records(
        records_path(build),
        [
            event("candidate", "tiny", DIGEST_B),
            event("published", "tiny", DIGEST_A),
            event("published", "other", DIGEST_B),
            event("smoke-failed", "tiny", DIGEST_B),
        ],
    )
    stack = make_test_stack(tmp_path)
    assert published_image_ref(stack, build) == f"reg/sglang@{DIGEST_A}"
    assert published_image_ref(make_test_stack(tmp_path / "nothing", "nothing"), build) is None
    append_records(records_path(build), [event("published", "tiny", DIGEST_B), event("rollback", "tiny", DIGEST_A)])
    assert published_image_ref(stack, build) == f"reg/sglang@{DIGEST_A}"
    assert resolve_image_ref(stack, build_root=build) == f"reg/sglang@{DIGEST_A}"


def test_durations_are_short_and_readable() -> None:
    assert [format_duration(s) for s in (5, 65, 3700, 90000)] == ["5s", "1m05s", "1h01m", "1d01h"]


@pytest.mark.skipif(not shutil.which("docker-compose") and not shutil.which("docker"), reason="no compose CLI")
def test_detect_compose_says_which_it_found() -> None:
    cli = detect_compose()
    assert cli.major in (1, 2)
    assert cli.version in cli.label and f"(v{cli.major})" in cli.label
    if shutil.which("docker-compose"):
        assert detect_compose("docker-compose").label.startswith("docker-compose ")


def test_detect_compose_names_what_it_tried() -> None:
    with pytest.raises(DockerUnavailable, match="no-such-compose"):
        detect_compose("no-such-compose")


def test_the_deploy_tasks_are_registered(repo_root: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("sglstack_tasks", repo_root / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    assert {"deploy", "status", "logs", "undeploy", "rollback"} <= set(tasks.ns.task_names)
    flags = {arg.name for arg in tasks.ns["deploy"].get_arguments()}
    assert {"stack", "digest", "image", "docker_host", "eagle3", "gpus"} <= flags
    # Every option of the one definition is a flag of the task, with its help.
    assert {f.replace("-", "_") for f in DeployOptions.task_help()} == flags


def test_a_restore_is_what_serves_after_a_failed_redeploy() -> None:
    a, b = _record("r@" + DIGEST_A, DIGEST_A), _record("r@" + DIGEST_B, DIGEST_B)
    failed = _record("r@sha256:" + "c" * 64, "sha256:" + "c" * 64, result="failed")
    restored = _record("r@" + DIGEST_B, DIGEST_B, action="restore")
    assert serving_now([a, b]) == b
    assert serving_now([a, b, failed]) is None  # nothing restored it (there was nothing to restore)
    assert serving_now([a, b, failed, restored]) == restored
    assert serving_now([a, _record("r@" + DIGEST_A, DIGEST_A, action="undeploy", result="removed")]) is None
    # The restore serves b again: rollback goes to a, the image before b.
    assert rollback_target([a, b, failed, restored]) == a
    # A restore that failed too: rollback brings back the last healthy one.
    assert rollback_target([a, b, failed, _record("r@" + DIGEST_B, DIGEST_B, action="restore", result="failed")]) == b


def test_records_written_before_the_smoke_report_field_still_read(tmp_path: Path) -> None:
    row = _record("r@" + DIGEST_A, DIGEST_A).to_dict()
    del row["smoke_report"], row["note"]
    records_path(tmp_path, "tiny").parent.mkdir(parents=True)
    records_path(tmp_path, "tiny").write_text(json.dumps(row) + "\n")
    (record,) = read_records(tmp_path, "tiny")
    assert (record.digest, record.smoke_report, record.note) == (DIGEST_A, "unknown", "")


def test_the_smoke_report_is_known_only_for_the_released_digest() -> None:
    report = "sha256:" + "5" * 64
    release = PublishedRelease(stack="tiny", repository="reg/sglang", digest=DIGEST_A, smoke_report="r.json",
                               smoke_report_sha256=report)
    assert passing_smoke_report(release, DIGEST_A) == report
    assert passing_smoke_report(release, DIGEST_B) is None  # --digest/--image of anything else: unknown
    assert passing_smoke_report(None, DIGEST_A) is None
    unrecorded = PublishedRelease(stack="tiny", repository="reg/sglang", digest=DIGEST_A, smoke_report=None,
                                  smoke_report_sha256=None)
    assert passing_smoke_report(unrecorded, DIGEST_A) is None


def test_the_deploy_options_are_defined_once_and_parsed_with_one_line_errors() -> None:
    options = DeployOptions.from_cli({"stack": "tiny", "port": "8080", "wait_timeout": "2.5", "nnodes": None})
    assert (options.port, options.wait_timeout, options.nnodes, options.health_interval) == (8080, 2.5, 1, 30)
    help_flags = set(DeployOptions.task_help())
    assert {"port", "wait-timeout", "nnodes", "node-rank", "health-interval", "start-period"} <= help_flags
    for name in ("port", "wait_timeout", "start_period", "nnodes", "node_rank", "health_interval"):
        with pytest.raises(DeployError) as info:
            DeployOptions.from_cli({"stack": "tiny", name: "abc"})
        assert str(info.value).startswith(f"--{name.replace('_', '-')} 'abc': not a")
    with pytest.raises(DeployError, match="--tail 'x': not a whole number"):
        LogsOptions.from_cli({"stack": "tiny", "tail": "x"})


def test_every_recorded_serving_field_is_filled_from_its_deploy_option_or_listed_as_none() -> None:
    """ComposeOptions and K8sOptions are filled by name from DeployOptions (`from_options`): a field added to
    either with no option of its name (or a rename) and not listed would silently keep its default."""
    options = {f.name for f in dataclasses.fields(DeployOptions)}
    for model in (cmp.ComposeOptions, K8sOptions):
        unfilled = {f.name for f in dataclasses.fields(model)
                    if OPTION_OF_FIELD.get(f.name, f.name) not in options and f.name not in FIELDS_WITHOUT_OPTION}
        assert unfilled == set(), (model.__name__, unfilled)
    every_field = {f.name for m in (cmp.ComposeOptions, K8sOptions) for f in dataclasses.fields(m)}
    assert every_field >= FIELDS_WITHOUT_OPTION and set(OPTION_OF_FIELD) <= every_field
    assert set(OPTION_OF_FIELD.values()) <= options


def test_the_deploy_options_become_the_recorded_serving_options(tmp_path: Path) -> None:
    assert compose_options(DeployOptions(stack="tiny")) == cmp.ComposeOptions()
    assert k8s_options(DeployOptions(stack="tiny")) == K8sOptions()
    given = DeployOptions(stack="tiny", eagle3=False, gpus=0, port=8080, hf_cache="/hf", start_period=90,
                          restart="always", env_file=str(tmp_path / "my.env"), nnodes=2, node_rank=1,
                          dist_init_addr="n0:5000", health_interval=7, kernel_cache=True, replicas=3,
                          namespace="ns", host_network=True, rdma="rdma/ib=2", hf_token_secret="tok",
                          image_pull_secret="pull")
    assert compose_options(given) == cmp.ComposeOptions(
        eagle3=False, gpus=0, port=8080, hf_cache="/hf", start_period_s=90, restart="always",
        env_file=str((tmp_path / "my.env").resolve()), nnodes=2, node_rank=1, dist_init_addr="n0:5000",
        healthcheck_interval_s=7, kernel_cache=True)
    assert k8s_options(given) == K8sOptions(eagle3=False, gpus=0, nnodes=2, replicas=3, namespace="ns",
                                            host_network=True, rdma="rdma/ib=2", hf_cache="/hf",
                                            hf_token_secret="tok", start_period_s=90, kernel_cache=True,
                                            image_pull_secret="pull")
    # `invoke render --nnodes/--host-network/--rdma`: the same one copy, from the options render has
    render = RenderOptions(stack="tiny", stacks_file="s.yaml", nnodes=2, host_network=True, rdma="rdma/ib")
    assert K8sOptions.from_options(render) == K8sOptions(nnodes=2, host_network=True, rdma="rdma/ib")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["deploy", "--port", "abc"], "error: --port 'abc': not a whole number"),
        (["deploy", "--wait-timeout", "soon"], "error: --wait-timeout 'soon': not a number"),
        (["deploy", "--nnodes", "two"], "error: --nnodes 'two': not a whole number"),
        (["deploy", "--node-rank", "x"], "error: --node-rank 'x': not a whole number"),
        (["deploy", "--start-period", "1m"], "error: --start-period '1m': not a whole number"),
        (["deploy", "--health-interval", "fast"], "error: --health-interval 'fast': not a whole number"),
        (["deploy", "--wait-timeout", "0"], "error: stack 'tiny': --wait-timeout 0: must be more than 0 seconds"),
        (["deploy", "--wait-timeout", "-5"], "error: stack 'tiny': --wait-timeout -5: must be more than 0 seconds"),
        (["deploy", "--nnodes", "0"], "error: stack 'tiny': --nnodes 0: must be at least 1"),
        (["deploy", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"],
         "error: stack 'tiny': --node-rank 2: not in 0..1"),
        (["deploy", "--nnodes", "2", "--dist-init-addr", "node0"],
         "error: stack 'tiny': --dist-init-addr 'node0': multi-node serving needs HOST:PORT of node 0"),
        (["deploy", "--restart", "sometimes"], "error: stack 'tiny': --restart 'sometimes': not one of"),
        (["deploy", "--port", "0"], "error: stack 'tiny': --port 0: not a TCP port"),
        (["deploy", "--health-interval", "0"], "error: stack 'tiny': --health-interval 0: must be at least 1"),
        (["logs", "--tail", "many"], "error: --tail 'many': not a whole number"),
        (["rollback", "--wait-timeout", "x"], "error: --wait-timeout 'x': not a number"),
    ],
)
def test_bad_deploy_options_are_one_line_errors_before_anything_runs(tmp_path: Path, args, message) -> None:
    matrix = write_test_matrix(tmp_path / "m")
    task, *rest = args
    extra = ["--image", "sglstack-test/never-pulled:1"] if task == "deploy" else []
    proc = run_invoke(task, "--stack", "tiny", "--stacks-file", str(matrix), *extra, *rest, cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})
    assert proc.returncode == 2, proc.stderr  # bad input
    assert proc.stderr.strip().startswith(message), proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    # Nothing was started, pulled, preflighted or written.
    assert not (tmp_path / "build").exists()


def test_a_restore_is_not_cut_in_half_by_a_signal() -> None:
    import os
    import signal

    from sglstack.core.signals import Interrupted, signals_raise
    from sglstack.core.signals import deferred as signals_deferred

    done = []
    # As in every task: signals raise, and the restore defers them until it is whole.
    with pytest.raises(Interrupted) as info, signals_raise(), signals_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGHUP)
        done.append("the whole restore ran")
    assert done == ["the whole restore ran"]
    assert info.value.exit_code == 143  # the first signal decides the exit code
    with signals_raise(), signals_deferred():
        done.append("no signal, no interruption")
    assert len(done) == 2
