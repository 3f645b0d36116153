"""The pure logic of preflight, each branch's whole Check (name, status, value, threshold, detail, measured), the
units and the node's platform."""

from __future__ import annotations

import pytest
from preflight_nodes import H200, _all_pairs

from sglstack.inimage.preflight import checks as C
from sglstack.inimage.preflight.checks import FAIL, PASS, WARN, AllReduceResult, GpuInfo

# ---- every branch's whole Check (name, status, value, threshold, detail, measured) -----------------


@pytest.mark.parametrize(
    ("driver", "cuda", "expected"),
    [
        (None, "13.0.1", C.Check("driver", FAIL, "none", ">= 580.65.06 (CUDA 13.0.1)", "no NVIDIA driver found")),
        ("", "12.9.1", C.Check("driver", FAIL, "none", ">= 575.51.03 (CUDA 12.9.1)", "no NVIDIA driver found")),
        (None, None, C.Check("driver", FAIL, "none", "an NVIDIA driver", "no NVIDIA driver found")),
        (None, "11.8", C.Check("driver", FAIL, "none", "an NVIDIA driver", "no NVIDIA driver found")),
        ("580.159.04", None, C.Check("driver", PASS, "580.159.04", "any (stack pins no CUDA)")),
        ("580.159.04", "", C.Check("driver", PASS, "580.159.04", "any (stack pins no CUDA)")),
        (
            "470.82.01",
            "11.8",
            C.Check("driver", WARN, "470.82.01", "unknown for CUDA 11.8", "no driver table entry for CUDA 11.8"),
        ),
        ("580.159.04", "13.0.1", C.Check("driver", PASS, "580.159.04", ">= 580.65.06 (CUDA 13.0.1)")),
        ("575.51.03", "12.9", C.Check("driver", PASS, "575.51.03", ">= 575.51.03 (CUDA 12.9)")),
        (
            "575.51.02",
            "12.9",
            C.Check(
                "driver",
                WARN,
                "575.51.02",
                ">= 575.51.03 (CUDA 12.9)",
                "minor-version compatibility only: run-time JIT of newer PTX fails",
            ),
        ),
        (
            "525.60.13",  # exactly CUDA 12's first driver: minor-version compatibility still holds
            "12.8.1",
            C.Check(
                "driver",
                WARN,
                "525.60.13",
                ">= 570.26 (CUDA 12.8.1)",
                "minor-version compatibility only: run-time JIT of newer PTX fails",
            ),
        ),
        (
            "525.60.12",
            "12.8.1",
            C.Check("driver", FAIL, "525.60.12", ">= 570.26 (CUDA 12.8.1)", "CUDA 12.8.1 cannot run on this driver"),
        ),
        (
            "575.57.08",
            "13.0.1",
            C.Check("driver", FAIL, "575.57.08", ">= 580.65.06 (CUDA 13.0.1)", "CUDA 13.0.1 cannot run on this driver"),
        ),
    ],
)
def test_driver_check_whole(driver, cuda, expected):
    assert C.check_driver(driver, cuda) == expected


def test_required_driver_per_release():
    assert C.required_driver("12.4") == ("550.54.14", "525.60.13")
    assert C.required_driver("12.5.1") == ("550.54.14", "525.60.13")
    assert C.required_driver("12.0") == ("525.60.13", "525.60.13")
    assert C.required_driver("13") is None and C.required_driver("14.0") is None


@pytest.mark.parametrize(
    ("count", "tp", "expected"),
    [
        (8, 8, C.Check("gpu count", PASS, "8", ">= 8 (tp)", "", 8.0)),
        (8, 4, C.Check("gpu count", PASS, "8", ">= 4 (tp)", "", 8.0)),
        (7, 8, C.Check("gpu count", FAIL, "7", ">= 8 (tp)", "the stack's tp 8 needs 8 GPUs", 7.0)),
    ],
)
def test_gpu_count_check_whole(count, tp, expected):
    assert C.check_gpu_count(count, tp) == expected


