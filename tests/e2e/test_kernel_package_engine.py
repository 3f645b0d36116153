"""The kernel package's checks that need the engine or the package index (split from tests/unit/test_kernel_package.py):
the base image's glibc, a base pinned by image id, and uv's own reason for a release without wheels."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglstack.lock.flow import LockError, resolve_stack

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.docker
def test_glibc_is_read_from_the_base_image_without_running_it(stacks_matrix):
    from sglstack.lock.plan import base_image_glibc  # the Docker part: only this test needs an engine

    stack = stacks_matrix.get("pypi-cu130").model_copy(update={"base_image": "debian:bookworm-slim", "glibc": None})
    assert base_image_glibc(stack) == "2.36"
    assert base_image_glibc(stack.model_copy(update={"base_image": "sglstack-test/absent:never"})) is None


@pytest.mark.network  # by hand: uv reaches the index itself, through no fixture
def test_a_release_without_wheels_for_the_platform_fails_with_uvs_own_reason(stacks_matrix):
    """Real uv against the package index: 0.5.23 has manylinux_2_34 wheels only; at 2.28 the lock must say so."""
    stack = stacks_matrix.get("pypi-cu130").model_copy(update={"glibc": "2.28", "torch": None, "flashinfer": None,
                                                         "sgl_kernel": None})
    with pytest.raises(LockError) as err:
        resolve_stack(stack)
    message = str(err.value)
    assert "x86_64-manylinux_2_28" in message and "the stack requires sglang==0.5.23" in message
    assert "manylinux_2_34_x86_64" in message  # uv's hint: where the wheels are


@pytest.mark.docker
def test_a_base_pinned_by_image_id_is_checked_before_the_build(stacks_matrix):
    from sglstack.adapters.docker import docker_client
    from sglstack.core.errors import BuildError
    from sglstack.imagebuild.verify import check_base_image  # the engine side: only the docker tests need it

    client = docker_client()
    bookworm = client.images.get("debian:bookworm-slim").id
    stack = stacks_matrix.get("pypi-cu130").model_copy(update={"base_image": "debian:bookworm-slim",
                                                        "base_image_id": bookworm, "base_seed": None})
    check_base_image(client, stack)  # the same image: nothing to say
    other = stack.model_copy(update={"base_image_id": "sha256:" + "0" * 64})
    with pytest.raises(BuildError) as err:
        check_base_image(client, other)
    assert str(err.value) == (f"stack 'pypi-cu130': base_image debian:bookworm-slim is image {bookworm}, but the "
                              f"stack pins base_image_id sha256:{'0' * 64}")
    with pytest.raises(BuildError, match="is not on this engine"):
        check_base_image(client, other.model_copy(update={"base_image": "sglstack-test/absent:never"}))
