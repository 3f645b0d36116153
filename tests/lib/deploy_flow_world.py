"""The deploy flow tests' world (tests/unit/test_deploy_flow*.py): compose is a double with `ComposeCLI`'s interface
that brings the image of the file it is given up on an engine double, which answers the Docker SDK calls the flow
makes; health is the engine double's per-image script, read by the real `wait_healthy` on the test's clock."""

from __future__ import annotations

from pathlib import Path
from subprocess import CompletedProcess
from types import SimpleNamespace
from typing import Any

import docker.errors
from deploy_fixtures import make_test_stack
from fake_clock import FakeClock

from sglstack.deploy import checks, deployment, flow, health, lifecycle, restore
from sglstack.deploy.deployment import Deployment
from sglstack.deploy.store import DeploymentRecord, read_records
from sglstack.render import compose as cmp

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


def make_world(tmp_path, monkeypatch):
    """The engine and compose doubles, the test's clock and every outside call of the flow patched (the tests'
    `world` fixture)."""
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
