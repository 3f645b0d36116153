"""The smoke server module through its seams, in process: a container seen through a double of the docker SDK's
`Container` (its `attrs`, `reload`, `logs`, `wait`, and the engine's `APIError`), a process group through a
stand-in of the `Popen` it reads, and the one-off runs (DeepGEMM's pre-compiler) to their end. No engine, no
child process, no timing."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import docker.errors
import pytest
from inthread_sglang import ThreadProc

from sglstack.smoke import server as server_mod
from sglstack.smoke.launch import ContainerPlan, ProcessPlan
from sglstack.smoke.measure import ServerRun

KEY = "sk-live-9f2a"


class Container:
    """What the server module reads of docker's `Container`."""

    def __init__(self, attrs=None, logs=b"", *, fail_logs=False, status_code=None, wait_raises=False):
        self.attrs = attrs or {}
        self._logs, self.fail_logs = logs, fail_logs
        self.reloads = 0
        self.log_calls: list[dict] = []
        self.status_code, self.wait_raises = status_code, wait_raises
        self.waited: list[float] = []

    def reload(self):
        self.reloads += 1

    def logs(self, **kwargs):
        self.log_calls.append(kwargs)
        if self.fail_logs:
            raise docker.errors.APIError("logs", explanation="no such container")
        return self._logs

    def wait(self, timeout):
        self.waited.append(timeout)
        if self.wait_raises:
            raise TimeoutError("read timed out")
        return {} if self.status_code is None else {"StatusCode": self.status_code}


def _plan(**overrides) -> ContainerPlan:
    fields = dict(kind="eagle3", image="sha256:abc", command=("python3", "-m", "sglang.launch_server", "--api-key",
                                                             "first", f"--api-key={KEY}"),
                  environment={"HF_TOKEN": "hf_secretvalue"}, binds=("/m:/models:ro",), gpus=0, ipc_mode="host",
                  shm_size="16g", ulimits=(("nofile", 1024, 2048),), labels={"a": "b"}, container_port=30000,
                  bind_address="127.0.0.1")
    return ContainerPlan(**{**fields, **overrides})


def _options(docker_host=None):
    return SimpleNamespace(docker_host=docker_host, build_dir="build")


def test_the_run_kwargs_carry_the_plan_and_ask_for_gpus_only_when_it_has_some():
    kwargs = server_mod.docker_run_kwargs(_plan())
    assert kwargs["environment"] == {"HF_TOKEN": "hf_secretvalue"}
    assert (kwargs["ipc_mode"], kwargs["shm_size"], kwargs["volumes"]) == ("host", "16g", ["/m:/models:ro"])
    assert kwargs["ports"] == {"30000/tcp": ("127.0.0.1", None)}
    assert [(u.name, u.soft, u.hard) for u in kwargs["ulimits"]] == [("nofile", 1024, 2048)]
    assert "device_requests" not in kwargs
    gpus = server_mod.docker_run_kwargs(_plan(gpus=2))["device_requests"]
    assert [(r.count, r.capabilities) for r in gpus] == [(2, [["gpu"]])]
    one = server_mod.docker_run_kwargs(_plan(gpus=1))["device_requests"]
    assert [(r.count, r.capabilities) for r in one] == [(1, [["gpu"]])]


@pytest.mark.parametrize(("state", "said"), [
    ({"Status": "running"}, None),
    ({"Status": "exited", "ExitCode": 1}, "the server exited with code 1 before it was healthy"),
    ({"Status": "dead", "ExitCode": 137, "OOMKilled": True},
     "the server exited with code 137 (OOM-killed) before it was healthy"),
    ({"Status": "exited", "ExitCode": 0, "OOMKilled": False}, "the server exited with code 0 before it was healthy"),
])
def test_a_container_that_exited_says_its_code_and_an_oom_kill(state, said):
    container = Container({"State": state})
    assert server_mod.ContainerServer(container, _plan(), _options()).exit_failure() == said
    assert container.reloads == 1  # read fresh, not from the state at creation


