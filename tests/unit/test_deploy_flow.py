"""`deploy` and what follows it (`rollback`, `service_logs`, `undeploy`) in process: compose is a double with
`ComposeCLI`'s interface that brings the image of the file it is given up on an engine double, which answers the
Docker SDK calls the flow makes (`info`, `images.get`, `containers.list` by label, `api.inspect_container`,
`logs`, `networks.list`). Health is the engine double's per-image script, read by the real `wait_healthy`
on the test's clock; every line said, every record field and every compose call is asserted."""

from __future__ import annotations

import signal
from pathlib import Path
from subprocess import CompletedProcess
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest
from deploy_fixtures import make_test_stack
from fake_clock import FakeClock

from sglstack.core.errors import DeployError
from sglstack.core.safefiles import OutputNotWritable
from sglstack.core.signals import Interrupted
from sglstack.deploy import checks, deployment, flow, health, lifecycle, restore
from sglstack.deploy.deployment import DeployFailed, Deployment
from sglstack.deploy.files import SAVED_SUFFIX
from sglstack.deploy.restore import pinned_image
from sglstack.deploy.store import DeploymentRecord, append_record, read_records
from sglstack.render import compose as cmp
from sglstack.serving.phases import MILESTONES, PHASES

REPO = "127.0.0.1:5000/sglstack/sglang"
A = f"{REPO}@sha256:{'a' * 64}"
B = f"{REPO}@sha256:{'b' * 64}"
ID_A, ID_B, PULLED = "sha256:" + "1" * 64, "sha256:" + "2" * 64, "sha256:" + "3" * 64
OPTIONS = cmp.ComposeOptions(gpus=0)
PROJECT = cmp.project_name("tiny")
HEALTHY = {"State": {"Status": "running", "Health": {"Status": "healthy"}}, "RestartCount": 0}
STARTING = {"State": {"Status": "running", "Health": {"Status": "starting"}}, "RestartCount": 0}
CRASHED = {"State": {"Status": "exited", "ExitCode": 3, "Health": {"Status": "unhealthy"}}, "RestartCount": 2}


class Container:
    def __init__(self, engine: Engine, image: str) -> None:
        self.engine, self.image = engine, image
        self.id = "c" + image[-11:]
        self.name, self.labels = f"{PROJECT}-sglang-1", {cmp.LABEL_STACK: engine.owner}
        self.attrs = {"State": {"StartedAt": "2026-12-05T03:00:00.000000000Z"}}
        self.removed = False

    def logs(self, *, stdout: bool, stderr: bool, tail: int | None = None, timestamps: bool = False) -> bytes:
        assert stdout and stderr
        self.engine.log_calls.append({"tail": tail, "timestamps": timestamps})
        if self.engine.logs_fail:
            raise docker.errors.APIError("logs refused")
        return self.engine.log.get(self.image, b"")

    def reload(self) -> None:
        pass

    def remove(self, *, force: bool, v: bool) -> None:
        assert force and v
        self.engine.removed.append(self.id)
        self.engine.running.pop(PROJECT, None)


