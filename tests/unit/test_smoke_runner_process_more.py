"""`run_smoke` in process (the SGLang double on a thread behind the process runner's seam, tests/lib/inthread_sglang;
the docker runner through tests/lib/inthread_docker), along the branches the other in-process tests leave on one
side: a named stack, an API key the server checks (and hides in its kept log, four characters too), the cold
start against the last pass's, two smokes of one cache folder, and a server log that is not UTF-8 or is larger
than the start log is read. Verdicts come from the double's scripted behaviour and the history's recorded
figures, never from measured speed."""

from __future__ import annotations

import fcntl
import json
import os
import time
from types import SimpleNamespace

import pytest
from fake_clock import FakeClock
from inthread_docker import Engine
from inthread_sglang import ThreadProc, python_env, serve_in_threads

from sglstack.core.errors import SglstackError
from sglstack.core.folderlock import LOCK_NAME, StackBusy
from sglstack.smoke import measured, run_smoke, smoke_options
from sglstack.smoke import report as report_mod
from sglstack.smoke import runner as runner_mod
from sglstack.smoke import server as server_mod
from sglstack.smoke.launch import ProcessPlan

ENV = {"SGLANG_DOUBLE_TOKENS_PER_S": "4000", "SGLANG_DOUBLE_TTFT_S": "0", "SGLANG_LOG_MS": "1"}
STAMP = "[2026-12-05 10:00:00.000]"


@pytest.fixture
def servers(monkeypatch):
    return serve_in_threads(monkeypatch)


def _options(tmp_path, stack=None, env=None, **more):
    env_dir = tmp_path / "env"
    env_dir = env_dir if env_dir.exists() else python_env(env_dir)
    settings = {"runner": "process", "python_env": str(env_dir), "model": "m", "draft_model": "d", "tp": 1,
                "gpus": 0, "timeout": 60, "concurrency": 1, "num_prompts": 1, "max_new_tokens": 4,
                "kinds": "baseline", "no_history": True, **more}
    return smoke_options(stack, env={**ENV, **(env or {})}, build_dir=str(tmp_path / "build"), **settings)


def _run(tmp_path, stack=None, env=None, **more):
    lines: list[str] = []
    options = _options(tmp_path, stack, env, **more)
    return run_smoke(stack, None, options, log=lines.append), lines


@pytest.mark.parametrize("key", ["sk-proc-7f3a9", "Qz9K"])  # four characters are hidden too
def test_a_servers_api_key_is_sent_and_hidden_in_its_kept_log(servers, tmp_path, key):
    report, _ = _run(tmp_path, extra_args=f"--api-key {key}", timeout=5, report=str(tmp_path / "report.json"))
    assert report.data["verdict"] == "pass", report.data["failures"]
    assert servers.started[0]["args"]["api_key"] == key  # the double checks it on every route
    log = (tmp_path / "report.baseline.log").read_text()
    assert "server_args=" in log and key not in log and "***" in log


def test_a_three_character_key_is_left_in_the_log(servers, tmp_path):
    """As redact_text: a "secret" shorter than four characters would blank every such run of letters."""
    report, _ = _run(tmp_path, extra_args="--api-key Qz9", timeout=5, report=str(tmp_path / "report.json"))
    assert report.data["verdict"] == "pass", report.data["failures"]
    assert "'api_key': 'Qz9'" in (tmp_path / "report.baseline.log").read_text()


def test_a_named_stacks_smoke_keeps_its_report_history_and_caches_in_its_folder(servers, tmp_path, stacks_matrix):
    stack = stacks_matrix.stacks["cu130"]
    report, _ = _run(tmp_path, stack, no_history=False, kernel_cache=True)
    data = report.data
    assert data["verdict"] == "pass", data["failures"]
    assert data["stack"] == "cu130"
    folder = tmp_path / "build" / "cu130"
    assert data["history_file"] == str(folder / "smoke-history.jsonl")
    assert len((folder / "smoke-history.jsonl").read_text().splitlines()) == 1
    assert (folder / "smoke-report.json").is_file()
    assert servers.started[0]["env"]["TRITON_CACHE_DIR"].startswith(str(folder / "kernel-cache" / "baseline"))
    assert not (tmp_path / "build" / "_no-stack").exists()


