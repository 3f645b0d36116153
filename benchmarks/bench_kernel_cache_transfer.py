"""A large kernel cache through the embedded registry (distribution 2.8, tag scheme), streamed: the seconds and
the peak memory of each step (pack into the smoke's store, attach to an image, fetch into a node's store, unpack
into the folder the server reads), against the layer's size.

Peak memory is measured two ways per step: the Python heap's peak (tracemalloc, a second run of the step, since
tracing slows it) and the process's resident peak (VmHWM, reset before each step through /proc/self/clear_refs;
it includes the interpreter and the libraries, about 60-80 MB before any step).

Usage: python3 benchmarks/bench_kernel_cache_transfer.py [--mb 512] [--kind random|binaries] [--level N]
  --kind random    incompressible bytes (the layer is as large as the cache: the worst case for memory)
  --kind binaries  copies of this machine's shared libraries (ELF code, which compresses like cubins do)
  --level N        the gzip level to pack at (default: the project's)
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import sys
import sysconfig
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglstack.attest.kernelcache import attach_kernel_cache, fetch_kernel_cache
from sglstack.kernelcache import LayoutStore, NodeGpu, cache_files, cache_key
from sglstack.kernelcache import files as kc_files
from sglstack.registry.client import OCI_MANIFEST, RegistryClient, compute_digest
from sglstack.registry.local import registry_config, start_binary, stop_process

MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_peak_reset() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def rss_peak() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def fill_cache(folder: Path, mb: int, kind: str) -> None:
    (folder / "deep_gemm").mkdir(parents=True)
    if kind == "random":
        for n in range(max(1, mb // 16)):
            with open(folder / "deep_gemm" / f"kernel-{n}.cubin", "wb") as fh:
                for _ in range(16):
                    fh.write(os.urandom(MIB))
        return
    sources = sorted(p for p in Path(sysconfig.get_paths()["stdlib"]).parent.rglob("*.so*") if p.is_file())
    sources += sorted(p for p in Path("/usr/lib").rglob("*.so*") if p.is_file() and not p.is_symlink())
    total, n = 0, 0
    while total < mb * MIB:
        for src in sources:
            if total >= mb * MIB:
                break
            dst = folder / "deep_gemm" / f"k{n}-{src.name}"
            shutil.copyfile(src, dst)
            total += dst.stat().st_size
            n += 1


def push_image(client: RegistryClient, repo: str, nonce: str) -> str:
    """The same small image (by `nonce`) in `repo`: its digest."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "nonce": nonce}).encode()
    layer = nonce.encode()
    client.put_blob(repo, config)
    client.put_blob(repo, layer)
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": compute_digest(config), "size": len(config)},
                       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                   "digest": compute_digest(layer), "size": len(layer)}]}).encode()
    return client.put_manifest(repo, "image", body, OCI_MANIFEST)


def measured(step: Callable[[], Any], again: Callable[[], Any]) -> tuple[Any, float, int, int]:
    """(result, seconds, resident peak, heap peak): timed and RSS-measured untraced; the heap peak from `again`."""
    rss_peak_reset()
    start = time.monotonic()
    result = step()
    seconds = time.monotonic() - start
    rss = rss_peak()
    tracemalloc.start()
    try:
        again()
        heap = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, seconds, rss, heap


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--kind", choices=("random", "binaries"), default="random")
    parser.add_argument("--level", type=int, default=getattr(kc_files, "COMPRESS_LEVEL", 9))  # 9: before it was set
    args = parser.parse_args()
    kc_files.COMPRESS_LEVEL = args.level
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-kc-") as tmp:
        work = Path(tmp)
        fill_cache(work / "cache", args.mb, args.kind)
        cache_bytes = sum(cache_files(work / "cache").values())
        port = free_port()
        proc = start_binary(registry_config(port, work / "data"), work, port)
        try:
            client = RegistryClient(f"127.0.0.1:{port}")
            for _ in range(100):
                try:
                    client.ping()
                    break
                except Exception:  # still starting
                    time.sleep(0.1)
            nonce = secrets.token_hex(8)
            digest = push_image(client, "bench/kc", nonce)
            key = cache_key(image=digest, gpu=NodeGpu("NVIDIA H200", "9.0", "580"), argv=["python3", "-m", "x"],
                            env={}, model="m", draft_model=None, tp_size=8, cache_root="/root/.cache/sglstack-kernels")
            smoke = LayoutStore(work / "smoke-store")
            node = LayoutStore(work / "node-store")
            rows: dict[str, tuple[float, int, int]] = {}
            packed, *row = measured(lambda: smoke.put(key, work / "cache"),
                                    lambda: LayoutStore(work / "pack-again").put(key, work / "cache"))
            rows["pack"] = tuple(row)  # type: ignore[assignment]
            shutil.rmtree(work / "pack-again")
            steps: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
                "push": (lambda: attach_kernel_cache(client, "bench/kc", digest, smoke, packed.manifest_digest, None),
                         lambda: attach_kernel_cache(client, "bench/kc2", push_image(client, "bench/kc2", nonce), smoke,
                                                     packed.manifest_digest, None)),
                "fetch": (lambda: fetch_kernel_cache(client, "bench/kc", digest, key, node, None),
                          lambda: fetch_kernel_cache(client, "bench/kc", digest, key, LayoutStore(work / "node-2"),
                                                     None)),
                "unpack": (lambda: node.restore(key, work / "restored", work),
                           lambda: node.restore(key, work / "restored-2", work)),
            }
            for name, (step, again) in steps.items():
                _, *row = measured(step, again)
                rows[name] = tuple(row)  # type: ignore[assignment]
                for extra in ("node-2", "restored-2"):
                    shutil.rmtree(work / extra, ignore_errors=True)
        finally:
            stop_process(proc.pid)
        size = packed.layer_size
        print(f"kernel cache {args.kind}: {cache_bytes / MIB:.0f} MiB in {packed.files} files, layer "
              f"{size / MIB:.1f} MiB (gzip level {args.level}); load {os.getloadavg()[0]:.1f}, "
              f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
        print(f"{'step':<8}{'seconds':>9}{'layer MiB/s':>12}{'RSS peak MiB':>14}{'heap peak MiB':>15}"
              f"{'heap/layer':>12}")
        for name, (seconds, rss, heap) in rows.items():
            print(f"{name:<8}{seconds:>9.2f}{size / MIB / seconds:>12.0f}{rss / MIB:>14.1f}{heap / MIB:>15.2f}"
                  f"{heap / size:>12.4f}")


if __name__ == "__main__":
    main()
