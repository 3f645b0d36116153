"""The smoke's measurement phases as they are logged and reported, in process (the SGLang double on a thread,
tests/lib/inthread_sglang): each phase's concurrency and token budget, a cache flush the server refuses, a
server that refuses every request, and a failure's log tail. Outcomes only: no verdict depends on speed."""

from __future__ import annotations

import re
import time

import pytest
from inthread_sglang import ThreadServers, python_env

from sglstack.adapters.process import free_tcp_port
from sglstack.smoke import measured, smoke_options
from sglstack.smoke import server as server_mod
from sglstack.smoke.launch import process_plan

ENV = {"SGLANG_DOUBLE_TOKENS_PER_S": "4000", "SGLANG_DOUBLE_TTFT_S": "0"}


@pytest.fixture
def asked(monkeypatch):
    """Each /generate the smoke asks: its max_new_tokens."""
    tokens: list[int] = []
    real = measured.SGLangClient.generate

    def generate(self, prompt, max_new_tokens):
        tokens.append(max_new_tokens)
        return real(self, prompt, max_new_tokens)

    monkeypatch.setattr(measured.SGLangClient, "generate", generate)
    return tokens


def _measure(tmp_path, measure=measured.measure_server, api_key=None, refuse_flush=False, more_log=(), **overrides):
    settings = {"kinds": "baseline", "concurrency": 1, "num_prompts": 2, "max_new_tokens": 8, **overrides}
    options = smoke_options(None, model="moonshotai/Kimi-K2.5", draft_model="d", gpus=0, runner="process",
                            python_env=str(python_env(tmp_path / "env")), build_dir=str(tmp_path / "build"),
                            report=str(tmp_path / "report.json"), env=ENV, timeout=5, **settings)
    kind = options.kinds[-1]
    plan = process_plan(options, kind, free_tcp_port())
    servers = ThreadServers()
    lines: list[str] = []
    log_path = tmp_path / f"{kind}.log"
    with servers.running_in_thread(plan.argv, env=plan.environment, log_path=log_path) as proc:
        if refuse_flush:
            servers.engines[0].flush_cache = lambda: False  # as the scheduler answers while requests run
        with log_path.open("a") as log:
            log.writelines(f"{line}\n" for line in more_log)
        run = measure(server_mod.ProcessServer(proc, plan, log_path, time.time()), api_key, options, lines.append)
    return run, lines


def test_each_phase_runs_at_its_concurrency_with_the_token_budget(tmp_path, asked):
    run, lines = _measure(tmp_path, concurrency=2, concurrency_levels="1,2,3,4", kinds="baseline,eagle3")
    assert (run.single.concurrency, run.concurrent.concurrency) == (1, 2)
    assert {level: phase.concurrency for level, phase in run.level_phases.items()} == {3: 3, 4: 4}
    assert asked == [8] * (2 + 2 + 2 + 3 + 4)  # warm-up, single stream, concurrency 2, levels 3 and 4
    # Every measured request's verify steps count, the levels' too (not the warm-up's): 11 of 3 steps each.
    assert run.acceptance["requests"] == 11 and run.acceptance["verify_steps"] == 33
    said = [line for line in lines if " concurrency 1: " in line]
    ttft = run.runs[0]["ttft_s"]
    assert said == [f"smoke: eagle3: concurrency 1: {run.runs[0]['tokens_per_s']:.1f} tok/s per stream, "
                    f"TTFT {ttft:.3f}s, 2/2 completed"]  # no flush asked: nothing said of the cache


def test_a_flush_the_server_refuses_is_said(tmp_path, asked):
    run, lines = _measure(tmp_path, refuse_flush=True, flush_cache=True)
    assert [r["flushed"] for r in run.runs] == [False]
    assert next(line for line in lines if "concurrency 1:" in line).endswith(", 2/2 completed, cache NOT flushed")


def test_a_server_that_refuses_every_request_is_measured_as_nothing_completed(tmp_path, asked):
    run, lines = _measure(tmp_path, extra_args="--api-key sk-never-given")
    assert run.started and run.single.completed == 0 and run.single.ttft_s is None
    said = [line for line in lines if "concurrency 1:" in line]
    assert len(said) == 1 and said[0].endswith(" tok/s per stream, TTFT 0.000s, 0/2 completed")


def test_a_failure_names_the_last_five_log_lines_once_each(tmp_path, asked):
    run, lines = _measure(tmp_path, measure=_never_healthy, more_log=[f"line {i}" for i in range(1, 8)])
    assert run.kind == "baseline" and not run.started
    assert run.failure == "it went away; last log lines: line 3 | line 4 | line 5 | line 6 | line 7"
    assert lines[0] == "smoke: baseline: it went away"
    assert [re.sub(r"^  \| ", "", line) for line in lines[-7:]] == [f"line {i}" for i in range(1, 8)]


def test_a_failure_without_a_log_says_only_why(tmp_path, asked):
    class Silent(server_mod.ProcessServer):
        def log_tail(self, lines=15):
            return []

    def gone(server, api_key, options, log):
        silent = Silent(server.proc, server.plan, server.log_path, server.started_at)
        return _never_healthy(silent, api_key, options, log)

    run, lines = _measure(tmp_path, measure=gone)
    assert run.failure == "it went away" and lines == ["smoke: baseline: it went away"]


def _never_healthy(server, api_key, options, log):
    server.exit_failure = lambda: "it went away"
    return measured.measure_server(server, api_key, options, log)
