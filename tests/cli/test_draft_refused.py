"""A draft that cannot fit its target or its flags is refused before any server starts (issue 41): by `smoke`
(either runner), by `deploy` and by `stacks --check`, wherever the model files are on this machine; one
`error:` line per mismatch, exit 2, and nothing started (no engine is reachable here: a run that got that far
would say so, exit 1)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from clirun import REPO, run_invoke
from draft_fixtures import DRAFT, MAPS, TARGET, model_folder

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
CPU_STACKS = (REPO / "tests" / "fixtures" / "stacks-cpu.yaml").read_text()
MISFIT = {**DRAFT, "vocab_size": 32000, "max_position_embeddings": 2048}


def _models(root: Path) -> Path:
    model_folder(root / "target", TARGET)
    model_folder(root / "draft", MISFIT, MAPS)
    return root


def _lines(root: str, target: str, draft: str, algorithm: str = "EAGLE3", stack: str = "") -> list[str]:
    where = f"stack '{stack}': " if stack else ""
    head = f"error: {where}draft {draft} ({root}/draft) against target {target}: "
    first = [f"{head}architecture LlamaForCausalLMEagle3 is an EAGLE-3 draft, but --speculative-algorithm is "
             f"{algorithm}: SGLang runs it without its auxiliary hidden states and accepts none of its tokens (accept "
             "length 1.0); use EAGLE3"] if algorithm != "EAGLE3" else []
    return [*first,
            f"{head}vocab_size 32000, but the target's vocab_size is 128256 (the draft takes the target's embedding)",
            f"{head}max_position_embeddings 2048, but the server serves a context of 8192 tokens (past its trained "
            "context the draft's proposals are rejected: set --context-length 2048 in serving.extra_args, or use a "
            "draft trained for the context)"]


def _stacks_file(tmp_path: Path, models: Path, algorithm: str = "EAGLE") -> Path:
    path = tmp_path / "stacks.yaml"
    path.write_text(CPU_STACKS + f"""
  draft-misfit:
    inherits: cpu-test
    serving:
      model: /models/target
      speculative:
        algorithm: {algorithm}
        draft_model: /models/draft
        num_steps: 3
        eagle_topk: 1
        num_draft_tokens: 4
      mounts: ["{models}:/models:ro"]
""")
    return path


def test_smoke_in_a_container_refuses_the_draft_through_its_mount(tmp_path):
    models = _models(tmp_path / "m")
    proc = run_invoke("smoke", "--image", "x:1", "--model", "/models/target", "--draft-model", "/models/draft",
                      "--gpus", "0", "--mount", f"{models}:/models:ro", cwd=tmp_path,
                      env={**NO_ENGINE, "SGLSTACK_BUILD_DIR": str(tmp_path / "b")}, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == _lines(str(models), "/models/target", "/models/draft")
    assert not (tmp_path / "b").exists()


def test_smoke_with_the_process_runner_refuses_the_draft_before_a_process_starts(tmp_path):
    models = _models(tmp_path / "m")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python3")
    proc = run_invoke("smoke", "--runner", "process", "--python-env", str(venv), "--model", str(models / "target"),
                      "--draft-model", str(models / "draft"), "--gpus", "0", cwd=tmp_path,
                      env={**NO_ENGINE, "SGLSTACK_BUILD_DIR": str(tmp_path / "b")}, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == _lines(str(models), str(models / "target"), str(models / "draft"))


def test_stacks_check_refuses_a_stack_whose_draft_is_at_hand_and_misfits(tmp_path):
    models = _models(tmp_path / "m")
    proc = run_invoke("stacks", "--check", "--stacks-file", str(_stacks_file(tmp_path, models)), cwd=tmp_path,
                      timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == _lines(str(models), "/models/target", "/models/draft", "EAGLE", "draft-misfit")


def test_deploy_refuses_the_draft_before_preflight_and_the_engine(tmp_path):
    models = _models(tmp_path / "m")
    proc = run_invoke("deploy", "--stack", "draft-misfit", "--stacks-file", str(_stacks_file(tmp_path, models)),
                      "--image", "x:1", cwd=tmp_path, env={**NO_ENGINE, "SGLSTACK_BUILD_DIR": str(tmp_path / "b")},
                      timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == _lines(str(models), "/models/target", "/models/draft", "EAGLE", "draft-misfit")


def test_a_release_refuses_the_draft_before_the_build(tmp_path):
    models = _models(tmp_path / "m")
    proc = run_invoke("build", "--stack", "draft-misfit", "--stacks-file", str(_stacks_file(tmp_path, models)),
                      "--push", "--unsigned", "--dry-run", cwd=tmp_path,
                      env={**NO_ENGINE, "SGLSTACK_BUILD_DIR": str(tmp_path / "b"), "SGLSTACK_SIGNING_KEY": ""},
                      timeout=300)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == _lines(str(models), "/models/target", "/models/draft", "EAGLE", "draft-misfit")


def test_smoke_in_a_container_reads_an_unmounted_model_path_that_is_a_folder_here(tmp_path):
    models = _models(tmp_path / "m")
    proc = run_invoke("smoke", "--image", "x:1", "--model", str(models / "target"), "--draft-model",
                      str(models / "draft"), "--gpus", "0", cwd=tmp_path,
                      env={**NO_ENGINE, "SGLSTACK_BUILD_DIR": str(tmp_path / "b")}, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == _lines(str(models), str(models / "target"), str(models / "draft"))