class Engine:
    """The Docker SDK as the flow uses it. `running[project]` is the image compose brought up there; `health`
    scripts each image's inspect answers, one per poll (the last repeats)."""

    def __init__(self) -> None:
        self.running: dict[str, str] = {}
        self.health: dict[str, list[dict[str, Any]]] = {}
        self.polls: dict[str, int] = {}
        self.log: dict[str, bytes] = {}
        self.log_calls: list[dict[str, Any]] = []
        self.logs_fail = False
        self.tags: dict[str, str] = {}  # a reference (or an image id) -> the image id it names on the engine
        self.info_fails = False
        self.name: str | None = "node-1"
        self.owner = "tiny"  # the stack label of the containers it runs
        self.init_log: bytes | None = None  # a kernel-cache init service's container in the project, and its log
        self.unlistable: set[str] = set()  # images whose containers cannot be listed once their health was read
        self.inspect_error: Exception | None = None
        self.removed: list[str] = []
        self.networks_removed: list[str] = []
        self.images = SimpleNamespace(get=self._image)
        self.containers = SimpleNamespace(list=self._containers)
        self.networks = SimpleNamespace(list=self._networks)
        self.api = SimpleNamespace(inspect_container=self._inspect)

    def info(self) -> dict[str, Any]:
        if self.info_fails:
            raise docker.errors.APIError("info refused")
        return {"ServerVersion": "20.10"} | ({"Name": self.name} if self.name else {})

    def _image(self, ref: str) -> SimpleNamespace:
        if ref not in self.tags:
            raise docker.errors.ImageNotFound(f"No such image: {ref}")
        return SimpleNamespace(id=self.tags[ref])

    def _containers(self, *, all: bool, filters: dict[str, list[str]]) -> list[Container]:
        assert all
        labels = filters["label"]
        project = labels[0].removeprefix(f"{health.COMPOSE_PROJECT_LABEL}=")
        assert labels[1:] in ([], [f"{health.COMPOSE_SERVICE_LABEL}={cmp.SERVICE}"]), labels
        image = self.running.get(project)
        if image in self.unlistable and self.polls.get(image):
            raise docker.errors.DockerException("the engine stopped answering")
        found = [Container(self, image)] if image else []
        if image and self.init_log is not None and not labels[1:]:  # another service of the project
            init = Container(self, "kernel-cache-init")
            self.log["kernel-cache-init"] = self.init_log
            found.append(init)
        return found

    def _networks(self, *, filters: dict[str, str]) -> list[SimpleNamespace]:
        assert filters == {"label": f"{health.COMPOSE_PROJECT_LABEL}={PROJECT}"}
        return [SimpleNamespace(remove=lambda: self.networks_removed.append("default"))]

    def _inspect(self, cid: str) -> dict[str, Any]:
        if self.inspect_error is not None:
            raise self.inspect_error
        if cid == "c" + "kernel-cache-init"[-11:]:  # the init service: done, exited 0
            return {"State": {"Status": "exited", "ExitCode": 0}, "RestartCount": 0}
        image = next(i for i in self.running.values() if cid == "c" + i[-11:])
        script = self.health.get(image, [HEALTHY])
        n = self.polls[image] = self.polls.get(image, 0) + 1
        return script[min(n, len(script)) - 1]


class Compose:
    """`ComposeCLI`'s interface: `label` and `run(project, files, args, *, docker_host, cwd, timeout)`. `up`
    brings up the image named in the file; `fail` maps a command to its (exit code, stderr)."""

    label = "docker compose 2.29.0 (v2)"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[str, tuple[int, str]] = {}
        self.fail_image: dict[str, str] = {}  # `up` of this image fails with this stderr

    def run(self, project: str, files, args: list[str], *, docker_host: str | None = None, cwd: Path | None = None,
            timeout: float = 600) -> CompletedProcess[str]:
        paths = [Path(f) for f in files]
        self.calls.append((project, [p.name for p in paths], args, docker_host))
        code, err = self.fail.get(args[0], (0, ""))
        if args[0] == "up":
            text = paths[0].read_text(encoding="utf-8")
            image = next(line.split(":", 1)[1].strip().strip('"') for line in text.splitlines()
                         if line.strip().startswith("image:"))
            if image in self.fail_image:
                return CompletedProcess(args, 1, "", self.fail_image[image])
            if code == 0:
                self.engine.running[project] = image
                self.engine.polls.pop(image, None)
        if args[0] == "down" and code == 0:
            self.engine.running.pop(project, None)
        if args[0] == "logs":
            return CompletedProcess(args, code, "sglang-1  | ready\n", err)
        return CompletedProcess(args, code, "", err)


