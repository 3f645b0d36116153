"""Everything `invoke build` can check is checked before the build starts, and `--dry-run` fails where the
real run would: the stage `--target` names, the release's signing key, its `--smoke-opt`s and its registry.

Each case asserts the whole error line, the exit code, and that no long work ran: nothing on stdout (the
build's first line is "building target ..."; a dry run's plan starts "stack:") and no build folder made.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import REPO, run_invoke

STACKS = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
BUILD = ("build", "--stack", "cpu-test", "--stacks-file", str(STACKS))


def _run(tmp_path: Path, *args: str):
    env = {"SGLSTACK_SIGNING_KEY": "", "SGLSTACK_BUILD_DIR": str(tmp_path / "build"),
           "SGLSTACK_DOCKER_CLI": "/usr/bin/docker"}
    proc = run_invoke(*BUILD, *args, cwd=tmp_path, env=env, timeout=120)
    assert proc.stdout == "", "work started before the check"
    assert not (tmp_path / "build").exists()
    return proc.returncode, proc.stderr.strip()


@pytest.mark.parametrize("dry_run", [("--dry-run",), ()], ids=["dry-run", "real"])
def test_a_target_that_is_no_stage_is_refused_with_the_nearest(tmp_path, dry_run):
    assert _run(tmp_path, "--target", "runtim", *dry_run) == (
        2, "error: stack 'cpu-test': --target 'runtim' is not a stage of its Dockerfile (stages: sglang-src, "
           "runtime); did you mean 'runtime'?")


@pytest.mark.parametrize("dry_run", [("--dry-run",), ()], ids=["dry-run", "real"])
def test_a_release_without_a_key_fails_the_dry_run_as_the_real_one(tmp_path, dry_run):
    assert _run(tmp_path, "--push", *dry_run) == (
        2, "error: no signing key: pass --signing-key PATH or set SGLSTACK_SIGNING_KEY (a path, or the PEM itself), or "
           "--unsigned to release without a signature")


@pytest.mark.parametrize("dry_run", [("--dry-run",), ()], ids=["dry-run", "real"])
def test_a_bad_smoke_opt_is_refused_before_the_build(tmp_path, dry_run):
    # The registry cannot be reached either: the smoke option, bad input, is what is named.
    assert _run(tmp_path, "--push", "--unsigned", "--registry", "127.0.0.1:1", "--smoke-opt", "runs=many",
                *dry_run) == (2, "error: invalid smoke option: runs 'many' is not a whole number")


def test_an_unreachable_registry_stops_the_release_before_the_build(tmp_path):
    code, line = _run(tmp_path, "--push", "--unsigned", "--registry", "127.0.0.1:1")
    assert code == 1 and line.startswith("error: registry 127.0.0.1:1: GET /v2/ failed"), line


@pytest.mark.parametrize("flag", [("--signing-key", "k.pem"), ("--unsigned",), ("--smoke-opt", "runs=3")])
def test_a_release_option_without_push_is_refused(tmp_path, flag):
    assert _run(tmp_path, "--dry-run", *flag) == (
        2, f"error: stack 'cpu-test': {flag[0]} is for a release: add --push, or drop {flag[0]}")


BAD_REF = "Not A Ref!!"
BAD_REF_LINE = "not an image reference: it has a path component 'Not A Ref!!' that has uppercase letters"


@pytest.mark.parametrize(("args", "flag"), [
    (("render", "--stack", "cpu-test", "--image", BAD_REF), "--image"),
    (("deploy", "--stack", "cpu-test", "--image", BAD_REF), "--image"),
    (("size", "--stack", "cpu-test", "--image", BAD_REF), "--image"),
    (("preflight", "--stack", "cpu-test", "--image", BAD_REF), "--image"),
    (("smoke", "--stack", "cpu-test", "--image", BAD_REF), "--image"),
    (("sbom", BAD_REF), "--ref"),
    (("verify-image", BAD_REF, "--verify-key", "k.pem"), "--ref"),
], ids=lambda v: v if isinstance(v, str) else v[0])
def test_every_image_option_is_checked_against_the_grammar_when_parsed(tmp_path, args, flag):
    stacks = ("--stacks-file", str(STACKS)) if "--stack" in args else ()
    proc = run_invoke(*args, *stacks, cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")},
                      timeout=120)
    assert (proc.returncode, proc.stderr.strip()) == (2, f"error: {flag} '{BAD_REF}': {BAD_REF_LINE}")
    assert proc.stdout == "" and not (tmp_path / "build").exists()  # no compose.yaml written, nothing run


@pytest.mark.parametrize("dry_run", [("--dry-run",), ()], ids=["dry-run", "real"])
def test_a_ca_bundle_that_is_no_file_is_refused_before_the_render(tmp_path, dry_run):
    missing = str(tmp_path / "no-ca.pem")
    assert _run(tmp_path, "--ca-bundle", missing, *dry_run) == (
        2, f"error: CA bundle '{missing}' (from --ca-bundle or SGLSTACK_CA_BUNDLE) is not a file")


@pytest.mark.parametrize("dry_run", [("--dry-run",), ()], ids=["dry-run", "real"])
def test_a_docker_client_that_is_not_there_fails_the_dry_run_as_the_real_one(tmp_path, dry_run):
    missing = str(tmp_path / "docker")
    assert _run(tmp_path, "--docker-cli", missing, *dry_run) == (
        1, f"error: docker client '{missing}' (from --docker-cli or SGLSTACK_DOCKER_CLI) not found")


@pytest.mark.parametrize(("args", "line"), [
    (("--digest", "sha256:abc"), "error: --digest 'sha256:abc' is not a digest (sha256:<64 hex>)"),
    (("--digest", "sha256:" + "a" * 64, "--smoke-report", "gone.json"),
     "error: --smoke-report gone.json: not a file (the smoke report that passed this digest)"),
])
def test_publish_refuses_bad_input_before_asking_the_registry(tmp_path, args, line):
    # The registry is one that refuses connections: asked, it would be four attempts and exit 1.
    proc = run_invoke("publish", "--stack", "cpu-test", "--stacks-file", str(STACKS), "--unsigned", "--registry",
                      "127.0.0.1:1", *args, cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")},
                      timeout=120)
    assert (proc.returncode, proc.stderr.strip(), proc.stdout) == (2, line, "")
    assert not (tmp_path / "build").exists()


@pytest.mark.parametrize(("args", "line"), [
    (("deploy", "--on", "k8z", "--image", "x"),
     "error: --on 'k8z': not one of compose, k8s; did you mean 'k8s'?"),
    (("deploy", "--restart", "alway", "--image", "x"),
     "error: stack 'cpu-test': --restart 'alway': not one of no, always, on-failure, unless-stopped; did you mean "
     "'always'?"),
    (("bisect", "--good", "0.5.8", "--bad", "0.5.9", "--metric", "speedupp"),
     "error: --metric: unknown metric 'speedupp' (choose from baseline, eagle3, speedup, accept_length); did you "
     "mean 'speedup'?"),
], ids=lambda v: v if isinstance(v, str) else v[0] + v[1])
def test_a_near_miss_of_a_named_choice_gets_did_you_mean(tmp_path, args, line):
    proc = run_invoke(args[0], "--stack", "cpu-test", "--stacks-file", str(STACKS), *args[1:], cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert (proc.returncode, proc.stderr.strip(), proc.stdout) == (2, line, "")
    assert not (tmp_path / "build").exists()


@pytest.mark.parametrize("dry_run", [("--dry-run",), ()], ids=["dry-run", "real"])
def test_a_release_smoke_mount_missing_here_is_refused_before_the_build(tmp_path, dry_run):
    """The release smoke would refuse it after the whole build: the bind source is checked first, as it will."""
    missing = tmp_path / "no-such-models"
    code, line = _run(tmp_path, "--push", "--unsigned", "--smoke-opt", f"mount={missing}:/models", *dry_run)
    assert (code, line) == (2, f"error: stack 'cpu-test': --mount '{missing}:/models': {missing} does not exist "
                               "(Docker would create it as root); create it first")


def test_a_release_smoke_on_a_remote_engine_does_not_check_this_machines_folders(tmp_path):
    missing = tmp_path / "no-such-models"
    proc = run_invoke(*BUILD, "--push", "--unsigned", "--dry-run", "--smoke-opt", f"mount={missing}:/models",
                      "--smoke-opt", "docker_host=ssh://user@gpu-node", cwd=tmp_path,
                      env={"SGLSTACK_SIGNING_KEY": "", "SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert any(line.startswith("stack:        cpu-test") for line in proc.stdout.splitlines())


@pytest.mark.parametrize("dry_run", [("--dry-run",), ()], ids=["dry-run", "real"])
def test_a_release_smoke_shm_size_that_is_no_size_is_refused_before_the_build(tmp_path, dry_run):
    """`serving.shm_size` is held to the size rule in stacks.yaml; the smoke's own value was passed unread."""
    assert _run(tmp_path, "--push", "--unsigned", "--smoke-opt", "shm_size=abc", *dry_run) == (
        2, "error: stack 'cpu-test': shm_size: 'abc' is not a size such as 32g (a whole number, then b, k, m, g or t)")
