"""`smoke --runner process`: the SGLang double served as local processes from a Python environment.

The environment is a real venv holding the double (tests/doubles/sglang-double) on its path, run by the
production code path (`run_smoke`, or `invoke smoke` in a subprocess). Every test checks that no process
of the servers is left afterwards, by a marker in their environment.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clirun import REPO, interrupt_when, start_invoke
from smoke_fixtures import DOUBLE_ENV, FAST, make_double_env

from sglstack.adapters import process as process_adapter
from sglstack.core.errors import SmokeError
from sglstack.smoke import run_smoke, smoke_options
from sglstack.smoke.launch import process_plan
from sglstack.smoke.outputs import server_log_path

MARKER = "SGLSTACK_TEST_PROCESS_MARKER"


@pytest.fixture(scope="session")
def double_env(tmp_path_factory, repo_root) -> Path:
    return make_double_env(tmp_path_factory.mktemp("double-env") / "venv", repo_root)


@pytest.fixture
def marker():
    """A value only this test's servers carry in their environment; none may be left at the end."""
    value = f"t-{secrets.token_hex(4)}"
    yield value
    left = _processes_with(value)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"the process runner left processes behind: {left}"


def _processes_with(value: str) -> list[int]:
    needle = f"{MARKER}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and _state(entry) not in ("Z", "X"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _state(entry: Path) -> str:
    return (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]


def _options(tmp_path: Path, env_dir: Path, marker: str, env: dict[str, str] | None = None, **overrides):
    return smoke_options(
        None,
        env={**DOUBLE_ENV, MARKER: marker, **(env or {})},
        build_dir=str(tmp_path / "build"),
        report=str(tmp_path / "report.json"),
        runner="process",
        python_env=str(env_dir),
        **{**FAST, **overrides},
    )


def test_process_runner_measures_gates_and_records_the_runner(double_env, marker, tmp_path):
    # Two workers per server, like SGLang's scheduler and detokenizer: they must go with the server.
    options = _options(tmp_path, double_env, marker, env={"SGLANG_DOUBLE_WORKERS": "2"})
    report = run_smoke(None, None, options, log=lambda _: None)
    data = report.data
    assert report.passed, data["failures"]
    assert data["baseline"]["tokens_per_s"] > 0 and data["eagle3"]["tokens_per_s"] > 0
    assert data["agreement"] == 1.0 and data["accept_length"] > 2
    assert data["image"]["runner"] == "process" and data["image"]["id"].startswith("env-sha256:")
    assert data["image"]["digest"] is None  # an environment has no registry digest
    assert data["runner"]["kind"] == "process" and data["runner"]["python_env"] == str(double_env)
    # The stack's exact serving argv, with the environment's interpreter in place of `python3`.
    eagle = data["commands"]["eagle3"]
    assert eagle[0] == str(double_env / "bin" / "python3") and eagle[1:3] == ["-m", "sglang.launch_server"]
    # The port each server was really started on (a free one per run), as the server itself logged it.
    port = eagle[eagle.index("--port") + 1]
    assert f"'port': {port}" in server_log_path(tmp_path / "report.json", "eagle3").read_text()
    assert "--speculative-algorithm" in eagle and "--speculative-algorithm" not in data["commands"]["baseline"]
    # Each server's output is kept beside the report: the double logged its workers and its readiness.
    log = server_log_path(tmp_path / "report.json", "eagle3").read_text()
    assert "started worker process" in log and "fired up and ready" in log
    history = [json.loads(line) for line in (tmp_path / "build" / "_no-stack" / "smoke-history.jsonl").open()]
    assert [h["runner"] for h in history] == ["process"]
    assert history[0]["fingerprint"]["runner"] == "process"
    assert "process runner" in (tmp_path / "report.md").read_text()
    assert _processes_with(marker) == []


def test_workers_that_ignore_sigterm_are_killed_when_each_server_ends(double_env, marker, tmp_path, monkeypatch):
    """A worker stuck in a CUDA call ignores SIGTERM: the group's SIGKILL after the grace ends it (the marker
    fixture then finds no process of either server left), and both servers were measured."""
    monkeypatch.setattr(process_adapter, "TERM_GRACE_S", 1.0)  # the production path, a shorter grace
    env = {"SGLANG_DOUBLE_WORKERS": "2", "SGLANG_DOUBLE_WORKERS_IGNORE_TERM": "1"}
    report = run_smoke(None, None, _options(tmp_path, double_env, marker, env=env), log=lambda _: None)
    assert report.passed, report.data["failures"]
    assert report.data["baseline"]["tokens_per_s"] > 0 and report.data["eagle3"]["tokens_per_s"] > 0
    assert server_log_path(tmp_path / "report.json", "baseline").read_text().count("started worker process") == 2
    assert _processes_with(marker) == []


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(marker):
    script = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
              "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(3600)']); "
              "time.sleep(3600)")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True, stdout=subprocess.PIPE,
                            env={**os.environ, MARKER: marker})
    assert proc.stdout is not None and proc.stdout.readline() == b"1\n"  # the grandchild is up
    assert len(_processes_with(marker)) == 2
    process_adapter.end_process_group(proc, grace_s=0.5)
    assert proc.returncode == -signal.SIGKILL  # SIGTERM was ignored: only the SIGKILL ended the leader
    assert _processes_with(marker) == []