def test_a_container_without_a_state_is_running():
    assert server_mod.ContainerServer(Container({}), _plan(), _options()).exit_failure() is None


@pytest.mark.parametrize(("ports", "host", "url"), [
    ({"30000/tcp": [{"HostIp": "", "HostPort": ""}, {"HostIp": "0.0.0.0", "HostPort": "49153"}]}, None,
     "http://127.0.0.1:49153"),
    ({"30000/tcp": [{"HostPort": "49153"}]}, "tcp://gpu-node-7:2375", "http://gpu-node-7:49153"),
    ({"30000/tcp": None}, None, None),
    ({"8000/tcp": [{"HostPort": "1"}]}, None, None),
    ({}, None, None),
])
def test_the_url_is_the_published_port_on_the_engines_host(ports, host, url):
    container = Container({"NetworkSettings": {"Ports": ports}})
    server = server_mod.ContainerServer(container, _plan(), _options(host))
    assert server.base_url() == url
    assert server.local_clock is False and server.kind == "eagle3"


def test_a_container_without_network_settings_has_no_url_yet():
    assert server_mod.ContainerServer(Container({}), _plan(), _options()).base_url() is None


def test_the_log_tail_drops_blank_lines_and_hides_the_secrets():
    logs = f"line one\n\n   \nserver_args api_key='{KEY}' token=hf_secretvalue\nlast\n".encode()
    container = Container(logs=logs)
    tail = server_mod.ContainerServer(container, _plan(), _options()).log_tail(7)
    assert tail == ["line one", "server_args api_key='***' token=***", "last"]
    assert container.log_calls == [{"stdout": True, "stderr": True, "tail": 7}]
    assert server_mod.ContainerServer(container, _plan(), _options()).log_tail() == tail
    assert container.log_calls[-1]["tail"] == 15


def test_the_log_tail_of_a_container_gone_is_empty():
    assert server_mod.log_tail(Container(fail_logs=True)) == []
    assert server_mod.log_tail(Container(logs=b"\xff bad\n")) == ["\ufffd bad"]


def test_a_containers_start_log_is_on_the_engines_clock():
    logs = (b"2026-12-05T03:30:01.500000000Z server_args=x\n"
            b"2026-12-05T03:30:03.000000000Z The server is fired up and ready to roll!\nno stamp\n")
    container = Container({"State": {"StartedAt": "2026-12-05T03:30:00.000000000Z"}}, logs)
    lines, started, resolution = server_mod.ContainerServer(container, _plan(), _options()).start_log()
    assert [(line.at is not None, line.text) for line in lines] == [
        (True, "server_args=x"), (True, "The server is fired up and ready to roll!"), (False, "no stamp")]
    assert lines[1].at - started == pytest.approx(3.0)
    assert resolution == 0.001
    assert container.log_calls == [{"stdout": True, "stderr": True, "timestamps": True}]
    assert container.reloads == 1


def test_a_start_log_with_bytes_that_are_not_utf8_is_read_with_replacements():
    logs = b"2026-12-05T03:30:01.500000000Z \xff Load weight end.\n"
    container = Container({"State": {"StartedAt": "2026-12-05T03:30:00Z"}}, logs)
    lines, _started, _resolution = server_mod.ContainerServer(container, _plan(), _options()).start_log()
    assert [line.text for line in lines] == ["\ufffd Load weight end."]


def test_a_start_log_without_a_start_time_or_engine_is_unknown():
    lines, started, _resolution = server_mod.ContainerServer(Container({}, b"x\n"), _plan(), _options()).start_log()
    assert started is None and [line.text for line in lines] == ["x"]
    gone = server_mod.ContainerServer(Container(fail_logs=True), _plan(), _options()).start_log()
    assert gone == ([], None, 0.001)