def test_a_named_stacks_image_is_what_the_docker_runner_opens(monkeypatch, tmp_path, stacks_matrix):
    stack = stacks_matrix.stacks["cu130"]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the stack binds ~/.cache/huggingface: it is there
    (tmp_path / "home" / ".cache" / "huggingface").mkdir(parents=True)
    engine = Engine(tmp_path)
    monkeypatch.setattr(server_mod, "running_container", engine.running_container)
    monkeypatch.setattr(report_mod, "smoke_chart", lambda data, history: b"png")

    def open_what_to_serve(stack, image, options, interpreter, log):
        engine.opened.append((stack, image, interpreter))
        return "the engine", {"ref": "sglstack/cu130:abc", "digest": None, "id": "sha256:" + "8" * 64,
                              "repo_digests": []}

    monkeypatch.setattr(runner_mod, "open_what_to_serve", open_what_to_serve)
    options = _options(tmp_path, stack, runner="docker", python_env=None)
    report = run_smoke(stack, "sglstack/cu130:abc", options, log=lambda _line: None)
    assert report.data["verdict"] == "pass", report.data["failures"]
    assert engine.opened == [(stack, "sglstack/cu130:abc", None)]
    assert [r["image"] for r in engine.runs] == ["sha256:" + "8" * 64]


def _last_pass_started_in(history, seconds):
    """The history's last line as if its baseline had been healthy after `seconds`."""
    records = [json.loads(line) for line in history.read_text().splitlines()]
    records[-1]["baseline"]["startup_s"] = seconds
    history.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize(("before_s", "fails"), [(1e-7, True), (1e6, False)])
def test_the_cold_start_is_judged_against_the_last_passing_runs(servers, tmp_path, before_s, fails):
    """No start takes 0.1 µs to answer healthy over HTTP, and none here takes 11 days: both sides are far."""
    first, _ = _run(tmp_path, no_history=False, max_start_regression=0)
    assert first.data["verdict"] == "pass", first.data["failures"]
    _last_pass_started_in(tmp_path / "build" / "_no-stack" / "smoke-history.jsonl", before_s)
    second, _ = _run(tmp_path, no_history=False, max_start_regression=0)
    failures = second.data["failures"]
    assert [f.split(":")[0] for f in failures] == (["max_start_regression"] if fails else [])
    assert second.data["verdict"] == ("fail" if fails else "pass")
    if fails:
        assert failures[0].startswith("max_start_regression: the baseline start took ")


def test_a_second_smoke_of_the_same_cache_folders_is_refused_before_it_serves(servers, tmp_path):
    """The other smoke holds the folders' lock as another process would (an flock on its own descriptor)."""
    base = tmp_path / "build" / "_no-stack" / "kernel-cache"
    base.mkdir(parents=True)
    fd = os.open(base / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StackBusy, match=f"^kernel caches {base}: another smoke of this stack is using them"):
            _run(tmp_path, kernel_cache=True)
    finally:
        os.close(fd)
    assert servers.started == []
    report, _ = _run(tmp_path, kernel_cache=True)  # once that one ended
    assert report.data["verdict"] == "pass"


def _process_server(tmp_path, log: bytes) -> server_mod.ProcessServer:
    path = tmp_path / "server.log"
    path.write_bytes(log)
    plan = ProcessPlan(kind="baseline", argv=("python3",), environment={}, port=1, python="python3")
    return server_mod.ProcessServer(ThreadProc(), plan, path, started_at=123.0)


def test_a_start_log_that_is_not_utf8_is_read_with_the_bad_bytes_replaced(tmp_path):
    server = _process_server(tmp_path, f"{STAMP} Load weight end. \xff\xfe elapsed=1 s\n".encode("latin-1")
                             + f"{STAMP} The server is fired up and ready to roll!\n".encode())
    lines, started_at, resolution = server.start_log()
    assert started_at == 123.0 and resolution == pytest.approx(0.001)
    assert [line.text for line in lines] == [f"{STAMP} Load weight end. \ufffd\ufffd elapsed=1 s",
                                             f"{STAMP} The server is fired up and ready to roll!"]
    assert lines[0].at is not None and lines[0].at == lines[1].at


