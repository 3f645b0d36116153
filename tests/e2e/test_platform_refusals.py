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
