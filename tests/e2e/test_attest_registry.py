# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""Attestations against the real embedded registry (distribution 2.8: no referrers API, so the tag
scheme), images built with BuildKit and listed inside a real container: sign, verify, the four
tamperings, a failed attestation push during a release, cleanup, and the CLI's exit codes."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
import subprocess
from pathlib import Path

import pytest
from clirun import run_invoke
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from registry_fixtures import plain_registry  # noqa: F401 - fixture

from sglstack.attest.errors import AttestationError, NotVerified
from sglstack.attest.release import AttestPlan
from sglstack.attest.store import attach, fallback_tag, find_attestations
from sglstack.attest.verify import verify_image
from sglstack.config.imageref import parse_image_reference
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import PinMismatch
from sglstack.imagebuild.verify import sbom_inventory
from sglstack.inventory.listing import image_inventory
from sglstack.inventory.sbom import SBOM_FILE, read_sbom, sbom_document
from sglstack.lock.trust import lock_for_build
from sglstack.lockfile.model import Lock, LockedPackage
from sglstack.publish import cleanup_candidates, push_candidate, read_records, records_path, release, target_repository
from sglstack.publish.tags import release_tags
from sglstack.registry.client import RegistryClient
from sglstack.render.dockerfile import released_config_hash

pytestmark = pytest.mark.docker
DAY = dt.date(2026, 12, 3)
STACKS = Path(__file__).resolve().parents[1] / "fixtures" / "stacks-cpu.yaml"
# A Python distribution the lister must find (Debian's python3 reads /usr/lib/python3/dist-packages).
FAKE_DIST = ("RUN d=/usr/lib/python3/dist-packages/six-1.16.0.dist-info && mkdir -p $d "
             "&& printf 'Metadata-Version: 2.1\\nName: six\\nVersion: 1.16.0\\n' > $d/METADATA\n")