def test_crash_at_start_fails_fast_with_the_log_tail(double_env, marker, tmp_path):
    options = _options(tmp_path, double_env, marker, env={"SGLANG_DOUBLE_CRASH_AT_START": "speculative"})
    lines: list[str] = []
    started = time.monotonic()
    report = run_smoke(None, None, options, log=lines.append)
    assert time.monotonic() - started < 30
    assert report.data["baseline"]["started"] and report.data["baseline"]["tokens_per_s"] > 0
    failure = report.data["eagle3"]["failure"]
    assert failure.startswith("the server exited with code 1 before it was healthy")
    assert "CUDA out of memory" in failure
    assert any(line.startswith("eagle3: the server exited") for line in report.failures)


def test_the_process_plan_is_the_serving_argv_on_the_picked_port(double_env, tmp_path):
    options = _options(tmp_path, double_env, "unused", env={"PATH": "/opt/tools/bin"})
    plan = process_plan(options, "baseline", 41234, host_env={"PATH": "/usr/bin", "HF_TOKEN": "t"})
    argv = list(plan.argv)
    assert argv[0] == str(double_env / "bin" / "python3")
    assert argv[argv.index("--port") + 1] == "41234" and argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--model-path") + 1] == FAST["model"]
    assert plan.environment["PATH"] == f"{double_env / 'bin'}{os.pathsep}/opt/tools/bin"
    assert plan.environment["HF_TOKEN"] == "t"


CALLER_SECRETS = {"SGLSTACK_SIGNING_KEY": "-----BEGIN PRIVATE KEY-----\nMC4CAQAw\n-----END PRIVATE KEY-----\n",
                  "REGISTRY_PASSWORD": "reg-pw", "AWS_SECRET_ACCESS_KEY": "aws-secret", "GITHUB_TOKEN": "gh-tok",
                  "NCCL_API_KEY": "not-nccl's", "PYTHONPATH": "/caller/site", "SGLANG_DISABLE_THIS": "caller-sglang",
                  "DOCKER_HOST": "unix:///caller.sock", "SSH_AUTH_SOCK": "/tmp/agent"}


def test_the_process_server_gets_only_the_declared_and_the_runtime_environment(double_env, tmp_path):
    """The caller's whole environment used to reach the server (which runs the model's own code)."""
    options = _options(tmp_path, double_env, "m-1", env={"MY_KEY": "${VAULT_KEY}", "PLAIN": "p"})
    host = {**CALLER_SECRETS, "PATH": "/usr/bin", "HOME": "/home/ci", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "CUDA_VISIBLE_DEVICES": "0,1", "NVIDIA_DRIVER_CAPABILITIES": "compute", "NCCL_DEBUG": "INFO",
            "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "HF_HOME": "/data/hf", "TMPDIR": "/scratch",
            "HF_TOKEN": "hf-t", "VAULT_KEY": "v-1"}
    plan = process_plan(options, "baseline", 41234, host_env=host)
    assert dict(plan.environment) == {
        "PATH": f"{double_env / 'bin'}{os.pathsep}/usr/bin", "HOME": "/home/ci", "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "0,1", "NVIDIA_DRIVER_CAPABILITIES": "compute",
        "NCCL_DEBUG": "INFO", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "HF_HOME": "/data/hf", "TMPDIR": "/scratch",
        "HF_TOKEN": "hf-t", **DOUBLE_ENV, MARKER: "m-1", "MY_KEY": "v-1", "PLAIN": "p"}


def _env_dumping(env_dir: Path, dump: Path) -> Path:
    """The venv with its python3 a wrapper that writes its environment to `dump`, then runs the real one."""
    python = env_dir / "bin" / "python3"
    real = env_dir / "bin" / "python3.real"
    if not real.exists():
        python.rename(real)
    python.write_text(f"#!/bin/sh\nenv -0 > '{dump}'\nexec '{real}' \"$@\"\n")
    python.chmod(0o755)
    return env_dir


