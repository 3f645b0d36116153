"""The preflight check tests' node (tests/unit/test_preflight_checks*.py): an H200 as `nvidia-smi` reports it, and a
topology with one link kind between every pair of GPUs."""

from __future__ import annotations

from sglstack.inimage.preflight.checks import GpuInfo

H200 = GpuInfo(
    0, "NVIDIA H200", compute_cap="9.0", memory_total_mib=143771, memory_used_mib=615, memory_free_mib=143155
)


def _all_pairs(n: int, link: str) -> dict[tuple[int, int], str]:
    return {(i, j): link for i in range(n) for j in range(i + 1, n)}
