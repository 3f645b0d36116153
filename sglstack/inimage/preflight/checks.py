"""Pure threshold logic: measured facts of a node -> `Check` results (pass / warn / fail).

No I/O here. Every threshold carries the reason it has the value it has; the measurements behind them
are in benchmarks/RESULTS.md (## Preflight). Standard library only: this runs inside stack images.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

PASS, WARN, FAIL = "pass", "warn", "fail"
_SEVERITY = {PASS: 0, WARN: 1, FAIL: 2}

GiB = 1 << 30
MiB = 1 << 20

# Minimum Linux driver per CUDA toolkit (major, minor), from NVIDIA's CUDA release notes (table "CUDA
# Toolkit and Corresponding Driver Versions", GA releases). A driver below the toolkit's own minimum but
# at least its major's first driver runs only under CUDA minor-version compatibility: cubins load, but
# PTX newer than the driver cannot be JIT-compiled, and DeepGEMM/FlashInfer compile kernels at run time.
CUDA_MIN_DRIVER: dict[tuple[int, int], str] = {
    (13, 0): "580.65.06",
    (12, 9): "575.51.03",
    (12, 8): "570.26",
    (12, 6): "560.28.03",
    (12, 4): "550.54.14",
    (12, 1): "530.30.02",
    (12, 0): "525.60.13",
}
CUDA_MAJOR_MIN_DRIVER: dict[int, str] = {13: "580.65.06", 12: "525.60.13"}

# Free memory: SGLang takes a static fraction of each card (--mem-fraction-static, about 0.8-0.9 for
# large tp) at start. A process already holding more than 10% of a card makes that fail or shrinks the KV
# cache; holding half the card, a Kimi K2.5 load cannot fit. An idle H200 showed 615 MiB (0.4%) used by
# the driver and nothing else (RESULTS.md), so a healthy idle card passes with a wide margin.
FREE_MEMORY_PASS_FRACTION = 0.90
FREE_MEMORY_WARN_FRACTION = 0.50

# Device-to-device copy bandwidth (bytes read + bytes written per second) against the datasheet memory
# bandwidth. Healthy H200s measured 4280-4282 GB/s, 0.89 of their 4.8 TB/s (RESULTS.md, 2026-12-02;
# other H200 machines of the same pool gave the same 4.3 TB/s). Below 0.75 the card is clearly slower
# than a healthy one (throttled clocks, a degraded HBM stack, another job on it); below 0.5 it cannot
# serve at speed.
COPY_PASS_FRACTION = 0.75
COPY_WARN_FRACTION = 0.50

# Datasheet HBM bandwidth in GB/s, matched against the name nvidia-smi reports (most specific first).
DATASHEET_MEMORY_GBPS: tuple[tuple[str, float], ...] = (
    ("H200", 4800.0),
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),  # H100 SXM5 80GB
    ("B200", 8000.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100", 1555.0),  # the 40 GB parts
)

# NVLink 3 and 4 move 25 GB/s per link and direction (H100/H200 SXM: 18 links = 450 GB/s each way). An
# all-reduce's bus bandwidth cannot exceed the links' one-way rate; at large sizes NCCL without NVLink
# SHARP (NVLS off, as it must be here) reaches a large part of it. Until the 8-GPU run measures it (issue
# 9), a large-size busbw below half the link rate is a warning, never a failure; smaller sizes are
# latency-bound and get no threshold.
NVLINK_GBPS_PER_LINK = 25.0
ALLREDUCE_WARN_FRACTION_OF_LINK = 0.5
ALLREDUCE_THRESHOLD_MIN_BYTES = 256 * MiB

# /dev/shm: NCCL's shared-memory transport and SGLang's worker processes use it; Docker's default of 64
# MiB makes NCCL fail to create its segments. Below 1 GiB is a failure; below the stack's smoke.shm_size
# (what smoke and deploy give the container) a warning.
SHM_FAIL_BYTES = 1 * GiB

# memlock: NCCL over InfiniBand / GPUDirect RDMA registers (pins) memory and fails under a small limit.
# A single NVLink node does not need it, so anything short of unlimited is a warning.
UNLIMITED = -1


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, its status, the measured value and the threshold."""

    name: str
    status: str
    value: str
    threshold: str
    detail: str = ""
    measured: float | None = None  # the number behind `value`, for --json consumers

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Requirements:
    """What the stack needs from the node."""

    stack: str = ""
    cuda: str | None = None  # the stack's CUDA toolkit, e.g. "13.0.1"
    tp: int = 1
    arch_list: tuple[str, ...] = ()  # e.g. ("9.0", "10.0a", "12.0+PTX")
    shm_bytes: int = 32 * GiB
    sizes: tuple[int, ...] = (1 * MiB, 64 * MiB, 1 * GiB)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str = ""
    compute_cap: str = ""  # "9.0"
    memory_total_mib: int = 0
    memory_used_mib: int = 0
    memory_free_mib: int = 0
    pci_bus_id: str = ""


