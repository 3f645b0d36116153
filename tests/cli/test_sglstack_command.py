"""The installed `sglstack` command: every task, from any folder, on the stacks.yaml it is pointed at or finds.

Run as a user would, from a temporary folder outside the checkout on a copied stacks.yaml: `python -m
sglstack.cli`, and the console script from the environment's bin/ where the install made it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "sglstack"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SGLSTACK_BUILD_DIR", "SGLSTACK_STACKS_FILE")}
    return {**env, "PYTHONPATH": str(REPO), "COLUMNS": "200", **extra}


def sglstack(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglstack.cli", *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=300, env=_env(**env))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder of its own (a copy of the checkout's stacks.yaml) with a folder below it."""
    root = tmp_path / "proj"
    (root / "deep" / "er").mkdir(parents=True)
    shutil.copyfile(REPO / "stacks.yaml", root / "stacks.yaml")
    return root


def test_the_console_script_is_declared():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"sglstack": "sglstack.cli.main:main"}


def test_version_is_the_installed_one(tmp_path):
    done = sglstack("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"sglstack {metadata.version('sglstack')}\n", "")


def test_the_stacks_file_is_found_in_a_folder_above(project):
    done = sglstack("stacks", cwd=project / "deep" / "er")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"stacks in {project / 'stacks.yaml'}"


def test_build_outputs_go_to_the_project_not_the_current_folder(project):
    here = project / "deep"
    done = sglstack("render", "--stack", "cu129", cwd=here)
    assert done.returncode == 0, done.stderr
    assert (project / "build" / "cu129" / "Dockerfile").is_file()
    assert sorted(p.name for p in here.iterdir()) == ["er"]


def test_a_stacks_file_pointed_at_from_elsewhere(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = sglstack("render", "--stack", "cu129", "--stacks-file", "../proj/stacks.yaml", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert (project / "build" / "cu129" / "Dockerfile").is_file()
    assert list(elsewhere.iterdir()) == []


def test_the_stacks_file_given_before_the_task_is_every_tasks_project(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = sglstack("--stacks-file", str(project / "stacks.yaml"), "render", "--stack", "cu129", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert (project / "build" / "cu129" / "Dockerfile").is_file()
    assert list(elsewhere.iterdir()) == []


def test_no_stacks_file_anywhere_is_one_line_naming_where_it_looked(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = sglstack("stacks", cwd=empty)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"error: stacks: no stacks.yaml in {empty} or any folder above it "
                           "(give --stacks-file PATH, or run from the project's folder)\n")


def test_a_task_that_reads_no_matrix_needs_no_stacks_file(tmp_path):
    done = sglstack("diff", "-h", cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == ""
    assert sglstack("--list", cwd=tmp_path).returncode == 0


def test_shell_completion(tmp_path):
    script = sglstack("--print-completion-script", "bash", cwd=tmp_path)
    assert script.returncode == 0 and "sglstack --complete" in script.stdout
    tasks = sglstack("--complete", "--", "sglstack", cwd=tmp_path)
    assert tasks.returncode == 0
    assert {"render", "patches.apply", "registry.up"} <= set(tasks.stdout.split())
    flags = sglstack("--complete", "--", "sglstack", "render", "--st", cwd=tmp_path)
    assert {"--stack", "--stacks-file"} <= set(flags.stdout.split())


@pytest.mark.skipif(not SCRIPT.is_file(), reason="the environment was installed before the console script "
                                                 "existed: pip install -e . makes it")
def test_the_console_script_from_the_environments_bin(project):
    done = subprocess.run([str(SCRIPT), "stacks"], cwd=project / "deep", capture_output=True, text=True,
                          check=False, timeout=300, env=_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"stacks in {project / 'stacks.yaml'}"


def test_h_on_every_task_of_the_command_is_its_help(tmp_path, monkeypatch, capsys):
    """The same collection as `invoke` in the checkout: every task's help, exit 0, from a folder of no project."""
    from sglstack.cli.main import program

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SGLSTACK_STACKS_FILE", raising=False)
    tasks = sorted(program().namespace.task_names)
    assert {"render", "patches.apply", "registry.up"} <= set(tasks)
    for task in tasks:
        with pytest.raises(SystemExit) as exited:
            program().run(["sglstack", task, "-h"])
        out = capsys.readouterr()
        assert (exited.value.code or 0, out.err) == (0, ""), task
        assert out.out.startswith(f"Usage: sglstack [--core-opts] {task} "), task


@pytest.mark.parametrize(("argv", "line"), [
    (["zzzz"], "error: unknown task 'zzzz' (`sglstack --list` lists them)"),
    (["diff", "a"], "error: diff: missing argument AFTER (usage: sglstack diff BEFORE AFTER [--options])"),
    (["--stacks-file"], "error: option --stacks-file needs a value"),
])
def test_a_refusal_names_the_command_that_was_typed(tmp_path, argv, line):
    done = sglstack(*argv, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
