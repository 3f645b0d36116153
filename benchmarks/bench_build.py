"""Build-speed figures for `invoke build`, measured in one run on the local dockerd.

    python3 benchmarks/bench_build.py [--heavy "torch==2.9.1"] [--docker-cli /usr/bin/docker]

On the CPU test stack (tests/fixtures/stacks-cpu.yaml, real sglang 0.5.9 + the Kimi K2.5 patch) plus a
heavy install layer made of a real wheel of a few hundred MB, it measures:
  1. a cold build through sglstack (no layer cache; pip's download cache mount is warm after the first
     fetch, as on any builder that has built before);
  3. a rebuild after a change to one patch method's body: ratio to cold, and whether the heavy layer was
     reused (its build step CACHED, its layer digest still in the image);
  4. a no-op rebuild: seconds, and proof that no BuildKit client was started;
  5. a plain `docker build --no-cache` of the same rendered Dockerfile: the orchestration overhead ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.adapters.docker import docker_client  # noqa: E402
from sglstack.config.matrix import load_matrix  # noqa: E402
from sglstack.core.resources import DEFAULT_PATCHES_DIR  # noqa: E402
from sglstack.imagebuild import flow as build_mod  # noqa: E402
from sglstack.imagebuild.flow import build_stack  # noqa: E402
from sglstack.imagebuild.plan import BuildSettings  # noqa: E402


def timed(fn):
    start = time.monotonic()
    result = fn()
    return result, time.monotonic() - start


def step_results(log: Path, needle: str) -> list[str]:
    """BuildKit's result lines ('DONE 12.3s' / 'CACHED') for the steps whose title contains `needle`."""
    text = log.read_text()
    nums = {m.group(1) for m in re.finditer(r"^#(\d+) \[.*" + re.escape(needle), text, re.M)}
    return [m.group(2) for m in re.finditer(r"^#(\d+) (DONE [\d.]+s|CACHED)", text, re.M) if m.group(1) in nums]


def step_times(log: Path) -> list[tuple[float, str]]:
    text = log.read_text()
    names = {m.group(1): m.group(2) for m in re.finditer(r"^#(\d+) (\[.*)$", text, re.M)}
    return [(float(m.group(2)), names.get(m.group(1), "?")) for m in re.finditer(r"^#(\d+) DONE ([\d.]+)s", text, re.M)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--heavy", default="torch==2.9.1")
    parser.add_argument("--docker-cli", default=os.environ.get("SGLSTACK_DOCKER_CLI", "/usr/bin/docker"))
    parser.add_argument("--ca-bundle", default=os.environ.get("PIP_CERT") or os.environ.get("SGLSTACK_CA_BUNDLE"))
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="sglstack-bench-build-"))
    patches = tmp / "patches"
    shutil.copytree(DEFAULT_PATCHES_DIR, patches)
    # A developer changing a method body also drops the stale declared after-hash; do the same here.
    toml = patches / "kimi-k25-eagle3" / "patch.toml"
    toml.write_text(re.sub(r"\n\[sha256_after\]\n(\"[^\n]*\n)*", "\n", toml.read_text()))
    matrix_file = tmp / "stacks.yaml"
    fixture = (REPO / "tests" / "fixtures" / "stacks-cpu.yaml").read_text()
    matrix_file.write_text(fixture.replace("stacks:\n", "stacks:\n  bench-heavy:\n    inherits: cpu-test\n"
                                           "    extra_layers:\n      - name: heavy\n"
                                           f"        requirements: ['{args.heavy}']\n        no_deps: true\n", 1))
    # load_matrix checks patch ids against the repo's patches/; the ids are the same in the copy
    stack = load_matrix(matrix_file).get("bench-heavy")
    out = tmp / "out"
    base = {"docker_cli": args.docker_cli, "ca_bundle": args.ca_bundle, "out_dir": out, "patches_dir": patches,
            "show_progress": False}
    client = docker_client()

    print(f"heavy layer: {args.heavy} (no deps); work dir {tmp}")
    warm, t_first = timed(lambda: build_stack(stack, BuildSettings(force=True, **base)))
    print(f"first build (fills pip's download cache): {t_first:.1f} s")
    cold, t_cold = timed(lambda: build_stack(stack, BuildSettings(force=True, no_cache=True, **base)))
    print(f"1. cold build via sglstack (--no-cache):  {t_cold:.1f} s")
    # The same run's own phase times: what sglstack adds around the BuildKit call, free of the network and
    # apt-mirror variance that separates two cold builds.
    phases = json.loads(cold.record_path.read_text())["durations_s"]
    around = t_cold - phases["build"]
    print(f"   of which BuildKit {phases['build']:.1f} s; sglstack around it {around:.1f} s "
          f"(render {phases['render']:.2f}, reading the verified facts {phases['verify']:.2f}, "
          f"stamp {phases['stamp']:.2f}); "
          f"total / BuildKit = {t_cold / phases['build']:.3f}")

    methods = patches / "kimi-k25-eagle3" / "methods.py"
    # A new edit each run: BuildKit's cache outlives the run, and a repeated edit would be a cache hit.
    edit = f'"""Get embedding and LM head weights (benchmark edit {secrets.token_hex(4)})."""'
    methods.write_text(methods.read_text().replace(
        '"""Get embedding and LM head weights for speculative decoding."""', edit))
    changed, t_patch = timed(lambda: build_stack(stack, BuildSettings(**base)))
    heavy_steps = step_results(out / "build.log", args.heavy)
    slowest = sorted(step_times(out / "build.log"), reverse=True)[:4]
    b = client.images.get(changed.image_id).attrs["RootFS"]["Layers"]
    earlier = {d for x in (warm, cold) for d in client.images.get(x.image_id).attrs["RootFS"]["Layers"]}
    reused = sum(1 for d in b if d in earlier)
    print(f"3. rebuild after a patch body change:     {t_patch:.1f} s   ratio to cold = {t_patch / t_cold:.3f} "
          f"(target <= 0.10); heavy step: {', '.join(heavy_steps) or '?'}; layers reused {reused}/{len(b)} "
          f"(the new ones: the patch overlay and sglstack's metadata)")
    print("   slowest steps of that rebuild: " + "; ".join(f"{t:.1f} s {name[:60]}" for t, name in slowest))

    def no_buildkit(*_a, **_k):
        raise AssertionError("BuildKit was called for an unchanged config")

    real_detect = build_mod.detect_builder
    build_mod.detect_builder = no_buildkit
    noop, t_noop = timed(lambda: build_stack(stack, BuildSettings(**base)))
    build_mod.detect_builder = real_detect
    print(f"4. no-op rebuild:                         {t_noop:.2f} s   skipped={noop.skipped}, no BuildKit call "
          f"(target < 2 s)")

    secret = ["--secret", f"id=ca_bundle,src={args.ca_bundle}"] if args.ca_bundle else []
    plain_cmd = [args.docker_cli, "build", "--no-cache", "--progress=plain", "-f", str(out / "Dockerfile"), *secret,
                 str(out / "context")]
    _, t_plain = timed(lambda: subprocess.run(plain_cmd, env={**os.environ, "DOCKER_BUILDKIT": "1"},
                                              capture_output=True, check=True))
    print(f"5. plain docker build --no-cache of the same rendered Dockerfile: {t_plain:.1f} s; "
          f"sglstack cold / plain cold = {t_cold / t_plain:.3f} (target within 5%: <= 1.05)")
    for image in {warm.tag, cold.tag, changed.tag}:
        subprocess.run([args.docker_cli, "rmi", "-f", image], capture_output=True, check=False)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
