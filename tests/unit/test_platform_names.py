"""The one home of platform names (`config/platforms`): an image's os/architecture/variant as a platform, the
default variant (arm64's v8) the same as none, any other kept."""

from __future__ import annotations

import pytest

from sglstack.config.platforms import ELF_MACHINE, MACHINE, platform_of_image, platform_of_machine
from sglstack.inimage.incontainer.elfdeps import HOST_MACHINES, MULTIARCH


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


@pytest.mark.parametrize("given,meant", [
    ("linux/arm64/v8", "linux/arm64"), ("arm64", "linux/arm64"), ("linux/aarch64", "linux/arm64"),
    ("aarch64", "linux/arm64"), ("ARM64", "linux/arm64"), ("x86_64", "linux/amd64"), ("linux/x86-64", "linux/amd64"),
    ("amd64", "linux/amd64"), ("linux/arm64", None), ("linux/arm64/v7", None), ("linux/arm/v7", None),
    ("riscv64", None), ("", None), ("linux/amd64/v8", None), ("linux/arm64/v8/x", None),
])
def test_a_near_miss_spelling_gets_a_did_you_mean_and_nothing_else_does(given, meant):
    from sglstack.config.platforms import meant_platform

    assert meant_platform(given) == meant


@pytest.mark.parametrize("given", ["linux/arm64/v8", "arm64", "linux/aarch64"])
def test_a_platform_option_spelled_another_way_is_refused_with_the_spelling_the_stack_uses(given):
    """`build/render/size --platform` and `publish-index --platform-digest` take the stack's own spelling only (the
    lock's, the index's): another one is one line naming stack and platform, with what it means."""
    from pathlib import Path

    from sglstack.config.matrix import load_matrix
    from sglstack.core.errors import ConfigError
    from sglstack.publish.index import parse_platform_digests

    stack = load_matrix(Path(__file__).resolve().parents[2] / "stacks.yaml").get("pypi-cu130-gb")
    with pytest.raises(ConfigError) as err:
        stack.for_platform(given)
    assert str(err.value) == (f"stack 'pypi-cu130-gb': platform {given} is not one of the stack's (linux/amd64 "
                              "linux/arm64); did you mean linux/arm64?")
    assert err.value.exit_code == 2
    with pytest.raises(ConfigError) as err:
        parse_platform_digests(stack, [f"{given}=sha256:{'a' * 64}", f"linux/amd64=sha256:{'b' * 64}"], "t")
    said = str(err.value)  # the item as given is cut to 80 characters
    assert said.startswith(f"stack 'pypi-cu130-gb': --platform-digest {given}=sha256:aaaa") and said.endswith(
        f": {given} is not one of the stack's platforms (linux/amd64 linux/arm64); did you mean linux/arm64?")


def test_the_in_image_copies_of_the_machine_map_agree_with_the_one_home():
    """In-image code may import nothing of ours, so the ELF lister keeps its own copy of the map: a test is its
    one home's word (preflight's node side is held to it in test_preflight_checks)."""
    assert {ELF_MACHINE[p]: MACHINE[p] for p in MACHINE} == HOST_MACHINES
    assert set(MULTIARCH) == set(MACHINE.values())