def test_arch_entries_match_their_capability():
    assert C._arch_matches("12.0", "12.0+PTX") and C._arch_matches("10.0", "10.0a")
    assert C._arch_matches("9.0", "9.0a+PTX") and not C._arch_matches("9.0", "+PTX9.0")
    assert not C._arch_matches("9.0", "9.0+ptx")


def _gpus(*caps: str) -> list[GpuInfo]:
    return [
        GpuInfo(i, "NVIDIA B200" if cap == "10.0" else "NVIDIA H200", compute_cap=cap) for i, cap in enumerate(caps)
    ]


@pytest.mark.parametrize(
    ("caps", "arch_list", "expected"),
    [
        ((), ("9.0",), C.Check("compute capability", PASS, "none", "in 9.0")),
        (("8.0",) * 2, (), C.Check("compute capability", PASS, "8.0 x2", "any (stack lists no cuda_arch_list)")),
        (
            ("9.0", "10.0", "9.0"),
            ("9.0", "10.0a", "12.0+PTX"),
            C.Check("compute capability", PASS, "10.0 x1, 9.0 x2", "in 9.0,10.0a,12.0+PTX"),
        ),
        (
            ("12.1", "10.3"),
            ("9.0", "10.0+PTX"),
            C.Check(
                "compute capability",
                WARN,
                "10.3 x1, 12.1 x1",
                "in 9.0,10.0+PTX",
                "10.3,12.1 runs only from JIT-compiled PTX",
            ),
        ),
        (
            ("8.0", "12.1"),  # 12.1 could JIT sm_90 PTX, 8.0 cannot: no kernels for 8.0
            ("9.0+PTX",),
            C.Check(
                "compute capability",
                FAIL,
                "12.1 x1, 8.0 x1",
                "in 9.0+PTX",
                "the image has no kernels for compute capability 12.1,8.0",
            ),
        ),
        (
            ("8.0", "8.6"),
            ("9.0", "10.0"),
            C.Check(
                "compute capability",
                FAIL,
                "8.0 x1, 8.6 x1",
                "in 9.0,10.0",
                "the image has no kernels for compute capability 8.0,8.6",
            ),
        ),
    ],
)
def test_compute_capability_check_whole(caps, arch_list, expected):
    assert C.check_compute_capability(_gpus(*caps), arch_list) == expected


@pytest.mark.parametrize(
    ("total", "used", "free", "expected_status", "value", "detail"),
    [
        (143771, 615, 143156, PASS, "143156 / 143771 MiB (99.6%)", ""),
        (1000, 100, 900, PASS, "900 / 1000 MiB (90.0%)", ""),  # exactly the pass fraction
        (1000, 101, 899, WARN, "899 / 1000 MiB (89.9%)", "101 MiB already in use"),
        (1000, 500, 500, WARN, "500 / 1000 MiB (50.0%)", "500 MiB already in use"),  # exactly the warn fraction
        (
            1000,
            501,
            499,
            FAIL,
            "499 / 1000 MiB (49.9%)",
            "501 MiB already in use: the model will not fit",
        ),
        (0, 0, 0, FAIL, "0 / 0 MiB (0.0%)", "0 MiB already in use: the model will not fit"),  # no total reported
    ],
)
def test_free_memory_check_whole(total, used, free, expected_status, value, detail):
    gpu = GpuInfo(5, "NVIDIA H200", memory_total_mib=total, memory_used_mib=used, memory_free_mib=free)
    expected = C.Check("free memory gpu5", expected_status, value, ">= 90% free", detail, float(free))
    assert C.check_free_memory(gpu) == expected


NVLINK_EVERY_PAIR = "NVLink between every pair"


