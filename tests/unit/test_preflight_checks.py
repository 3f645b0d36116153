"""The pure threshold logic of preflight: every check's pass / warn / fail boundary (each branch's whole Check:
test_preflight_checks_whole.py)."""

from __future__ import annotations

import pytest
from preflight_nodes import H200, _all_pairs

from sglstack.inimage.preflight import checks as C
from sglstack.inimage.preflight.checks import FAIL, PASS, WARN, AllReduceResult, GpuInfo


@pytest.mark.parametrize(
    ("driver", "cuda", "status"),
    [
        ("580.159.04", "13.0.1", PASS),  # what the H200 machine runs
        ("580.65.06", "13.0", PASS),  # exactly the CUDA 13.0 GA minimum
        ("575.57.08", "13.0.1", FAIL),  # a 12.9 driver cannot run CUDA 13
        ("575.51.03", "12.9.1", PASS),
        ("570.124.06", "12.9.1", WARN),  # minor-version compatibility only
        ("520.61.05", "12.9.1", FAIL),
        ("580.159.04", "13.1", PASS),  # an unlisted minor needs the newest listed one below it
        ("470.82.01", "11.8", WARN),  # no table entry: said, not guessed
        ("580.159.04", None, PASS),
    ],
)
def test_driver_against_the_stacks_cuda(driver, cuda, status):
    check = C.check_driver(driver, cuda)
    assert check.status == status, check
    assert check.value == driver


def test_no_driver_fails():
    check = C.check_driver(None, "13.0.1")
    assert (check.status, check.value) == (FAIL, "none")


def test_required_driver_table():
    assert C.required_driver("13.0.1") == ("580.65.06", "580.65.06")
    assert C.required_driver("12.9.1") == ("575.51.03", "525.60.13")
    assert C.required_driver("12.7") == C.required_driver("12.6")
    assert C.required_driver("11.8") is None


def test_gpu_count_against_tp():
    assert C.check_gpu_count(8, 8).status == PASS
    failed = C.check_gpu_count(1, 8)
    assert failed.status == FAIL and failed.threshold == ">= 8 (tp)" and "tp 8" in failed.detail


@pytest.mark.parametrize(
    ("cap", "arch_list", "status"),
    [
        ("9.0", ("9.0", "10.0", "10.3", "12.0"), PASS),
        ("9.0", ("9.0a",), PASS),
        ("8.0", ("9.0", "10.0"), FAIL),  # an A100 with a Hopper+ image
        ("12.1", ("9.0", "12.0+PTX"), WARN),  # JIT from PTX
        ("8.0", ("9.0+PTX",), FAIL),  # PTX of a newer arch does not run on an older GPU
        ("8.0", (), PASS),
    ],
)
def test_compute_capability_in_arch_list(cap, arch_list, status):
    gpus = [GpuInfo(i, "gpu", compute_cap=cap) for i in range(2)]
    check = C.check_compute_capability(gpus, arch_list)
    assert check.status == status, check
    assert check.value == f"{cap} x2"


@pytest.mark.parametrize(("used", "status"), [(615, PASS), (20000, WARN), (100000, FAIL)])
def test_free_memory_fraction(used, status):
    gpu = GpuInfo(3, "NVIDIA H200", memory_total_mib=143771, memory_used_mib=used, memory_free_mib=143771 - used)
    check = C.check_free_memory(gpu)
    assert check.status == status
    assert check.name == "free memory gpu3" and check.measured == 143771 - used


def test_topology_every_pair():
    assert C.check_topology(1, {}).status == PASS
    full = C.check_topology(8, _all_pairs(8, "NV18"))
    assert (full.status, full.value) == (PASS, "28/28 pairs NVLink (NV18)")
    links = {**_all_pairs(4, "NV12"), (1, 3): "PIX"}
    pcie = C.check_topology(4, links)
    assert pcie.status == WARN and "1-3:PIX" in pcie.detail and pcie.value.startswith("5/6")
    broken = C.check_topology(4, {**links, (0, 2): "SYS"}, {(0, 2): False, (1, 3): True})
    assert broken.status == FAIL and "0-2:SYS" in broken.detail
    missing = C.check_topology(2, {})
    assert missing.status == WARN


def test_min_nvlinks():
    assert C.min_nvlinks(8, _all_pairs(8, "NV18")) == 18
    assert C.min_nvlinks(3, {**_all_pairs(3, "NV12"), (0, 2): "PHB"}) == 0
    assert C.min_nvlinks(1, {}) == 0


