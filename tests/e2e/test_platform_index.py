# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""One release of two platforms in a real registry: each platform's image pushed by digest with the real engine,
one index over them (`publish-index`), read back as both platforms; an entry listed for the wrong platform is
refused, and a deploy's node check refuses a node the image has no platform for, before anything is pulled."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import secrets

import docker.errors
import pytest
from clirun import REPO, run_invoke
from platform_images import build_labels, one_file_image
from registry_fixtures import plain_registry  # noqa: F401 - fixture

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import DeployError
from sglstack.publish.history import PublishError
from sglstack.publish.index import make_index, publish_index
from sglstack.publish.platforms import check_node_platform, reference_platforms
from sglstack.registry.client import DOCKER_MANIFEST_LIST, RegistryClient

pytestmark = pytest.mark.docker


@pytest.fixture
def pushed(docker_client, plain_registry):
    """Each platform's image pushed to the registry by the engine: (repository, {platform: digest})."""
    repo = f"{plain_registry.host}/sglstack-test/multi-{secrets.token_hex(4)}"
    digests = {}
    for platform in ("linux/amd64", "linux/arm64"):
        tag = f"{repo}:{platform.split('/')[1]}"
        one_file_image(docker_client, platform, tag, build_labels("pypi-cu130-gb", platform))
        docker_client.images.push(tag)
        digests[platform] = RegistryClient(plain_registry.host).manifest_digest(repo.split("/", 1)[1],
                                                                                 platform.split("/")[1])
    yield repo, digests
    for platform in digests:
        docker_client.images.remove(f"{repo}:{platform.split('/')[1]}", force=True)


def test_one_index_lists_both_platforms_and_a_node_is_checked_against_it(pushed, docker_client):
    repo, digests = pushed
    stack = load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb")
    made = publish_index(stack, [f"{p}={d}" for p, d in digests.items()], tag="candidate-index", registry=repo)
    assert made.platforms == ("linux/amd64", "linux/arm64")
    manifest = RegistryClient(repo.split("/")[0]).get_manifest(repo.split("/", 1)[1], made.digest)
    assert manifest.media_type == DOCKER_MANIFEST_LIST  # a 20.10 engine pushes Docker manifests
    assert [(m["digest"], m["platform"]) for m in manifest.json()["manifests"]] == [
        (digests["linux/amd64"], {"architecture": "amd64", "os": "linux"}),
        (digests["linux/arm64"], {"architecture": "arm64", "os": "linux", "variant": "v8"})]
    assert reference_platforms(made.ref) == ("linux/amd64", "linux/arm64")
    said: list[str] = []
    check_node_platform("pypi-cu130-gb", made.ref, "the node (gb200-1)", ("linux/arm64",), said.append)
    check_node_platform("pypi-cu130-gb", made.ref, "the node (h200-1)", ("linux/amd64",), said.append)
    assert said == []
    x86_only = f"{repo}@{digests['linux/amd64']}"
    with pytest.raises(DeployError) as err:
        check_node_platform("pypi-cu130-gb", x86_only, "every node of gb200-nvl72", ("linux/arm64",), said.append)
    assert str(err.value) == (f"stack 'pypi-cu130-gb': {x86_only} is for linux/amd64, every node of gb200-nvl72 is "
                              "linux/arm64: the image cannot run there (nothing was pulled or changed)")