@pytest.fixture
def world(tmp_path, monkeypatch):
    engine = Engine()
    engine.tags.update({A: ID_A, B: ID_B, ID_A: ID_A, ID_B: ID_B})
    compose = Compose(engine)
    clock = FakeClock(100.0)
    monkeypatch.setattr(health, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    # The default build root is not the deployment's: a record written to the default one is not found.
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "default-build"))
    asked: dict[str, list[Any]] = {"client": [], "host": [], "platform": [], "pull": [], "http": [], "cache": [],
                                   "report": []}
    answers: dict[str, Any] = {"http": True, "notices": [], "reports": {}}

    def client(host=None):
        asked["client"].append(host)
        return engine

    def check_host(c, spec, options, *, project, local, docker_host):
        asked["host"].append((c is engine, spec.stack, options, project, local, docker_host))
        return answers["notices"]

    def check_node_platform(stack, ref, where, platforms, say, c):
        asked["platform"].append((stack, ref, where, platforms, c is engine))
        if ref not in engine.tags:
            say(f"platform: {ref} is neither on the engine nor in a registry named by it: not checked against {where}")

    def ensure_image(c, ref, stack, say):
        asked["pull"].append((c is engine, ref, stack))
        if ref not in engine.tags:
            say(f"pulling {ref}")
            engine.tags[ref] = PULLED

    def image_identity(c, ref):
        assert c is engine
        return (ref.split("@")[1] if "@" in ref else "", engine.tags.get(ref, ""))

    def smoke_report_for(stack, digest, root):
        asked["report"].append((stack, digest, root))
        return answers["reports"].get(digest)

    def restore_for_compose(root, stack, out, spec, ref, name, *, local, verify_key, say):
        asked["cache"].append((root, stack, out, spec.stack, ref, name, local, verify_key))
        say(f"kernel cache: restoring the caches of {name}")
        return "kernel cache: restored 3 files"

    def answers_200(url):
        asked["http"].append(url)
        return answers["http"]

    monkeypatch.setattr(flow, "docker_client", client)
    monkeypatch.setattr(flow, "check_host", check_host)
    monkeypatch.setattr(checks, "engine_platform", lambda c: "linux/amd64" if c is engine else "?")
    monkeypatch.setattr(checks, "check_node_platform", check_node_platform)
    monkeypatch.setattr(flow, "ensure_image", ensure_image)
    monkeypatch.setattr(flow, "image_identity", image_identity)
    monkeypatch.setattr(flow, "smoke_report_for", smoke_report_for)
    monkeypatch.setattr(flow, "restore_for_compose", restore_for_compose)
    monkeypatch.setattr(deployment, "answers_200", answers_200)
    monkeypatch.setattr(lifecycle, "docker_client", client)
    stamps = iter(f"2026-12-05T03:{n // 60:02d}:{n % 60:02d}Z" for n in range(1, 3600))
    monkeypatch.setattr(flow, "utc_timestamp", lambda: next(stamps))
    monkeypatch.setattr(lifecycle, "utc_timestamp", lambda: next(stamps))
    monkeypatch.setattr(restore, "utc_timestamp", lambda: next(stamps))
    dep = Deployment(stack=make_test_stack(tmp_path / "m"), build_root=tmp_path / "build")
    return SimpleNamespace(dep=dep, engine=engine, compose=compose, clock=clock, asked=asked, answers=answers,
                           said=[])


def deploy(w, image=A, options=OPTIONS, **kw) -> DeploymentRecord:
    return flow.deploy(w.dep, image, options, compose=w.compose, say=w.said.append, **kw)


def rows(w) -> list[tuple[str, str, str, str]]:
    return [(r.action, r.result, r.image, r.note) for r in read_records(w.dep.build_root, "tiny")]


DIGEST_A, DIGEST_B = A.split("@")[1], B.split("@")[1]


UP = ["up", "-d", "--remove-orphans", "--no-build"]
DOWN = ["down", "-v", "--remove-orphans"]
NO_REPORT = ("no passing smoke report is known for {}: labelled io.sglstack.smoke-report=unknown (a published digest "
             "carries the report that let it through)")


def calls(w) -> list[tuple[Any, ...]]:
    return [(files, args, host) for project, files, args, host in w.compose.calls if project == PROJECT]


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
