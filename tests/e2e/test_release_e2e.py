"""`invoke build --stack X --push` end to end: real build, verify, candidate push to a real registry,
smoke of that digest with the CPU SGLang double, promotion of the same manifest."""

# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from clirun import run_invoke
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from faultproxy import Fault, FaultProxy
from registry_fixtures import plain_registry  # noqa: F401 - fixture

from sglstack.inventory.sbom import read_sbom
from sglstack.registry.client import RegistryClient

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.docker
REPO_PASS = "e2e-pass/sglang"


def release_matrix(tmp_path: Path, base_image: str, registry: str, speedup: str, repo: str) -> Path:
    """A stack built FROM the SGLang double: the double's PYTHONPATH shadows the (CUDA-less) real SGLang
    at serving time, while the build installs, patches and verifies the real sglang 0.5.9 as usual."""
    path = tmp_path / "stacks.yaml"
    path.write_text(textwrap.dedent(f"""
        defaults:
          python: "3.11"
          publish:
            repository: {registry}/{repo}
          serving:
            model: test-org/tiny-model
            speculative: {{draft_model: test-org/tiny-eagle3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}
            tp: 1
            gpus: 0
            startup_timeout_s: 90
            shm_size: 256m
            env: {{SGLANG_DOUBLE_SPEC_SPEEDUP: "{speedup}", SGLANG_DOUBLE_TOKENS_PER_S: "300"}}
          smoke:
            max_new_tokens: 24
            concurrency: 2
            num_prompts: 3
        stacks:
          e2e:
            base_image: {base_image}
            sglang: {{version: 0.5.9, install_deps: false}}
            patches: [kimi-k25-eagle3]
        """))
    return path


SIGNING_KEY = Ed25519PrivateKey.generate()


def run_build_push(matrix: Path, cwd: Path, ca_bundle: Path, docker_cli: str) -> subprocess.CompletedProcess:
    """The release, signed with a key the environment holds as PEM (SGLSTACK_SIGNING_KEY)."""
    pem = SIGNING_KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
    return run_invoke("build", "--stack", "e2e", "--stacks-file", str(matrix), "--push",
                      "--ca-bundle", str(ca_bundle), "--docker-cli", docker_cli, cwd=cwd,
                      env={"SGLSTACK_SIGNING_KEY": pem})


def attestation_tag(tag: str) -> bool:
    return tag.startswith("sha256-")


def test_build_push_publishes_exactly_the_tested_digest(tmp_path, plain_registry, sglang_double_image, ca_bundle,
                                                        docker_cli, docker_client):
    registry = plain_registry.host
    matrix = release_matrix(tmp_path, sglang_double_image, registry, speedup="4", repo="e2e-pass/sglang")
    proc = run_build_push(matrix, tmp_path, ca_bundle, docker_cli)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client = RegistryClient(registry)
    tags = client.list_tags(REPO_PASS)
    candidate = next(t for t in tags if t.startswith("candidate-e2e-"))
    tested = client.manifest_digest(REPO_PASS, candidate)
    assert "e2e" in tags and "0.5.9-e2e" in tags
    immutable = [t for t in tags if t.startswith("0.5.9-e2e-") and len(t.split("-")) == 4]
    assert len(immutable) == 1
    for tag in ("e2e", "0.5.9-e2e", immutable[0]):
        assert client.manifest_digest(REPO_PASS, tag) == tested
    records = [json.loads(line) for line in (tmp_path / "build" / "publish" / "records.jsonl").read_text().splitlines()]
    published = [r for r in records if r.get("event") == "published"]
    assert published and {r["digest"] for r in published} == {tested}
    smoke_report = json.loads((tmp_path / published[0]["smoke_report"]).read_text())
    assert smoke_report["passed"] is True
    assert tested in smoke_report["image"]
    record = json.loads((tmp_path / "build" / "e2e" / "record.json").read_text())
    assert record["config_hash"].startswith(candidate.removeprefix("candidate-e2e-"))
    # signed, with the SBOM of the built image and its provenance: verifiable by the published tag
    public = tmp_path / "release.pub"
    public.write_bytes(SIGNING_KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
    verified = run_invoke("verify-image", f"{registry}/{REPO_PASS}:e2e", "--verify-key", str(public), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert tested in verified.stdout
    sbom_path = tmp_path / "sbom.json"
    listed = run_invoke("sbom", f"{registry}/{REPO_PASS}:e2e", "--json-out", str(sbom_path), cwd=tmp_path)
    assert listed.returncode == 0 and "attached to" in listed.stderr, listed.stderr
    assert read_sbom(sbom_path.read_bytes()).python["sglang"] == "0.5.9"  # listed inside the built image
    assert sorted(t.rsplit(".", 1)[1] for t in tags if attestation_tag(t)) == ["provenance", "sbom", "signature"]
    # a second release of the same config does nothing and says so
    again = run_build_push(matrix, tmp_path, ca_bundle, docker_cli)
    assert again.returncode == 0
    assert "skipping the build" in again.stdout and "already published" in again.stdout


def test_smoke_failure_moves_no_release_tag(tmp_path, plain_registry, sglang_double_image, ca_bundle, docker_cli):
    registry = plain_registry.host
    matrix = release_matrix(tmp_path, sglang_double_image, registry, speedup="0.5", repo="e2e-fail/sglang")
    proc = run_build_push(matrix, tmp_path, ca_bundle, docker_cli)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "speedup" in (proc.stdout + proc.stderr).lower()
    tags = RegistryClient(registry).list_tags("e2e-fail/sglang")
    assert len(tags) == 1 and tags[0].startswith("candidate-e2e-"), tags


@pytest.mark.timeout(900)  # a real build, smoke and push (67 s on a loaded CI machine)
def test_build_push_whose_promotion_fails_leaves_no_release_tag(tmp_path, plain_registry, sglang_double_image,
                                                                ca_bundle, docker_cli):
    """The registry refuses the third release tag: the two that moved are removed again, the candidate
    stays, the records say `reverted`, and the error line says which tags moved and that they went back."""
    proxy = FaultProxy(plain_registry.port)
    try:
        proxy.add(Fault("PUT", r"/manifests/e2e$", "status", status=400))
        matrix = release_matrix(tmp_path, sglang_double_image, proxy.host, speedup="4", repo="e2e-revert/sglang")
        proc = run_build_push(matrix, tmp_path, ca_bundle, docker_cli)
    finally:
        proxy.close()
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: stack 'e2e': registry ") and "failed at " in error and ":e2e: " in error
    assert "0.5.9-e2e had moved and were put back" in error and "recorded as reverted" in error
    tags = [t for t in RegistryClient(plain_registry.host).list_tags("e2e-revert/sglang") if not attestation_tag(t)]
    assert len(tags) == 1 and tags[0].startswith("candidate-e2e-"), tags
    records = [json.loads(line) for line in (tmp_path / "build" / "publish" / "records.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records] == ["candidate", "attested", "reverted", "reverted", "reverted"]
    assert {r["tag"] for r in records if r["event"] == "reverted"} >= {"0.5.9-e2e", "e2e"}
