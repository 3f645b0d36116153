"""A seeded base on a real engine: `docker load` of the seed's archive records the platform and the root file
system's digest as its one layer (a `docker import` records neither: it says amd64 and stamps the time), and the
build refuses a base that is not the pinned root file system for the platform it builds."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from sglstack.config.baseseed import BaseSeed, docker_archive, image_config
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import BuildError

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
BASE = "sglstack-test/seed:tiny"


def _rootfs() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        data = b"a seeded root file system\n"
        info = tarfile.TarInfo("./etc/seeded")
        info.size, info.mtime = len(data), 1735689600
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def seeded(docker_client):
    """The tiny root file system loaded as the arm64 base of a two-platform stack; removed afterwards."""
    rootfs = _rootfs()
    digest = "sha256:" + hashlib.sha256(rootfs).hexdigest()
    seed = BaseSeed(rootfs={"linux/amd64": "sha256:" + "a" * 64, "linux/arm64": digest})
    config = image_config(seed, "linux/arm64", digest)
    docker_client.images.load(b"".join(docker_archive(config, f"{BASE}-arm64", len(rootfs), [rootfs], seed.epoch)))
    stack = load_matrix(REPO / "stacks.yaml").get("pypi-cu130").model_copy(update={
        "base_image": BASE, "platforms": ("linux/amd64", "linux/arm64"), "base_seed": seed})
    yield stack, digest, config
    docker_client.images.remove(f"{BASE}-arm64", force=True)


def test_the_seed_is_loaded_as_its_platform_with_the_tar_as_its_layer_and_a_reproducible_id(docker_client, seeded):
    _, digest, config = seeded
    attrs = docker_client.images.get(f"{BASE}-arm64").attrs
    assert (attrs["Architecture"], attrs["Os"], attrs["RootFS"]["Layers"]) == ("arm64", "linux", [digest])
    assert attrs["Id"] == "sha256:" + hashlib.sha256(config).hexdigest()  # the same on every machine
    assert attrs["Created"].startswith("2025-01-01T00:00:00")


def test_the_build_checks_the_seeded_base_of_the_platform_it_builds(docker_client, seeded):
    from sglstack.imagebuild.verify import check_base_image

    stack, digest, _ = seeded
    check_base_image(docker_client, stack.for_platform("linux/arm64"))  # the pinned rootfs: nothing to say
    with pytest.raises(BuildError) as err:
        check_base_image(docker_client, stack.for_platform("linux/amd64"))
    assert str(err.value) == (f"stack 'pypi-cu130': base_image {BASE}-amd64 is not on this engine: run invoke "
                              f"seed-base --stack pypi-cu130 (it makes the pinned root file system "
                              f"sha256:{'a' * 64})")
    moved = stack.model_copy(update={"base_seed": stack.base_seed.model_copy(update={"rootfs": {
        "linux/amd64": "sha256:" + "a" * 64, "linux/arm64": "sha256:" + "b" * 64}})})
    with pytest.raises(BuildError) as err:
        check_base_image(docker_client, moved.for_platform("linux/arm64"))
    assert str(err.value) == (f"stack 'pypi-cu130': base_image {BASE}-arm64 is not the pinned root file system "
                              f"(its layers: {digest}; base_seed.rootfs pins sha256:{'b' * 64}): run invoke "
                              f"seed-base --stack pypi-cu130")


def test_an_image_of_the_other_platform_under_the_name_is_refused(docker_client, seeded):
    from sglstack.imagebuild.verify import check_base_image

    stack, _, _ = seeded
    docker_client.images.get(f"{BASE}-arm64").tag(f"{BASE}-amd64")
    try:
        with pytest.raises(BuildError) as err:
            check_base_image(docker_client, stack.for_platform("linux/amd64"))
    finally:
        docker_client.images.remove(f"{BASE}-amd64")
    assert str(err.value) == (f"stack 'pypi-cu130': base_image {BASE}-amd64 is a linux/arm64 image, the build is "
                              f"for linux/amd64")
