# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""Locked builds on the real dockerd with BuildKit: the image installs exactly its lock, verification
compares the installed set with the lock, and `invoke diff` reads images from the engine and a registry."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from clirun import run_invoke
from registry_fixtures import plain_registry  # noqa: F401 - fixture

from sglstack.config.imageref import Repository
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import PinMismatch
from sglstack.diff.compare import snapshot_diff
from sglstack.diff.sources import load_snapshot
from sglstack.imagebuild import verify as verify_mod
from sglstack.imagebuild.identity import tree_sha256
from sglstack.inventory.sbom import SBOM_FILE, read_sbom
from sglstack.lockfile.model import VENV_BOOTSTRAP, LockedPackage, lock_content_sha256, lock_path
from sglstack.lockfile.text import read_lock
from sglstack.publish import push_candidate
from sglstack.registry.client import RegistryClient

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "stacks-lock.yaml"

pytestmark = [pytest.mark.docker, pytest.mark.network]


@pytest.fixture(scope="module")
def locked_build(tmp_path_factory, docker_cli, ca_bundle):
    work = tmp_path_factory.mktemp("locked-build")
    stacks = work / "stacks-lock.yaml"
    shutil.copy(FIXTURE, stacks)
    proc = run_invoke("lock", "--stack", "cpu-lock", "--stacks-file", str(stacks), cwd=work)
    assert proc.returncode == 0, proc.stderr
    proc = run_invoke("build", "--stack", "cpu-lock", "--stacks-file", str(stacks), "--force",
                      "--ca-bundle", str(ca_bundle), "--docker-cli", docker_cli, cwd=work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "warning" not in proc.stdout
    record = json.loads((work / "build" / "cpu-lock" / "record.json").read_text())
    return work, stacks, read_lock(lock_path(stacks, "cpu-lock")), record


def test_the_image_installs_exactly_the_lock(locked_build):
    _, _, lock, record = locked_build
    installed = {k: v for k, v in record["installed"].items() if k not in VENV_BOOTSTRAP}
    assert installed == lock.pins
    assert {"requests", "certifi", "charset-normalizer", "idna", "urllib3", "sglang"} == set(installed)
    assert record["lock"]["content_sha256"] == lock_content_sha256(lock) and record["platform"] == "linux/amd64"
    assert record["lock"]["hashed"] == len(lock.packages) and not record["lock"]["unresolved"]
    assert record["labels"]["io.sglstack.lock-sha256"] == lock_content_sha256(lock)
    # The seeded base has no registry digest (it was never pulled): the record names it by its image id.
    assert record["base_image"]["name"] == "debian:bookworm-slim" and record["base_image"]["digest"] is None
    assert record["base_image"]["image_id"].startswith("sha256:")


def test_the_sbom_lists_the_image_and_agrees_with_the_lock(locked_build):
    """Listed inside the built image (not from the build's own installed.json), checked against the lock."""
    work, _, lock, record = locked_build
    body = (work / "build" / "cpu-lock" / SBOM_FILE).read_bytes()
    assert record["sbom"]["sha256"] == hashlib.sha256(body).hexdigest() and record["sbom"]["compared_with_lock"]
    sbom = read_sbom(body)
    assert sbom.image_id == record["image_id"]
    assert {k: v for k, v in sbom.python.items() if k not in VENV_BOOTSTRAP} == lock.pins
    assert sbom.debian == record["sbom"]["debian"] > 50  # base and apt layer: listed, not compared
    assert record["provenance"]["patches"] == {"kimi-k25-eagle3": tree_sha256(REPO / "patches" / "kimi-k25-eagle3")}
    assert record["provenance"]["sglstack"]["version"]


def test_each_layer_installs_its_part_hash_checked_without_resolving(locked_build):
    work, _, lock, _ = locked_build
    dockerfile = (work / "build" / "cpu-lock" / "Dockerfile").read_text()
    assert "--mount=type=bind,source=lock/http-client.txt,target=/run/sglstack-lock/http-client.txt" in dockerfile
    assert ("--mount=type=bind,from=uv-http-client,source=/opt/uv,target=/run/sglstack-uv \\\n" in dockerfile
            and "uv pip install --python /opt/venv/bin/python --no-deps --require-hashes --compile-bytecode \\\n"
                "      --link-mode copy -r /run/sglstack-lock/http-client.txt" in dockerfile)
    assert "--require-hashes -r /run/sglstack-lock/sglang.txt" in dockerfile
    assert "'requests==2.32.3'" not in dockerfile  # nothing is resolved at build time
    part = (work / "build" / "cpu-lock" / "context" / "lock" / "http-client.txt").read_text()
    assert part == lock.part_text("http-client")


def test_verification_names_every_missing_and_extra_package(locked_build, docker_client):
    _, stacks, lock, record = locked_build
    stack = load_matrix(stacks).get("cpu-lock")
    idna = lock.get("idna")
    wrong = dataclasses.replace(lock, packages=(
        *(p for p in lock.packages if p.name != "idna"),
        LockedPackage("six", "1.16.0", "http-client", idna.hashes)))
    with pytest.raises(PinMismatch) as err:
        verify_mod.verified_facts(docker_client, record["image_id"], stack, "runtime", wrong)
    message = str(err.value)
    assert "six==1.16.0 is in the lock but not installed" in message
    assert f"installed but not in the lock: idna=={idna.version}" in message
    verify_mod.verified_facts(docker_client, record["image_id"], stack, "runtime", lock)  # the real lock passes


def test_diff_reads_the_image_from_the_engine(locked_build):
    work, _, _, record = locked_build
    image = load_snapshot(record["tag"])
    assert image.kind == "image" and image.config_hash == record["config_hash"]
    same = snapshot_diff(load_snapshot(str(work / "build" / "cpu-lock" / "record.json")), image)
    assert not same.packages and not same.patches and not same.pins and not same.base and same.sglang is None
    proc = run_invoke("diff", record["tag"], str(lock_path(work / "stacks-lock.yaml", "cpu-lock")), "--json",
                      cwd=work)
    assert proc.returncode == 0, proc.stderr
    changes = json.loads(proc.stdout)["packages"]
    assert {c["name"] for c in changes} <= VENV_BOOTSTRAP  # only the venv's own pip/setuptools differ


def test_diff_reads_an_image_through_the_registry_api(locked_build, docker_client, plain_registry):
    work, _, _, record = locked_build
    repo = Repository(plain_registry.host, "sglstack-test/locked")
    client = RegistryClient(plain_registry.host)
    digest = push_candidate(docker_client, record["tag"], repo, "cand", client)
    remote = load_snapshot(repo.ref(digest), docker_host="unix:///nonexistent.sock")  # not through the engine
    assert remote.kind == "image" and remote.config_hash == record["config_hash"]
    assert remote.packages and remote.packages["requests"] == "2.32.3"
    diff = snapshot_diff(load_snapshot(str(work / "build" / "cpu-lock" / "record.json")), remote)
    assert not diff.packages and not diff.patches and not diff.pins
