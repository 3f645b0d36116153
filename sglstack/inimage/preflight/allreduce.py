"""NCCL all-reduce across every GPU through `torch.distributed`, one process per GPU.

Each rank fills a float32 buffer with small integers, so the sum is exact and every element can be
compared with the expected value; then it times in-place all-reduces with CUDA events. Bus bandwidth is
NCCL-tests' definition: algbw * 2(n-1)/n. With one GPU the group has one rank: NCCL runs, moves nothing,
and no bandwidth figure is reported.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Sequence

from .checks import AllReduceResult, MiB

# NVLink multicast (NVLS) can put a host's shared GPUs out of service: keep it off in NCCL, PyTorch's
# symmetric memory and NVSHMEM, in this process and every rank it starts.
MULTICAST_OFF_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

RUN_TIMEOUT_S = 300
_PATTERN = 251  # element i holds (i % 251) + rank + 1: sums stay small integers, exact in float32


def _iters(nbytes: int) -> int:
    return 50 if nbytes <= MiB else 20 if nbytes <= 256 * MiB else 10


def _worker(rank: int, world: int, port: int, sizes: Sequence[int], out_path: str) -> None:
    # torch is optional (a node or an image without it still gets every other check): imported where used.
    import torch
    import torch.distributed as dist

    os.environ.update(MULTICAST_OFF_ENV)
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=RUN_TIMEOUT_S // 2),
        device_id=torch.device("cuda", rank),
    )
    result: dict = {"mismatches": {}, "time_us": {}}
    try:
        for nbytes in sizes:
            n = nbytes // 4
            base = torch.arange(n, device="cuda", dtype=torch.int64).remainder_(_PATTERN).to(torch.float32)
            buf = base + (rank + 1)
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            expected = base * world + world * (world + 1) / 2
            wrong = (buf != expected).nonzero()
            if wrong.numel():
                i = int(wrong[0, 0])
                result["mismatches"][nbytes] = f"rank {rank} element {i}: {float(buf[i])} != {float(expected[i])}"
            # Rank 0 reports: it must learn of a wrong sum on any rank.
            wrong_total = torch.tensor([wrong.shape[0]], device="cuda", dtype=torch.int64)
            dist.all_reduce(wrong_total, op=dist.ReduceOp.SUM)
            if wrong_total.item() and nbytes not in result["mismatches"]:
                result["mismatches"][nbytes] = f"{int(wrong_total.item())} wrong element(s) on other ranks"
            del base, expected
            # AVG keeps the values bounded over repeated in-place reductions; it moves the same bytes.
            timed = torch.randn(n, device="cuda")
            for _ in range(3):
                dist.all_reduce(timed, op=dist.ReduceOp.AVG)
            torch.cuda.synchronize()
            dist.barrier()
            samples = []
            for _ in range(_iters(nbytes)):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dist.all_reduce(timed, op=dist.ReduceOp.AVG)
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e3)
            # The slowest rank bounds the collective: take the max over ranks of each rank's median.
            median = torch.tensor([statistics.median(samples)], device="cuda")
            dist.all_reduce(median, op=dist.ReduceOp.MAX)
            result["time_us"][nbytes] = float(median.item())
            del buf, timed
        if rank == 0:
            with open(out_path, "w") as fh:
                json.dump(result, fh)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_allreduce(world: int, sizes: Sequence[int]) -> AllReduceResult:
    """Spawn `world` ranks (one per GPU), all-reduce each size, check the sum and time it."""
    os.environ.update(MULTICAST_OFF_ENV)
    try:
        import torch.multiprocessing as mp  # optional, as in `_worker`
    except ImportError as exc:
        return AllReduceResult(world, False, error=f"torch is not importable ({exc})")
    with tempfile.TemporaryDirectory(prefix="sglstack-preflight-") as tmp:
        out_path = os.path.join(tmp, "rank0.json")
        ctx = mp.start_processes(
            _worker, args=(world, _free_port(), list(sizes), out_path), nprocs=world, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + RUN_TIMEOUT_S
        try:
            while not ctx.join(timeout=5):
                if time.monotonic() > deadline:
                    return AllReduceResult(world, False, error=f"timed out after {RUN_TIMEOUT_S}s (NCCL hang?)")
        except Exception as exc:  # ProcessRaisedException / ProcessExitedException from a rank
            last = [line for line in str(exc).strip().splitlines() if line.strip()]
            return AllReduceResult(world, False, error=(last[-1] if last else type(exc).__name__)[:300])
        finally:
            for proc in ctx.processes:
                if proc.is_alive():
                    proc.terminate()
        with open(out_path) as fh:
            raw = json.load(fh)
    time_us = {int(k): v for k, v in raw["time_us"].items()}
    # A single rank moves no data between GPUs: its call time is kept, but it is no bandwidth.
    algbw = {s: (s / (t / 1e6) / 1e9 if world > 1 else None) for s, t in time_us.items()}
    busbw = {s: (bw * 2 * (world - 1) / world if bw is not None else None) for s, bw in algbw.items()}
    mismatches = {int(k): v for k, v in raw["mismatches"].items()}
    return AllReduceResult(world, not mismatches, mismatches, time_us, algbw, busbw)