def test_diff_of_two_indexes_is_platform_by_platform(pushed, tmp_path):
    """`invoke diff` of an index and one of fewer platforms: the platform both have compared, the other removed."""
    import json

    repo, digests = pushed
    client = RegistryClient(repo.split("/")[0])
    path = repo.split("/", 1)[1]
    make_index(client, path, digests, "both")
    make_index(client, path, {"linux/amd64": digests["linux/amd64"]}, "amd64-only")
    proc = run_invoke("diff", f"{repo}:both", f"{repo}:amd64-only", "--json", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["index"], data["added_platforms"], data["removed_platforms"]) == (True, [], ["linux/arm64"])
    assert [(p["platform"], p["a"], p["identical"]) for p in data["platforms"]] == [
        ("linux/amd64", f"{repo}@{digests['linux/amd64']} (image)", True)]
    text = run_invoke("diff", f"{repo}:amd64-only", f"{repo}:both", cwd=tmp_path, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "platform linux/arm64: added (only B has it)" in text.stdout.splitlines()


def test_an_image_listed_for_another_platform_is_refused_and_nothing_is_written(pushed):
    repo, digests = pushed
    client = RegistryClient(repo.split("/")[0])
    path = repo.split("/", 1)[1]
    with pytest.raises(PublishError) as err:
        make_index(client, path, {"linux/amd64": digests["linux/amd64"], "linux/arm64": digests["linux/amd64"]},
                   "candidate-wrong")
    assert str(err.value) == (f"{path}@{digests['linux/amd64']} is a linux/amd64 image, listed for linux/arm64: "
                              "nothing was written")
    assert err.value.exit_code == 2  # bad input: the entry given is not that platform's image
    assert client.manifest_digest(path, "candidate-wrong") is None


def test_the_task_writes_the_index_and_says_how_to_promote_it(pushed, tmp_path):
    repo, digests = pushed
    proc = run_invoke("publish-index", "--stack", "pypi-cu130-gb", "--registry", repo, "--tag", "candidate-idx",
                      "--unsigned", *(x for p, d in digests.items() for x in ("--platform-digest", f"{p}={d}")),
                      cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    digest = RegistryClient(repo.split("/")[0]).manifest_digest(repo.split("/", 1)[1], "candidate-idx")
    assert proc.stdout.splitlines() == [
        f"pypi-cu130-gb: index {repo}@{digest} (linux/amd64 linux/arm64) under tag candidate-idx: smoke it where the "
        f"node matches, then invoke publish --stack pypi-cu130-gb --digest {digest}"]
    missing = run_invoke("publish-index", "--stack", "pypi-cu130-gb", "--registry", repo, "--tag", "t", "--unsigned",
                         "--platform-digest", f"linux/amd64={digests['linux/amd64']}", cwd=tmp_path, timeout=120)
    assert (missing.returncode, missing.stderr.splitlines()) == (2, [
        "error: stack 'pypi-cu130-gb': no --platform-digest for linux/arm64: an index of the stack lists every "
        "platform it builds"])


def _release_unsigned(client: RegistryClient, repo: str, digest: str) -> None:
    """What `build --push --unsigned` attaches to a platform's image: its SBOM and provenance, no signature."""
    import datetime as dt

    from sglstack.attest.provenance import provenance_statement
    from sglstack.attest.store import attach
    from sglstack.inventory.model import Inventory
    from sglstack.inventory.sbom import sbom_document

    path = repo.split("/", 1)[1]
    config = client.get_manifest(path, digest).blobs()[0]
    record = {"stack": "pypi-cu130-gb", "target": "runtime", "image_id": config, "config_hash": "c" * 64,
              "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic"}, "pins": {},
              "base_image": {"name": "seed", "digest": None}, "sglang": {"version": "0.5.23", "git": None},
              "provenance": {"patches": {}, "sglstack": {}}}
    sbom = sbom_document(Inventory(python={"wheel": "0.45"}, debian=()), image_name=repo, image_id=config,
                         created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC))
    attach(client, path, digest, [("sbom", sbom), ("provenance", provenance_statement(record, repository=repo,
                                                                                      digest=digest))])


