"""Cases an adversarial newcomer found after issues 36 and 43 were merged: each one failed before its fix.

Each asserts the whole outcome: exit code, the one `error:` line (or the help), and an empty stdout.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from clirun import REPO, run_invoke

from sglstack.config.matrix import DEFAULT_PATCHES_DIR

MATRIX = """\
stacks:
  cu129:
    base_image: debian:bookworm-slim
    sglang: {version: 0.5.9}
    serving: {model: org/model}
    patches: [kimi-k25-eagle3]
  cu130:
    inherits: cu129
"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "stacks.yaml").write_text(MATRIX)
    (tmp_path / "root" / "sglang").mkdir(parents=True)
    return tmp_path


def _run(project, *args):
    return run_invoke(*args, cwd=project, env={"SGLSTACK_BUILD_DIR": str(project / "build")}, timeout=120)


@pytest.mark.parametrize("args", [
    ["bake", "-h", "--stack"],
    ["bake", "--help", "-s"],
    ["smoke", "-h", "--mount"],
    ["smoke", "--mount", "--help"],
])
def test_help_wins_over_a_repeatable_option_without_its_value(project, args):
    proc = _run(project, *args)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith(f"Usage: inv[oke] [--core-opts] {args[0]} ")


@pytest.mark.parametrize(("args", "line"), [
    (["patches.apply", "--root", "root", "--patch", "kimi-k25-eagl3"],
     "error: patch 'kimi-k25-eagl3': unknown patch (no {patches}/kimi-k25-eagl3/patch.toml; known: "
     "kimi-k25-eagle3); did you mean 'kimi-k25-eagle3'?"),
    (["patches.verify", "--root", "root", "--patch", "kimi-k25-eagl3"],
     "error: patch 'kimi-k25-eagl3': unknown patch (no {patches}/kimi-k25-eagl3/patch.toml; known: "
     "kimi-k25-eagle3); did you mean 'kimi-k25-eagle3'?"),
])
def test_an_unknown_patch_id_is_bad_input(project, args, line):
    proc = _run(project, *args, "--stacks-file", "stacks.yaml")
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line.format(patches=DEFAULT_PATCHES_DIR) + "\n", "")


@pytest.mark.parametrize(("args", "line"), [
    # an old spelling that another task renamed points to this task's own name for that meaning
    (["deploy", "--stack", "cu130", "--key", "k.pub"],
     "error: deploy: unknown option '--key'; did you mean '--verify-key'?"),
    (["render", "--stack", "cu130", "--key", "k.pub"],
     "error: render: unknown option '--key'; did you mean '--verify-key'?"),
    (["patches.check", "--sglang-version", "0.5.9"],
     "error: patches.check: unknown option '--sglang-version'; did you mean '--sglang'?"),
    (["patches.verify", "--root", "root", "--sglang-version", "0.5.9"],
     "error: patches.verify: unknown option '--sglang-version'"),  # it has no --sglang; never core --version
    (["rollback", "--stack", "cu130", "--no-gpus"], "error: rollback: unknown option '--no-gpus'"),
    (["smoke", "--repeats", "3"], "error: smoke: unknown option '--repeats'; did you mean '--runs'?"),
    (["bisect", "--stack", "cu130", "--good", "a", "--bad", "b", "--bisect-metric", "speedup"],
     "error: bisect: unknown option '--bisect-metric'; did you mean '--metric'?"),
    # an action asked for JSON: before, "did you mean '--on'?"
    (["deploy", "--stack", "cu130", "--json"],
     "error: deploy: unknown option '--json' (deploy is an action: it prints no report as JSON)"),
    (["render", "--stack", "cu130", "--json-out=x.json"],
     "error: render: unknown option '--json-out' (render is an action: it prints no report as JSON)"),
    # a near-miss is the task's own option, never one of invoke's core flags (`--pty`, `--version`)
    (["deploy", "--stack", "cu130", "--pt", "1"], "error: deploy: unknown option '--pt'; did you mean '--port'?"),
])
def test_an_unknown_option_suggests_the_tasks_own_option(project, args, line):
    proc = _run(project, *args)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")


@pytest.mark.parametrize(("opt", "start", "end"), [
    ("runz=3", "error: unknown smoke option(s): runz (known: ", "); did you mean 'runs'?"),
    ("num_prompt=3", "error: unknown smoke option(s): num_prompt (known: ", "); did you mean 'num_prompts'?"),
])
def test_an_unknown_smoke_opt_key_gets_did_you_mean(project, opt, start, end):
    proc = _run(project, "build", "--stack", "cu130", "--push", "--unsigned", "--smoke-opt", opt,
                "--stacks-file", "stacks.yaml", "--dry-run")
    assert (proc.returncode, proc.stdout, len(proc.stderr.splitlines())) == (2, "", 1)
    assert proc.stderr.startswith(start) and proc.stderr.endswith(end + "\n")
    assert not (project / "build").exists()


