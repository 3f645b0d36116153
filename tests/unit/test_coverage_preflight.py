"""`invoke preflight --image REF` warns when the node's GPUs are not covered by the image's coverage label
(and says the coverage is unknown when the image has none)."""

from __future__ import annotations

import pytest

from sglstack.core.labels import COVERAGE_LABEL
from sglstack.preflight.checks import PASS, WARN, GpuInfo, Requirements, check_kernel_coverage
from sglstack.preflight.node import NodeReport
from sglstack.preflight.remote import image_coverage_check

LABEL = {"9.0": "native", "10.0": "native", "10.3": "ptx", "12.0": "missing"}


def gpus(*caps: str) -> list[GpuInfo]:
    return [GpuInfo(index=i, name="GPU", compute_cap=c) for i, c in enumerate(caps)]


@pytest.mark.parametrize(("caps", "status", "detail"), [
    (("9.0",) * 8, PASS, ""),
    (("10.3",), WARN, "10.3 runs JIT-compiled PTX"),
    (("12.0",), WARN, "no kernels for 12.0"),
    (("12.1",), WARN, "12.1 is not among the image's capabilities (9.0,10.0,10.3,12.0)"),
    (("9.0", "8.0"), WARN, "8.0 is not among"),
])
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