def test_topology_check_whole_for_each_branch():
    single = C.Check("topology", PASS, "1 GPU: no pairs", NVLINK_EVERY_PAIR, "a single GPU has no peer to link to")
    assert C.check_topology(1, {}) == single
    assert C.check_topology(8, _all_pairs(8, "NV18")) == C.Check(
        "topology", PASS, "28/28 pairs NVLink (NV18)", NVLINK_EVERY_PAIR, "", 28.0
    )
    mixed = {**_all_pairs(4, "NV18"), (0, 1): "NV12", (2, 3): "NV6"}
    assert C.check_topology(4, mixed) == C.Check(
        "topology", PASS, "6/6 pairs NVLink (NV12,NV18,NV6)", NVLINK_EVERY_PAIR, "", 6.0
    )
    # A pair NVIDIA's tools report P2P-capable over PCIe only warns; a missing entry reads '?'.
    pcie = {**_all_pairs(4, "NV12"), (1, 3): "PIX", (0, 3): "NV1"}
    del pcie[(2, 3)]
    assert C.check_topology(4, pcie, {(1, 3): True}) == C.Check(
        "topology", WARN, "4/6 pairs NVLink (NV1,NV12)", NVLINK_EVERY_PAIR, "PCIe only: 1-3:PIX 2-3:?", 4.0
    )
    broken = {**pcie, (0, 2): "SYS"}
    assert C.check_topology(4, broken, {(0, 2): False, (1, 3): True, (2, 3): False}) == C.Check(
        "topology", FAIL, "3/6 pairs NVLink (NV1,NV12)", NVLINK_EVERY_PAIR, "no P2P: 0-2:SYS 2-3:?", 3.0
    )
    assert C.check_topology(2, {}) == C.Check(
        "topology", WARN, "0/1 pairs NVLink", NVLINK_EVERY_PAIR, "PCIe only: 0-1:?", 0.0
    )


def test_topology_names_at_most_eight_pairs():
    five = C.check_topology(5, _all_pairs(5, "SYS"))  # 10 pairs: the first eight, then '...'
    assert five.detail == "PCIe only: 0-1:SYS 0-2:SYS 0-3:SYS 0-4:SYS 1-2:SYS 1-3:SYS 1-4:SYS 2-3:SYS ..."
    nine = C.check_topology(5, {**_all_pairs(5, "SYS"), (3, 4): "NV4"})
    assert nine.detail == "PCIe only: 0-1:SYS 0-2:SYS 0-3:SYS 0-4:SYS 1-2:SYS 1-3:SYS 1-4:SYS 2-3:SYS ..."
    eight = {**_all_pairs(5, "SYS"), (3, 4): "NV4", (2, 4): "NV4"}  # exactly eight PCIe pairs: no '...'
    assert (
        C.check_topology(5, eight).detail
        == "PCIe only: 0-1:SYS 0-2:SYS 0-3:SYS 0-4:SYS 1-2:SYS 1-3:SYS 1-4:SYS 2-3:SYS"
    )


def test_min_nvlinks_is_the_weakest_pair():
    assert C.min_nvlinks(3, {(0, 1): "NV18", (0, 2): "NV18", (1, 2): "NV6"}) == 6
    assert C.min_nvlinks(3, {(0, 1): "NV18", (0, 2): "NV18"}) == 0  # a pair without an entry has no NVLink


@pytest.mark.parametrize(
    ("name", "gbps", "expected_status", "value", "threshold", "detail"),
    [
        ("NVIDIA H200", 4282.0, PASS, "4282 GB/s", ">= 3600 GB/s (75% of 4800)", "89% of datasheet"),
        ("NVIDIA H200", 3600.0, PASS, "3600 GB/s", ">= 3600 GB/s (75% of 4800)", "75% of datasheet"),
        ("NVIDIA H200", 3000.0, WARN, "3000 GB/s", ">= 3600 GB/s (75% of 4800)", "62% of datasheet: a slow card"),
        ("NVIDIA H200", 2400.0, WARN, "2400 GB/s", ">= 3600 GB/s (75% of 4800)", "50% of datasheet: a slow card"),
        ("NVIDIA H200", 2399.0, FAIL, "2399 GB/s", ">= 3600 GB/s (75% of 4800)", "50% of datasheet: a slow card"),
        ("NVIDIA B200", 7200.0, PASS, "7200 GB/s", ">= 6000 GB/s (75% of 8000)", "90% of datasheet"),
        ("NVIDIA H100 80GB HBM3", 2900.0, PASS, "2900 GB/s", ">= 2512 GB/s (75% of 3350)", "87% of datasheet"),
    ],
)
def test_copy_bandwidth_check_whole(name, gbps, expected_status, value, threshold, detail):
    gpu = GpuInfo(2, name)
    expected = C.Check("copy bandwidth gpu2", expected_status, value, threshold, detail, gbps)
    assert C.check_copy_bandwidth(gpu, gbps) == expected


