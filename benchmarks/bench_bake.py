"""Builds at scale: rendering every artefact of the matrix, and what a registry cache saves a cold runner.

    python3 benchmarks/bench_bake.py render [--repeat N] [--stacks N]
    python3 benchmarks/bench_bake.py cache [--image TAG ...]

`render` times, for the matrix of stacks.yaml and for a generated matrix of N stacks (copies of the
first stack, inheriting it): loading, the Dockerfiles, the build contexts, the compose files and the
bake file (its definition alone, and `invoke bake` as a whole, contexts included), with ratios.

`cache` reads the layers of verified images this engine holds (by default every `sglstack/*` image
labelled verified, each a build record's tag) and splits them into the base image's layers (pulled on
any runner) and the layers the Dockerfile builds. For a cold runner it prints what each case fetches
and what it rebuilds: no cache (rebuild every built layer), a registry cache of an unchanged config
(fetch them, rebuild none), and after a patch change (fetch the layers before the first step the
patches reach, rebuild the rest). Sizes are the engine's uncompressed layer sizes; a registry moves
them gzip-compressed, so the fetched bytes are an upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglstack.cli.build import bake_command
from sglstack.config.matrix import DEFAULT_STACKS_FILE, load_matrix
from sglstack.imagebuild.bake import bake_definition, plan_targets, render_stack_targets
from sglstack.imagebuild.context import write_build_context, write_compose
from sglstack.imagebuild.plan import secret_sources
from sglstack.render.compose import moving_tag_ref
from sglstack.render.dockerfile import render_dockerfile

MS = 1000.0


def generated_matrix(folder: Path, count: int) -> Path:
    """stacks.yaml plus `count` stacks inheriting its first one."""
    text = DEFAULT_STACKS_FILE.read_text()
    first = load_matrix(DEFAULT_STACKS_FILE).names()[0]
    extra = "".join(f"  gen{i:04d}:\n    inherits: {first}\n    description: generated {i}\n" for i in range(count))
    path = folder / "stacks.yaml"
    path.write_text(text + extra)
    return path


def time_artefacts(stacks_file: Path, repeat: int) -> dict[str, float]:
    """Median seconds of each artefact for the whole matrix."""
    runs: dict[str, list[float]] = {k: [] for k in ("load", "dockerfiles", "contexts", "compose", "bake definition",
                                                     "invoke bake (contexts + file)")}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            t = time.perf_counter()
            matrix = load_matrix(stacks_file)
            runs["load"].append(time.perf_counter() - t)
            stacks = list(matrix.stacks.values())
            t = time.perf_counter()
            for stack in stacks:
                render_dockerfile(stack)
            runs["dockerfiles"].append(time.perf_counter() - t)
            t = time.perf_counter()
            for stack in stacks:
                write_build_context(stack, out / stack.name)
            runs["contexts"].append(time.perf_counter() - t)
            t = time.perf_counter()
            for stack in stacks:
                write_compose(stack, moving_tag_ref(stack), out / stack.name)
            runs["compose"].append(time.perf_counter() - t)
            secrets = secret_sources(None)
            requests = [r for stack in stacks for r in render_stack_targets(stack, out / stack.name, None, secrets)]
            t = time.perf_counter()
            json.dumps(bake_definition(plan_targets(requests)))
            runs["bake definition"].append(time.perf_counter() - t)
            os.environ["SGLSTACK_BUILD_DIR"] = str(out / "bake")
            t = time.perf_counter()
            with open(os.devnull, "w") as sink:
                stdout, sys.stdout = sys.stdout, sink
                try:
                    bake_command(str(stacks_file))
                finally:
                    sys.stdout = stdout
            runs["invoke bake (contexts + file)"].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in runs.items()}


def render_main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        cases = [("stacks.yaml", DEFAULT_STACKS_FILE), (f"{args.stacks} generated stacks",
                                                        generated_matrix(Path(tmp), args.stacks))]
        for label, path in cases:
            stacks = len(load_matrix(path).stacks)
            times = time_artefacts(path, args.repeat)
            total = sum(v for k, v in times.items() if k != "invoke bake (contexts + file)")
            print(f"{label}: {stacks} stacks, {2 * stacks} bake targets, median of {args.repeat}")
            for name, seconds in times.items():
                print(f"  {name:<32} {seconds * MS:9.1f} ms  {seconds / stacks * MS:7.2f} ms/stack  "
                      f"{seconds / total:6.3f} of all artefacts")
            print(f"  {'all artefacts (load..bake def.)':<32} {total * MS:9.1f} ms")
    return 0


# ---- the registry cache on a cold runner -------------------------------------------------------------

def _docker(*argv: str) -> str:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=True).stdout


def verified_images() -> list[str]:
    """The newest verified serving image of each local `sglstack/STACK` repository."""
    out = _docker("images", "--filter", "label=io.sglstack.verified=true", "--filter",
                  "label=io.sglstack.target=runtime", "--format", "{{.Repository}}:{{.Tag}}")
    newest: dict[str, str] = {}
    for line in out.splitlines():  # newest first
        repo = line.partition(":")[0]
        if repo.startswith("sglstack/") and "<none>" not in line:
            newest.setdefault(repo, line)
    return sorted(newest.values())


def built_layers(image: str) -> tuple[list[int], list[tuple[int, str]]]:
    """(base layer sizes, [(size, step)] of the layers the Dockerfile built, bottom up)."""
    info = json.loads(_docker("image", "inspect", image))[0]
    base_name = (info["Config"].get("Labels") or {}).get("org.opencontainers.image.base.name", "")
    repo, _, tag = image.partition(":")
    if not base_name and tag.startswith("sglang-src-"):
        # The src stage carries none of the serving stage's labels: its base is the stack's src_image.
        matrix = load_matrix(DEFAULT_STACKS_FILE)
        name = repo.removeprefix("sglstack/")
        base_name = matrix.stacks[name].src_image if name in matrix.stacks else ""
    base_count = len(json.loads(_docker("image", "inspect", base_name))[0]["RootFS"]["Layers"]) if base_name else 0
    rows = _docker("history", "--no-trunc", "--human=false", "--format", "{{.Size}}\t{{.CreatedBy}}", image)
    history = [(int(size), step) for size, _, step in (r.partition("\t") for r in reversed(rows.splitlines()))]
    # History rows that add a layer: a RUN or COPY/ADD (BuildKit records 0-byte layers as empty, too).
    with_layer = [(s, step) for s, step in history if not step.startswith(("ENV", "LABEL", "WORKDIR", "EXPOSE",
                                                                           "SHELL", "CMD", "ENTRYPOINT", "ARG"))]
    layers = len(info["RootFS"]["Layers"])
    with_layer = with_layer[-layers:]
    return [s for s, _ in with_layer[:base_count]], with_layer[base_count:]


def first_patch_step(built: list[tuple[int, str]]) -> int:
    """The first built layer a change to a patch reaches (the overlay from the patched src stage)."""
    for i, (_, step) in enumerate(built):
        if "/out/patches.json" in step or "patches/" in step or "/out/overlay" in step:
            return i
    return len(built)


def cache_main(args: argparse.Namespace) -> int:
    images = args.image or verified_images()
    if not images:
        print("no verified sglstack image in this engine: build one (invoke build) first")
        return 1
    for image in images:
        base, built = built_layers(image)
        cut = first_patch_step(built)
        mb = 1e6
        built_bytes = sum(s for s, _ in built)
        print(f"{image}: {len(base)} base layers ({sum(base) / mb:.1f} MB, pulled on any runner), "
              f"{len(built)} built layers ({built_bytes / mb:.1f} MB)")
        cases = [("cold runner, no cache", 0, len(built)),
                 ("cold runner, registry cache, same config", len(built), 0),
                 ("cold runner, registry cache, one patch changed", cut, len(built) - cut)]
        for label, fetched, rebuilt in cases:
            fetched_bytes = sum(s for s, _ in built[:fetched])
            rebuilt_bytes = sum(s for s, _ in built[len(built) - rebuilt:])
            print(f"  {label:<48} fetch {fetched:2d} layers {fetched_bytes / mb:8.1f} MB   "
                  f"rebuild {rebuilt:2d} layers {rebuilt_bytes / mb:8.1f} MB")
        for size, step in built:
            print(f"    {size / mb:8.2f} MB  {step[:100]}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    render = sub.add_parser("render")
    render.add_argument("--repeat", type=int, default=5)
    render.add_argument("--stacks", type=int, default=50)
    cache = sub.add_parser("cache")
    cache.add_argument("--image", action="append")
    args = parser.parse_args()
    return render_main(args) if args.what == "render" else cache_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