def test_a_container_that_cannot_start_is_a_failed_run_in_one_line(monkeypatch):
    def refuse(*args, **kwargs):
        raise docker.errors.APIError("500", explanation="could not select device driver nvidia\nmore")

    monkeypatch.setattr(server_mod, "running_container", refuse)
    run = server_mod.serve_and_measure(object(), _plan(), _options(), lambda _m: None)  # type: ignore[arg-type]
    assert run == ServerRun(kind="eagle3", started=False,
                            failure="the container could not start: could not select device driver nvidia")


def test_a_container_is_measured_with_the_last_api_key_and_its_run_returned(monkeypatch):
    seen = {}
    container = Container()

    class Running:
        def __init__(self, engine, image, **kwargs):
            seen.update(engine=engine, image=image, **kwargs)

        def __enter__(self):
            return container

        def __exit__(self, *exc):
            seen["removed"] = True

    def measure(server, api_key, options, log):
        seen["measured"] = (server.container, server.plan.kind, api_key, options)
        seen["server_options"], seen["log"] = server.options, log
        return ServerRun(kind="eagle3", started=True)

    monkeypatch.setattr(server_mod, "running_container", Running)
    options = _options()
    log = print
    run = server_mod.serve_and_measure("engine", _plan(), options, log, measure)  # type: ignore[arg-type]
    assert seen["server_options"] is options and seen["log"] is log
    assert run == ServerRun(kind="eagle3", started=True)
    assert seen["measured"] == (container, "eagle3", KEY, options)
    assert (seen["engine"], seen["image"], seen["name_prefix"], seen["labels"]) == ("engine", "sha256:abc",
                                                                                   "sglstack-smoke", {"a": "b"})
    assert seen["command"] == list(_plan().command) and seen["shm_size"] == "16g" and seen["removed"]


@pytest.mark.parametrize(("given", "result"), [
    ({"status_code": 3}, 3),
    ({}, -1),
    ({"wait_raises": True}, "a timeout after 2.5s"),
])
def test_a_one_off_container_runs_to_its_end(monkeypatch, given, result):
    container = Container(**given)
    seen = {}

    def running(engine, image, **kwargs):
        seen.update(engine=engine, image=image, **kwargs)
        return _Yield(container)

    monkeypatch.setattr(server_mod, "running_container", running)
    assert server_mod.container_to_end("engine", _plan(), 2.5) == result  # type: ignore[arg-type]
    assert container.waited == [2.5] and seen["name_prefix"] == "sglstack-smoke"
    assert seen["command"] == list(_plan().command) and seen["ipc_mode"] == "host"
    assert (seen["engine"], seen["image"], seen["labels"]) == ("engine", "sha256:abc", {"a": "b"})


@pytest.mark.parametrize(("error", "said"), [
    (docker.errors.APIError("x", explanation="no such image\ndetail"), "no such image"),
    (docker.errors.APIError("engine went away\nmore"), "engine went away"),  # no explanation: the error itself
])
def test_a_one_off_container_the_engine_refuses_says_why(monkeypatch, error, said):
    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(server_mod, "running_container", refuse)
    assert server_mod.container_to_end("engine", _plan(), 1) == f"an error ({said})"  # type: ignore[arg-type]
    run = server_mod.serve_and_measure("engine", _plan(), _options(), lambda _m: None)  # type: ignore[arg-type]
    assert run.failure == f"the container could not start: {said}"


class _Yield:
    def __init__(self, value):
        self.value = value

    def __enter__(self):
        return self.value

    def __exit__(self, *exc):
        return False


def _pplan(secrets=(KEY,)) -> ProcessPlan:
    return ProcessPlan(kind="baseline", argv=("/env/bin/python3", "-m", "sglang.launch_server", "--api-key", KEY),
                       environment={"PATH": "/env/bin"}, port=43123, python="/env/bin/python3", secrets=secrets)


