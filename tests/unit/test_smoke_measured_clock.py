"""The one health wait and a warm start's measurement on the test's clock: the SGLang double answers on a thread
(tests/lib/inthread_sglang), `time.monotonic` and `time.sleep` of `smoke.measured` are the test's, and the
double turns healthy when the test's clock says so. Every wait, poll interval and start time is exact."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from fake_clock import FakeClock
from inthread_sglang import ThreadServers, python_env

from sglstack.smoke import measured, smoke_options
from sglstack.smoke import server as server_mod
from sglstack.smoke.launch import process_plan


class ReadyAt(FakeClock):
    """The test's clock; the double's engines turn ready once it reaches `ready_at`."""

    def __init__(self, servers: ThreadServers, ready_at: float | None) -> None:
        super().__init__()
        self.servers, self.ready_at = servers, ready_at

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.ready_at is not None and self.now >= self.ready_at:
            for engine in self.servers.engines:
                engine.ready = True


@pytest.fixture
def servers():
    threads = ThreadServers()
    threads.hold_ready = True
    return threads


def _clock(monkeypatch, servers, ready_at):
    clock = ReadyAt(servers, ready_at)
    monkeypatch.setattr(measured, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep,
                                                           time=time.time))
    return clock


def _options(tmp_path, **overrides):
    return smoke_options(None, model="moonshotai/Kimi-K2.5", kinds="baseline", gpus=0, runner="process",
                         python_env=str(python_env(tmp_path / "env")), build_dir=str(tmp_path / "build"),
                         report=str(tmp_path / "report.json"), num_prompts=1,
                         **{"timeout": 1, "max_new_tokens": 4, **overrides})


def _serve(servers, options, tmp_path, port):
    plan = process_plan(options, "baseline", port)
    log_path = tmp_path / "baseline.log"
    cm = servers.running_in_thread(plan.argv, env=plan.environment, log_path=log_path)
    return cm, plan, log_path


class Unreachable:
    """A started server that never publishes where it answers (a container whose port is not bound yet)."""

    kind = "baseline"
    local_clock = True

    def __init__(self, gone_after: int | None = None) -> None:
        self.polls, self.gone_after = 0, gone_after

    def exit_failure(self):
        self.polls += 1
        return "it went away" if self.gone_after is not None and self.polls > self.gone_after else None

    def base_url(self):
        return None


def test_a_server_that_never_answers_is_polled_backing_off_until_the_deadline(monkeypatch, servers, tmp_path):
    clock = _clock(monkeypatch, servers, None)
    client, failure = measured.wait_until_healthy(Unreachable(), None, _options(tmp_path))  # type: ignore[arg-type]
    assert client is None
    assert failure == "not healthy after 1s (/health_generate never answered)"
    assert clock.sleeps == pytest.approx([0.2, 0.3, 0.45, 0.05])
    assert clock.now == pytest.approx(1.0)


def test_the_poll_interval_grows_to_two_seconds_and_stays(monkeypatch, servers, tmp_path):
    clock = _clock(monkeypatch, servers, None)
    measured.wait_until_healthy(Unreachable(), None, _options(tmp_path, timeout=12))  # type: ignore[arg-type]
    assert clock.sleeps[:8] == pytest.approx([0.2, 0.3, 0.45, 0.675, 1.0125, 1.51875, 2.0, 2.0])
    assert sum(clock.sleeps) == pytest.approx(12.0)


def test_a_server_that_exits_while_waited_for_stops_the_wait_at_once(monkeypatch, servers, tmp_path):
    clock = _clock(monkeypatch, servers, None)
    server = Unreachable(gone_after=2)
    assert measured.wait_until_healthy(server, None, _options(tmp_path)) == (None, "it went away")  # type: ignore[arg-type]
    assert clock.sleeps == pytest.approx([0.2, 0.3])


def test_a_server_answering_503_is_named_with_its_last_answer(monkeypatch, servers, tmp_path):
    clock = _clock(monkeypatch, servers, None)
    options = _options(tmp_path)
    cm, plan, log_path = _serve(servers, options, tmp_path, _free_port())
    with cm as proc:
        server = server_mod.ProcessServer(proc, plan, log_path)
        client, failure = measured.wait_until_healthy(server, None, options)
    assert client is None
    assert failure == "not healthy after 1s (/health_generate last answered 503)"
    assert len(clock.sleeps) == 4


def test_a_server_that_exits_after_answering_closes_its_client(monkeypatch, servers, tmp_path):
    _clock(monkeypatch, servers, None)
    options = _options(tmp_path)
    cm, plan, log_path = _serve(servers, options, tmp_path, _free_port())
    closed = []
    monkeypatch.setattr(measured.SGLangClient, "close", lambda self: closed.append(self.base_url))
    with cm as proc:
        server = server_mod.ProcessServer(proc, plan, log_path)
        polls = iter([None, None, "the server exited with code 1 before it was healthy"])
        server.exit_failure = lambda: next(polls)  # type: ignore[method-assign]
        client, failure = measured.wait_until_healthy(server, None, options)
    assert (client, failure) == (None, "the server exited with code 1 before it was healthy")
    assert closed == [f"http://127.0.0.1:{plan.port}"]


@pytest.mark.parametrize(("ready_at", "startup"), [(0.0, 0.0), (0.4, 0.5), (1.0, 1.625)])
def test_a_warm_start_is_healthy_when_the_server_says_so_and_measures_its_first_token(
        monkeypatch, servers, tmp_path, ready_at, startup):
    clock = _clock(monkeypatch, servers, ready_at)
    options = _options(tmp_path, timeout=5)
    lines: list[str] = []
    cm, plan, log_path = _serve(servers, options, tmp_path, _free_port())
    with cm as proc:
        if ready_at == 0.0:
            servers.engines[0].ready = True
        server = server_mod.ProcessServer(proc, plan, log_path, started_at=time.time())
        run = measured.measure_start(server, None, options, lines.append)
    assert run.started and run.kind == "baseline" and run.failure is None
    assert run.startup_s == pytest.approx(startup)
    assert clock.now == pytest.approx(startup)  # nothing waited once healthy
    assert lines[0] == f"smoke: baseline: healthy after {startup:.1f}s"
    assert lines[1].startswith("smoke: baseline: start by phase: ")
    assert run.phases["milestones_s"]["first_token"] >= round(startup, 3)  # the warm-up's TTFT after healthy
    assert run.single is None and run.outputs is None and run.runs == ()


def test_a_warm_start_that_never_gets_healthy_is_a_failed_run_with_its_log(monkeypatch, servers, tmp_path):
    _clock(monkeypatch, servers, None)
    options = _options(tmp_path)
    lines: list[str] = []
    cm, plan, log_path = _serve(servers, options, tmp_path, _free_port())
    with cm as proc:
        run = measured.measure_start(server_mod.ProcessServer(proc, plan, log_path), None, options, lines.append)
    assert run.started is False
    assert run.failure.startswith("not healthy after 1s (/health_generate last answered 503); last log lines: ")
    assert run.failure.endswith("Load weight end. elapsed=0.00 s, type=DoubleForCausalLM, avail mem=0.00 GB, "
                                "mem usage=0.00 GB.")
    assert run.failure.count(" | ") == 1  # the two log lines, joined once
    assert lines[0] == "smoke: baseline: not healthy after 1s (/health_generate last answered 503)"
    assert [line[:4] for line in lines[1:]] == ["  | ", "  | "]


def test_the_first_token_counts_from_the_start_and_unknown_starts_guess_nothing():
    class Logged:
        kind, local_clock = "eagle3", False

        def __init__(self, started):
            self.started = started

        def start_log(self):
            return [], self.started, 0.001

    said: list[str] = []
    warm = [SimpleNamespace(ttft_s=0.25)]
    phases = measured.start_phases_of(Logged(100.0), 2.0, warm, said.append)  # type: ignore[arg-type]
    assert phases["milestones_s"]["first_token"] == pytest.approx(2.25)
    none = measured.start_phases_of(Logged(None), 2.0, [], said.append)  # type: ignore[arg-type]
    assert none["milestones_s"]["first_token"] is None
    no_ttft = measured.start_phases_of(Logged(1.0), 2.0, [SimpleNamespace(ttft_s=None)], said.append)  # type: ignore[arg-type]
    assert no_ttft["milestones_s"]["first_token"] is None
    assert [line.split(":")[0] for line in said] == ["smoke", "smoke", "smoke"] and "eagle3" in said[0]


def test_server_info_that_fails_is_no_second_opinion():
    class Broken:
        def server_info(self):
            raise ValueError("not JSON")

    assert measured._server_info_or_none(Broken()) is None  # type: ignore[arg-type]
    assert measured._server_info_or_none(SimpleNamespace(server_info=lambda: {"a": 1})) == {"a": 1}  # type: ignore[arg-type]


def _free_port() -> int:
    from sglstack.adapters.process import free_tcp_port

    return free_tcp_port()


def test_a_warm_start_warms_up_once_with_the_servers_key(monkeypatch, servers, tmp_path):
    _clock(monkeypatch, servers, 0.0)
    options = _options(tmp_path, timeout=5, extra_args="--api-key sk-warm-0042", max_new_tokens=20)
    asked: list[tuple[str, int]] = []
    real = measured.SGLangClient.generate

    def generate(self, prompt, tokens):
        asked.append((self.session.headers.get("Authorization"), tokens))
        return real(self, prompt, tokens)

    monkeypatch.setattr(measured.SGLangClient, "generate", generate)
    cm, plan, log_path = _serve(servers, options, tmp_path, _free_port())
    with cm as proc:
        servers.engines[0].ready = True
        server = server_mod.ProcessServer(proc, plan, log_path, started_at=time.time())
        run = measured.measure_start(server, "sk-warm-0042", options, lambda _line: None)
    assert asked == [("Bearer sk-warm-0042", 16)]  # one request, at most 16 tokens
    assert run.phases["milestones_s"]["first_token"] is not None  # the key was taken: it generated