def test_a_signed_index_verifies_platform_by_platform_and_an_unsigned_platform_moves_no_tag(pushed, tmp_path):
    """`publish-index --signing-key` signs each platform's released image and the index before the tag; verify-image
    of the tag lists each platform and its verdict (exit 0), and exits 1 for another key, naming every platform."""
    import json

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from sglstack.attest.signing import public_pem

    repo, digests = pushed
    client = RegistryClient(repo.split("/")[0])
    path = repo.split("/", 1)[1]
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    (tmp_path / "pub.pem").write_bytes(public_pem(key))
    (tmp_path / "other.pem").write_bytes(public_pem(other))
    args = ["publish-index", "--stack", "pypi-cu130-gb", "--registry", repo, "--signing-key", str(tmp_path / "key.pem"),
            *(x for p, d in digests.items() for x in ("--platform-digest", f"{p}={d}"))]
    _release_unsigned(client, repo, digests["linux/amd64"])  # arm64 has no SBOM and provenance: nothing to sign
    refused = run_invoke(*args, "--tag", "candidate-refused", cwd=tmp_path, timeout=120)
    assert refused.returncode == 1 and "no SBOM and provenance of stack 'pypi-cu130-gb'" in refused.stderr
    assert client.manifest_digest(path, "candidate-refused") is None
    _release_unsigned(client, repo, digests["linux/arm64"])
    proc = run_invoke(*args, "--tag", "candidate-signed", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    index = client.manifest_digest(path, "candidate-signed")
    assert [line.split(":")[0] for line in proc.stdout.splitlines()[:3]] == [
        "  signed", "  signed", "  signed"]
    verify = run_invoke("verify-image", f"{repo}:candidate-signed", "--verify-key", str(tmp_path / "pub.pem"),
                        "--json", cwd=tmp_path, timeout=120)
    assert verify.returncode == 0, verify.stderr
    report = json.loads(verify.stdout)
    assert (report["digest"], report["verified"]) == (index, True)
    assert [(p["platform"], p["digest"], p["verified"]) for p in report["platforms"]] == [
        ("index", index, True), ("linux/amd64", digests["linux/amd64"], True),
        ("linux/arm64", digests["linux/arm64"], True)]
    wrong = run_invoke("verify-image", f"{repo}:candidate-signed", "--verify-key", str(tmp_path / "other.pem"),
                       cwd=tmp_path, timeout=120)
    assert wrong.returncode == 1
    assert [line.split()[:3] for line in wrong.stdout.splitlines()] == [
        ["index", index, "NOT"], ["linux/amd64", digests["linux/amd64"], "NOT"],
        ["linux/arm64", digests["linux/arm64"], "NOT"]]
    sbom = run_invoke("sbom", f"{repo}:candidate-signed", "--verify-key", str(tmp_path / "pub.pem"), cwd=tmp_path,
                      timeout=120)
    assert sbom.returncode == 0, sbom.stderr
    shown = json.loads(sbom.stdout)
    assert shown["index"] == index
    assert [(p["platform"], p["image"], p["signature"].split(":")[0]) for p in shown["platforms"]] == [
        ("linux/amd64", f"{repo}@{digests['linux/amd64']}", "signed"),
        ("linux/arm64", f"{repo}@{digests['linux/arm64']}", "signed")]
    assert [line.split()[:2] for line in sbom.stderr.splitlines()] == [["sbom:", "linux/amd64"],
                                                                        ["sbom:", "linux/arm64"]]


def test_a_compose_deploy_of_an_image_for_another_platform_is_refused_before_anything(docker_client, tmp_path):
    """The x86-tag-on-GB200 failure, the other way round on this amd64 engine: one line, nothing pulled, run or
    recorded (the image is local here, so its platform is the engine's record of it)."""
    from deploy_fixtures import free_port, make_test_stack

    from sglstack.deploy.deployment import Deployment
    from sglstack.deploy.flow import deploy
    from sglstack.publish.platforms import engine_platform
    from sglstack.render import compose as cmp

    assert engine_platform(docker_client) == "linux/amd64"
    tag = f"sglstack-test/arm-only:{secrets.token_hex(4)}"
    one_file_image(docker_client, "linux/arm64", tag)
    dep = Deployment(stack=make_test_stack(tmp_path), build_root=tmp_path / "build",
                     project=f"sglstack-test-arm-{secrets.token_hex(4)}")
    (tmp_path / "hf").mkdir()
    said: list[str] = []
    try:
        with pytest.raises(DeployError) as err:
            deploy(dep, tag, cmp.ComposeOptions(gpus=0, port=free_port(), hf_cache=str(tmp_path / "hf")),
                   say=said.append)
    finally:
        docker_client.images.remove(tag, force=True)
    name = docker_client.info()["Name"]
    assert str(err.value) == (f"stack 'tiny': {tag} is for linux/arm64, the node ({name}) is linux/amd64: the image "
                              "cannot run there (nothing was pulled or changed)")
    assert not [m for m in said if m.startswith(("pulling", "deploying"))]
    assert not (tmp_path / "build" / "tiny" / "deployments.jsonl").exists()


def test_a_k8s_deploy_of_an_x86_only_image_to_grace_nodes_is_refused_before_anything_is_applied(pushed, tmp_path):
    """InferenceX PR#1582's failure (an x86-only tag on GB200 nodes) as one line, with the recording kubectl
    stand-in's nodes all arm64: nothing applied, nothing recorded; the index deploys to the same nodes."""
    import json
    import os
    from pathlib import Path

    repo, digests = pushed
    env = {"PATH": f"{REPO / 'tests' / 'doubles' / 'kubectl'}{os.pathsep}{os.environ['PATH']}",
           "KUBECTL_DOUBLE_STATE": str(tmp_path / "kube"), "KUBECTL_DOUBLE_CONTEXT": "gb200-nvl72",
           "KUBECTL_DOUBLE_NODES": "arm64,arm64", "SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    x86_only = f"{repo}@{digests['linux/amd64']}"
    proc = run_invoke("deploy", "--stack", "pypi-cu130-gb", "--on", "k8s", "--image", x86_only, "--wait-timeout",
                      "30", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: stack 'pypi-cu130-gb': {x86_only} is for linux/amd64, every node of gb200-nvl72 is linux/arm64: the "
        "image cannot run there (nothing was pulled or changed)")
    calls = [json.loads(line) for line in (tmp_path / "kube" / "argv.jsonl").read_text().splitlines()]
    assert not [c for c in calls if "apply" in c]
    assert not (Path(env["SGLSTACK_BUILD_DIR"]) / "pypi-cu130-gb" / "deployments.jsonl").exists()
    index = publish_index(load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb"),
                          [f"{p}={d}" for p, d in digests.items()], tag="candidate-k8s", registry=repo)
    proc = run_invoke("deploy", "--stack", "pypi-cu130-gb", "--on", "k8s", "--image", index.ref, "--wait-timeout",
                      "30", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr

    # A rollback is checked as a deploy is: the x86-only image, healthy once on x86 nodes, is not put back on
    # the Grace nodes the index now serves on.
    records = Path(env["SGLSTACK_BUILD_DIR"]) / "pypi-cu130-gb" / "deployments.jsonl"
    lines = records.read_text().splitlines()
    first = {**json.loads(lines[-1]), "image": x86_only, "digest": digests["linux/amd64"],
             "time": "2026-12-01T00:00:00Z"}
    records.write_text(json.dumps(first) + "\n" + "\n".join(lines) + "\n")  # the x86 deployment came first
    before = len((tmp_path / "kube" / "argv.jsonl").read_text().splitlines())
    proc = run_invoke("rollback", "--stack", "pypi-cu130-gb", "--on", "k8s", "--wait-timeout", "30", cwd=tmp_path,
                      env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: stack 'pypi-cu130-gb': {x86_only} is for linux/amd64, every node of gb200-nvl72 is linux/arm64: the "
        "image cannot run there (nothing was pulled or changed)")
    calls = [json.loads(line) for line in (tmp_path / "kube" / "argv.jsonl").read_text().splitlines()]
    assert not [c for c in calls[before:] if "apply" in c]
    assert len(records.read_text().splitlines()) == len(lines) + 1  # nothing recorded


def test_smoke_serves_an_index_by_its_digest_and_refuses_another_platforms_image(
        docker_client, plain_registry, sglang_double_image, tmp_path):
    """`smoke --image REPO@sha256:INDEX` on this x86 host: the engine pulls the index's linux/amd64 image (the
    SGLang double), the report names the index digest (what `publish --digest` promotes) and the platform served.
    The arm64 image of the same index, smoked here by its own digest, is refused before any server starts:
    binfmt would run it under QEMU."""
    from smoke_fixtures import LABEL, fast_options

    from sglstack.core.errors import SmokeInputError
    from sglstack.smoke import run_smoke

    repo = f"{plain_registry.host}/sglstack-test/smoke-index-{secrets.token_hex(4)}"
    path = repo.split("/", 1)[1]
    tags = {"linux/amd64": f"{repo}:amd64", "linux/arm64": f"{repo}:arm64"}
    docker_client.images.get(sglang_double_image).tag(tags["linux/amd64"])
    one_file_image(docker_client, "linux/arm64", tags["linux/arm64"])
    client = RegistryClient(plain_registry.host)
    label = f"smoke-{secrets.token_hex(4)}"
    try:
        for tag in tags.values():
            docker_client.images.push(tag)
        digests = {p: client.manifest_digest(path, t.rsplit(":", 1)[1]) for p, t in tags.items()}
        index, _ = make_index(client, path, digests, "candidate")
        for tag in tags.values():  # the engine now holds neither: the index is pulled by its digest
            docker_client.images.remove(tag)
        report = run_smoke(None, f"{repo}@{index}", fast_options(tmp_path, label))
        assert report.passed, report.failures
        image = report.data["image"]
        assert (image["digest"], image["platform"]) == (index, "linux/amd64")
        assert image["id"] == docker_client.images.get(sglang_double_image).id

        # the index smoke-tested is the digest promoted: every release tag points to the index, or none
        from sglstack.publish.digest import publish_digest
        from sglstack.publish.tags import release_tags
        stack = load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb")
        (tmp_path / "smoke-report.json").write_text(json.dumps(report.data))
        assert publish_digest(stack, index, unsigned=True, registry=repo, config_hash="0123456789ab",
                              smoke_report=str(tmp_path / "smoke-report.json"), build_dir=tmp_path / "build",
                              today=dt.date(2026, 12, 2)) == 0
        released = release_tags(stack, "0123456789ab", dt.date(2026, 12, 2))
        for tag in (released.immutable, *released.moving):
            assert client.manifest_digest(path, tag) == index, tag
        assert client.image_platforms(path, released.moving[0]) == ("linux/amd64", "linux/arm64")

        arm = f"{repo}@{digests['linux/arm64']}"
        with pytest.raises(SmokeInputError) as err:
            run_smoke(None, arm, fast_options(tmp_path, label))
        assert str(err.value).startswith(f"image {arm} is for linux/arm64, the Docker host is linux/amd64: ")
        assert not docker_client.containers.list(all=True, filters={"label": f"{LABEL}={label}"})
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": f"{LABEL}={label}"}):
            container.remove(force=True)
        for ref in (*tags.values(), f"{repo}@{digests['linux/arm64']}" if "digests" in locals() else None):
            if ref:
                with contextlib.suppress(docker.errors.DockerException):
                    docker_client.images.remove(ref, force=True)


def test_a_stack_of_two_platforms_promotes_only_a_digest_that_serves_both(pushed, tmp_path):
    """`publish --digest` of one platform's image would send every node of the other platform an image it cannot
    run (and two platforms' releases would overwrite each other's tags): refused before any tag moves."""
    from sglstack.attest.errors import BadInput
    from sglstack.publish.digest import publish_digest

    repo, digests = pushed
    stack = load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb")
    client = RegistryClient(repo.split("/", 1)[0])
    path = repo.split("/", 1)[1]
    for platform, other in (("linux/amd64", "linux/arm64"), ("linux/arm64", "linux/amd64")):
        with pytest.raises(BadInput) as err:
            publish_digest(stack, digests[platform], unsigned=True, registry=repo, config_hash="0123456789ab",
                           build_dir=tmp_path)
        assert str(err.value) == (
            f"stack 'pypi-cu130-gb' is released for linux/amd64 linux/arm64: {repo}@{digests[platform]} serves "
            f"{platform}, not {other}; promote the index of every platform (invoke publish-index)")
    assert sorted(client.list_tags(path)) == ["amd64", "arm64"]  # no release tag moved


def test_a_mixed_cluster_takes_only_an_image_of_every_platform_its_pods_may_land_on(pushed, tmp_path):
    """GB200 racks beside x86 nodes: the pods of a two-platform stack may land on either (their node affinity), so
    an x86-only image is refused there (it passed when any node matched), and the index of both deploys."""
    import json
    import os

    repo, digests = pushed
    env = {"PATH": f"{REPO / 'tests' / 'doubles' / 'kubectl'}{os.pathsep}{os.environ['PATH']}",
           "KUBECTL_DOUBLE_STATE": str(tmp_path / "kube"), "KUBECTL_DOUBLE_CONTEXT": "mixed",
           "KUBECTL_DOUBLE_NODES": "amd64,arm64,arm64", "SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    x86_only = f"{repo}@{digests['linux/amd64']}"
    proc = run_invoke("deploy", "--stack", "pypi-cu130-gb", "--on", "k8s", "--image", x86_only, "--wait-timeout",
                      "30", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: stack 'pypi-cu130-gb': {x86_only} is for linux/amd64, and mixed has linux/arm64 nodes the pods may "
        "land on (the stack is linux/amd64 linux/arm64): the image cannot run there (nothing was pulled or changed)")
    calls = [json.loads(line) for line in (tmp_path / "kube" / "argv.jsonl").read_text().splitlines()]
    assert not [c for c in calls if "apply" in c]
    index = publish_index(load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb"),
                          [f"{p}={d}" for p, d in digests.items()], tag="candidate-mixed", registry=repo)
    proc = run_invoke("deploy", "--stack", "pypi-cu130-gb", "--on", "k8s", "--image", index.ref, "--wait-timeout",
                      "30", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    applied = json.loads(next((tmp_path / "kube" / "objects").glob("LeaderWorkerSet.*.json")).read_text())
    pod = applied["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}]
