"""Pure parsers of what the node tools print: `nvidia-smi` CSV and banner, `nvidia-smi topo -m`, NVML.

Standard library only: this runs inside stack images.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .checks import GpuInfo

# `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`, in this order.
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "driver_version",
    "compute_cap",
    "memory.total",
    "memory.used",
    "memory.free",
    "pci.bus_id",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _int(text: str) -> int:
    m = re.search(r"\d+", text)
    return int(m.group(0)) if m else 0


def parse_query_gpu(text: str) -> tuple[str | None, list[GpuInfo]]:
    """The query CSV -> (driver version, GPUs). Rows that do not have every field are skipped."""
    driver, gpus = None, []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(QUERY_FIELDS) or not cells[0].isdigit():
            continue
        row = dict(zip(QUERY_FIELDS, cells, strict=True))
        driver = driver or row["driver_version"]
        gpus.append(
            GpuInfo(
                index=int(row["index"]),
                name=row["name"],
                uuid=row["uuid"],
                compute_cap=row["compute_cap"],
                memory_total_mib=_int(row["memory.total"]),
                memory_used_mib=_int(row["memory.used"]),
                memory_free_mib=_int(row["memory.free"]),
                pci_bus_id=row["pci.bus_id"],
            )
        )
    return driver, gpus


def parse_smi_banner(text: str) -> tuple[str | None, str | None]:
    """Plain `nvidia-smi` -> (driver version, the highest CUDA version the driver supports)."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return (driver.group(1) if driver else None), (cuda.group(1) if cuda else None)


def _cells(line: str) -> list[str]:
    # Columns are tab-separated; some versions pad with spaces instead.
    parts = line.split("\t") if "\t" in line else re.split(r"\s{2,}", line)
    return [p.strip() for p in parts]


def parse_topo_matrix(text: str) -> tuple[int, dict[tuple[int, int], str]]:
    """`nvidia-smi topo -m` -> (GPU count, {(i, j): link}) for i < j, e.g. {(0, 1): 'NV18'}.

    NIC rows and columns, the affinity columns and the legend are ignored.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    # The header row starts with an empty cell; GPU rows start with their label in column 0.
    header_at = next(
        (n for n, line in enumerate(lines) if line[:1] in (" ", "\t") and re.search(r"\bGPU0\b", line)), None
    )
    if header_at is None:
        return 0, {}
    header = _cells(lines[header_at])
    if header and header[0] == "":
        header = header[1:]
    columns = {n: int(name[3:]) for n, name in enumerate(header) if re.fullmatch(r"GPU\d+", name)}
    links: dict[tuple[int, int], str] = {}
    rows = 0
    for line in lines[header_at + 1 :]:
        cells = _cells(line)
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            if cells and cells[0].startswith("Legend"):
                break
            continue
        rows += 1
        i = int(cells[0][3:])
        for col, j in columns.items():
            if col + 1 < len(cells) and i < j:
                links[(i, j)] = cells[col + 1]
    return rows, links


def nvml_gpus(snapshot: Mapping[str, Any]) -> tuple[str | None, list[GpuInfo]]:
    """An NVML snapshot (as `probe.nvml_snapshot` records it) -> (driver version, GPUs)."""
    gpus = []
    for dev in snapshot.get("devices", []):
        mem = dev.get("memory", {})
        major, minor = dev.get("cuda_compute_capability", [0, 0])
        gpus.append(
            GpuInfo(
                index=int(dev["index"]),
                name=dev.get("name", ""),
                uuid=dev.get("uuid", ""),
                compute_cap=f"{major}.{minor}",
                memory_total_mib=int(mem.get("total", 0)) >> 20,
                memory_used_mib=int(mem.get("used", 0)) >> 20,
                memory_free_mib=int(mem.get("free", 0)) >> 20,
                pci_bus_id=dev.get("pci_bus_id", ""),
            )
        )
    return snapshot.get("driver_version"), gpus


def nvml_cuda_version(snapshot: Mapping[str, Any]) -> str | None:
    """NVML reports the driver's CUDA version as an int, 13000 -> '13.0'."""
    raw = snapshot.get("cuda_driver_version")
    return f"{raw // 1000}.{raw % 1000 // 10}" if isinstance(raw, int) and raw > 0 else None


def nvml_links(snapshot: Mapping[str, Any]) -> tuple[dict[tuple[int, int], str], dict[tuple[int, int], bool]]:
    """An NVML snapshot -> ({(i, j): 'NV<active links>' or the common PCIe ancestor}, {(i, j): P2P ok})."""
    links: dict[tuple[int, int], str] = {}
    p2p: dict[tuple[int, int], bool] = {}
    for pair in snapshot.get("pairs", []):
        key = (int(pair["a"]), int(pair["b"]))
        links[key] = f"NV{pair['nvlinks']}" if pair.get("nvlinks") else str(pair.get("ancestor", "?"))
        if "p2p_read" in pair:
            p2p[key] = pair["p2p_read"] == "ok"
    return links, p2p
