"""Real BuildKit builds on the local dockerd: the production template, build path and verification."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from clirun import run_invoke
from docker import errors as docker_errors

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import BuildError, PinMismatch
from sglstack.imagebuild import flow as build_mod
from sglstack.imagebuild import images as images_mod
from sglstack.imagebuild.flow import build_stack
from sglstack.imagebuild.plan import TEMP_REPOSITORY, BuildSettings
from sglstack.imagebuild.verify import BUILD_CONTAINER_LABEL
from sglstack.pipeline.flow import describe_plan

REPO = Path(__file__).resolve().parents[2]
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
METHODS = ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")

pytestmark = pytest.mark.docker


def tags_of(client, stack_name: str) -> list[str]:
    return [t for image in client.images.list() for t in image.tags if t.startswith(f"sglstack/{stack_name}:")]


@pytest.fixture(scope="module")
def secret_values(tmp_path_factory, ca_bundle):
    """An extra CA bundle (the real one plus a unique marker line) and an HF token that must not leak."""
    marker = f"sglstack-secret-marker-{secrets.token_hex(8)}"
    token = f"hf_{secrets.token_hex(16)}"
    bundle = tmp_path_factory.mktemp("ca") / "extra-ca.pem"
    bundle.write_text(ca_bundle.read_text() + f"\n# {marker}\n")
    return {"bundle": bundle, "marker": marker, "token": token}


@pytest.fixture(scope="module")
def built(tmp_path_factory, secret_values, docker_cli, docker_client):
    stack = load_matrix(CPU_MATRIX).get("cpu-test")
    out = tmp_path_factory.mktemp("build-cpu-test")
    old = os.environ.get("HF_TOKEN")
    os.environ["HF_TOKEN"] = secret_values["token"]
    try:
        result = build_stack(
            stack,
            BuildSettings(
                force=True,
                ca_bundle=str(secret_values["bundle"]),
                docker_cli=docker_cli,
                out_dir=out,
                show_progress=False,
            ),
        )
    finally:
        if old is None:
            os.environ.pop("HF_TOKEN", None)
        else:
            os.environ["HF_TOKEN"] = old
    return stack, result, out


def test_patched_methods_are_class_members_inside_the_image(built, docker_client):
    _, result, _ = built
    source = docker_client.containers.run(
        result.tag,
        [
            "bash",
            "-c",
            'cat "$(python -c \'import sysconfig; print(sysconfig.get_paths()["purelib"])\')'
            '/sglang/srt/models/kimi_k25.py"',
        ],
        remove=True,
    ).decode()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KimiK25ForConditionalGeneration")
    members = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert set(METHODS) <= members
    module_defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert not set(METHODS) & module_defs
    assert source.rstrip().endswith("EntryClass = [KimiK25ForConditionalGeneration]")


def test_record_and_labels_describe_the_verified_image(built, docker_client):
    stack, result, out = built
    record = json.loads((out / "record.json").read_text())
    assert record["image_id"] == result.image_id
    assert record["config_hash"] == result.config_hash
    assert record["builder"]["kind"] in ("classic", "buildx")
    assert record["installed"]["sglang"] == "0.5.9"
    assert record["pins"] == stack.pins()
    [patch] = record["patches"]
    assert patch["id"] == "kimi-k25-eagle3" and patch["status"] == "applied"
    assert patch["sha256_before"] != patch["sha256_after"]
    assert set(record["durations_s"]) >= {"render", "build", "verify", "stamp"}
    # the in-image checks ran in the image (install_deps: false here: shared libraries only)
    checks = record["image_checks"]
    assert checks["shared_libraries"]["unresolved"] == {} and checks["python"].startswith("3.11.")
    assert "pip_check" not in checks and "serving_argv" not in checks
    labels = docker_client.images.get(result.tag).labels
    assert labels["io.sglstack.config-hash"] == result.config_hash
    assert labels["io.sglstack.verified"] == "true"
    assert labels["io.sglstack.pin.sglang"] == "0.5.9"
    assert labels["io.sglstack.patch.kimi-k25-eagle3"].startswith("applied sha256:" + patch["sha256_before"][:16])
    assert labels["org.opencontainers.image.title"] == "sglstack cpu-test"


def test_no_secret_in_history_config_labels_or_layers(built, docker_client, secret_values):
    _, result, _ = built
    image = docker_client.images.get(result.tag)
    needles = [secret_values["marker"], secret_values["token"]]
    history = json.dumps(image.history())
    config = json.dumps(image.attrs)
    for needle in needles:
        assert needle not in history
        assert needle not in config
    cli_history = subprocess.run(
        ["/usr/bin/docker", "history", "--no-trunc", result.tag], capture_output=True, text=True, check=True
    ).stdout
    assert not any(n in cli_history for n in needles)
    blob = b"".join(image.save(named=False))
    assert len(blob) > 1_000_000
    for needle in needles:
        assert needle.encode() not in blob
    # layers are tars inside the saved tar: look inside each one too (they are not compressed, but be sure)
    with tarfile.open(fileobj=io.BytesIO(blob)) as outer:
        for member in outer.getmembers():
            if member.name.endswith("layer.tar"):
                data = outer.extractfile(member).read()
                assert not any(n.encode() in data for n in needles)


def test_unchanged_config_is_not_rebuilt(built, monkeypatch, docker_cli):
    stack, result, out = built

    def no_buildkit(*_a, **_k):
        raise AssertionError("BuildKit must not be called for an unchanged config")

    monkeypatch.setattr(build_mod, "detect_builder", no_buildkit)
    again = build_stack(stack, BuildSettings(docker_cli=docker_cli, out_dir=out, show_progress=False))
    assert again.skipped and again.image_id == result.image_id and again.tag == result.tag


class BuildKitCalled(Exception):
    """Raised by a stand-in for `detect_builder`: the build went past the "already built" check."""


def test_a_patch_edit_is_built_again_not_skipped(built, tmp_path, monkeypatch, docker_cli):
    """The verified image of the unedited config is in dockerd; an edit of the patch's methods.py must
    not find it ("already built, skipping" would ship the old patch). The build is stopped where
    BuildKit would start: what this checks is the decision, against the real image store."""
    stack, result, out = built
    patches = tmp_path / "patches"
    shutil.copytree(REPO / "patches", patches, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    def buildkit_called(*_a, **_k):
        raise BuildKitCalled

    monkeypatch.setattr(build_mod, "detect_builder", buildkit_called)
    unedited = build_stack(stack, BuildSettings(docker_cli=docker_cli, out_dir=out, patches_dir=patches,
                                               show_progress=False))
    assert unedited.skipped and unedited.image_id == result.image_id
    methods = patches / "kimi-k25-eagle3" / "methods.py"
    methods.write_text(methods.read_text() + "\n# edited after the image was built\n")
    with pytest.raises(BuildKitCalled):
        build_stack(stack, BuildSettings(docker_cli=docker_cli, out_dir=out, patches_dir=patches,
                                        show_progress=False))


def test_patch_that_cannot_apply_fails_the_build_and_tags_nothing(tmp_path, docker_cli, docker_client, ca_bundle):
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(
        CPU_MATRIX.read_text().replace(
            "stacks:\n",
            "stacks:\n  cpu-test-drifted:\n"
            "    inherits: cpu-test\n    sglang:\n      version: 0.5.8\n      install_deps: false\n",
            1,
        )
    )
    proc = run_invoke("build", "--stack", "cpu-test-drifted", "--stacks-file", str(matrix),
                      "--ca-bundle", str(ca_bundle), "--docker-cli", docker_cli, cwd=tmp_path)
    assert proc.returncode != 0
    assert "kimi-k25-eagle3" in proc.stderr
    assert "0.5.8" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert tags_of(docker_client, "cpu-test-drifted") == []


def test_pin_mismatch_fails_and_tags_nothing(tmp_path, docker_cli, docker_client, ca_bundle):
    stack = load_matrix(CPU_MATRIX).get("cpu-test-pin-drift")
    with pytest.raises(PinMismatch) as info:
        build_stack(
            stack,
            BuildSettings(
                force=True, ca_bundle=str(ca_bundle), docker_cli=docker_cli, out_dir=tmp_path, show_progress=False
            ),
        )
    assert "typing-extensions: pinned 4.0.0, installed" in str(info.value)
    assert tags_of(docker_client, "cpu-test-pin-drift") == []


def test_production_cu130_sglang_src_target_builds_and_verifies(tmp_path, docker_cli, docker_client, ca_bundle):
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    result = build_stack(
        stack,
        BuildSettings(
            target="sglang-src",
            force=True,
            ca_bundle=str(ca_bundle),
            docker_cli=docker_cli,
            out_dir=tmp_path,
            show_progress=False,
        ),
    )
    record = json.loads((tmp_path / "record-sglang-src.json").read_text())
    [patch] = record["patches"]
    assert patch["status"] == "applied" and patch["sglang_version"] == "0.5.9"
    assert result.tag.startswith("sglstack/cu130:sglang-src-")
    reqs = docker_client.containers.run(result.tag, ["cat", "/out/sglang-requirements.txt"], remove=True).decode()
    assert "flashinfer-python==0.6.4" in reqs and "override of flashinfer_python==0.6.3" in reqs
    assert "\nflashinfer_python==0.6.3" not in reqs


def test_failed_build_prints_the_failing_step(tmp_path, docker_cli, ca_bundle):
    stack = load_matrix(CPU_MATRIX).get("cpu-test")
    bad = stack.model_copy(update={"name": "cpu-test-broken", "system_packages": ("no-such-package-sglstack",)})
    with pytest.raises(BuildError) as info:
        build_stack(
            bad, BuildSettings(ca_bundle=str(ca_bundle), docker_cli=docker_cli, out_dir=tmp_path, show_progress=False)
        )
    message = str(info.value)
    assert "failed step [runtime" in message and "apt-get" in message
    assert "no-such-package-sglstack" in message
    assert (tmp_path / "build.log").exists()


def test_dry_run_touches_no_docker(tmp_path):
    # The release smoke's bind sources are checked before the build, as the smoke will: cu130 mounts the
    # Hugging Face cache of the home folder, here one of the test's own.
    (tmp_path / "home" / ".cache" / "huggingface").mkdir(parents=True)
    proc = run_invoke("build", "--stack", "cu130", "--dry-run", "--push", "--unsigned", "--ca-bundle",
                      "/etc/ssl/certs/ca-certificates.crt", "--stacks-file", str(REPO / "stacks.yaml"),
                      cwd=tmp_path, env={"DOCKER_HOST": "tcp://127.0.0.1:9", "HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "config hash:" in out and "--secret id=ca_bundle,src=" in out
    assert "--target runtime" in out
    assert "candidate" in out and "0.5.9-cu130-" in out
    assert "--speculative-algorithm EAGLE3" in out and "--tp-size 8" in out
    assert not (tmp_path / "build").exists()


def test_installed_record_describes_the_patched_file(built, docker_client):
    """The patched module comes as an overlay on the pristine wheel; pip's RECORD must still be truthful."""
    _, result, _ = built
    script = (
        "import base64, csv, hashlib, sysconfig, pathlib\n"
        "site = pathlib.Path(sysconfig.get_paths()['purelib'])\n"
        "record = next(site.glob('sglang-*.dist-info')) / 'RECORD'\n"
        "bad = []\n"
        "for path, h, size in csv.reader(record.read_text().splitlines()):\n"
        "    if h and (site / path).is_file():\n"
        "        data = (site / path).read_bytes()\n"
        "        d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()\n"
        "        if h != 'sha256=' + d or int(size) != len(data): bad.append(path)\n"
        "print('BAD', bad)\n"
    )
    out = docker_client.containers.run(result.tag, ["python", "-c", script], remove=True).decode()
    assert out.strip() == "BAD []"
    history = docker_client.images.get(result.tag).history()
    overlay = next(h for h in history if "/out/overlay/" in (h.get("CreatedBy") or ""))
    assert 0 < overlay["Size"] < 200_000  # only the patched module, not the whole package


