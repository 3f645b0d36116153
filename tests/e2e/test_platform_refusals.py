# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""Two architectures attacked as a user would: what must be refused before anything heavy happens, against the
real engine and a real registry holding one-file images of each platform (`platform_images`).

- `smoke --image` of an image (or an index) no platform of this host is served by: one line naming the image,
  its platforms and the host's, exit 2, decided from the registry's manifest before any pull."""

from __future__ import annotations

import contextlib
import secrets

import docker.errors
import pytest
from clirun import run_invoke
from platform_images import build_labels, one_file_image
from registry_fixtures import plain_registry  # noqa: F401 - fixture

from sglstack.publish.index import make_index
from sglstack.registry.client import RegistryClient

pytestmark = pytest.mark.docker


@pytest.fixture
def arm_only(docker_client, plain_registry):
    """An arm64 image pushed by the engine, and an index listing it alone, then removed from the engine:
    (repository, the image's digest, the index's tag)."""
    repo = f"{plain_registry.host}/sglstack-test/arm-only-{secrets.token_hex(4)}"
    path = repo.split("/", 1)[1]
    one_file_image(docker_client, "linux/arm64", f"{repo}:arm64", build_labels("pypi-cu130-gb", "linux/arm64"))
    docker_client.images.push(f"{repo}:arm64")
    client = RegistryClient(plain_registry.host)
    digest = client.manifest_digest(path, "arm64")
    make_index(client, path, {"linux/arm64": digest}, "grace")
    docker_client.images.remove(f"{repo}:arm64", force=True)
    yield repo, digest, "grace"
    for ref in (f"{repo}:arm64", f"{repo}:grace", f"{repo}@{digest}"):
        with contextlib.suppress(docker.errors.DockerException):
            docker_client.images.remove(ref, force=True)


def _absent(docker_client, ref: str) -> bool:
    try:
        docker_client.images.get(ref)
    except docker.errors.ImageNotFound:
        return True
    return False


@pytest.mark.parametrize("which", ["index", "digest"])
def test_smoke_of_an_image_this_host_cannot_run_is_refused_before_the_pull(arm_only, docker_client, tmp_path,
                                                                            which):
    """An arm64-only index said only "no such image" after a failed pull (exit 1); the arm64 image by digest was
    pulled whole (~10 GB for a real one) before the refusal. Both now: one line from the registry's manifest,
    exit 2, nothing on the engine."""
    repo, digest, tag = arm_only
    ref = f"{repo}:{tag}" if which == "index" else f"{repo}@{digest}"
    proc = run_invoke("smoke", "--image", ref, "--gpus", "0", "--model", "m", "--draft-model", "d", "--no-history",
                      cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, [
        f"error: image {ref} is for linux/arm64, the Docker host is linux/amd64: nothing was pulled; smoke it on a "
        "linux/arm64 node, or an index that lists linux/amd64"])
    assert _absent(docker_client, ref)
    assert not [i for i in docker_client.images.list(name=repo)]


def _push(docker_client, repo: str, platform: str, labels: dict[str, str] | None) -> str:
    """`platform`'s one-file image with `labels` pushed under REPO:ARCH-HEX: its digest (removed from the engine)."""
    tag = f"{repo}:{platform.split('/')[1]}-{secrets.token_hex(3)}"
    one_file_image(docker_client, platform, tag, labels)
    try:
        docker_client.images.push(tag)
    finally:
        docker_client.images.remove(tag, force=True)
    host, path = repo.split("/", 1)
    digest = RegistryClient(host).manifest_digest(path, tag.rsplit(":", 1)[1])
    assert digest is not None
    return digest


