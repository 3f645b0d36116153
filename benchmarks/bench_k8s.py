"""Render the Kubernetes manifests (LeaderWorkerSet + Service) of every stack: render alone, and render
plus validation (our LWS model + kubernetes-validate's strict schemas, offline), in milliseconds.

    python3 benchmarks/bench_k8s.py [--repeat N] [--stacks-file FILE]

Each stack is rendered in the shapes the matrix serves: one node, and a 2-node group with host
networking and RDMA. The first validation loads the JSON schemas; later ones reuse them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglstack.config.matrix import DEFAULT_STACKS_FILE, load_matrix
from sglstack.render import k8s

REF = "127.0.0.1:5000/sglstack/sglang@sha256:" + "0" * 64
SHAPES = {"1 node": k8s.K8sOptions(), "2 nodes, hostNetwork, rdma/ib": k8s.K8sOptions(
    nnodes=2, host_network=True, rdma="rdma/ib")}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--stacks-file", default=str(DEFAULT_STACKS_FILE))
    args = parser.parse_args()
    matrix = load_matrix(args.stacks_file)
    stacks = list(matrix.stacks.values())

    t0 = time.perf_counter()
    k8s.render_k8s(stacks[0], REF)
    first = time.perf_counter() - t0

    render_only, validated = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        objs = [k8s.manifests(s, REF, o) for s in stacks for o in SHAPES.values()]
        for o in objs:
            for obj in o.values():
                k8s.dump(obj)
        render_only.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for s in stacks:
            for o in SHAPES.values():
                k8s.render_k8s(s, REF, o)
        validated.append(time.perf_counter() - t0)
    n = len(stacks) * len(SHAPES)
    print(f"stacks: {len(stacks)}, shapes: {len(SHAPES)} -> {n} manifest sets (LWS + Service), repeat {args.repeat}")
    print(f"first render + validation (loads the schemas): {ms(first)} ms")
    print(f"whole matrix, render only (median):            {ms(statistics.median(render_only))} ms")
    print(f"whole matrix, render + validation (median):    {ms(statistics.median(validated))} ms "
          f"({ms(statistics.median(validated) / n)} ms per set)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