def test_dry_run_without_push_still_shows_the_release_tags_and_smoke():
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    out = "\n".join(describe_plan(stack, BuildSettings(), push=False, registry=None))
    assert "push:         no" in out
    assert "candidate-cu130-" in out and "0.5.9-cu130-" in out
    assert "--speculative-algorithm EAGLE3" in out and "--tp-size 8" in out
    src = "\n".join(describe_plan(stack, BuildSettings(target="sglang-src"), push=False, registry=None))
    assert "candidate" not in src and "launch_server" not in src


def _temporary_tags(client, stack_name: str) -> list[str]:
    return [t for image in client.images.list() for t in image.tags
            if t.startswith(f"{TEMP_REPOSITORY}/{stack_name}:")]


def test_two_concurrent_builds_of_one_config_leave_no_temporary_tag(tmp_path, docker_cli, docker_client, ca_bundle):
    """Both builds produce the same image; each holds it under its own tag and removes only that one."""
    stack = load_matrix(CPU_MATRIX).get("cpu-test").model_copy(update={"name": "cpu-test-concurrent"})
    options = {"force": True, "ca_bundle": str(ca_bundle), "docker_cli": docker_cli, "show_progress": False}
    try:
        for round_ in range(2):
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = [pool.submit(build_stack, stack, BuildSettings(out_dir=tmp_path / f"{round_}-{i}", **options))
                           for i in range(2)]
                results = [f.result(timeout=900) for f in futures]
            assert _temporary_tags(docker_client, stack.name) == []
            assert {r.tag for r in results} == {results[0].tag}
            labels = docker_client.images.get(results[0].tag).labels
            assert labels["io.sglstack.verified"] == "true"
            assert docker_client.containers.list(
                all=True, filters={"label": f"{BUILD_CONTAINER_LABEL}={stack.name}"}) == []
    finally:
        for tag in tags_of(docker_client, stack.name):
            docker_client.images.remove(tag, noprune=True)


