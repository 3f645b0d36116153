"""Today's SGLang in the matrix: the kernel package is named by the stack, the lock's platform tag follows
the base image's glibc, and a resolver conflict shows uv's own reason.

sglang 0.5.23 renamed its kernel package (`sgl-kernel` -> `sglang-kernel`) and ships manylinux_2_34 wheels
only; the repo's `pypi-cu130` stack is that release, `cu130` / `cu129` keep the old name and must not move.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sglstack.adapters.uv import Resolution, ResolvedPackage
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError
from sglstack.coverage.rules import device_code_wheels
from sglstack.lock.conflicts import check_stack_pins
from sglstack.lock.flow import resolve_stack
from sglstack.lock.plan import glibc_version, plan_layers, python_platform
from sglstack.lockfile.current import is_current, stack_input_hash
from sglstack.lockfile.model import lock_path
from sglstack.lockfile.text import read_lock
from sglstack.render.dockerfile import image_labels, install_layers

REPO = Path(__file__).resolve().parents[2]
HASH = "sha256:" + "a" * 64


def test_the_kernel_package_is_the_stacks_name_in_pins_labels_layers_and_coverage(stacks_matrix):
    new = stacks_matrix.get("pypi-cu130")
    assert new.kernel_package == "sglang-kernel"
    assert new.pins()["sglang-kernel"] == "0.4.10" and "sgl-kernel" not in new.pins()
    assert ("io.sglstack.pin.sglang-kernel", "0.4.10") in image_labels(new)
    assert [x.name for x in plan_layers(new, "linux/amd64")][:2] == ["torch", "sglang-kernel"]
    kernel = next(x for x in install_layers(new) if x.name == "sglang-kernel")
    assert "sglang-kernel==0.4.10" in kernel.args
    assert next((w.package, w.requirement) for w in device_code_wheels(new, "linux/amd64")) == \
        ("sglang-kernel", "sglang-kernel==0.4.10")
    # the stacks that do not name it keep sgl-kernel, and their locks stay current (same input hash)
    for name in ("cu130", "cu129"):
        old = stacks_matrix.get(name)
        assert old.kernel_package == "sgl-kernel" and "sgl-kernel" in old.pins()
        assert is_current(read_lock(lock_path(REPO / "stacks.yaml", name)), old), name


def test_a_renamed_kernel_package_is_checked_against_sglangs_metadata_under_its_own_name(stacks_matrix):
    new = stacks_matrix.get("pypi-cu130")
    requires = ["sglang-kernel==0.4.10", "torch==2.14.1", "flashinfer_python[cu13]==0.7.2"]
    assert [f for f in check_stack_pins(new, requires, "0.5.23") if f.is_failure] == []
    moved = ["sglang-kernel==0.4.11", "torch==2.14.1", "flashinfer_python[cu13]==0.7.2"]
    [conflict] = [f for f in check_stack_pins(new, moved, "0.5.23") if f.is_failure]
    assert "pins sglang-kernel==0.4.10 but sglang 0.5.23 requires 'sglang-kernel==0.4.11'" in conflict.message


def test_a_bad_kernel_package_name_is_one_line_naming_the_key(tmp_path):
    text = (REPO / "stacks.yaml").read_text()
    bad = tmp_path / "stacks.yaml"
    bad.write_text(text.replace("package: sglang-kernel ", "package: 'sglang kernel' "))
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    with pytest.raises(ConfigError) as err:
        load_matrix(bad, patches_dir=tmp_path / "patches")
    assert "stack 'pypi-cu130'" in str(err.value) and "sgl_kernel.package" in str(err.value)
    assert "'sglang kernel' is not a package name" in str(err.value)


def test_the_default_kernel_name_and_an_unset_glibc_leave_the_input_hash_of_older_stacks_alone(stacks_matrix):
    old = stacks_matrix.get("cu129")
    named = old.model_copy(update={"sgl_kernel": old.sgl_kernel.model_copy(update={"package": "sglang-kernel"})})
    assert stack_input_hash(named) != stack_input_hash(old)
    assert stack_input_hash(old.model_copy(update={"glibc": "2.39"})) != stack_input_hash(old)


# ---- the platform tag ------------------------------------------------------------------------------

def test_the_platform_tag_follows_glibc():
    assert python_platform("linux/amd64") == "x86_64-manylinux_2_28"
    assert python_platform("linux/amd64", "2.36") == "x86_64-manylinux_2_36"
    assert python_platform("linux/arm64", "2.39") == "aarch64-manylinux_2_39"


def test_glibc_is_read_from_libcs_banner():
    banner = b"\x00GNU C Library (Debian GLIBC 2.36-9+deb12u10) stable release version 2.36.\n\x00"
    assert glibc_version(b"\x7fELF...." + banner) == "2.36"
    assert glibc_version(b"\x7fELF no banner here") is None


def test_the_lock_resolves_for_the_declared_glibc_and_records_it(stacks_matrix):
    stack = stacks_matrix.get("pypi-cu130")
    seen = []

    def uv(requests):
        seen.extend(requests)
        return [Resolution(tuple(ResolvedPackage(n.split("==")[0], n.split("==")[1], hashes=(HASH,))
                                 for n in r.requirements), "0.13.9", 0.1) for r in requests]

    lock = resolve_stack(stack, compile_fn=uv, base_glibc="2.31")  # declared 2.36 wins over the image's
    assert {r.python_platform for r in seen} == {"x86_64-manylinux_2_36"}
    assert lock.python_platforms == ("x86_64-manylinux_2_36",)
    seen.clear()
    unset = stack.model_copy(update={"glibc": None})
    resolve_stack(unset, compile_fn=uv, base_glibc="2.39")
    assert {r.python_platform for r in seen} == {"x86_64-manylinux_2_39"}






# ---- verifying the PyPI stack's image --------------------------------------------------------------

def test_torch_from_pypi_reports_a_local_label_that_its_pin_lacks(stacks_matrix):
    from sglstack.imagebuild.judge import pin_mismatches  # the verify half of this file's story

    stack = stacks_matrix.get("pypi-cu130")
    info = {"distributions": stack.pins(), "torch": {"version": "2.14.1+cu130", "cuda": "13.0"}}
    assert pin_mismatches(stack, info) == []
    older = {**info, "torch": {"version": "2.14.0+cu130", "cuda": "13.0"}}
    assert pin_mismatches(stack, older) == ["torch reports 2.14.0+cu130, pinned 2.14.1"]
    cu130 = stacks_matrix.get("cu130")  # a pin with a label must be met exactly
    plain = {"distributions": cu130.pins(), "torch": {"version": "2.9.1", "cuda": "13.0"}}
    assert pin_mismatches(cu130, plain) == ["torch reports 2.9.1, pinned 2.9.1+cu130"]


def test_a_pin_is_met_by_the_same_version_in_another_spelling(stacks_matrix):
    """`cuda-toolkit==13.0.3` installs the wheel 13.0.3.0 (PEP 440 pads the release): the same version."""
    from sglstack.imagebuild.judge import pin_mismatches

    stack = stacks_matrix.get("pypi-cu130")
    assert stack.pins()["cuda-toolkit"] == "13.0.3"
    torch = {"version": "2.14.1+cu130", "cuda": "13.0"}
    padded = {"distributions": {**stack.pins(), "cuda-toolkit": "13.0.3.0"}, "torch": torch}
    assert pin_mismatches(stack, padded) == []
    other = {"distributions": {**stack.pins(), "cuda-toolkit": "13.0.3.1"}, "torch": torch}
    assert pin_mismatches(stack, other) == ["cuda-toolkit: pinned 13.0.3, installed 13.0.3.1"]
    labelled = {"distributions": {**stack.pins(), "cuda-toolkit": "13.0.3+local"}, "torch": torch}
    assert pin_mismatches(stack, labelled) == ["cuda-toolkit: pinned 13.0.3, installed 13.0.3+local"]


def test_coverage_checks_the_stacks_cuda_packages_at_the_installed_versions(stacks_matrix):
    stack = stacks_matrix.get("pypi-cu130")
    sources = {w.package: w for w in device_code_wheels(stack, "linux/amd64", {"sgl-deep-ep": "0.1.2.post1"})}
    assert sources["sgl-deep-ep"].requirement == "sgl-deep-ep==0.1.2.post1"
    assert sources["nvidia-cudnn-cu13"].version == ""  # not given: reported as not checked
    assert list(sources)[:4] == ["sglang-kernel", "torch", "torchvision", "triton"]  # pins first, once each


def test_a_package_without_device_code_is_a_note_not_a_row():
    from sglstack.config.settings import CoveragePolicy
    from sglstack.coverage.report import build_report
    from sglstack.coverage.rules import DeviceObject, PackageObjects, capabilities_of

    jit = PackageObjects("quack-kernels", "0.6.5", "t", (DeviceObject("quack/_host.so", "0" * 64, (), (), 0),))
    report = build_report("s", "linux/amd64", capabilities_of(["9.0"]), CoveragePolicy(), [jit], [])
    assert report.rows == () and report.violations == ()
    assert report.notes == ("quack-kernels 0.6.5 ships no compiled device code: what it runs on the GPU is "
                            "compiled at run time (JIT), for the GPU it finds",)


def test_a_stack_pinning_the_old_kernel_name_against_a_release_that_renamed_it_is_told_which_to_pin(stacks_matrix):
    from sglstack.lock.conflicts import required_kernel_package  # the METADATA side of the rename

    requires = ["sglang-kernel==0.4.10", "torch==2.14.1", "flashinfer_python[cu13]==0.7.2"]
    assert required_kernel_package(requires) == "sglang-kernel"
    assert required_kernel_package(["sgl-kernel==0.3.21", "torch==2.9.1"]) == "sgl-kernel"
    assert required_kernel_package(["torch==2.9.1"]) is None
    stale = stacks_matrix.get("pypi-cu130")
    stale = stale.model_copy(update={"sgl_kernel": stale.sgl_kernel.model_copy(update={"package": "sgl-kernel"})})
    [conflict] = [f for f in check_stack_pins(stale, requires, "0.5.23") if f.is_failure]
    assert conflict.message == ("pins the kernel package sgl-kernel, but sglang 0.5.23 requires sglang-kernel: "
                                "set sgl_kernel.package: sglang-kernel (and its version)")