def test_a_served_process_does_not_see_the_callers_secrets(marker, tmp_path, repo_root, monkeypatch):
    dump = tmp_path / "server.env"
    env_dir = _env_dumping(make_double_env(tmp_path / "venv", repo_root), dump)
    for name, value in CALLER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("VAULT_KEY", "v-1")
    options = _options(tmp_path, env_dir, marker, env={"MY_KEY": "${VAULT_KEY}", "PLAIN": "p"}, kinds=("baseline",))
    report = run_smoke(None, None, options, log=lambda _: None)
    assert report.data["baseline"]["tokens_per_s"] > 0, report.data["baseline"]
    seen = dict(item.split("=", 1) for item in dump.read_text().split("\0") if item)
    assert not set(CALLER_SECRETS) & set(seen)
    assert {k: seen.get(k) for k in ("MY_KEY", "PLAIN", MARKER)} == {"MY_KEY": "v-1", "PLAIN": "p", MARKER: marker}
    assert seen["PATH"].split(os.pathsep)[0] == str(env_dir / "bin")
    assert not [v for v in CALLER_SECRETS.values() if v in dump.read_text()]


def test_a_servers_api_key_is_hidden_in_its_kept_log_the_failure_and_the_report(double_env, marker, tmp_path,
                                                                              monkeypatch):
    """SGLang logs its server_args, API key included: the kept logs, the log tail and the report held it."""
    monkeypatch.setenv("VAULT_API_KEY", "sk-live-7d1e")
    options = _options(tmp_path, double_env, marker, env={"SGLANG_DOUBLE_CRASH_AT_START": "speculative"},
                       extra_args=("--api-key", "${VAULT_API_KEY}"))
    lines: list[str] = []
    report = run_smoke(None, None, options, log=lines.append)
    assert report.data["baseline"]["tokens_per_s"] > 0  # the client used the key the server was given
    assert report.data["eagle3"]["failure"].startswith("the server exited with code 1 before it was healthy")
    baseline_log = server_log_path(tmp_path / "report.json", "baseline").read_text()
    assert "'api_key': '***'" in baseline_log
    shown = {"log": "\n".join(lines), "report": (tmp_path / "report.json").read_text(), "baseline": baseline_log,
             "eagle3": server_log_path(tmp_path / "report.json", "eagle3").read_text()}
    assert {name: "sk-live-7d1e" in text for name, text in shown.items()} == dict.fromkeys(shown, False)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"runner": "slurm"}, "smoke runner 'slurm': choose from docker, process"),
        ({"runner": "process", "python_env": None}, "smoke runner 'process': pass --python-env PATH"),
        ({"runner": "docker"}, "is for --runner process"),
    ],
)
def test_runner_options_are_checked_before_anything_starts(tmp_path, overrides, message):
    settings = {"runner": "process", "python_env": str(tmp_path), **overrides}
    with pytest.raises(SmokeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        smoke_options(None, **FAST, **{k: v for k, v in settings.items() if v is not None})


def test_a_python_env_without_an_interpreter_is_one_line_before_any_server(tmp_path, marker):
    options = _options(tmp_path, tmp_path / "no-such-env", marker)
    with pytest.raises(SmokeError, match=r"--python-env '.*no-such-env': no such folder"):
        run_smoke(None, None, options, log=lambda _: None)
    (tmp_path / "empty").mkdir()
    options = _options(tmp_path, tmp_path / "empty", marker)
    with pytest.raises(SmokeError, match="no executable bin/python3 in it"):
        run_smoke(None, None, options, log=lambda _: None)
    assert not (tmp_path / "report.json").exists() and not (tmp_path / "build").exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signal_ends_the_whole_server_process_group(signum, double_env, marker, tmp_path, repo_root):
    """`timeout`/CI (SIGTERM) and Ctrl-C end the smoke with the server and all its workers gone."""
    args = [
        "--runner", "process", "--python-env", str(double_env), "--model", FAST["model"],
        "--draft-model", FAST["draft_model"], "--gpus", "0", "--timeout", "120", "--num-prompts", "4",
        "--max-new-tokens", "16", "--report", str(tmp_path / "report.json"),
        *[arg for key, value in {**DOUBLE_ENV, MARKER: marker, "SGLANG_DOUBLE_WORKERS": "2",
                                 "SGLANG_DOUBLE_NEVER_HEALTHY": "1"}.items() for arg in ("--env", f"{key}={value}")],
    ]
    assert repo_root == REPO
    proc = start_invoke("smoke", *args, cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})
    out, err = interrupt_when(proc, lambda: len(_processes_with(marker)) >= 3, signum,
                              what="the server and its two workers")
    assert proc.returncode == 128 + signum, out + err
    assert f"interrupted ({signum.name})" in err and "Traceback" not in err
    assert _processes_with(marker) == []
    assert not (tmp_path / "report.json").exists()


def test_each_runner_refuses_the_other_runners_input_before_anything_starts(double_env, tmp_path, marker):
    with pytest.raises(SmokeError, match="smoke runner 'process' serves --python-env, not an image"):
        run_smoke(None, "some/image:tag", _options(tmp_path, double_env, marker), log=lambda _: None)
    docker_options = smoke_options(None, **FAST, report=str(tmp_path / "report.json"))
    with pytest.raises(SmokeError, match="smoke runner 'docker': pass --image"):
        run_smoke(None, None, docker_options, log=lambda _: None)
    assert not (tmp_path / "report.json").exists()
