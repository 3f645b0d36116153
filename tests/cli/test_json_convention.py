"""One `--json` convention for every task that reports (issue 36; README, "Tasks"): `--json` prints the
report as JSON alone on stdout, `--json-out PATH` writes the same document to PATH, checked before any work
(exit 2), `-` is stdout; the old form `--json PATH` is one `error:` line naming `--json-out`."""

from __future__ import annotations

import json

import pytest
from clirun import REPO, run_invoke, task_collection

# Every task of the collection is one or the other: a new task must say which it is.
REPORTING = {
    "stacks", "lock", "diff", "build", "sbom", "verify-image", "coverage", "size", "releases", "upgrade", "smoke",
    "bisect", "preflight", "status", "patches.list", "patches.check", "patches.verify",
}
# Tasks that act (write files, move tags, start or stop services) and say what they did, with no report.
ACTIONS = {
    "render", "bake", "publish", "deploy", "logs", "undeploy", "rollback", "test", "registry.up", "registry.down",
    "registry.cleanup", "patches.apply", "seed-base", "publish-index",
}
# The fewest arguments each reporting task takes past invoke's parser (checked: none is looked at first).
REQUIRED = {
    "stacks": (), "lock": ("--stack", "cu130"), "diff": ("a", "b"), "build": ("--stack", "cu130", "--dry-run"),
    "sbom": ("reg.example/x:y",), "verify-image": ("reg.example/x:y",), "coverage": ("--stack", "cu130"),
    "size": ("--stack", "cu130"), "releases": (), "upgrade": ("--stack", "cu130", "--sglang", "0.5.10"),
    "smoke": ("--image", "x:y"), "bisect": ("--stack", "cu130", "--good", "0.5.9", "--bad", "0.5.10"),
    "preflight": ("--stack", "cu130"), "status": (), "patches.list": (),
    "patches.check": ("--stack", "cu130"), "patches.verify": ("--root", "tree", "--stack", "cu130"),
}


def _tasks() -> dict[str, object]:
    ns = task_collection()
    return {name: ns[name] for name in ns.task_names}


def test_every_task_is_reporting_or_an_action():
    assert set(_tasks()) == REPORTING | ACTIONS
    assert set(REQUIRED) == REPORTING


def test_every_reporting_task_has_json_and_json_out_and_no_other_task_has_them():
    for name, task in _tasks().items():
        args = {arg.name: arg for arg in task.get_arguments()}
        if name in REPORTING:
            assert args["json"].kind is bool, name  # a flag: it takes no value
            assert args["json_out"].kind is str, name
            assert args["json"].names == ("json",) and args["json_out"].names == ("json-out",), name
        else:
            assert not {"json", "json_out"} & set(args), name


@pytest.mark.parametrize("task", sorted(REPORTING))
def test_a_json_out_with_no_folder_is_refused_before_any_work(tmp_path, task):
    """The arguments are not looked at (no such image, root or registry): the path is refused first."""
    target = tmp_path / "no" / "r.json"
    proc = run_invoke(task, *REQUIRED[task], "--json-out", str(target), cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (
        2, "", [f"error: {task}: --json-out {target}: its folder does not exist"])


@pytest.mark.parametrize("args", [("stacks", "--json", "out.json"), ("diff", "a", "b", "--json", "out.json"),
                                  ("coverage", "--stack", "cu130", "--json=out.json")])
def test_the_old_form_says_to_use_json_out(tmp_path, args):
    proc = run_invoke(*args, cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (2, "", [
        f"error: {args[0]}: option --json takes no value: it prints the JSON report on stdout; to write it to a "
        "file use --json-out out.json"])
    assert not (tmp_path / "out.json").exists()


# Tasks that report offline, with no engine or index: their JSON read back whole.
OFFLINE = {
    "stacks": (("stacks",), ["file", "stacks"]),
    "patches.list": (("patches.list",), ["patches"]),
    # One stack no test deploys: status lists the engine's containers, which tests running beside this one
    # start and stop (their uptimes change between the calls compared here).
    "status": (("status", "--stack", "cu129"), ["deployments", "unreadable_record_lines"]),
    "build --dry-run": (("build", "--stack", "cu130", "--dry-run"), ["plan", "push", "stack"]),
    "diff": (("diff", str(REPO / "locks" / "cu129.txt"), str(REPO / "locks" / "cu130.txt")),
             ["a", "b", "base", "config_hash", "identical", "labels", "packages", "patches", "pins", "platform",
              "sglang", "sglang_commits", "size", "unknown"]),
}


@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_json_is_the_json_alone_and_json_out_the_same_document(tmp_path, name):
    args, keys = OFFLINE[name]
    env = {"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    alone = run_invoke(*args, "--json", cwd=REPO, env=env, timeout=120)
    assert alone.returncode == 0, alone.stderr
    document = json.loads(alone.stdout)  # the whole of stdout: nothing before or after it
    assert sorted(document) == keys
    out = tmp_path / "report.json"
    both = run_invoke(*args, "--json", "--json-out", str(out), cwd=REPO, env=env, timeout=120)
    assert both.returncode == 0, both.stderr
    assert json.loads(out.read_text()) == json.loads(both.stdout) == document
    file_only = run_invoke(*args, "--json-out", str(out), cwd=REPO, env=env, timeout=120)
    assert json.loads(out.read_text()) == document
    assert file_only.stdout.strip() and "{" not in file_only.stdout.splitlines()[0]  # the table, as without it
    dash = run_invoke(*args, "--json-out", "-", cwd=REPO, env=env, timeout=120)
    assert json.loads(dash.stdout) == document and not (REPO / "-").exists()


def test_the_stacks_document(tmp_path):
    proc = run_invoke("stacks", "--json", cwd=REPO, timeout=120)
    stacks = {s["stack"]: s for s in json.loads(proc.stdout)["stacks"]}
    assert stacks["cu130"]["cuda"] == "13.0.1" and stacks["cu130"]["patches"] == ["kimi-k25-eagle3"]


def test_build_json_without_dry_run_is_refused(tmp_path):
    proc = run_invoke("build", "--stack", "cu130", "--json", cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (2, "", [
        "error: build: --json and --json-out report the plan of --dry-run (a build reports as it goes)"])


def test_smoke_json_and_bisect_exit_exclude_each_other(tmp_path):
    proc = run_invoke("smoke", "--image", "x:y", "--bisect-exit", "1", "--json", cwd=tmp_path, timeout=120)
    assert proc.stderr.splitlines() == ["error: smoke: give --json or --bisect-exit, not both"] \
        or proc.stderr.splitlines() == ["error: smoke: give --bisect-exit or --json, not both"]


def test_smoke_json_is_the_report_alone_on_stdout(tmp_path, repo_root):
    """The smoke prints its progress and verdict: under --json they go to stderr, the report to stdout."""
    from smoke_fixtures import DOUBLE_ENV, FAST, make_double_env  # a venv: only this test needs it

    env_dir = make_double_env(tmp_path / "venv", repo_root)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in FAST.items()]
    envs = [x for k, v in DOUBLE_ENV.items() for x in ("--env", f"{k}={v}")]
    out = tmp_path / "copy.json"
    proc = run_invoke("smoke", "--runner", "process", "--python-env", str(env_dir), *flags, *envs, "--no-history",
                      "--skip-preflight", "--report", str(tmp_path / "report.json"), "--json", "--json-out", str(out),
                      cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document == json.loads(out.read_text()) == json.loads((tmp_path / "report.json").read_text())
    assert "smoke PASS" in proc.stderr