def test_temporary_tag_goes_even_while_a_foreign_container_uses_the_image(tmp_path, docker_cli, docker_client):
    """The leak seen with concurrent builds: the image's only name is our temporary tag, and a running
    container that is not ours uses the image, so a plain removal is refused (409). The tag must go anyway,
    and the image in use must stay."""
    (tmp_path / "Dockerfile").write_text(f"FROM debian:bookworm-slim\nLABEL test={secrets.token_hex(6)}\n")
    proc = subprocess.run([docker_cli, "build", "-q", str(tmp_path)], capture_output=True, text=True, check=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
    image_id = proc.stdout.strip()
    ref = f"{TEMP_REPOSITORY}/cpu-test-foreign:{secrets.token_hex(4)}"
    foreign = None
    try:
        with build_mod.held_image(docker_client, image_id, ref):
            foreign = docker_client.containers.run(image_id, command=["sleep", "120"], detach=True)
            assert ref in docker_client.images.get(image_id).tags
        with pytest.raises(docker_errors.ImageNotFound):
            docker_client.images.get(ref)
        assert docker_client.images.get(image_id).id == image_id  # an image in use stays
    finally:
        if foreign is not None:
            foreign.remove(force=True)
        with contextlib.suppress(docker_errors.DockerException):
            docker_client.images.remove(image_id, force=True)


def test_hf_token_never_touches_a_disk_during_a_build(tmp_path, docker_cli, ca_bundle, monkeypatch):
    """While BuildKit runs, no file under the temp folder or the build folder holds the token, and the
    client's command line names the variable, not the value."""
    token = f"hf_{secrets.token_hex(16)}"
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    seen: list[list[str]] = []
    real_run_build = build_mod.run_build

    def watched(builder, request, **kwargs):
        seen.append(build_mod.build_argv(builder, request, tmp_path / "iid"))
        stop = threading.Event()
        hits: list[str] = []

        def scan():
            while not stop.is_set():
                for root in (temp, tmp_path / "out"):
                    hits.extend(str(p) for p in root.rglob("*") if p.is_file() and token.encode() in p.read_bytes())
                stop.wait(0.2)

        scanner = threading.Thread(target=scan)
        scanner.start()
        try:
            return real_run_build(builder, request, **kwargs)
        finally:
            stop.set()
            scanner.join()
            assert hits == []

    monkeypatch.setattr(build_mod, "run_build", watched)
    stack = load_matrix(CPU_MATRIX).get("cpu-test")
    build_stack(stack, BuildSettings(force=True, ca_bundle=str(ca_bundle), docker_cli=docker_cli,
                                    out_dir=tmp_path / "out", show_progress=False))
    main_build = seen[0]
    assert "id=hf_token,env=HF_TOKEN" in main_build and not any(token in arg for arg in main_build)
    assert list(temp.iterdir()) == []


def test_an_image_removed_before_it_is_held_is_built_again(tmp_path, docker_cli, docker_client, ca_bundle, monkeypatch):
    """The narrow race of two concurrent builds: the other one's hold went, with the image, between our
    export and our hold. The build runs BuildKit once more (cached) instead of failing."""
    stack = load_matrix(CPU_MATRIX).get("cpu-test")
    real_held, real_run_build = build_mod.held_image, build_mod.run_build
    builds: list[str] = []

    def counting_run_build(*args, **kwargs):
        builds.append(real_run_build(*args, **kwargs))
        return builds[-1]

    def vanished_once(client, image_id, ref):
        if len(builds) == 1:
            raise build_mod.ImageVanished("gone")
        return real_held(client, image_id, ref)

    monkeypatch.setattr(build_mod, "run_build", counting_run_build)
    monkeypatch.setattr(images_mod, "run_build", counting_run_build)  # the stamp is a FROM-only build
    monkeypatch.setattr(build_mod, "held_image", vanished_once)
    result = build_stack(stack, BuildSettings(force=True, ca_bundle=str(ca_bundle), docker_cli=docker_cli,
                                             out_dir=tmp_path, show_progress=False))
    assert len(builds) == 3  # the main build twice, then the stamp
    assert docker_client.images.get(result.tag).labels["io.sglstack.verified"] == "true"
    assert _temporary_tags(docker_client, "cpu-test") == []