def test_only_the_first_64_mib_of_a_start_log_are_read(tmp_path):
    """A line that ends at the limit is read; one right after it is not."""
    last = f"{STAMP} The server is fired up and ready to roll!\n".encode()
    pad = server_mod.MAX_START_LOG_BYTES - len(last)
    beyond = f"{STAMP} Load weight end. elapsed=1 s\n".encode()
    server = _process_server(tmp_path, b" " * (pad - 1) + b"\n" + last + beyond)
    texts = [line.text for line in server.start_log()[0]]
    assert texts[-1] == f"{STAMP} The server is fired up and ready to roll!"
    assert len(texts) == 2


def test_a_sweep_setting_not_served_fails_by_the_eagle3_servers_name(servers, tmp_path):
    """Without a measured baseline no setting is served, and each one's verdict says whose run is missing."""
    report, _ = _run(tmp_path, env={"SGLANG_DOUBLE_CRASH_AT_START": "baseline"}, kinds="baseline,eagle3",
                     sweep="3:1:4,5:1:6", report=str(tmp_path / "report.json"))
    skipped = report.data["sweep"]["settings"][1]
    assert skipped["verdict"] == "fail"
    assert skipped["failures"][-1] == "eagle3: not served: the baseline failed"


def test_a_key_that_refers_to_an_unset_variable_is_refused_before_a_server_starts(servers, tmp_path, monkeypatch):
    monkeypatch.delenv("SMOKE_TEST_KEY", raising=False)
    with pytest.raises(SglstackError, match=r"^serving.extra_args refers to \$\{SMOKE_TEST_KEY\}, which is not set"):
        _run(tmp_path, extra_args="--api-key ${SMOKE_TEST_KEY}", report=str(tmp_path / "report.json"))
    assert servers.started == []
    monkeypatch.setenv("SMOKE_TEST_KEY", "sk-from-env-0042")
    report, _ = _run(tmp_path, extra_args="--api-key ${SMOKE_TEST_KEY}", report=str(tmp_path / "report.json"))
    assert report.data["verdict"] == "pass", report.data["failures"]
    assert servers.started[0]["args"]["api_key"] == "sk-from-env-0042"


def test_the_process_runner_checks_its_draft_here_whatever_docker_host_says(servers, tmp_path, monkeypatch):
    """The process runner serves on this machine: a remote DOCKER_HOST does not move its draft elsewhere."""
    monkeypatch.setenv("DOCKER_HOST", "ssh://user@gpu-node.test")
    draft = tmp_path / "no-such-draft"
    with pytest.raises(SglstackError, match=f"draft {draft}: no folder {draft} on this machine"):
        _run(tmp_path, kinds="baseline,eagle3", draft_model=str(draft), report=str(tmp_path / "report.json"))
    assert servers.started == []


def test_the_eagle3_servers_accept_length_is_read_from_each_answer_and_from_the_server(servers, tmp_path):
    """The double verifies 3 tokens a step: 4 tokens in 2 steps, in each answer's meta_info and in its server info;
    the baseline server reports no speculation, so neither is read for it."""
    report, _ = _run(tmp_path, kinds="baseline,eagle3", min_speedup=0.01, report=str(tmp_path / "report.json"))
    data = report.data
    assert data["eagle3"]["accept_length_meta"] == pytest.approx(4 / 2)
    assert data["eagle3"]["accept_length_server"] == pytest.approx(4 / 2)
    assert (data["baseline"]["accept_length_meta"], data["baseline"]["accept_length_server"]) == (None, None)