@pytest.mark.parametrize(("args", "line"), [
    (["--runs", "3"], "error: smoke: --runs is for --bisect-exit (without it the smoke runs once per phase)"),
    (["--threshold", "3"], "error: smoke: --threshold is for --bisect-exit (the gates judge a plain smoke)"),
    (["--metric", "speedup"], "error: smoke: --metric is for --bisect-exit (the gates judge a plain smoke)"),
])
def test_a_bisect_only_smoke_option_without_bisect_exit_is_refused(project, args, line):
    proc = _run(project, "smoke", "--image", "sglstack/x:1", "--model", "m", "--draft-model", "d", *args)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")
    assert not (project / "build").exists()


def test_a_version_mismatch_names_the_option_patches_apply_takes(project):
    meta = project / "root" / "sglang-0.5.9.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    proc = _run(project, "patches.apply", "--root", "root", "--patch", "kimi-k25-eagle3", "--sglang", "0.5.8")
    assert (proc.returncode, proc.stderr, proc.stdout) == (
        2, "error: --sglang 0.5.8 does not match sglang 0.5.9 installed under root\n", "")


@pytest.mark.parametrize(("args", "line"), [
    (["-D", "abc", "--list"], "error: option --list-depth 'abc': not a whole number"),
    (["--list-depth=x", "--list"], "error: option --list-depth 'x': not a whole number"),
    (["-F", "flatt", "--list"], "error: option --list-format 'flatt': not one of flat, nested, json; "
                                "did you mean 'flat'?"),
])
def test_a_core_flag_of_the_sglstack_command_with_a_bad_value_is_one_line(tmp_path, args, line):
    proc = subprocess.run([sys.executable, "-m", "sglstack.cli", *args], cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")


@pytest.mark.parametrize(("ref", "why"), [
    ("Bad/Ref", "it has a path component 'Bad' that has uppercase letters"),
    ("x@sha256:abc", "it has a digest 'sha256:abc' that is not sha256: and 64 lowercase hex digits"),
])
def test_diff_refuses_a_reference_in_the_words_of_every_image_option(ref, why):
    from sglstack.core.errors import ConfigError
    from sglstack.diff.sources import _registry_snapshot

    with pytest.raises(ConfigError) as info:
        _registry_snapshot(ref)  # before any registry is asked
    assert str(info.value) == (f"'{ref}' is not a file, a local image or a build record's image, and not an "
                               f"image reference: {why}")


@pytest.mark.parametrize(("args", "line"), [
    (["deploy", "--replicas", "2"], "error: --on compose: --replicas applies to --on k8s only (compose would drop it)"),
    (["deploy", "--context", "c", "--namespace", "n"],
     "error: --on compose: --context, --namespace apply to --on k8s only (compose would drop them)"),
    (["deploy", "--host-network"],
     "error: --on compose: --host-network applies to --on k8s only (compose would drop it)"),
    (["deploy", "--rdma", "rdma/ib"], "error: --on compose: --rdma applies to --on k8s only (compose would drop it)"),
    (["deploy", "--hf-token-secret", "s"],
     "error: --on compose: --hf-token-secret applies to --on k8s only (compose would drop it)"),
    (["deploy", "--image-pull-secret", "regcred"],
     "error: --on compose: --image-pull-secret applies to --on k8s only (compose would drop it)"),
    (["rollback", "--context", "c"], "error: --on compose: --context applies to --on k8s only (compose would drop it)"),
    # the other way was refused before, as exit 1
    (["deploy", "--on", "k8s", "--env-file", "x"],
     "error: --on k8s: --env-file applies to compose only (LWS places the pods)"),
    (["rollback", "--on", "k8s", "--docker-host", "unix:///nowhere"],
     "error: --on k8s: --docker-host applies to compose only (LWS places the pods)"),
])
def test_an_option_of_the_other_deploy_target_is_refused(project, args, line):
    image = ["--image", "sglstack/x:1"] if args[0] == "deploy" else []
    proc = _run(project, *args, "--stack", "cu130", *image, "--stacks-file", "stacks.yaml")
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")
    assert not (project / "build").exists()


@pytest.mark.parametrize(("where", "line"), [
    ("", "error: stacks: option --json-out is empty (give a value, or leave the option out)"),
    ("fifo", "error: stacks: --json-out {path}: is not a regular file (a device, FIFO or socket is never replaced)"),
])
def test_a_json_out_that_names_no_regular_file_is_refused_before_the_table(project, where, line):
    path = str(project / where) if where else ""
    if where:
        os.mkfifo(path)
    proc = _run(project, "stacks", "--stacks-file", "stacks.yaml", "--json-out", path)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line.format(path=path) + "\n", "")


