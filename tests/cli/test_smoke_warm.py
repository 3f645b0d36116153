"""`invoke smoke --warm-start` through the command line, served by the double as local processes: the cold start
fills the kernel cache, the warm start gets it back from the artifact and compiles nothing (exit 0); a warm-start
gate without a warm start is one line, exit 2, before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_invoke
from smoke_fixtures import DOUBLE_ENV, FAST, make_double_env


def args(env_dir: Path, tmp_path: Path, *more: str) -> list[str]:
    env = {**DOUBLE_ENV, "SGLANG_DOUBLE_KERNELS": "3"}
    return ["smoke", "--runner", "process", "--python-env", str(env_dir), "--model", FAST["model"],
            "--draft-model", FAST["draft_model"], "--gpus", "0", "--timeout", "60", "--num-prompts", "2",
            "--max-new-tokens", "64", "--concurrency", "2", "--no-history", "--report", str(tmp_path / "r.json"),
            *[a for k, v in env.items() for a in ("--env", f"{k}={v}")], *more]


def test_a_warm_start_from_the_command_line(tmp_path, repo_root):
    env_dir = make_double_env(tmp_path / "venv", repo_root)
    done = run_invoke(*args(env_dir, tmp_path, "--warm-start", "--no-warm-compile"), cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for kind in ("baseline", "eagle3"):
        start = next(line for line in lines if line.startswith(f"  {kind} start: cold "))
        assert start.endswith(", 0 new and 0 rewritten kernel cache files")
    report = json.loads((tmp_path / "r.json").read_text())
    assert {k: report["warm"][k]["kernel_cache"]["restore"]["matched"] for k in ("baseline", "eagle3")} == {
        "baseline": True, "eagle3": True}
    assert "## Start by phase" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "build" / "_no-stack" / "kernel-cache" / "store" / "index.json").is_file()


def test_a_warm_gate_without_a_warm_start_is_bad_input(tmp_path, repo_root):
    done = run_invoke(*args(tmp_path / "no-env", tmp_path, "--max-warm-start-s", "30"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: smoke gate max_warm_start_s gates a warm start: pass --warm-start"]


def test_a_cache_store_of_other_things_is_bad_input_in_one_line(tmp_path, repo_root):
    env_dir = make_double_env(tmp_path / "venv", repo_root)
    store = tmp_path / "mine"
    store.mkdir()
    (store / "notes.txt").write_text("the user's own files")
    done = run_invoke(*args(env_dir, tmp_path, "--kernel-cache", "--cache-store", str(store)), cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: --cache-store: kernel cache store {store}: a folder that is neither empty nor an OCI image layout "
        "(no oci-layout file); name a new or empty folder, or a kernel cache store"]
    assert sorted(p.name for p in store.iterdir()) == ["notes.txt"] and not (tmp_path / "r.json").exists()
