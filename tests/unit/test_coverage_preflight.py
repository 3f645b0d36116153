"""`invoke preflight --image REF` warns when the node's GPUs are not covered by the image's coverage label
(and says the coverage is unknown when the image has none)."""

from __future__ import annotations

import pytest

from sglstack.core.labels import COVERAGE_LABEL
from sglstack.inimage.preflight.checks import PASS, WARN, Check, GpuInfo, Requirements, check_kernel_coverage
from sglstack.inimage.preflight.node import NodeReport
from sglstack.preflight.remote import image_coverage_check

LABEL = {"9.0": "native", "10.0": "native", "10.3": "ptx", "12.0": "missing"}


def gpus(*caps: str) -> list[GpuInfo]:
    return [GpuInfo(index=i, name="GPU", compute_cap=c) for i, c in enumerate(caps)]


@pytest.mark.parametrize(
    ("caps", "status", "detail"),
    [
        (("9.0",) * 8, PASS, ""),
        (("10.3",), WARN, "10.3 runs JIT-compiled PTX"),
        (("12.0",), WARN, "no kernels for 12.0"),
        (("12.1",), WARN, "12.1 is not among the image's capabilities (9.0,10.0,10.3,12.0)"),
        (("9.0", "8.0"), WARN, "8.0 is not among"),
    ],
)
def test_node_gpus_against_the_label(caps, status, detail):
    check = check_kernel_coverage(gpus(*caps), LABEL)
    assert check.status == status and detail in check.detail
    assert check.name == "kernel coverage" and caps[0] in check.value


def test_an_image_without_a_label_has_unknown_coverage():
    report = NodeReport(Requirements(stack="s"), node={"gpus": [{"index": 0, "name": "H200", "compute_cap": "9.0"}]})
    check = image_coverage_check({}, report)
    assert check.status == WARN and check.value == "unknown" and "no io.sglstack.coverage label" in check.detail
    check = image_coverage_check({COVERAGE_LABEL: "9.0:native,10.0:native"}, report)
    assert check.status == PASS and check.value == "9.0: native"
    bad = image_coverage_check({COVERAGE_LABEL: "nine:fast"}, report)
    assert bad.status == WARN and "unreadable" in bad.detail


THRESHOLD = "native kernels for every GPU"


def test_coverage_check_whole_when_every_gpu_is_native():
    assert check_kernel_coverage(gpus("10.0", "9.0", "10.0"), LABEL) == Check(
        "kernel coverage", PASS, "9.0: native, 10.0: native", THRESHOLD
    )
    assert check_kernel_coverage(gpus("", ""), LABEL) == Check("kernel coverage", PASS, "no GPU", THRESHOLD)


def test_coverage_check_whole_lists_absent_missing_and_ptx_in_that_order():
    expected = Check(
        "kernel coverage",
        WARN,
        "8.0: not built for, 10.3: ptx, 11.0: ptx, 12.0: missing, 12.1: not built for",
        THRESHOLD,
        "8.0,12.1 is not among the image's capabilities (9.0,10.0,10.3,12.0,11.0): expect 'no kernel image is"
        " available for execution on the device'; some extensions have no kernels for 12.0 (excepted in the"
        " stack's policy); 10.3,11.0 runs JIT-compiled PTX: a slower first start, and the driver must JIT it",
    )
    coverage = {**LABEL, "11.0": "ptx"}
    assert check_kernel_coverage(gpus("12.1", "12.0", "11.0", "10.3", "8.0"), coverage) == expected


def test_coverage_check_whole_without_a_label():
    unknown = "the image has no io.sglstack.coverage label: its kernel coverage is unknown"
    assert check_kernel_coverage(gpus("9.0"), None) == Check("kernel coverage", WARN, "unknown", THRESHOLD, unknown)
    unreadable = "the coverage label 'nine:fast' is unreadable"
    assert check_kernel_coverage(gpus("9.0"), None, unreadable) == Check(
        "kernel coverage", WARN, "unknown", THRESHOLD, unreadable
    )


def test_coverage_check_names_every_missing_capability():
    check = check_kernel_coverage(gpus("12.0", "10.3"), {"9.0": "native", "10.3": "missing", "12.0": "missing"})
    assert check == Check(
        "kernel coverage",
        WARN,
        "10.3: missing, 12.0: missing",
        THRESHOLD,
        "some extensions have no kernels for 10.3,12.0 (excepted in the stack's policy)",
    )
