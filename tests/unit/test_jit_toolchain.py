# ruff: noqa: F811 - the fixture imported from jit_fixtures is a parameter here
"""The JIT toolchain check, against NVIDIA's real compiler (the nvcc, CCCL and runtime wheels from PyPI, no GPU:
compiling and linking needs none): the toolkit layout a CUDA-from-wheels image needs, made by the rendered
Dockerfile's own step, and the mismatch that CCCL refuses, named in the build's words."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jit_fixtures import cuda_wheel_toolkits  # noqa: F401 - a fixture

from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.judge import image_check_problems, jit_problems
from sglstack.render.dockerfile import render_dockerfile

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "sglstack" / "inimage" / "incontainer"
ARCHS = ("9.0", "10.0", "10.3", "12.0")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="nvcc needs a host compiler: .ci/provision.sh")


def imagecheck_jit(cuda_home: Path, archs=ARCHS, tmp: Path | None = None) -> dict:
    """imagecheck.py as the build runs it in the image, with this CUDA_HOME."""
    site = tmp or cuda_home.parent  # the shared-library part needs a folder; the toolkit's own is fine
    env = {**os.environ, "CUDA_HOME": str(cuda_home), "PYTHONPATH": str(TOOLS)}
    proc = subprocess.run([sys.executable, str(TOOLS / "imagecheck.py"), "--site", str(site),
                           *(f"--jit-arch={a}" for a in archs)], capture_output=True, text=True, env=env,
                          check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["jit_toolchain"]


def layout_step(stack_name: str) -> str:
    """The rendered serving stage's toolkit layout step, as the shell command its RUN line runs."""
    dockerfile = render_dockerfile(load_matrix(REPO / "stacks.yaml").get(stack_name))
    m = re.search(r"^RUN (cudart=.*?)(?<!\\)\n", dockerfile, re.MULTILINE | re.DOTALL)
    assert m, "no toolkit layout step in the rendered Dockerfile"
    return m.group(1).replace("\\\n", "")  # Docker joins continued lines


def test_the_wheel_toolkit_links_only_after_the_rendered_layout_step(cuda_wheel_toolkits, tmp_path):
    home = cuda_wheel_toolkits["matched"]
    before = imagecheck_jit(home, ("9.0",), tmp_path)
    assert before["release"] == "13.0" and before["returncode"] != 0
    assert before["driver_stub"] is None
    assert jit_problems(before, "13.0") == [
        f"JIT toolchain: nothing for -lcuda: no {home}/lib64/stubs/libcuda.so (FlashInfer links every JIT module "
        "with -lcuda: a CUDA toolkit's stub, or a link to the driver's libcuda.so.1 that the NVIDIA runtime mounts)",
        f"JIT toolchain: {home}/bin/nvcc (CUDA 13.0) cannot build a CUDA extension for 9.0 with "
        "-L$CUDA_HOME/lib64 -lcudart: /usr/bin/ld: cannot find -lcudart: No such file or directory"]

    for stack in ("pypi-cu130", "cu130"):  # both CUDA-from-wheels stacks render the same step
        assert layout_step(stack) == layout_step("pypi-cu130")
    subprocess.run(["bash", "-euo", "pipefail", "-c", layout_step("pypi-cu130")], check=True, timeout=60,
                   env={**os.environ, "CUDA_HOME": str(home)})
    assert os.readlink(home / "lib64") == "lib" and os.readlink(home / "lib" / "libcudart.so") == "libcudart.so.13"
    multiarch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True, check=True).stdout.strip()
    driver = f"/usr/lib/{multiarch}/libcuda.so.1"  # where the NVIDIA runtime mounts the driver's library
    assert os.readlink(home / "lib64" / "stubs" / "libcuda.so") == driver

    after = imagecheck_jit(home, ARCHS, tmp_path)
    assert (after["returncode"], after["error"], after["archs"], after["driver_stub"]) == (0, None, list(ARCHS), driver)
    assert jit_problems(after, "13.0") == [] and image_check_problems({"jit_toolchain": after}, cuda="13.0") == []
    # the same compiler is not the CUDA of a 12.9 stack, even where it compiles
    assert jit_problems(after, "12.9.1") == [
        f"JIT toolchain: {home}/bin/nvcc is CUDA 13.0, the stack's CUDA is 12.9 (pin the compiler to the CUDA of "
        "its headers, e.g. cuda-toolkit[nvcc,cccl]==12.9.*)"]


def test_a_newer_compiler_over_the_runtimes_headers_is_refused_by_name(cuda_wheel_toolkits, tmp_path):
    """pypi-cu130 before its cuda-jit layer: nvcc 13.5 and CCCL 13.3 over torch's CUDA 13.0 headers."""
    home = cuda_wheel_toolkits["newer_compiler"]
    subprocess.run(["bash", "-euo", "pipefail", "-c", layout_step("pypi-cu130")], check=True, timeout=60,
                   env={**os.environ, "CUDA_HOME": str(home)})
    report = imagecheck_jit(home, ("9.0",), tmp_path)
    assert report["release"] == "13.5" and report["returncode"] != 0
    mismatch, refused = jit_problems(report, "13.0")
    assert mismatch == (f"JIT toolchain: {home}/bin/nvcc is CUDA 13.5, the stack's CUDA is 13.0 (pin the compiler "
                        "to the CUDA of its headers, e.g. cuda-toolkit[nvcc,cccl]==13.0.*)")
    assert refused.startswith(f"JIT toolchain: {home}/bin/nvcc (CUDA 13.5) cannot build a CUDA extension for 9.0 "
                              "with -L$CUDA_HOME/lib64 -lcudart: ")
    assert refused.endswith('error: #error "CUDA compiler and CUDA toolkit headers are incompatible, please check '
                            'your include paths"')


def test_no_compiler_in_the_image_is_one_line(tmp_path):
    report = imagecheck_jit(tmp_path / "nowhere", ("9.0",), tmp_path)
    assert report["returncode"] is None
    assert jit_problems(report, "13.0") == [
        f"JIT toolchain: no nvcc at {tmp_path}/nowhere/bin/nvcc (FlashInfer, DeepGEMM and torch compile kernels "
        "with $CUDA_HOME/bin/nvcc at run time)"]
