# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""The release against a real distribution registry, real dockerd pushes and the real smoke path
(the CPU SGLang double): candidate push, smoke by digest, promotion of exactly the tested digest."""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
import subprocess
import threading

import pytest
from registry_fixtures import counting_proxy, plain_registry  # noqa: F401 - fixtures

from sglstack.config.matrix import load_matrix
from sglstack.publish import (
    ImmutableTagCollision,
    cleanup_candidates,
    publish_digest,
    push_candidate,
    read_records,
    records_path,
    release,
    target_repository,
)
from sglstack.publish.tags import release_tags
from sglstack.registry.client import OCI_INDEX, RegistryClient

pytestmark = pytest.mark.docker
DAY = dt.date(2026, 12, 2)


@pytest.fixture(scope="module")
def cpu_stacks(repo_root):
    return load_matrix(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml")


@pytest.fixture(scope="module")
def variant(sglang_double_image, docker_cli, docker_client, tmp_path_factory):
    """Distinct images (distinct digests) on top of the double: a label-only BuildKit build each."""
    made = []

    def make(name: str) -> str:
        ctx = tmp_path_factory.mktemp("variant")
        (ctx / "Dockerfile").write_text(f"FROM {sglang_double_image}\nLABEL io.sglstack.test-variant={name}\n")
        tag = f"sglstack-test-publish-{name}:{secrets.token_hex(4)}"
        subprocess.run(
            [docker_cli, "build", "-q", "-t", tag, str(ctx)],
            check=True,
            capture_output=True,
            env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
        )
        made.append(tag)
        return tag

    yield make
    for tag in made:
        docker_client.images.remove(tag, force=True)


@pytest.fixture
def repo_for(counting_proxy):
    """A fresh repository per test, reached through the byte-counting proxy."""
    return lambda: f"{counting_proxy.host}/sglstack-test/pub-{secrets.token_hex(4)}"


def _hash() -> str:
    return secrets.token_hex(32)


def _smoke_opts(tmp_path, *extra):
    # A wide speed margin: two smokes share 2 CPU cores in the concurrency test. The double's own pace (300
    # tok/s, not its 1500) keeps the simulated time above a loaded machine's per-request overhead, which
    # otherwise pulls every measured ratio towards 1 (0.85x was seen at load 11 with 4x simulated).
    return [f"build_dir={tmp_path / 'smoke'}", "timeout=60", "env=SGLANG_DOUBLE_SPEC_SPEEDUP=4",
            "env=SGLANG_DOUBLE_TOKENS_PER_S=300", *extra]


def test_release_publishes_exactly_the_tested_digest(cpu_stacks, variant, repo_for, tmp_path):
    stack, repo_name, config_hash = cpu_stacks.get("cpu-test"), repo_for(), _hash()
    result = release(
        stack,
        image_ref=variant("full"),
        config_hash=config_hash,
        registry=repo_name,
        smoke_opts=_smoke_opts(tmp_path),
        build_dir=tmp_path,
        today=DAY,
    )
    assert result.published and result.digest
    repo = target_repository(stack, repo_name)
    client = RegistryClient(repo.registry)
    tags = release_tags(stack, config_hash, DAY)
    for tag in (tags.candidate, *tags.release):
        assert client.manifest_digest(repo.path, tag) == result.digest
    assert client.get_manifest(repo.path, tags.immutable).digest == result.digest
    report = json.loads(result.smoke_report.read_text())
    assert report["passed"] and report["report"]["image"]["digest"] == result.digest
    assert report["image"] == f"{repo}@{result.digest}"
    recs = [r for r in read_records(records_path(tmp_path)) if r["event"] == "published"]
    assert {r["tag"] for r in recs} == set(tags.release)
    assert all(r["digest"] == result.digest and r["smoke_report"] == str(result.smoke_report) for r in recs)

    # The same config again: already published, nothing pushed, nothing recorded.
    before = len(read_records(records_path(tmp_path)))
    again = release(
        stack,
        image_ref=variant("full-again"),
        config_hash=config_hash,
        registry=repo_name,
        smoke_opts=_smoke_opts(tmp_path),
        build_dir=tmp_path,
        today=DAY + dt.timedelta(days=3),
    )
    assert not again.published and again.digest is None
    assert len(read_records(records_path(tmp_path))) == before
    assert client.manifest_digest(repo.path, tags.moving[0]) == result.digest


def test_smoke_failure_moves_no_release_tag(cpu_stacks, variant, repo_for, tmp_path):
    stack, repo_name, config_hash = cpu_stacks.get("cpu-test"), repo_for(), _hash()
    result = release(
        stack,
        image_ref=variant("slow"),
        config_hash=config_hash,
        registry=repo_name,
        smoke_opts=_smoke_opts(tmp_path, "env=SGLANG_DOUBLE_SPEC_SPEEDUP=0.5"),
        build_dir=tmp_path,
        today=DAY,
    )
    assert not result.published and result.digest
    repo = target_repository(stack, repo_name)
    client = RegistryClient(repo.registry)
    tags = release_tags(stack, config_hash, DAY)
    assert client.list_tags(repo.path) == [tags.candidate]
    assert client.manifest_digest(repo.path, tags.candidate) == result.digest
    assert json.loads(result.smoke_report.read_text())["passed"] is False
    assert [r["event"] for r in read_records(records_path(tmp_path))] == ["candidate", "smoke-failed"]


def test_immutable_tag_collision_is_refused(cpu_stacks, variant, repo_for, tmp_path, docker_client):
    stack, repo_name, config_hash = cpu_stacks.get("cpu-test"), repo_for(), _hash()
    repo = target_repository(stack, repo_name)
    client = RegistryClient(repo.registry)
    tags = release_tags(stack, config_hash, DAY)
    first = push_candidate(docker_client, variant("first"), repo, "seed", client)
    publish_digest(stack, first, unsigned=True,
                   registry=repo_name, config_hash=config_hash, build_dir=tmp_path, today=DAY)
    smoked = []
    with pytest.raises(ImmutableTagCollision, match=f"immutable tag .*{tags.immutable} already points to {first}"):
        release(
            stack,
            image_ref=variant("second"),
            config_hash=config_hash,
            registry=repo_name,
            force=True,
            build_dir=tmp_path,
            today=DAY,
            smoke=lambda *a: smoked.append(a) or (True, {}),
        )
    assert smoked == []  # refused before the smoke
    for tag in tags.release:
        assert client.manifest_digest(repo.path, tag) == first


def test_rollback_repoints_the_moving_tags(cpu_stacks, variant, repo_for, tmp_path, docker_client):
    stack, repo_name = cpu_stacks.get("cpu-test"), repo_for()
    repo = target_repository(stack, repo_name)
    client = RegistryClient(repo.registry)
    hash_a, hash_b = _hash(), _hash()
    old = push_candidate(docker_client, variant("old"), repo, "cand-a", client)
    new = push_candidate(docker_client, variant("new"), repo, "cand-b", client)
    publish_digest(stack, old, unsigned=True, registry=repo_name, config_hash=hash_a, build_dir=tmp_path, today=DAY)
    publish_digest(
        stack, new, unsigned=True, registry=repo_name, config_hash=hash_b, build_dir=tmp_path,
        today=DAY + dt.timedelta(days=1)
    )
    moving = release_tags(stack, hash_a, DAY).moving
    assert all(client.manifest_digest(repo.path, t) == new for t in moving)

    # No --config-hash: the publish record knows the old digest's immutable tag and moving tags.
    assert publish_digest(stack, old, unsigned=True, registry=repo_name, build_dir=tmp_path) == 0
    assert all(client.manifest_digest(repo.path, t) == old for t in moving)
    assert client.manifest_digest(repo.path, release_tags(stack, hash_a, DAY).immutable) == old
    assert client.manifest_digest(repo.path, release_tags(stack, hash_b, DAY + dt.timedelta(days=1)).immutable) == new
    immutables = [t for t in client.list_tags(repo.path) if re.fullmatch(r".*-\d{8}-[0-9a-f]{8}", t)]
    assert len(immutables) == 2  # a rollback creates no new immutable tag
    rollback = [r for r in read_records(records_path(tmp_path)) if r["event"] == "rollback"]
    assert {r["tag"] for r in rollback} >= set(moving)
    assert all(r["previous"] == new for r in rollback if r["kind"] == "moving")


def test_promotion_uploads_no_layer(
    cpu_stacks,
    variant,
    repo_for,
    tmp_path,
    docker_client,
    counting_proxy,
    plain_registry,
):
    stack, repo_name, config_hash = cpu_stacks.get("cpu-test"), repo_for(), _hash()
    repo = target_repository(stack, repo_name)
    client = RegistryClient(repo.registry)
    counting_proxy.reset()
    digest = push_candidate(docker_client, variant("bytes"), repo, "cand", client)
    pushed = counting_proxy.reset()
    manifest = client.get_manifest(repo.path, digest)
    layer_bytes = sum(layer["size"] for layer in manifest.json()["layers"])
    log_before = plain_registry.log.read_text(errors="replace")
    counting_proxy.reset()
    publish_digest(stack, digest, unsigned=True,
                   registry=repo_name, config_hash=config_hash, build_dir=tmp_path, today=DAY)
    promoted = counting_proxy.reset()
    new_log = plain_registry.log.read_text(errors="replace")[len(log_before) :]
    puts = re.findall(r'"(PUT|POST|PATCH) (/v2/[^ ]+) HTTP', new_log)
    print(f"push sent {pushed} bytes (layers {layer_bytes}); promotion sent {promoted} bytes; requests {puts}")
    assert puts and all(method == "PUT" and "/manifests/" in path for method, path in puts)
    assert len(puts) == 1 + len(stack.publish.moving_tags)
    assert promoted < 4 * len(manifest.body) * len(puts) + 8192
    assert "/blobs/" not in new_log.split("\n", 1)[-1] or not re.search(r'"(PUT|POST|PATCH) /v2/[^ ]+/blobs/', new_log)
    assert promoted * 1000 < layer_bytes  # what a re-push would send: the layers, compressed


def test_concurrent_releases_of_two_stacks_do_not_interfere(cpu_stacks, variant, repo_for, tmp_path):
    repo_name = repo_for()
    stacks = [cpu_stacks.get("cpu-test"), cpu_stacks.get("cpu-test-pin-drift")]
    images = [variant("conc-a"), variant("conc-b")]
    hashes = [_hash(), _hash()]
    results, errors = {}, []

    def run(i):
        try:
            results[i] = release(
                stacks[i],
                image_ref=images[i],
                config_hash=hashes[i],
                registry=repo_name,
                smoke_opts=_smoke_opts(tmp_path / str(i)),
                build_dir=tmp_path,
                today=DAY,
            )
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    repo = target_repository(stacks[0], repo_name)
    client = RegistryClient(repo.registry)
    assert results[0].digest != results[1].digest
    for i, stack in enumerate(stacks):
        assert results[i].published
        for tag in release_tags(stack, hashes[i], DAY).release:
            assert client.manifest_digest(repo.path, tag) == results[i].digest
    recs = read_records(records_path(tmp_path))
    assert len([r for r in recs if r["event"] == "published"]) == 6


def test_an_oci_index_is_promoted_as_is(cpu_stacks, variant, repo_for, tmp_path, docker_client):
    stack, repo_name, config_hash = cpu_stacks.get("cpu-test"), repo_for(), _hash()
    repo = target_repository(stack, repo_name)
    client = RegistryClient(repo.registry)
    child = client.get_manifest(repo.path, push_candidate(docker_client, variant("idx"), repo, "cand", client))
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": child.media_type,
                    "digest": child.digest,
                    "size": len(child.body),
                    "platform": {"architecture": "amd64", "os": "linux"},
                }
            ],
        }
    ).encode()
    index_digest = client.put_manifest(repo.path, "cand-index", index, OCI_INDEX)
    publish_digest(stack, index_digest, unsigned=True,
                   registry=repo_name, config_hash=config_hash, build_dir=tmp_path, today=DAY)
    for tag in release_tags(stack, config_hash, DAY).release:
        got = client.get_manifest(repo.path, tag)
        assert got.digest == index_digest and got.media_type == OCI_INDEX and got.children() == [child.digest]


def test_cleanup_removes_old_candidates_but_keeps_releases(cpu_stacks, variant, repo_for, tmp_path, docker_client):
    stack, repo_name, config_hash = cpu_stacks.get("cpu-test"), repo_for(), _hash()
    repo = target_repository(stack, repo_name)
    client = RegistryClient(repo.registry)
    released_cand = f"candidate-cpu-test-{config_hash[:12]}"
    failed_cand = f"candidate-cpu-test-{_hash()[:12]}"
    released = push_candidate(docker_client, variant("kept"), repo, released_cand, client)
    failed = push_candidate(docker_client, variant("dropped"), repo, failed_cand, client)
    publish_digest(stack, released, unsigned=True,
                   registry=repo_name, config_hash=config_hash, build_dir=tmp_path, today=DAY)
    assert cleanup_candidates([stack], registry=repo_name, older_than_days=1) == []  # both brand new
    removed = cleanup_candidates(
        [stack], registry=repo_name, older_than_days=0, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    )
    assert sorted(removed) == sorted([repo.ref(released_cand), repo.ref(failed_cand)])
    tags = client.list_tags(repo.path)
    assert released_cand not in tags and failed_cand not in tags
    assert client.manifest_digest(repo.path, failed) is None
    for tag in release_tags(stack, config_hash, DAY).release:
        assert client.manifest_digest(repo.path, tag) == released
