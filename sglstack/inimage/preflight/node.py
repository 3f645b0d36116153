"""Run the probes on this node and judge them: `inspect_node(Requirements) -> NodeReport`.

Standard library plus torch: this runs on the GPU node itself, or inside the stack image there.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import checks as C
from . import parse, probe
from .allreduce import MULTICAST_OFF_ENV, run_allreduce

SCHEMA = "sglstack.preflight/1"


@dataclass
class NodeReport:
    requirements: C.Requirements
    checks: list[C.Check] = field(default_factory=list)
    node: dict[str, Any] = field(default_factory=dict)
    fatal: str | None = None  # one line, when the node has no driver or no GPU at all

    @property
    def status(self) -> str:
        return C.FAIL if self.fatal else C.worst(self.checks)

    @property
    def exit_code(self) -> int:
        return 1 if self.status == C.FAIL else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "status": self.status,
            "fatal": self.fatal,
            "requirements": asdict(self.requirements),
            "node": self.node,
            "checks": [c.to_dict() for c in self.checks],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeReport:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a preflight report (schema {data.get('schema')!r}, want {SCHEMA})")
        req = dict(data["requirements"])
        req["arch_list"], req["sizes"] = tuple(req["arch_list"]), tuple(req["sizes"])
        return cls(
            C.Requirements(**req), [C.Check(**c) for c in data["checks"]], data.get("node", {}), data.get("fatal")
        )


# config.platforms.PLATFORM_OF_MACHINE, which this module cannot import (it runs in images where only the
# standard library is; tests/unit/test_preflight_checks.py holds the two equal).
NODE_PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}


def _save_raw(raw_dir: Path | None, name: str, content: str | None) -> None:
    if raw_dir is not None and content is not None:
        raw_dir.mkdir(parents=True, exist_ok=True)
        (raw_dir / name).write_text(content)


def inspect_node(
    req: C.Requirements, *, raw_dir: Path | None = None, progress: Callable[[str], None] = lambda _msg: None
) -> NodeReport:
    os.environ.update(MULTICAST_OFF_ENV)
    report = NodeReport(
        req,
        node={
            "hostname": platform.node(),
            # what deploy checks an image's platforms against (an x86-only tag cannot run on a Grace node)
            "platform": NODE_PLATFORMS.get(platform.machine(), f"linux/{platform.machine()}"),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "multicast_off_env": MULTICAST_OFF_ENV,
        },
    )
    smi = probe.smi_outputs()
    snapshot = probe.nvml_snapshot()
    for name, content in smi.items():
        _save_raw(raw_dir, name, content)
    if snapshot is not None:
        _save_raw(raw_dir, "nvml-snapshot.json", json.dumps(snapshot, indent=1) + "\n")

    # NVML first (the library nvidia-smi itself reads), nvidia-smi's CSV when nvidia-ml-py is missing.
    if snapshot is not None:
        driver, gpus = parse.nvml_gpus(snapshot)
        cuda_driver, source = parse.nvml_cuda_version(snapshot), "nvml"
    else:
        driver, gpus = parse.parse_query_gpu(smi["nvidia-smi-query-gpu.csv"] or "")
        cuda_driver, source = parse.parse_smi_banner(smi["nvidia-smi.txt"] or "")[1], "nvidia-smi"
    report.node.update(driver=driver, cuda_driver=cuda_driver, source=source, gpus=[asdict(g) for g in gpus])
    if not driver:
        report.checks.append(C.check_driver(None, req.cuda))
        report.fatal = (
            "no NVIDIA driver on this node: nvidia-smi is missing or failing and NVML (libnvidia-ml.so.1) did not load"
        )
        return report

    report.checks.append(C.check_driver(driver, req.cuda))
    if not gpus:
        report.checks.append(C.check_gpu_count(0, req.tp))
        report.fatal = f"NVIDIA driver {driver} is loaded but no GPU is visible"
        return report
    report.checks.append(C.check_gpu_count(len(gpus), req.tp))
    report.checks.append(C.check_compute_capability(gpus, req.arch_list))
    report.checks.extend(C.check_free_memory(g) for g in gpus)

    links = _topology(report, gpus, smi, snapshot)
    _measured(report, gpus, links, progress)

    report.checks.append(C.check_shm(probe.shm_bytes(), req.shm_bytes))
    report.checks.append(C.check_memlock(probe.memlock_soft_limit()))
    return report


def _topology(report: NodeReport, gpus: list[parse.GpuInfo], smi: dict[str, str | None], snapshot: dict[str, Any] | None
              ) -> dict[tuple[int, int], str]:
    """The GPUs' links (recorded and checked), for the all-reduce check's expectations."""
    # Topology from `nvidia-smi topo -m`, the matrix operators know; NVML's links when it is missing.
    count, links = parse.parse_topo_matrix(smi["nvidia-smi-topo-m.txt"] or "")
    nvml_links, nvml_p2p = parse.nvml_links(snapshot or {})
    if count != len(gpus):
        links = nvml_links
    p2p = {**nvml_p2p, **probe.torch_p2p(len(gpus))}
    report.node.update(
        links={f"{i}-{j}": v for (i, j), v in sorted(links.items())},
        p2p={f"{i}-{j}": v for (i, j), v in sorted(p2p.items())},
    )
    report.checks.append(C.check_topology(len(gpus), links, p2p))
    return links


def _measured(report: NodeReport, gpus: list[parse.GpuInfo], links: dict[tuple[int, int], str],
              progress: Callable[[str], None]) -> None:
    """What torch measures: each card's copy bandwidth and an NCCL all-reduce over all of them."""
    req = report.requirements
    torch, why = probe.torch_cuda()
    if torch is not None:
        report.node.update(
            torch=torch.__version__, torch_cuda=torch.version.cuda, nccl=".".join(map(str, torch.cuda.nccl.version()))
        )
    for gpu in gpus:
        progress(f"copy bandwidth on gpu{gpu.index}")
        try:
            gbps, error = (probe.copy_bandwidth_gbps(gpu.index), None) if torch else (None, why)
        except Exception as exc:  # a CUDA error on one card is that card's failure, not the run's
            gbps, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        report.checks.append(C.check_copy_bandwidth(gpu, gbps, error))

    progress(f"NCCL all-reduce over {len(gpus)} rank(s)")
    result = run_allreduce(len(gpus), req.sizes) if torch else C.AllReduceResult(len(gpus), False, error=why)
    report.node["allreduce"] = asdict(result)
    report.checks.extend(C.check_allreduce(result, C.min_nvlinks(len(gpus), links)))


def format_table(report: NodeReport) -> str:
    """A plain-text table (the node has no rich); the host renders its own."""
    rows = [("check", "status", "value", "threshold", "detail")]
    rows += [(c.name, c.status.upper(), c.value, c.threshold, c.detail) for c in report.checks]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    lines.append(
        f"preflight {report.status.upper()}"
        + (f" for stack {report.requirements.stack}" if report.requirements.stack else "")
    )
    return "\n".join(line.rstrip() for line in lines)
