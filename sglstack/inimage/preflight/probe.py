"""The probes: every side effect on the node (nvidia-smi, NVML, torch copies, /dev/shm, ulimits).

Standard library plus what the node has: nvidia-ml-py (`pynvml`) when importable, torch for the copies.
Each probe returns raw data or None; the judging is in `checks`, the parsing in `parse`.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
from typing import Any

from .checks import GiB
from .parse import QUERY_FIELDS

SMI_TIMEOUT_S = 60


def run_smi(*args: str) -> str | None:
    """`nvidia-smi ARGS` stdout, or None when there is no nvidia-smi or it fails (no driver loaded)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def smi_outputs() -> dict[str, str | None]:
    """The three nvidia-smi outputs preflight reads, keyed by the file name they are recorded under."""
    return {
        "nvidia-smi.txt": run_smi(),
        "nvidia-smi-query-gpu.csv": run_smi(f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"),
        "nvidia-smi-topo-m.txt": run_smi("topo", "-m"),
    }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_ANCESTORS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def nvml_snapshot() -> dict[str, Any] | None:
    """What NVML says about the node, as plain JSON data; None without nvidia-ml-py or a driver."""
    try:
        import pynvml as nvml  # optional (nvidia-ml-py): nvidia-smi's output is the fallback
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no driver on this node
        return None
    try:
        snap: dict[str, Any] = {
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": int(nvml.nvmlSystemGetCudaDriverVersion()),
            "devices": [],
            "pairs": [],
        }
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        bus_ids = [_text(nvml.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
        remotes: list[list[str]] = []
        for i, h in enumerate(handles):
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            snap["devices"].append(
                {
                    "index": i,
                    "name": _text(nvml.nvmlDeviceGetName(h)),
                    "uuid": _text(nvml.nvmlDeviceGetUUID(h)),
                    "pci_bus_id": bus_ids[i],
                    "cuda_compute_capability": list(nvml.nvmlDeviceGetCudaComputeCapability(h)),
                    "memory": {"total": int(mem.total), "used": int(mem.used), "free": int(mem.free)},
                }
            )
            remotes.append(_active_nvlink_remotes(nvml, h))
            snap["devices"][-1]["nvlink_remotes"] = remotes[-1]
        for a in range(len(handles)):
            for b in range(a + 1, len(handles)):
                snap["pairs"].append(_pair(nvml, handles, bus_ids, remotes, a, b))
        return snap
    finally:
        nvml.nvmlShutdown()


def _active_nvlink_remotes(nvml: Any, handle: Any) -> list[str]:
    out = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            out.append(_text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId).lower())
        except Exception:  # NotSupported on PCIe cards and past the last link
            continue
    return out


def _pair(nvml: Any, handles: list, bus_ids: list[str], remotes: list[list[str]], a: int, b: int) -> dict:
    direct = sum(r == bus_ids[b] for r in remotes[a])
    # Links that end on something other than a GPU end on an NVSwitch, which joins every GPU to every other.
    switched = sum(r not in bus_ids for r in remotes[a]) if any(r not in bus_ids for r in remotes[b]) else 0
    pair: dict[str, Any] = {"a": a, "b": b, "nvlinks": direct or switched}
    try:
        level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
        pair["ancestor"] = _ANCESTORS.get(int(level), str(level))
    except Exception as exc:
        pair["ancestor"] = f"unknown ({type(exc).__name__})"
    try:
        status = nvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], nvml.NVML_P2P_CAPS_INDEX_READ)
        pair["p2p_read"] = "ok" if status == nvml.NVML_P2P_STATUS_OK else f"status {int(status)}"
    except Exception as exc:
        pair["p2p_read"] = f"unknown ({type(exc).__name__})"
    return pair


def torch_cuda() -> tuple[Any, str | None]:
    """(the torch module, None) when torch sees a GPU, else (None, why not)."""
    try:
        import torch  # optional: a node or image without torch still gets the nvidia-smi checks
    except ImportError as exc:
        return None, f"torch is not importable ({exc})"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device"
    return torch, None


def torch_p2p(count: int) -> dict[tuple[int, int], bool]:
    torch, _ = torch_cuda()
    if torch is None:
        return {}
    return {(i, j): bool(torch.cuda.can_device_access_peer(i, j)) for i in range(count) for j in range(i + 1, count)}


def copy_bandwidth_gbps(index: int, nbytes: int = 2 * GiB, warmup: int = 3, iters: int = 20) -> float:
    """Median device-to-device copy bandwidth on GPU `index`, counting bytes read plus bytes written.

    2 GiB buffers are 35 times the H200's 60 MB L2, so the copy streams from HBM. The copy is checked:
    a wrong copy raises instead of returning a bandwidth.
    """
    torch, why = torch_cuda()
    if torch is None:
        raise RuntimeError(why)
    device = torch.device("cuda", index)
    with torch.cuda.device(device):
        free, _ = torch.cuda.mem_get_info(device)
        nbytes = min(nbytes, (free // 4) // (1 << 20) * (1 << 20))
        src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        for _ in range(warmup):
            dst.copy_(src)
        times_ms = []
        for _ in range(iters):
            dst.fill_(0)  # poison: a skipped copy cannot pass the check below
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times_ms.append(start.elapsed_time(end))
        ok = bool(torch.equal(dst, src))
        del src, dst
        torch.cuda.empty_cache()
    if not ok:
        raise RuntimeError("the copied buffer differs from its source")
    return 2 * nbytes / (statistics.median(times_ms) / 1e3) / 1e9


def shm_bytes(path: str = "/dev/shm") -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def memlock_soft_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if soft == resource.RLIM_INFINITY else int(soft)