@pytest.mark.parametrize(("gbps", "status"), [(4282.0, PASS), (3600.0, PASS), (3000.0, WARN), (1500.0, FAIL)])
def test_copy_bandwidth_against_the_datasheet(gbps, status):
    check = C.check_copy_bandwidth(H200, gbps)
    assert check.status == status
    assert check.threshold == ">= 3600 GB/s (75% of 4800)"


def test_copy_bandwidth_unknown_model_and_failed_copy():
    assert C.check_copy_bandwidth(GpuInfo(0, "Tesla T4"), 250.0).status == WARN
    failed = C.check_copy_bandwidth(H200, None, "the copied buffer differs from its source")
    assert failed.status == FAIL and failed.detail == "the copied buffer differs from its source"
    assert C.datasheet_memory_gbps("NVIDIA H100 80GB HBM3") == 3350.0
    assert C.datasheet_memory_gbps("NVIDIA H100 PCIe") == 2000.0


def test_single_rank_allreduce_is_correct_but_has_no_bandwidth():
    result = AllReduceResult(
        1,
        True,
        time_us={C.MiB: 39.0, C.GiB: 744.0},
        algbw_gbps={C.MiB: None, C.GiB: None},
        busbw_gbps={C.MiB: None, C.GiB: None},
    )
    out = C.check_allreduce(result, 0)
    assert out[0].status == PASS and "moves nothing" in out[0].detail
    assert [c.value for c in out[1:]] == ["n/a: single rank", "n/a: single rank"]
    assert all(c.measured is None for c in out)


def test_multi_rank_allreduce_thresholds():
    busbw = {C.MiB: 40.0, 64 * C.MiB: 300.0, C.GiB: 100.0}
    result = AllReduceResult(8, True, busbw_gbps=busbw)
    by_name = {c.name: c for c in C.check_allreduce(result, 18)}
    assert by_name["all-reduce busbw 1 MiB"].status == PASS  # latency-bound: no threshold
    assert by_name["all-reduce busbw 1 MiB"].threshold.startswith("none")
    slow = by_name["all-reduce busbw 1 GiB"]
    assert slow.status == WARN and slow.threshold.startswith(">= 225 GB/s")
    fast = C.check_allreduce(AllReduceResult(8, True, busbw_gbps={C.GiB: 360.0}), 18)[1]
    assert fast.status == PASS and fast.measured == 360.0


def test_wrong_sum_or_no_run_fails():
    wrong = AllReduceResult(2, False, mismatches={C.MiB: "element 7: 3.0 != 4.0"})
    first = C.check_allreduce(wrong, 18)[0]
    assert first.status == FAIL and first.value == "WRONG" and "element 7" in first.detail
    hung = C.check_allreduce(AllReduceResult(8, False, error="timed out after 300s (NCCL hang?)"), 18)
    assert [c.status for c in hung] == [FAIL] and "timed out" in hung[0].detail


def test_shm_and_memlock():
    assert C.check_shm(128 * C.GiB, 32 * C.GiB).status == PASS
    assert C.check_shm(8 * C.GiB, 32 * C.GiB).status == WARN
    docker_default = C.check_shm(64 * C.MiB, 32 * C.GiB)
    assert docker_default.status == FAIL and docker_default.value == "0.1 GiB"
    assert C.check_shm(None, C.GiB).status == FAIL
    assert C.check_memlock(-1).status == PASS
    assert C.check_memlock(8 * C.MiB).status == WARN and C.check_memlock(8 * C.MiB).value == "8 MiB"


def test_sizes_and_worst():
    assert [C.parse_size(s) for s in ("1M", "64MiB", "1G", "32g", "4096")] == [
        C.MiB,
        64 * C.MiB,
        C.GiB,
        32 * C.GiB,
        4096,
    ]
    with pytest.raises(ValueError, match="not a size"):
        C.parse_size("lots")
    assert C.fmt_bytes(C.GiB) == "1 GiB" and C.fmt_bytes(3 * C.MiB) == "3 MiB"
    checks = [C.Check("a", PASS, "", ""), C.Check("b", WARN, "", "")]
    assert C.worst(checks) == WARN and C.worst([]) == PASS
    assert C.worst([*checks, C.Check("c", FAIL, "", "")]) == FAIL