@pytest.mark.parametrize(("code", "said"), [
    (None, None),
    (1, "the server exited with code 1 before it was healthy"),
    (0, "the server exited with code 0 before it was healthy"),
    (-9, "the server exited with code -9 (killed by SIGKILL) before it was healthy"),
    (-99, "the server exited with code -99 (killed by signal 99) before it was healthy"),
])
def test_a_process_that_exited_says_its_code_and_signal(code, said):
    proc = ThreadProc()
    proc.returncode = code
    server = server_mod.ProcessServer(proc, _pplan(), Path("/nonexistent/log"))  # type: ignore[arg-type]
    assert server.exit_failure() == said
    assert server.base_url() == "http://127.0.0.1:43123"
    assert server.local_clock is True and server.kind == "baseline"


def test_a_process_log_tail_hides_the_secrets_and_a_missing_log_has_no_start(tmp_path):
    log = tmp_path / "baseline.log"
    log.write_text(f"one\nkey {KEY}\n[2026-12-05 03:30:01] Load weight end.\n")
    server = server_mod.ProcessServer(ThreadProc(), _pplan(), log, started_at=1234.5)  # type: ignore[arg-type]
    assert server.log_tail(2) == ["key ***", "[2026-12-05 03:30:01] Load weight end."]
    lines, started, resolution = server.start_log()
    assert [line.text for line in lines][-1] == "[2026-12-05 03:30:01] Load weight end."
    assert lines[-1].at is not None and lines[0].at is None
    assert (started, resolution) == (1234.5, 1.0)
    gone = server_mod.ProcessServer(ThreadProc(), _pplan(), tmp_path / "none.log", 7.0)  # type: ignore[arg-type]
    assert gone.start_log() == ([], 7.0, 1.0)


def test_a_process_that_cannot_start_is_a_failed_run_and_its_log_is_still_hidden(tmp_path, monkeypatch):
    log = tmp_path / "build" / "baseline.log"
    log.parent.mkdir()
    log.write_text(f"args {KEY} and abc\n")

    def refuse(argv, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    monkeypatch.setattr(server_mod, "running_process", refuse)
    options = SimpleNamespace(build_dir=str(tmp_path / "build"))
    run = server_mod.serve_process_and_measure(_pplan(secrets=(KEY, "abc")), options, log, lambda _m: None)  # type: ignore[arg-type]
    assert run.started is False and run.kind == "baseline"
    assert run.failure == ("the server process could not start: [Errno 2] No such file or directory: "
                           "'/env/bin/python3'")
    assert log.read_text() == "args *** and abc\n"  # a secret under 4 characters is not blanked


def test_a_log_without_secrets_is_left_as_it_is(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("nothing secret\n")
    os.utime(log, (1, 1))
    server_mod._hide_in_log(log, (KEY,))
    assert log.stat().st_mtime == 1 and log.read_text() == "nothing secret\n"
    server_mod._hide_in_log(tmp_path / "missing.log", (KEY,))
    assert not (tmp_path / "missing.log").exists()


@pytest.mark.parametrize(("code", "result"), [(0, 0), (4, 4), (None, "a timeout after 2.5s")])
def test_a_one_off_process_runs_to_its_end(tmp_path, monkeypatch, code, result):
    proc = ThreadProc()
    proc.returncode = code
    seen = {}

    def running(argv, **kwargs):
        seen.update(argv=argv, **kwargs)
        return _Yield(proc)

    monkeypatch.setattr(server_mod, "running_process", running)
    got = server_mod.run_to_end(["x"], {"A": "1"}, tmp_path / "l.log", tmp_path, 2.5)
    assert got == result and proc.waited == [2.5]
    assert seen == {"argv": ["x"], "env": {"A": "1"}, "log_path": tmp_path / "l.log", "log_root": tmp_path}


def test_a_one_off_process_that_cannot_start_says_why(tmp_path, monkeypatch):
    def refuse(argv, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(server_mod, "running_process", refuse)
    assert server_mod.run_to_end(["x"], {}, tmp_path / "l.log", tmp_path, 1) == "an error (Permission denied)"
