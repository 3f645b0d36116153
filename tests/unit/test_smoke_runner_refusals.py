"""What `run_smoke` refuses before any server starts, in process (the SGLang double on a thread and the docker
runner's seam, tests/lib/inthread_sglang): a draft path the process runner would not find, and a bind source
Docker would create as root. A refusal starts nothing; a baseline-only run never looks at the draft."""

from __future__ import annotations

import re

import pytest
from inthread_sglang import python_env, serve_in_threads

from sglstack.core.errors import SglstackError
from sglstack.smoke import run_smoke, smoke_options
from sglstack.smoke import runner as runner_mod
from sglstack.smoke import server as server_mod

ENV = {"SGLANG_DOUBLE_TOKENS_PER_S": "4000", "SGLANG_DOUBLE_TTFT_S": "0"}


@pytest.fixture
def servers(monkeypatch):
    return serve_in_threads(monkeypatch)


def _options(tmp_path, **more):
    return smoke_options(None, model="m", tp=1, gpus=0, timeout=60, concurrency=1, num_prompts=1, max_new_tokens=4,
                         env=ENV, build_dir=str(tmp_path / "build"), report=str(tmp_path / "report.json"),
                         no_history=True, **more)


def test_a_draft_path_the_process_runner_would_not_find_is_refused_before_a_server_starts(servers, tmp_path):
    draft = tmp_path / "no-such-draft"
    options = _options(tmp_path, runner="process", python_env=str(python_env(tmp_path / "env")), draft_model=str(draft))
    with pytest.raises(SglstackError, match=re.escape(f"draft {draft}: no folder {draft} on this machine")):
        run_smoke(None, None, options, log=lambda _line: None)
    assert servers.started == []


def test_a_baseline_only_run_never_looks_at_the_draft(servers, tmp_path):
    options = _options(tmp_path, runner="process", python_env=str(python_env(tmp_path / "env")),
                       draft_model=str(tmp_path / "no-such-draft"), kinds="baseline")
    assert run_smoke(None, None, options, log=lambda _line: None).data["verdict"] == "pass"


def test_a_bind_source_that_is_not_there_is_refused_before_a_container_starts(monkeypatch, tmp_path):
    started = []
    monkeypatch.setattr(server_mod, "running_container", lambda *a, **k: started.append(a))
    monkeypatch.setattr(runner_mod, "open_what_to_serve", lambda *args: started.append(args))
    options = _options(tmp_path, draft_model="d", mounts=[f"{tmp_path / 'no-models'}:/models:ro"])
    said = "does not exist (Docker would create it as root); create it first"
    with pytest.raises(SglstackError, match=re.escape(said)):
        run_smoke(None, "sglstack/cpu:test", options, log=lambda _line: None)
    assert started == []