@pytest.mark.parametrize(("args", "line", "code"), [
    # a script's `--verify-key "$KEY"` with KEY unset: before, rendered unverified with exit 0
    (["render", "--stack", "cu130", "--verify-key", "", "--image", "x@sha256:" + "a" * 64],
     "error: render: option --verify-key is empty (give a value, or leave the option out)", 2),
    (["render", "--stack", "cu130", "--out", ""],
     "error: render: option --out is empty (give a value, or leave the option out)", 2),
    (["build", "--stack", "cu130", "--dry-run", "--ca-bundle", ""],
     "error: build: option --ca-bundle is empty (give a value, or leave the option out)", 2),
    (["deploy", "--stack", "cu130", "--image", "sglstack/x:1", "--env-file", ""],
     "error: deploy: option --env-file is empty (give a value, or leave the option out)", 2),
    (["bake", "--stack="], "error: bake: option --stack is empty (give a value, or leave the option out)", 2),
    (["lock", "--stack", "cu130", "--upgrade-package="],
     "error: lock: option --upgrade-package is empty (give a value, or leave the option out)", 2),
    (["smoke", "--image", "sglstack/x:1", "--model", "m", "--draft-model", "d", "--bisect-exit", ""],
     "error: smoke: option --bisect-exit is empty (give a value, or leave the option out)", 128),
])
def test_an_empty_option_value_is_refused_not_taken_as_no_option(project, args, line, code):
    proc = _run(project, *args, "--stacks-file", "stacks.yaml")
    assert (proc.returncode, proc.stderr, proc.stdout) == (code, line + "\n", "")
    assert not (project / "build").exists()


def test_a_bisect_threshold_that_is_no_number_is_named_as_smoke_names_it(project):
    proc = _run(project, "bisect", "--stack", "cu130", "--good", "0.5.8", "--bad", "0.5.9", "--threshold", "abc",
                "--stacks-file", "stacks.yaml")
    assert (proc.returncode, proc.stderr, proc.stdout) == (
        2, "error: --threshold 'abc': not a number (a percentage, 5 = 5%)\n", "")


def test_a_smoke_that_stops_before_its_report_leaves_no_folder(project):
    proc = run_invoke("smoke", "--image", "sglstack/x:1", "--model", "m", "--draft-model", "d", "--gpus", "0",
                      "--skip-preflight", cwd=project, timeout=120,
                      env={"SGLSTACK_BUILD_DIR": str(project / "build"), "DOCKER_HOST": "unix:///nonexistent"})
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith("error: cannot reach the Docker engine at unix:///nonexistent")
    assert not (project / "build").exists()


@pytest.mark.parametrize(("opt", "line"), [
    # before: a traceback (SmokeOptions got gates twice), exit 1
    ("gates=x", "error: --smoke-opt 'gates=…': not a smoke option here: give min_speedup=, min_accept_length=, "
                "min_agreement= or max_regression="),
    # before: dropped unread, exit 0: the release smoke serves the candidate it pushed, not this image
    ("image=x", "error: --smoke-opt 'image=…': not a smoke option here: the smoke serves the image the task built"),
    ("stack=cu129", "error: --smoke-opt 'stack=…': not a smoke option here: the task's --stack is the stack"),
])
def test_a_smoke_opt_the_task_decides_is_refused(project, opt, line):
    proc = _run(project, "build", "--stack", "cu130", "--push", "--unsigned", "--smoke-opt", opt,
                "--stacks-file", "stacks.yaml", "--dry-run")
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")
    assert not (project / "build").exists()


def test_publish_digest_takes_a_reference_as_deploy_does(project):
    from sglstack.config.imageref import parse_repository
    from sglstack.publish.digest import _bare_digest

    digest = "sha256:" + "a" * 64
    repo = parse_repository("127.0.0.1:5000/sglstack/sglang")
    assert _bare_digest(f"127.0.0.1:5000/sglstack/sglang@{digest}", repo) == digest  # before: "is not a digest"
    proc = _run(project, "publish", "--stack", "cu130", "--unsigned", "--digest", f"x@{digest}",
                "--registry", "127.0.0.1:5000/sglstack/sglang", "--stacks-file", "stacks.yaml")
    assert (proc.returncode, proc.stderr, proc.stdout) == (
        2, f"error: --digest 'x@{digest}': names docker.io/library/x, but publish promotes in "
           f"127.0.0.1:5000/sglstack/sglang (give sha256:... or 127.0.0.1:5000/sglstack/sglang@sha256:...)\n", "")
