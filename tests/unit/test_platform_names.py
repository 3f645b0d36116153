"""The one home of platform names (`config/platforms`): an image's os/architecture/variant as a platform, the
default variant (arm64's v8) the same as none, any other kept."""

from __future__ import annotations

import pytest

from sglstack.config.platforms import platform_of_image, platform_of_machine


@pytest.mark.parametrize("given,platform", [
    (("linux", "arm64", ""), "linux/arm64"), (("linux", "arm64", "v8"), "linux/arm64"),
    (("linux", "amd64", ""), "linux/amd64"), (("linux", "arm", "v7"), "linux/arm/v7"),
    (("linux", "arm64", "v9"), "linux/arm64/v9"), (("", "riscv64", ""), "linux/riscv64"),
])
def test_an_images_os_architecture_and_variant_name_one_platform(given, platform):
    assert platform_of_image(*given) == platform


def test_a_machine_name_is_the_platform_docker_calls_it():
    assert (platform_of_machine("linux", "aarch64"), platform_of_machine("linux", "x86_64"),
            platform_of_machine("", "s390x")) == ("linux/arm64", "linux/amd64", "linux/s390x")