@pytest.fixture(scope="module")
def images(sglang_double_image, docker_cli, docker_client, tmp_path_factory):
    """Two small images on the double (python3 and dpkg inside): `a` has one Python distribution."""
    made = {}
    for name, extra in (("a", FAKE_DIST), ("b", "")):
        ctx = tmp_path_factory.mktemp(f"attest-{name}")
        (ctx / "Dockerfile").write_text(f"FROM {sglang_double_image}\n{extra}LABEL io.sglstack.test-attest={name}\n")
        tag = f"sglstack-test-attest-{name}:{secrets.token_hex(4)}"
        subprocess.run([docker_cli, "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True,
                       env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"})
        made[name] = tag
    yield made
    for tag in made.values():
        docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    out = {}
    for name in ("release", "other"):
        key = Ed25519PrivateKey.generate()
        (folder / f"{name}.pem").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (folder / f"{name}.pub").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        out[name] = (key, folder / f"{name}.pub")
    return out


@pytest.fixture(scope="module")
def stack(repo_root):
    return load_matrix(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml").get("cpu-test")


def _record(tmp_path, docker_client, image: str) -> tuple:
    """A build record as `invoke build` writes it, with the SBOM listed from the image beside it."""
    image_id = docker_client.images.get(image).id
    inventory = image_inventory(docker_client, image)
    (tmp_path / SBOM_FILE).write_bytes(sbom_document(inventory, image_name=image, image_id=image_id,
                                                     created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC)))
    # the config hash `invoke build` gives cpu-test now: what `--verify-key` binds the signature to
    config_hash = released_config_hash(cpu := load_matrix(STACKS).get("cpu-test"), lock_for_build(STACKS, cpu))
    record = {"stack": "cpu-test", "target": "runtime", "image_id": image_id, "tag": image, "config_hash": config_hash,
              "built_at": "2026-12-03T00:00:00Z", "builder": {"kind": "classic"}, "pins": {},
              "base_image": {"name": "debian:bookworm-slim", "digest": None}, "sglang": {"version": "0.5.9"},
              "lock": None, "provenance": {"patches": {}, "sglstack": {"version": "0.1.0", "commit": None}},
              "sbom": {"sha256": hashlib.sha256((tmp_path / SBOM_FILE).read_bytes()).hexdigest()}}
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    return path, inventory


@pytest.fixture
def published(plain_registry, images, keys, docker_client, tmp_path):
    """Image `a` pushed, with SBOM, provenance and signature attached (the release's AttestPlan), tag `rel`."""
    repo = parse_image_reference(f"{plain_registry.host}/sglstack-test/attest-{secrets.token_hex(4)}").repository
    client = RegistryClient(repo.registry)
    digest = push_candidate(docker_client, images["a"], repo, "rel", client)
    record_path, _ = _record(tmp_path, docker_client, images["a"])
    summary = AttestPlan(record_path, keys["release"][0])(client, repo, digest)
    assert "tag scheme" in summary and "signed by key" in summary
    return client, repo, digest


def test_the_sbom_lists_the_image_and_the_lock_check_fails_the_build(images, docker_client, stack):
    inventory = image_inventory(docker_client, images["a"])
    assert inventory.python == {"six": "1.16.0"}  # Debian's python3 has no other distribution
    assert any(name == "libc6" for name, _, _ in inventory.debian) and len(inventory.debian) > 50
    lock = Lock(stack="cpu-test", stack_sha256="0" * 64, resolved_at="x", resolver="uv", python="3.11",
                platforms=(), layers=("l",), packages=(LockedPackage("six", "1.16.0", "l", ("sha256:" + "1" * 64,)),))
    assert sbom_inventory(docker_client, images["a"], stack, lock).python == {"six": "1.16.0"}
    with pytest.raises(PinMismatch, match=r"SBOM does not match its lock: six==1.16.0 is in the lock but not"):
        sbom_inventory(docker_client, images["b"], stack, lock)
    empty = Lock(stack="cpu-test", stack_sha256="0" * 64, resolved_at="x", resolver="uv", python="3.11",
                 platforms=(), layers=(), packages=())
    with pytest.raises(PinMismatch, match=r"installed but not in the lock: six==1.16.0"):
        sbom_inventory(docker_client, images["a"], stack, empty)


def test_a_signed_image_verifies_by_tag_and_by_digest(published, keys):
    client, repo, digest = published
    tags = client.list_tags(repo.path)
    assert sorted(t for t in tags if t != "rel") == sorted(fallback_tag(digest, k) for k in
                                                           ("sbom", "provenance", "signature"))
    for ref in (repo.ref("rel"), repo.ref(digest)):
        result = verify_image(client, parse_image_reference(ref), keys["release"][0].public_key())
        assert result.digest == digest and result.attestations["sbom"]["python"] == 1


def test_a_tag_moved_to_another_image_is_refused(published, keys, images, docker_client):
    client, repo, digest = published
    other = push_candidate(docker_client, images["b"], repo, "other", client)
    moved = client.get_manifest(repo.path, other)
    client.put_manifest(repo.path, "rel", moved.body, moved.media_type)
    with pytest.raises(NotVerified, match="no signature attached"):
        verify_image(client, parse_image_reference(repo.ref("rel")), keys["release"][0].public_key())
    # ... and a's signature copied onto b's tag-scheme name still covers a, not b
    signature = client.get_manifest(repo.path, fallback_tag(digest, "signature"))
    client.put_manifest(repo.path, fallback_tag(other, "signature"), signature.body, signature.media_type)
    with pytest.raises(NotVerified, match="no signature attached"):  # its subject is a: not b's signature
        verify_image(client, parse_image_reference(repo.ref("rel")), keys["release"][0].public_key())


def test_another_key_is_refused(published, keys):
    client, repo, _ = published
    with pytest.raises(NotVerified, match="no signature by key"):
        verify_image(client, parse_image_reference(repo.ref("rel")), keys["other"][0].public_key())


def test_one_changed_sbom_byte_is_refused(published, keys):
    client, repo, digest = published
    sbom = next(a for a in find_attestations(client, repo.path, digest) if a.kind == "sbom")
    body = bytearray(client.get_blob(repo.path, sbom.document_digest))
    body[body.index(b"1.16.0")] = ord("2")  # six 2.16.0
    attach(client, repo.path, digest, [("sbom", bytes(body))])  # replaces the sha256-<hex>.sbom tag
    with pytest.raises(NotVerified, match=r"the sbom attached is .* changed after signing"):
        verify_image(client, parse_image_reference(repo.ref("rel")), keys["release"][0].public_key())


def test_a_deleted_attestation_is_refused(published, keys):
    client, repo, digest = published
    client.delete_manifest(repo.path, client.manifest_digest(repo.path, fallback_tag(digest, "provenance")))
    with pytest.raises(NotVerified, match=r"the provenance the signature names .* is not attached"):
        verify_image(client, parse_image_reference(repo.ref("rel")), keys["release"][0].public_key())


def test_verify_image_and_sbom_from_the_command_line(published, keys, tmp_path):
    _, repo, digest = published
    report = tmp_path / "verify.json"
    ok = run_invoke("verify-image", repo.ref("rel"), "--verify-key", str(keys["release"][1]), "--json-out", str(report),
                    cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(report.read_text())["digest"] == digest and "verified:" in ok.stdout
    refused = run_invoke("verify-image", repo.ref("rel"), "--verify-key", str(keys["other"][1]), cwd=tmp_path)
    assert refused.returncode == 1 and refused.stderr.strip().count("\n") == 0, refused.stderr
    assert "NOT verified" in refused.stderr and "no signature by key" in refused.stderr
    bad = run_invoke("verify-image", repo.ref("rel"), "--verify-key", str(tmp_path / "missing.pub"), cwd=tmp_path)
    assert bad.returncode == 2 and "cannot read key file" in bad.stderr
    out = tmp_path / "sbom.json"
    sbom = run_invoke("sbom", repo.ref("rel"), "--json-out", str(out), cwd=tmp_path)
    assert sbom.returncode == 0, sbom.stderr
    assert read_sbom(out.read_bytes()).python == {"six": "1.16.0"} and "attached to" in sbom.stderr


def test_a_failed_attestation_push_leaves_no_release_tag_and_no_attestation(
        plain_registry, images, docker_client, stack, tmp_path):
    repo_name = f"{plain_registry.host}/sglstack-test/attest-fail-{secrets.token_hex(4)}"
    repo = target_repository(stack, repo_name)
    client = RegistryClient(repo.registry)

    def failing(client, repo, digest):
        def documents():
            yield "sbom", b'{"bomFormat": "CycloneDX"}'
            yield "provenance", b"{}"
            raise AttestationError("signing failed half-way")  # after two artifacts were pushed
        return str(attach(client, repo.path, digest, documents()))

    config_hash = secrets.token_hex(32)
    with pytest.raises(Exception, match=r"attaching the attestations .* failed, no release tag moved"):
        release(stack, image_ref=images["a"], config_hash=config_hash, registry=repo_name, build_dir=tmp_path,
                today=DAY, smoke=lambda *a: (True, {}), attest=failing)
    tags = set(client.list_tags(repo.path))
    candidate = release_tags(stack, config_hash, DAY).candidate
    assert tags == {candidate}  # no release tag, no sha256-<hex>.<kind> tag left behind
    assert read_records(records_path(tmp_path))[-1]["event"] == "attest-failed"


def test_cleanup_removes_a_dropped_candidate_with_its_attestations(published, stack):
    client, repo, digest = published
    candidate = f"candidate-cpu-test-{secrets.token_hex(6)}"
    manifest = client.get_manifest(repo.path, digest)
    client.put_manifest(repo.path, candidate, manifest.body, manifest.media_type)
    client.untag(repo.path, "rel")
    removed = cleanup_candidates([stack], registry=str(repo), older_than_days=0,
                                 now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    assert removed == [repo.ref(candidate)]
    assert client.list_tags(repo.path) == []  # the image and its three attestations went together


def test_render_and_deploy_take_only_an_image_that_verifies(published, keys, images, docker_client, repo_root,
                                                            tmp_path):
    client, repo, digest = published
    stacks = str(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml")
    out = tmp_path / "out"
    ok = run_invoke("render", "--stack", "cpu-test", "--stacks-file", stacks, "--out", str(out),
                    "--image", repo.ref("rel"), "--verify-key", str(keys["release"][1]), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert f"image: {repo.ref(digest)}" in (out / "k8s" / "leaderworkerset.yaml").read_text()  # the verified digest
    unsigned = push_candidate(docker_client, images["b"], repo, "unsigned", client)
    refused_out = tmp_path / "refused"
    refused = run_invoke("render", "--stack", "cpu-test", "--stacks-file", stacks, "--out", str(refused_out),
                         "--image", repo.ref(unsigned), "--verify-key", str(keys["release"][1]), cwd=tmp_path)
    assert refused.returncode == 1 and "no signature attached" in refused.stderr and not refused_out.exists()
    deploy = run_invoke("deploy", "--stack", "cpu-test", "--stacks-file", stacks, "--image", repo.ref("rel"),
                        "--gpus", "0", "--verify-key", str(keys["other"][1]), cwd=tmp_path)
    assert deploy.returncode == 1 and "no signature by key" in deploy.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "build").exists()  # refused before anything was written or started


def test_sbom_of_a_local_image_is_listed_from_the_image_itself(images, tmp_path):
    proc = run_invoke("sbom", images["a"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["bomFormat"] == "CycloneDX" and "pkg:pypi/six@1.16.0" in {c.get("purl") for c in doc["components"]}
    assert "listed from image sha256:" in proc.stderr and "1 Python" in proc.stderr
