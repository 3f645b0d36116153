"""Bad input to `invoke smoke` is one line and exit 2, decided before any container or process starts (issue
34). The Docker host named is unreachable: a case that got as far as the engine would say so, exit 1."""

from __future__ import annotations

import pytest
from clirun import run_invoke

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
MODELS = ("--model", "org/m", "--draft-model", "org/d", "--gpus", "0")


@pytest.mark.parametrize(("args", "line"), [
    (("--image", "x:1"), "no model for the smoke in the options: pass --model or --stack"),
    (("--image", "x:1", "--model", "org/m"), "no draft model for the smoke in the options: pass --draft-model or "
                                             "--stack"),
    (MODELS, "smoke runner 'docker': pass --image (a tag, id or repo@sha256:...)"),
    (("--image", "Bad Ref!!", *MODELS),
     "--image 'Bad Ref!!': not an image reference: it has a path component 'Bad Ref!!' that has uppercase letters"),
    (("--image", "x:1\x1b[2J", *MODELS), "--image 'x:1\\x1b[2J': not an image reference: it has a tag that may "
                                         "hold only letters, digits, '_', '.' and '-', and may not start with '.' "
                                         "or '-'"),
    (("--image", "x:1", "--runner", "nope", *MODELS), "smoke runner 'nope': choose from docker, process"),
    (("--runner", "process", *MODELS), "smoke runner 'process': pass --python-env PATH (a venv or prefix "
                                       "holding bin/python3)"),
    (("--image", "x:1", "--python-env", "/venv", *MODELS),
     "--python-env '/venv' is for --runner process (the docker runner serves an image)"),
    (("--image", "x:1", "--concurrency", "0", *MODELS), "smoke option concurrency must be >= 1 (got 0)"),
    (("--image", "x:1", "--concurrency", "9" * 30, *MODELS),
     f"smoke option concurrency must be <= 65536 (got {'9' * 30})"),
    (("--image", "x:1", "--num-prompts", "many", *MODELS), "invalid smoke option: num_prompts 'many' is not a "
                                                           "whole number"),
    (("--image", "x:1", "--timeout", "inf", *MODELS), "invalid smoke option: timeout 'inf' is not a finite number"),
    (("--image", "x:1", "--min-speedup", "fast", *MODELS), "invalid gate override: min_speedup 'fast' is not a "
                                                           "number"),
    (("--image", "x:1", "--env", "NOEQ", *MODELS), "--env #1: expected KEY=VALUE"
        " (it has no '='; not shown, as it may be a secret)"),
    (("--image", "x:1", "--label", "bad", *MODELS), "--label #1: expected KEY=VALUE"
        " (it has no '='; not shown, as it may be a secret)"),
    (("--image", "x:1", "--model", "org/m", "--draft-model", "org/d", "--gpus", "1", "--tp", "2"),
     "--tp 2 needs at least 2 GPUs, but --gpus is 1"),
])
def test_bad_smoke_input_is_one_line_exit_2_before_the_engine(tmp_path, args, line):
    proc = run_invoke("smoke", *args, cwd=tmp_path, env={**NO_ENGINE, "SGLSTACK_BUILD_DIR": str(tmp_path / "b")},
                      timeout=300)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert not (tmp_path / "b").exists()


def test_a_missing_mount_folder_and_an_unwritable_report_are_bad_input(tmp_path):
    missing = tmp_path / "nope"
    proc = run_invoke("smoke", "--image", "x:1", *MODELS, "--mount", f"{missing}:/x", cwd=tmp_path, env=NO_ENGINE,
                      timeout=300)
    assert (proc.returncode, proc.stderr) == (
        2, f"error: --mount '{missing}:/x': {missing} does not exist (Docker would create it as root); create it "
           f"first\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_invoke("smoke", "--image", "x:1", *MODELS, "--report", f"{blocker}/r.json", cwd=tmp_path,
                      env=NO_ENGINE, timeout=300)
    assert (proc.returncode, proc.stderr) == (
        2, f"error: smoke report (--report) {blocker}/r.json: cannot be written ({blocker} is not a folder)\n")


def test_a_smoke_that_reaches_the_engine_is_not_bad_input(tmp_path):
    proc = run_invoke("smoke", "--image", "x:1", *MODELS, cwd=tmp_path,
                      env={**NO_ENGINE, "SGLSTACK_BUILD_DIR": str(tmp_path / "b")}, timeout=300)
    assert proc.returncode == 1 and proc.stderr.startswith("error: cannot reach the Docker engine at ")


@pytest.mark.parametrize(("given", "line"), [
    ("HF_TOKEN:hf-9f3c1e7dSECRET", "--env #2: expected KEY=VALUE (it has no '='; not shown, as it may be a secret)"),
    ("hf-9f3c1e7dSECRET", "--env #2: expected KEY=VALUE (it has no '='; not shown, as it may be a secret)"),
    ("=hf-9f3c1e7dSECRET", "--env '=…': expected KEY=VALUE"),
])
def test_a_malformed_env_value_is_refused_without_showing_it(tmp_path, given, line):
    """`--env HF_TOKEN:hf_...` (a typo for '=') printed the token in the refusal."""
    proc = run_invoke("smoke", "--image", "x:1", *MODELS, "--env", "A=1", "--env", given, cwd=tmp_path, env=NO_ENGINE)
    assert (proc.returncode, proc.stderr.strip()) == (2, f"error: {line}")
    assert "SECRET" not in proc.stdout + proc.stderr