def test_each_request_waits_at_most_the_request_timeout(servers, tmp_path):
    """The double takes 6 s to its first token (0.6 s for a prompt it has seen): at a 0.1 s request timeout every
    generation fails, however loaded the machine."""
    report, _ = _run(tmp_path, env={"SGLANG_DOUBLE_TTFT_S": "6"}, request_timeout=0.1,
                     report=str(tmp_path / "report.json"))
    baseline = report.data["baseline"]
    assert baseline["started"] is True
    assert (baseline["completed"], baseline["requests"]) == (0, 1)
    assert report.data["verdict"] == "fail"


def _local(at: float) -> str:
    return "[" + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) + ".000]"


def test_a_process_servers_phases_count_from_its_start_and_a_line_from_the_future_is_off_clock(tmp_path):
    """Stamps set by the test, a whole number of seconds after the start: every figure is exact. A line stamped
    three hours after the log was read is on another clock (a server given another TZ)."""
    started = float(int(time.time()) - 100)
    log = (f"{_local(started + 2)} server_args=ServerArgs(model_path='m')\n"
           f"{_local(started + 5)} Load weight end. elapsed=3.00 s\n"
           f"{_local(time.time() + 3 * 3600)} The server is fired up and ready to roll!\n")
    server = _process_server(tmp_path, log.encode())
    server.started_at = started
    lines: list[str] = []
    phases = measured.start_phases_of(server, 7.0, [], lines.append)
    assert phases["milestones_s"]["imports_done"] == 2.0 and phases["milestones_s"]["weights_loaded"] == 5.0
    assert phases["phases_s"]["weights"] == 3.0
    assert phases["off_clock"] == ["healthy"] and phases["milestones_s"]["healthy"] is None
    assert lines == [measured.phases_line("baseline", phases)]


def test_each_single_stream_run_is_reported_with_its_counts_and_accept_length(servers, tmp_path):
    report, _ = _run(tmp_path, kinds="baseline,eagle3", min_speedup=0.01, report=str(tmp_path / "report.json"))
    for kind, accept in (("baseline", None), ("eagle3", pytest.approx(4 / 2))):
        run = report.data[kind]["runs"][0]
        assert set(run) == {"tokens_per_s", "ttft_s", "completed", "requests", "flushed", "accept_length"}
        assert (run["completed"], run["requests"], run["flushed"], run["accept_length"]) == (1, 1, None, accept)
        # counted from the server's start: a first token within the test's own time limit, whatever the load
        assert 0 < report.data[kind]["phases"]["milestones_s"]["first_token"] < 600


class _Polled:
    """What the health wait reads of `SGLangClient`: each /health_generate's own timeout, and when it was asked
    (the test's clock); it answers 503 (still starting) until closed."""

    def __init__(self, clock: FakeClock, asked: list[tuple[float, float]]) -> None:
        self.clock, self.asked, self.closed = clock, asked, False

    def health_generate(self, *, timeout: float) -> int:
        self.asked.append((self.clock.now, timeout))
        return 503

    def close(self) -> None:
        self.closed = True


def test_each_health_poll_waits_what_is_left_of_the_start_budget_between_1_and_30_seconds(monkeypatch):
    clock, asked, made = FakeClock(), [], []
    monkeypatch.setattr(measured, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    monkeypatch.setattr(measured, "SGLangClient",
                        lambda url, timeout, api_key: made.append((url, _Polled(clock, asked))) or made[-1][1])
    server = SimpleNamespace(kind="baseline", exit_failure=lambda: None, base_url=lambda: "http://node:30000")
    client, failure = measured.wait_until_healthy(server, None, SimpleNamespace(timeout=45, request_timeout=5))
    assert (client, failure) == (None, "not healthy after 45s (/health_generate last answered 503)")
    assert asked[0] == (0.0, 30.0)  # 45 s left: at most 30
    assert asked[-1] == (45.0, 1.0)  # none left: at least 1
    assert all(timeout == max(1.0, min(30.0, 45.0 - at)) for at, timeout in asked)
    assert any(1.0 < timeout < 30.0 for _at, timeout in asked)
    assert [(url, polled.closed) for url, polled in made] == [("http://node:30000", True)]  # one client, closed