@pytest.mark.parametrize("case", ["another stack", "unlabelled", "unverified", "two releases", "no such manifest"])
def test_publish_index_takes_only_verified_builds_of_the_stack_and_refuses_others_as_bad_input(
        docker_client, plain_registry, tmp_path, case):
    """The unsigned path checked nothing but the platform: any image of the right architecture became the
    stack's index. Each entry is now a verified build of the stack (the labels the build stamps), both entries
    of one SGLang release; a refusal is one line naming the entry, exit 2 (was 1), and no tag is written."""
    from sglstack.core.labels import SGLANG_LABEL, STACK_LABEL, VERIFIED_LABEL

    repo = f"{plain_registry.host}/sglstack-test/idx-{secrets.token_hex(4)}"
    good = build_labels("pypi-cu130-gb", "linux/arm64")
    arm_labels = {"another stack": {**good, STACK_LABEL: "cu130"}, "unlabelled": None,
                  "unverified": {k: v for k, v in good.items() if k != VERIFIED_LABEL},
                  "two releases": {**good, SGLANG_LABEL: "0.5.22"}, "no such manifest": good}[case]
    amd = _push(docker_client, repo, "linux/amd64", {**build_labels("pypi-cu130-gb", "linux/amd64"),
                                                     SGLANG_LABEL: "0.5.23"})
    arm = _push(docker_client, repo, "linux/arm64", arm_labels)
    if case == "no such manifest":
        arm = "sha256:" + "0" * 64
    proc = run_invoke("publish-index", "--stack", "pypi-cu130-gb", "--registry", repo, "--tag", "candidate",
                      "--unsigned", "--platform-digest", f"linux/amd64={amd}", "--platform-digest",
                      f"linux/arm64={arm}", cwd=tmp_path, timeout=120)
    entry = f"sglstack-test/{repo.rsplit('/', 1)[1]}@{arm} (linux/arm64)"
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, ["error: " + {
        "another stack": f"{entry} is not a build of stack 'pypi-cu130-gb' (its {STACK_LABEL} label: 'cu130')",
        "unlabelled": f"{entry} is not a build of stack 'pypi-cu130-gb' (its {STACK_LABEL} label: none)",
        "unverified": f"{entry} is not a verified build (no {VERIFIED_LABEL}=true label)",
        "two releases": "the entries are builds of different SGLang releases (0.5.23 on linux/amd64, 0.5.22 on "
                        "linux/arm64): one index is one release",
        "no such manifest": f"{entry}: no such manifest in {plain_registry.host}",
    }[case] + ": nothing was written"])
    assert RegistryClient(plain_registry.host).manifest_digest(repo.split("/", 1)[1], "candidate") is None


def test_diff_of_a_local_arm64_image_and_an_index_compares_the_arm64_child_or_refuses(docker_client, plain_registry,
                                                                                       tmp_path):
    """A local image's platform was not read: a local arm64 build was diffed against the index's amd64 image (every
    package "changed"). Its platform (the engine's Os/Architecture/Variant) picks the index's child; an index
    without it is one line, exit 2."""
    import json

    repo = f"{plain_registry.host}/sglstack-test/diff-{secrets.token_hex(4)}"
    host, path = repo.split("/", 1)
    digests = {p: _push(docker_client, repo, p, build_labels("pypi-cu130-gb", p)) for p in ("linux/amd64",
                                                                                             "linux/arm64")}
    client = RegistryClient(host)
    make_index(client, path, digests, "both")
    make_index(client, path, {"linux/amd64": digests["linux/amd64"]}, "x86")
    local = f"sglstack-test/local-arm:{secrets.token_hex(4)}"
    one_file_image(docker_client, "linux/arm64", local, build_labels("pypi-cu130-gb", "linux/arm64"))
    try:
        proc = run_invoke("diff", local, f"{repo}:both", "--json", cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        assert [(p["platform"], p["b"]) for p in data["platforms"]] == [
            ("linux/arm64", f"{repo}@{digests['linux/arm64']} (image)")]
        assert (data["removed_platforms"], data["added_platforms"], data["notes"]) == ([], ["linux/amd64"], [])
        refused = run_invoke("diff", local, f"{repo}:x86", cwd=tmp_path, timeout=120)
        assert (refused.returncode, refused.stderr.strip().splitlines()) == (2, [
            f"error: diff: A ({local}) is linux/arm64, and B ({repo}:x86) is an index without linux/arm64 "
            "(it has linux/amd64): nothing to compare"])
    finally:
        docker_client.images.remove(local, force=True)


def test_a_compose_deploy_of_an_index_without_the_nodes_platform_is_refused_from_the_registry(arm_only, docker_client,
                                                                                              tmp_path):
    """The engine does not hold the image: its platforms are read from the registry's index (arm64 alone here),
    before compose pulls anything; the node (this amd64 engine) is refused in one line, nothing recorded."""
    from deploy_fixtures import free_port, make_test_stack

    from sglstack.core.errors import DeployError
    from sglstack.deploy.deployment import Deployment
    from sglstack.deploy.flow import deploy
    from sglstack.render import compose as cmp

    repo, _, tag = arm_only
    ref = f"{repo}:{tag}"
    dep = Deployment(stack=make_test_stack(tmp_path), build_root=tmp_path / "build",
                     project=f"sglstack-test-arm-{secrets.token_hex(4)}")
    (tmp_path / "hf").mkdir()
    said: list[str] = []
    with pytest.raises(DeployError) as err:
        deploy(dep, ref, cmp.ComposeOptions(gpus=0, port=free_port(), hf_cache=str(tmp_path / "hf")), say=said.append)
    assert str(err.value) == (f"stack 'tiny': {ref} is for linux/arm64, the node ({docker_client.info()['Name']}) is "
                              "linux/amd64: the image cannot run there (nothing was pulled or changed)")
    assert _absent(docker_client, ref) and not (tmp_path / "build" / "tiny" / "deployments.jsonl").exists()
    assert not [m for m in said if m.startswith(("pulling", "deploying"))]


def _index_body(entries: list[tuple[str, str]], client: RegistryClient, path: str) -> bytes:
    """An index written by another tool than `publish-index` (nothing checked): (digest, the architecture it is
    listed for) each."""
    import json

    from sglstack.registry.client import DOCKER_MANIFEST_LIST

    manifests = []
    for digest, arch in entries:
        child = client.get_manifest(path, digest)
        manifests.append({"mediaType": child.media_type, "digest": digest, "size": len(child.body),
                          "platform": {"architecture": arch, "os": "linux"}})
    return json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST_LIST, "manifests": manifests}).encode()


