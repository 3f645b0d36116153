"""Compose deployment timings for `invoke deploy / rollback / undeploy`, measured in one run.

    python3 benchmarks/bench_deploy.py [--repeat 3] [--docker-cli /usr/bin/docker]

Serves the CPU SGLang double (tests/doubles/sglang-double) through the production template with GPU
reservations off and a 1 s healthcheck interval, and measures (medians of --repeat):
  1. sglstack's deploy to healthy, split into its phases (render, `compose config`, `up -d`, health wait);
  2. a bare `compose up -d` of the same rendered file plus the same health wait: the overhead ratio;
  3. a redeploy with another image, a rollback, a redeploy of a crashing image that restores the previous
     deployment (to healthy), and an undeploy;
  4. compose CLI detection, first call against cached.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from sglstack.adapters import compose as compose_cli  # noqa: E402
from sglstack.config.matrix import load_matrix  # noqa: E402
from sglstack.deploy import (  # noqa: E402
    flow,
    health,
    lifecycle,
)
from sglstack.render import compose as cmp  # noqa: E402

STACK = {
    "stacks": {
        "bench": {
            "base_image": "debian:bookworm-slim",
            "sglang": {"version": "0.5.9"},
            "patches": [],
            "serving": {
                "model": "bench-org/tiny-model",
                "speculative": {
                    "draft_model": "bench-org/tiny-eagle3",
                    "num_steps": 3,
                    "eagle_topk": 1,
                    "num_draft_tokens": 4,
                },
                "tp": 1,
                "gpus": 1,
                "startup_timeout_s": 120,
                "shm_size": "256m",
            },
        }
    }
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(cli: str, tag: str, context: Path | None = None, dockerfile: str | None = None) -> None:
    argv = [cli, "build", "-q", "-t", tag, str(context) if context else "-"]
    subprocess.run(
        argv, input=dockerfile, text=True, check=True, capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "1"}
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--docker-cli", default="/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker")
    args = ap.parse_args()

    client = docker.from_env()
    repo = f"sglstack-bench-deploy-{secrets.token_hex(4)}"
    build(args.docker_cli, f"{repo}:a", REPO_ROOT / "tests" / "doubles" / "sglang-double")
    build(args.docker_cli, f"{repo}:b", dockerfile=f'FROM {repo}:a\nLABEL io.sglstack.bench="b"\n')
    build(args.docker_cli, f"{repo}:crash", dockerfile=f"FROM {repo}:a\nENV SGLANG_DOUBLE_CRASH_AT_START=1\n")
    work = Path(tempfile.mkdtemp(prefix="sglstack-bench-deploy-"))
    (work / "hf").mkdir()  # a missing bind source is refused (Docker would create it as root)
    (work / "stacks.yaml").write_text(yaml.safe_dump(STACK))
    stack = load_matrix(work / "stacks.yaml", patches_dir=work / "none").get("bench")
    options = cmp.ComposeOptions(
        gpus=False,
        port=free_port(),
        hf_cache=str(work / "hf"),
        start_period_s=30,
        healthcheck_interval_s=1,
        healthcheck_timeout_s=2,
        stop_grace_period_s=1,
    )

    t0 = time.perf_counter()
    compose_cli._detect_compose.cache_clear()
    compose = compose_cli.detect_compose()
    detect_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    compose_cli.detect_compose()
    detect_warm = time.perf_counter() - t0

    rows: dict[str, list[float]] = {}
    try:
        for i in range(args.repeat):
            dep = flow.Deployment(stack=stack, build_root=work / f"build{i}", project=f"{repo}-{i}")
            marks: list[tuple[str, float]] = []

            def say(msg: str, marks=marks) -> None:
                marks.append((msg, time.perf_counter()))

            t0 = time.perf_counter()
            flow.deploy(dep, f"{repo}:a", options, compose=compose, say=say)
            total = time.perf_counter() - t0
            at = {key: next(t for m, t in marks if m.startswith(key)) for key in ("rendered", "deploying")}
            healthy = next(t for m, t in marks if "is healthy" in m)
            rows.setdefault("deploy to healthy", []).append(total)
            rows.setdefault("  render", []).append(at["rendered"] - t0)
            rows.setdefault("  config + image check", []).append(at["deploying"] - at["rendered"])
            rows.setdefault("  up -d + health wait + record", []).append(healthy - at["deploying"])

            t0 = time.perf_counter()
            flow.deploy(dep, f"{repo}:b", options, compose=compose, say=lambda _: None)
            rows.setdefault("redeploy (other image)", []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            lifecycle.rollback(dep, compose=compose, say=lambda _: None)
            rows.setdefault("rollback", []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            try:
                flow.deploy(dep, f"{repo}:crash", options, compose=compose, say=lambda _: None)
                raise AssertionError("the crashing image deployed")
            except flow.DeployFailed as exc:
                assert "restored" in str(exc), exc
            rows.setdefault("failed redeploy + restore to healthy", []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            lifecycle.undeploy(dep, compose=compose, say=lambda _: None)
            rows.setdefault("undeploy", []).append(time.perf_counter() - t0)

            # The same file, bare: `up -d` and the same health poll, no validation or records.
            bare = f"{repo}-bare-{i}"
            compose_file = dep.out_dir / cmp.COMPOSE_FILE
            t0 = time.perf_counter()
            compose.run(bare, [compose_file], ["up", "-d", "--no-build"])
            bare_dep = flow.Deployment(stack=stack, build_root=dep.build_root, project=bare)
            verdict, _ = health.wait_healthy(client, bare_dep.project_name, cmp.SERVICE, 120, lambda _: None)
            rows.setdefault("bare compose up -d + health wait", []).append(time.perf_counter() - t0)
            assert verdict == "healthy", verdict
            compose.run(bare, [compose_file], ["down", "-v", "-t", "1"])
    finally:
        for i in range(args.repeat):
            for project in (f"{repo}-{i}", f"{repo}-bare-{i}"):
                project_filter = {"label": f"{health.COMPOSE_PROJECT_LABEL}={project}"}
                for c in client.containers.list(all=True, filters=project_filter):
                    c.remove(force=True)
                for n in client.networks.list(filters=project_filter):
                    n.remove()
        for tag in ("crash", "b", "a"):
            client.images.remove(f"{repo}:{tag}")
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"compose: {compose.label}; {args.repeat} runs; {os.cpu_count()} cores; medians")
    print(f"{'step':38} {'seconds':>8}")
    for key, value in med.items():
        print(f"{key:38} {value:8.2f}")
    ratio = med["deploy to healthy"] / med["bare compose up -d + health wait"]
    print(f"overhead ratio deploy / bare up+wait: {ratio:.2f}")
    print(
        f"compose detection: first {detect_cold:.2f} s, cached {detect_warm * 1e6:.0f} us "
        f"({detect_cold / max(detect_warm, 1e-9):.0f}x)"
    )


if __name__ == "__main__":
    main()