@dataclass(frozen=True)
class AllReduceResult:
    """What the NCCL worker measured. `busbw_gbps` is None for a single rank: it moves nothing."""

    world_size: int
    correct: bool
    mismatches: dict[int, str] = field(default_factory=dict)  # size -> first wrong element, if any
    time_us: dict[int, float] = field(default_factory=dict)
    algbw_gbps: dict[int, float | None] = field(default_factory=dict)
    busbw_gbps: dict[int, float | None] = field(default_factory=dict)
    error: str | None = None


def worst(checks: Sequence[Check]) -> str:
    return max((c.status for c in checks), key=_SEVERITY.__getitem__, default=PASS)


def fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def parse_size(text: str) -> int:
    """'1M', '64MiB', '1G', '32g', '4096' -> bytes (binary units, as Docker's shm_size)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"'{text}' is not a size like 1M, 64MiB or 1G")
    scale = {"": 1, "k": 1 << 10, "m": MiB, "g": GiB, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


# ---- driver ----------------------------------------------------------------------------------------


def required_driver(cuda: str) -> tuple[str, str] | None:
    """(the toolkit's minimum driver, its major's minimum driver) for a CUDA version, or None if unknown."""
    parts = version_tuple(cuda)
    if len(parts) < 2:
        return None
    major, minor = parts[0], parts[1]
    major_min = CUDA_MAJOR_MIN_DRIVER.get(major)
    if major_min is None:
        return None
    # A minor release not in the table needs at least the newest listed release below it.
    known = [k for k in CUDA_MIN_DRIVER if k[0] == major and k[1] <= minor]
    toolkit_min = CUDA_MIN_DRIVER[max(known)] if known else major_min
    return toolkit_min, major_min


def check_driver(driver_version: str | None, cuda: str | None) -> Check:
    need = required_driver(cuda) if cuda else None
    if not driver_version:
        threshold = f">= {need[0]} (CUDA {cuda})" if need else "an NVIDIA driver"
        return Check("driver", FAIL, "none", threshold, "no NVIDIA driver found")
    if not cuda:
        return Check("driver", PASS, driver_version, "any (stack pins no CUDA)")
    if need is None:
        return Check(
            "driver", WARN, driver_version, f"unknown for CUDA {cuda}", f"no driver table entry for CUDA {cuda}"
        )
    toolkit_min, major_min = need
    have = version_tuple(driver_version)
    threshold = f">= {toolkit_min} (CUDA {cuda})"
    if have >= version_tuple(toolkit_min):
        return Check("driver", PASS, driver_version, threshold)
    if have >= version_tuple(major_min):
        return Check(
            "driver",
            WARN,
            driver_version,
            threshold,
            "minor-version compatibility only: run-time JIT of newer PTX fails",
        )
    return Check("driver", FAIL, driver_version, threshold, f"CUDA {cuda} cannot run on this driver")


# ---- GPUs ------------------------------------------------------------------------------------------


def check_gpu_count(count: int, tp: int) -> Check:
    status = PASS if count >= tp else FAIL
    detail = "" if status == PASS else f"the stack's tp {tp} needs {tp} GPUs"
    return Check("gpu count", status, str(count), f">= {tp} (tp)", detail, float(count))


def _arch_matches(cap: str, arch: str) -> bool:
    return arch.removesuffix("+PTX").removesuffix("a") == cap


def check_compute_capability(gpus: Sequence[GpuInfo], arch_list: Sequence[str]) -> Check:
    caps = sorted({g.compute_cap for g in gpus})
    value = ", ".join(f"{c} x{sum(g.compute_cap == c for g in gpus)}" for c in caps) or "none"
    if not arch_list:
        return Check("compute capability", PASS, value, "any (stack lists no cuda_arch_list)")
    threshold = "in " + ",".join(arch_list)
    missing = [c for c in caps if not any(_arch_matches(c, a) for a in arch_list)]
    if not missing:
        return Check("compute capability", PASS, value, threshold)
    # PTX of a lower architecture still JIT-compiles for a newer GPU, slowly and without its own
    # instructions (no wgmma on Hopper from sm_80 PTX).
    ptx = [a for a in arch_list if a.endswith("+PTX")]
    jit_ok = all(any(version_tuple(a) <= version_tuple(c) for a in ptx) for c in missing)
    if ptx and jit_ok:
        return Check(
            "compute capability", WARN, value, threshold, f"{','.join(missing)} runs only from JIT-compiled PTX"
        )
    return Check(
        "compute capability",
        FAIL,
        value,
        threshold,
        f"the image has no kernels for compute capability {','.join(missing)}",
    )


def check_free_memory(gpu: GpuInfo) -> Check:
    total, free = gpu.memory_total_mib, gpu.memory_free_mib
    fraction = free / total if total else 0.0
    value = f"{free} / {total} MiB ({fraction:.1%})"
    threshold = f">= {FREE_MEMORY_PASS_FRACTION:.0%} free"
    if fraction >= FREE_MEMORY_PASS_FRACTION:
        status, detail = PASS, ""
    elif fraction >= FREE_MEMORY_WARN_FRACTION:
        status, detail = WARN, f"{gpu.memory_used_mib} MiB already in use"
    else:
        status, detail = FAIL, f"{gpu.memory_used_mib} MiB already in use: the model will not fit"
    return Check(f"free memory gpu{gpu.index}", status, value, threshold, detail, float(free))


# ---- topology --------------------------------------------------------------------------------------


def nvlink_count(link: str) -> int:
    """'NV18' -> 18; anything else (PIX, PXB, PHB, NODE, SYS) -> 0."""
    m = re.fullmatch(r"NV(\d+)", link.strip())
    return int(m.group(1)) if m else 0


def check_topology(
    count: int, links: Mapping[tuple[int, int], str], p2p: Mapping[tuple[int, int], bool] | None = None
) -> Check:
    """NVLink between every pair passes; PCIe peer access only warns; a pair without P2P fails."""
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    if not pairs:
        return Check(
            "topology",
            PASS,
            f"{count} GPU: no pairs",
            "NVLink between every pair",
            "a single GPU has no peer to link to",
        )
    p2p = p2p or {}
    nvlinked = [p for p in pairs if nvlink_count(links.get(p, "")) > 0]
    no_p2p = [p for p in pairs if p not in nvlinked and p2p.get(p) is False]
    pcie_only = [p for p in pairs if p not in nvlinked and p not in no_p2p]
    kinds = sorted({links.get(p, "?") for p in nvlinked})
    value = f"{len(nvlinked)}/{len(pairs)} pairs NVLink" + (f" ({','.join(kinds)})" if kinds else "")

    def names(ps: list[tuple[int, int]]) -> str:
        return " ".join(f"{i}-{j}:{links.get((i, j), '?')}" for i, j in ps[:8]) + (" ..." if len(ps) > 8 else "")

    if no_p2p:
        return Check(
            "topology", FAIL, value, "NVLink between every pair", f"no P2P: {names(no_p2p)}", float(len(nvlinked))
        )
    if pcie_only:
        return Check(
            "topology", WARN, value, "NVLink between every pair", f"PCIe only: {names(pcie_only)}", float(len(nvlinked))
        )
    return Check("topology", PASS, value, "NVLink between every pair", "", float(len(nvlinked)))


def min_nvlinks(count: int, links: Mapping[tuple[int, int], str]) -> int:
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    return min((nvlink_count(links.get(p, "")) for p in pairs), default=0)


# ---- bandwidth -------------------------------------------------------------------------------------


def datasheet_memory_gbps(gpu_name: str) -> float | None:
    for key, gbps in DATASHEET_MEMORY_GBPS:
        if key in gpu_name:
            return gbps
    return None


def check_copy_bandwidth(gpu: GpuInfo, gbps: float | None, error: str | None = None) -> Check:
    name = f"copy bandwidth gpu{gpu.index}"
    if gbps is None:
        return Check(name, FAIL, "not measured", "a device-to-device copy", error or "copy failed")
    value = f"{gbps:.0f} GB/s"
    peak = datasheet_memory_gbps(gpu.name)
    if peak is None:
        return Check(name, WARN, value, "no datasheet figure", f"no datasheet bandwidth for '{gpu.name}'", gbps)
    threshold = f">= {COPY_PASS_FRACTION * peak:.0f} GB/s ({COPY_PASS_FRACTION:.0%} of {peak:.0f})"
    fraction = gbps / peak
    if fraction >= COPY_PASS_FRACTION:
        return Check(name, PASS, value, threshold, f"{fraction:.0%} of datasheet", gbps)
    status = WARN if fraction >= COPY_WARN_FRACTION else FAIL
    return Check(name, status, value, threshold, f"{fraction:.0%} of datasheet: a slow card", gbps)


def check_allreduce(result: AllReduceResult, min_links: int) -> list[Check]:
    """Correctness against the exact sum, then bus bandwidth per size (none for a single rank)."""
    n = result.world_size
    ranks = f"{n} rank{'s' if n != 1 else ''}"
    if result.error:
        return [Check("all-reduce", FAIL, "did not run", f"NCCL across {ranks}", result.error)]
    wrong = ", ".join(f"{fmt_bytes(s)}: {m}" for s, m in result.mismatches.items())
    checks = [
        Check(
            "all-reduce sum",
            PASS if result.correct else FAIL,
            "exact" if result.correct else "WRONG",
            f"exact sum over {ranks}",
            "single-rank group: checks NCCL runs, moves nothing" if n == 1 else wrong,
        )
    ]
    link_gbps = min_links * NVLINK_GBPS_PER_LINK
    for size, busbw in result.busbw_gbps.items():
        name = f"all-reduce busbw {fmt_bytes(size)}"
        if busbw is None:
            checks.append(
                Check(
                    name,
                    PASS,
                    "n/a: single rank",
                    "none (needs 2+ GPUs)",
                    "one rank moves no data: no bandwidth figure",
                )
            )
            continue
        value = f"{busbw:.1f} GB/s"
        if size < ALLREDUCE_THRESHOLD_MIN_BYTES or link_gbps == 0:
            why = "latency-bound size" if size < ALLREDUCE_THRESHOLD_MIN_BYTES else "no NVLink: no reference"
            checks.append(Check(name, PASS, value, f"none ({why})", "", busbw))
            continue
        floor = ALLREDUCE_WARN_FRACTION_OF_LINK * link_gbps
        threshold = f">= {floor:.0f} GB/s ({ALLREDUCE_WARN_FRACTION_OF_LINK:.0%} of NV{min_links} one-way)"
        status = PASS if busbw >= floor else WARN
        checks.append(Check(name, status, value, threshold, "" if status == PASS else "slow interconnect", busbw))
    return checks


# ---- host limits -----------------------------------------------------------------------------------


def check_shm(shm_bytes: int | None, required: int) -> Check:
    if shm_bytes is None:
        return Check("/dev/shm", FAIL, "missing", f">= {fmt_bytes(required)}", "/dev/shm is not mounted")
    value = f"{shm_bytes / GiB:.1f} GiB"
    threshold = f">= {fmt_bytes(required)} (smoke.shm_size)"
    if shm_bytes >= required:
        return Check("/dev/shm", PASS, value, threshold, "", float(shm_bytes))
    if shm_bytes >= SHM_FAIL_BYTES:
        return Check("/dev/shm", WARN, value, threshold, "smaller than the stack's shm_size", float(shm_bytes))
    return Check(
        "/dev/shm",
        FAIL,
        value,
        threshold,
        f"under {fmt_bytes(SHM_FAIL_BYTES)}: NCCL's shm transport fails",
        float(shm_bytes),
    )


def check_memlock(soft_limit: int) -> Check:
    if soft_limit == UNLIMITED:
        return Check("memlock ulimit", PASS, "unlimited", "unlimited")
    return Check(
        "memlock ulimit",
        WARN,
        fmt_bytes(soft_limit),
        "unlimited",
        "NCCL over InfiniBand/GPUDirect RDMA needs pinned memory",
        float(soft_limit),
    )


# ---- kernel coverage of the image ------------------------------------------------------------------


def check_kernel_coverage(gpus: Sequence[GpuInfo], coverage: Mapping[str, str] | None, problem: str = "") -> Check:
    """The image's coverage label ({capability: native|ptx|missing}, written by `invoke build`) against the
    node's GPUs: a capability the image does not cover natively is a warning, so is an image without a label."""
    name, threshold = "kernel coverage", "native kernels for every GPU"
    caps = sorted({g.compute_cap for g in gpus if g.compute_cap}, key=version_tuple)
    if coverage is None:
        detail = problem or "the image has no io.sglstack.coverage label: its kernel coverage is unknown"
        return Check(name, WARN, "unknown", threshold, detail)
    value = ", ".join(f"{c}: {coverage.get(c, 'not built for')}" for c in caps) or "no GPU"
    ptx = [c for c in caps if coverage.get(c) == "ptx"]
    missing = [c for c in caps if coverage.get(c) == "missing"]
    absent = [c for c in caps if c not in coverage]
    if not (ptx or missing or absent):
        return Check(name, PASS, value, threshold)
    details = []
    if absent:
        details.append(f"{','.join(absent)} is not among the image's capabilities ({','.join(coverage)}): "
                       "expect 'no kernel image is available for execution on the device'")
    if missing:
        details.append(f"some extensions have no kernels for {','.join(missing)} (excepted in the stack's policy)")
    if ptx:
        details.append(f"{','.join(ptx)} runs JIT-compiled PTX: a slower first start, and the driver must JIT it")
    return Check(name, WARN, value, threshold, "; ".join(details))