def test_an_index_that_lists_an_amd64_image_as_arm64_is_neither_promoted_nor_deployed(docker_client, plain_registry,
                                                                                        tmp_path):
    """An index made by hand (or by a tool's mistake) can list the x86 image under arm64 too: its platform list
    passed every check, and GB200 nodes got an x86 image. Each child is read now: promotion refuses it (exit 2,
    no tag moved), and so does a deploy to arm64 nodes (nothing applied)."""
    import datetime as dt
    import json
    import os

    from clirun import REPO

    from sglstack.config.matrix import load_matrix
    from sglstack.publish.digest import publish_digest
    from sglstack.publish.platforms import IndexNotItsPlatforms
    from sglstack.registry.client import DOCKER_MANIFEST_LIST, compute_digest

    repo = f"{plain_registry.host}/sglstack-test/lying-{secrets.token_hex(4)}"
    host, path = repo.split("/", 1)
    amd = _push(docker_client, repo, "linux/amd64", build_labels("pypi-cu130-gb", "linux/amd64"))
    client = RegistryClient(host)
    body = _index_body([(amd, "amd64"), (amd, "arm64")], client, path)
    index = client.put_manifest(path, compute_digest(body), body, DOCKER_MANIFEST_LIST)
    said = (f"{host}/{path}@{index} lists {amd} for linux/arm64, but it is a linux/amd64 image: a node of linux/arm64 "
            "would run another CPU's image")
    stack = load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb")
    with pytest.raises(IndexNotItsPlatforms) as err:
        publish_digest(stack, index, unsigned=True, registry=repo, config_hash="0123456789ab", build_dir=tmp_path,
                       today=dt.date(2026, 12, 5))
    assert (str(err.value), err.value.exit_code) == (said, 2)
    assert [t.split("-")[0] for t in client.list_tags(path)] == ["amd64"]  # no release tag moved
    env = {"PATH": f"{REPO / 'tests' / 'doubles' / 'kubectl'}{os.pathsep}{os.environ['PATH']}",
           "KUBECTL_DOUBLE_STATE": str(tmp_path / "kube"), "KUBECTL_DOUBLE_CONTEXT": "gb200-nvl72",
           "KUBECTL_DOUBLE_NODES": "arm64,arm64", "SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    proc = run_invoke("deploy", "--stack", "pypi-cu130-gb", "--on", "k8s", "--image", f"{repo}@{index}",
                      "--wait-timeout", "30", cwd=tmp_path, env=env, timeout=120)
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (
        1, f"error: stack 'pypi-cu130-gb': {said} (nothing was pulled or changed)")
    calls = [json.loads(line) for line in (tmp_path / "kube" / "argv.jsonl").read_text().splitlines()]
    assert not [c for c in calls if "apply" in c]


def test_diff_of_a_local_amd64_image_and_a_local_arm64_one_says_they_are_of_two_platforms(docker_client, tmp_path):
    """Two local builds of one stack, one per platform: compared (not refused), the heading naming each side's
    platform, as two locks of two platforms are; two images of one platform name none."""
    import json

    tags = {p: f"sglstack-test/two-{p[6:]}:{secrets.token_hex(4)}" for p in ("linux/amd64", "linux/arm64")}
    for platform, tag in tags.items():
        one_file_image(docker_client, platform, tag, build_labels("pypi-cu130-gb", platform))
    try:
        proc = run_invoke("diff", tags["linux/amd64"], tags["linux/arm64"], "--json", cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        assert (data["a"], data["b"], data["platform"]) == (
            f"{tags['linux/amd64']} (image, linux/amd64)", f"{tags['linux/arm64']} (image, linux/arm64)",
            {"name": "platform", "before": "linux/amd64", "after": "linux/arm64", "kind": "changed"})
        same = run_invoke("diff", tags["linux/arm64"], tags["linux/arm64"], "--json", cwd=tmp_path, timeout=120)
        assert json.loads(same.stdout)["platform"] is None
    finally:
        for tag in tags.values():
            docker_client.images.remove(tag, force=True)