def test_copy_bandwidth_without_a_figure_or_a_measurement():
    assert C.check_copy_bandwidth(GpuInfo(1, "Tesla T4"), 250.4) == C.Check(
        "copy bandwidth gpu1", WARN, "250 GB/s", "no datasheet figure", "no datasheet bandwidth for 'Tesla T4'", 250.4
    )
    assert C.check_copy_bandwidth(H200, None) == C.Check(
        "copy bandwidth gpu0", FAIL, "not measured", "a device-to-device copy", "copy failed"
    )


def test_datasheet_figures_most_specific_first():
    assert [
        C.datasheet_memory_gbps(n)
        for n in ("NVIDIA H100 NVL", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB")
    ] == [3900.0, 2039.0, 1935.0, 1555.0]
    assert C.datasheet_memory_gbps("NVIDIA L40S") is None


def test_allreduce_that_did_not_run_names_its_ranks():
    for n, ranks in ((8, "8 ranks"), (2, "2 ranks"), (1, "1 rank")):
        out = C.check_allreduce(AllReduceResult(n, False, error="NCCL error: unhandled system error"), 18)
        assert out == [
            C.Check("all-reduce", FAIL, "did not run", f"NCCL across {ranks}", "NCCL error: unhandled system error")
        ]


def test_allreduce_single_rank_whole():
    result = AllReduceResult(1, True, busbw_gbps={C.MiB: None})
    assert C.check_allreduce(result, 0) == [
        C.Check(
            "all-reduce sum",
            PASS,
            "exact",
            "exact sum over 1 rank",
            "single-rank group: checks NCCL runs, moves nothing",
        ),
        C.Check(
            "all-reduce busbw 1 MiB",
            PASS,
            "n/a: single rank",
            "none (needs 2+ GPUs)",
            "one rank moves no data: no bandwidth figure",
        ),
    ]


def test_allreduce_eight_ranks_whole():
    busbw = {C.MiB: 40.04, 128 * C.MiB: 150.0, 256 * C.MiB: 225.0, C.GiB: 224.96}
    out = C.check_allreduce(AllReduceResult(8, True, busbw_gbps=busbw), 18)
    floor = ">= 225 GB/s (50% of NV18 one-way)"
    assert out == [
        C.Check("all-reduce sum", PASS, "exact", "exact sum over 8 ranks", ""),
        C.Check("all-reduce busbw 1 MiB", PASS, "40.0 GB/s", "none (latency-bound size)", "", 40.04),
        C.Check("all-reduce busbw 128 MiB", PASS, "150.0 GB/s", "none (latency-bound size)", "", 150.0),
        C.Check("all-reduce busbw 256 MiB", PASS, "225.0 GB/s", floor, "", 225.0),  # exactly the floor
        C.Check("all-reduce busbw 1 GiB", WARN, "225.0 GB/s", floor, "slow interconnect", 224.96),
    ]


def test_allreduce_without_nvlink_has_no_reference_and_lists_wrong_sums():
    result = AllReduceResult(
        2,
        False,
        mismatches={C.MiB: "element 7: 3.0 != 4.0", C.GiB: "element 0: nan != 2.0"},
        busbw_gbps={C.GiB: 20.0},
    )
    assert C.check_allreduce(result, 0) == [
        C.Check(
            "all-reduce sum",
            FAIL,
            "WRONG",
            "exact sum over 2 ranks",
            "1 MiB: element 7: 3.0 != 4.0, 1 GiB: element 0: nan != 2.0",
        ),
        C.Check("all-reduce busbw 1 GiB", PASS, "20.0 GB/s", "none (no NVLink: no reference)", "", 20.0),
    ]
    at_the_size_floor = C.check_allreduce(AllReduceResult(2, True, busbw_gbps={256 * C.MiB: 19.0}), 0)[1]
    assert at_the_size_floor == C.Check(
        "all-reduce busbw 256 MiB", PASS, "19.0 GB/s", "none (no NVLink: no reference)", "", 19.0
    )
    one_link = C.check_allreduce(AllReduceResult(2, True, busbw_gbps={C.GiB: 20.0}), 1)[1]
    assert one_link == C.Check("all-reduce busbw 1 GiB", PASS, "20.0 GB/s", ">= 12 GB/s (50% of NV1 one-way)", "", 20.0)


@pytest.mark.parametrize(
    ("shm", "required", "expected"),
    [
        (None, 32 * C.GiB, C.Check("/dev/shm", FAIL, "missing", ">= 32 GiB", "/dev/shm is not mounted")),
        (
            128 * C.GiB,
            32 * C.GiB,
            C.Check("/dev/shm", PASS, "128.0 GiB", ">= 32 GiB (smoke.shm_size)", "", float(128 * C.GiB)),
        ),
        (
            32 * C.GiB,
            32 * C.GiB,
            C.Check("/dev/shm", PASS, "32.0 GiB", ">= 32 GiB (smoke.shm_size)", "", float(32 * C.GiB)),
        ),
        (
            C.GiB,  # exactly the failure floor: only a warning
            32 * C.GiB,
            C.Check(
                "/dev/shm",
                WARN,
                "1.0 GiB",
                ">= 32 GiB (smoke.shm_size)",
                "smaller than the stack's shm_size",
                float(C.GiB),
            ),
        ),
        (
            C.GiB - 1,
            32 * C.GiB,
            C.Check(
                "/dev/shm",
                FAIL,
                "1.0 GiB",
                ">= 32 GiB (smoke.shm_size)",
                "under 1 GiB: NCCL's shm transport fails",
                float(C.GiB - 1),
            ),
        ),
    ],
)
def test_shm_check_whole(shm, required, expected):
    assert C.check_shm(shm, required) == expected


def test_memlock_check_whole():
    assert C.check_memlock(-1) == C.Check("memlock ulimit", PASS, "unlimited", "unlimited")
    assert C.check_memlock(64 * 1024) == C.Check(
        "memlock ulimit",
        WARN,
        "64 KiB",
        "unlimited",
        "NCCL over InfiniBand/GPUDirect RDMA needs pinned memory",
        65536.0,
    )


def test_fmt_bytes_picks_the_largest_exact_unit():
    assert [C.fmt_bytes(n) for n in (0, 1023, 1024, 1536, 2 * C.GiB, C.GiB + C.MiB, 8 * C.MiB + 1024)] == [
        "0 B",
        "1023 B",
        "1 KiB",
        "1536 B",
        "2 GiB",
        "1025 MiB",
        "8193 KiB",
    ]


def test_parse_size_units():
    cases = {"2k": 2048, "2KiB": 2048, "1t": 1 << 40, "1TB": 1 << 40, " 0.5 g ": C.GiB // 2, "3mb": 3 * C.MiB}
    assert {text: C.parse_size(text) for text in cases} == cases
    with pytest.raises(ValueError) as raised:
        C.parse_size("1x")
    assert str(raised.value) == "'1x' is not a size like 1M, 64MiB or 1G"


def test_check_to_dict():
    check = C.Check("gpu count", FAIL, "1", ">= 8 (tp)", "the stack's tp 8 needs 8 GPUs", 1.0)
    assert check.to_dict() == {
        "name": "gpu count",
        "status": FAIL,
        "value": "1",
        "threshold": ">= 8 (tp)",
        "detail": "the stack's tp 8 needs 8 GPUs",
        "measured": 1.0,
    }


def test_the_node_names_its_platform_as_deploy_checks_it():
    from sglstack.config.platforms import PLATFORM_OF_MACHINE
    from sglstack.inimage.preflight.node import NODE_PLATFORMS

    assert NODE_PLATFORMS == PLATFORM_OF_MACHINE
