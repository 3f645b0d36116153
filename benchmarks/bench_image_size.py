"""The serving image's size against its floor, the time of the size report, and what a node re-pulls.

Not a CI step: it reads (and for `patch-pull` rebuilds) the full `pypi-cu130` image. Run after
`invoke build --stack pypi-cu130` (the build record names the image).

    python3 benchmarks/bench_image_size.py report [STACK]                 # figures + seconds of the report
    python3 benchmarks/bench_image_size.py compressed REF --registry H:P  # push REF, sum its gzip'd layers
    python3 benchmarks/bench_image_size.py patch-pull [--registry H:P]    # a patch edit, rebuilt; bytes re-pulled
    python3 benchmarks/bench_image_size.py pull OLD NEW                   # NEW's layers a node holding OLD lacks

`report`: the image (uncompressed, the engine's), its installed distributions, its base layer, the floor
(installed environment + base) and the ratio, duplicates, and the seconds `invoke size` took.
`compressed`: tags REF into a registry (a local `docker-registry serve` on loopback), pushes it, and
sums the layer sizes of the pushed manifest: the bytes a node pulls onto an empty disk.
`patch-pull`: one line of the Kimi K2.5 patch edited on a copy of the matrix, built through the
production build path (verified), then the layers of the new image a node holding the old one lacks,
uncompressed (RootFS content digests) and, with --registry, compressed (blobs of the pushed manifests).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_pypi_stack import STACK, _copy_matrix  # noqa: E402
from sglstack.adapters.docker import docker_client  # noqa: E402
from sglstack.config.matrix import load_matrix  # noqa: E402
from sglstack.imagebuild.flow import build_stack  # noqa: E402
from sglstack.imagebuild.plan import BuildSettings  # noqa: E402
from sglstack.lock.trust import lock_for_build  # noqa: E402
from sglstack.size.measure import image_layers, measure  # noqa: E402
from sglstack.size.report import pull_bytes  # noqa: E402

DOCKER = "/usr/bin/docker"
MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json, "
                  "application/vnd.oci.image.manifest.v1+json")


def recorded_image(stack: str) -> str:
    return json.loads((REPO / "build" / stack / "record.json").read_text())["image_id"]


def report(stack: str) -> dict:
    image = recorded_image(stack)
    start = time.monotonic()
    rep = measure(docker_client(), image)
    seconds = round(time.monotonic() - start, 1)
    base = rep.layers[0].bytes
    floor = rep.installed_bytes + base
    return {"image": image, "bytes": rep.bytes, "installed_bytes": rep.installed_bytes, "base_bytes": base,
            "floor_bytes": floor, "ratio_to_floor": round(rep.bytes / floor, 4),
            "duplicate_bytes": rep.duplicate_bytes, "files": rep.files, "report_seconds": seconds,
            "layers": [(la.step, la.bytes) for la in rep.layers]}


def push(ref: str, registry: str, tag: str) -> dict:
    """Push `ref` as REGISTRY/sglstack-bench/size:TAG; the manifest's layers (compressed bytes, digests)."""
    remote = f"{registry}/sglstack-bench/size:{tag}"
    subprocess.run([DOCKER, "tag", ref, remote], check=True)
    start = time.monotonic()
    subprocess.run([DOCKER, "push", "-q", remote], check=True, stdout=subprocess.DEVNULL)
    seconds = round(time.monotonic() - start, 1)
    request = urllib.request.Request(f"http://{registry}/v2/sglstack-bench/size/manifests/{tag}",
                                     headers={"Accept": MANIFEST_TYPES})
    with urllib.request.urlopen(request, timeout=60) as response:
        manifest = json.load(response)
    subprocess.run([DOCKER, "rmi", remote], check=True, stdout=subprocess.DEVNULL)
    layers = [(layer["digest"], int(layer["size"])) for layer in manifest["layers"]]
    return {"ref": ref, "push_seconds": seconds, "compressed_bytes": sum(s for _, s in layers), "layers": layers}


def patch_pull(registry: str | None) -> dict:
    client = docker_client()
    old = recorded_image(STACK)
    _, _, old_layers = image_layers(client, old)
    with tempfile.TemporaryDirectory(prefix="sglstack-bench-") as tmp:
        stacks = _copy_matrix(Path(tmp))
        methods = Path(tmp) / "patches" / "kimi-k25-eagle3" / "methods.py"
        methods.write_text(methods.read_text() + f"\n# bench {time.time_ns()}\n")
        stack = load_matrix(stacks, patches_dir=Path(tmp) / "patches").get(STACK)
        start = time.monotonic()
        result = build_stack(stack, BuildSettings(lock=lock_for_build(str(stacks), stack),
                                                 patches_dir=Path(tmp) / "patches", out_dir=Path(tmp) / "out",
                                                 show_progress=False))
        seconds = round(time.monotonic() - start, 1)
    _, _, new_layers = image_layers(client, result.image_id)
    fetched, which = pull_bytes([la.diff_id for la in old_layers if la.diff_id], new_layers)
    out: dict = {"old": old, "new": result.image_id, "new_tag": result.tag, "build_seconds": seconds,
                 "uncompressed_pull_bytes": fetched, "layers_fetched": [(la.step, la.bytes) for la in which],
                 "layers": len(new_layers)}
    if registry:
        a, b = push(old, registry, "before"), push(result.image_id, registry, "after")
        have = {digest for digest, _ in a["layers"]}
        out["compressed_pull_bytes"] = sum(size for digest, size in b["layers"] if digest not in have)
        out["compressed_image_bytes"] = b["compressed_bytes"]
    return out


def pull(old: str, new: str) -> dict:
    client = docker_client()
    _, _, held = image_layers(client, old)
    _, _, layers = image_layers(client, new)
    fetched, which = pull_bytes([la.diff_id for la in held if la.diff_id], layers)
    return {"old": old, "new": new, "uncompressed_pull_bytes": fetched, "layers": len(layers),
            "layers_fetched": [(la.step, la.bytes) for la in which]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["report", "compressed", "patch-pull", "pull"])
    ap.add_argument("arg", nargs="?")
    ap.add_argument("arg2", nargs="?")
    ap.add_argument("--registry", help="HOST:PORT of a registry on loopback to push to")
    opts = ap.parse_args()
    if opts.what == "report":
        out = report(opts.arg or STACK)
    elif opts.what == "compressed":
        if not (opts.arg and opts.registry):
            ap.error("compressed needs REF and --registry")
        out = push(opts.arg, opts.registry, "measured")
    elif opts.what == "pull":
        if not (opts.arg and opts.arg2):
            ap.error("pull needs OLD and NEW")
        out = pull(opts.arg, opts.arg2)
    else:
        out = patch_pull(opts.registry)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
