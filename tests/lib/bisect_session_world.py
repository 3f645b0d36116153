"""The bisect loop tests' world (tests/unit/test_bisect_session*.py): a release stack without patches, so no git
history and no patch engine; `build_stack`, `run_smoke` and the package index's release list are stand-ins, and the
clock is the test's."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

from sglstack.bisect import driver, refs
from sglstack.bisect.driver import BisectRequest, run_bisect
from sglstack.bisect.log import BisectLog
from sglstack.core.errors import BuildError
from sglstack.imagebuild.plan import BuildResult
from sglstack.inimage import patchkit
from sglstack.smoke import SmokeReport

RELEASES = ["0.5.0", "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.5", "0.5.6"]
SLOW_FROM = "0.5.4"
# Each run of a batch: a level per release and a fixed spread, so every verdict and p-value is the same each run.
SPREAD = (1.0, 1.004, 0.996, 1.002, 0.998)

STACKS = textwrap.dedent("""
    stacks:
      rel:
        description: a release stack for the bisect loop's tests
        base_image: debian:bookworm-slim
        python: "3.11"
        sglang: {version: "0.5.6"}
        publish: {repository: 127.0.0.1:1/sglstack-test/bisect}
        serving: {model: test-org/tiny-model, tp: 1, gpus: 0, startup_timeout_s: 60, shm_size: 256m}
        smoke: {max_new_tokens: 24, concurrency: 1, num_prompts: 3}
    """)


class Clock:
    """`time.monotonic` for the driver alone: every reading is `step` seconds after the one before."""

    def __init__(self, step: float = 1.0) -> None:
        self.now = 100.0
        self.step = step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


class Fakes:
    def __init__(self) -> None:
        self.builds: list[tuple[str, object]] = []
        self.smokes: list[tuple[str, str, object]] = []
        self.images: set[str] = set()
        self.fail_build: set[str] = set()
        self.no_serve: set[str] = set()
        self.no_digest = False

    def build_stack(self, stack, options):
        ref = stack.sglang.version
        self.builds.append((ref, options))
        if ref in self.fail_build:
            raise BuildError(f"stack 'rel': BuildKit failed at {ref}")
        skipped = ref in self.images
        self.images.add(ref)
        return BuildResult(stack.name, "runtime", f"hash-{ref}", f"sha256:id-{ref}", f"sglstack/rel:{ref}",
                           skipped, None, "none" if skipped else "classic")

    def run_smoke(self, stack, image, options):
        ref = stack.sglang.version
        self.smokes.append((ref, image, options))
        level = 270.0 if patchkit.Version.parse(ref) >= patchkit.Version.parse(SLOW_FROM) else 300.0
        started = ref not in self.no_serve
        runs = [{"tokens_per_s": level * SPREAD[i % len(SPREAD)], "completed": 3, "requests": 3, "ttft_s": 0.01,
                 "flushed": True, "accept_length": None} for i in range(options.runs)]
        return SmokeReport({"verdict": "pass", "failures": [],
                            "image": {} if self.no_digest else {"digest": f"sha256:dg-{ref}"},
                            "baseline": {"started": started,
                                         "failure": None if started else "the server exited with code 1",
                                         "runs": runs if started else []},
                            "eagle3": {"started": False}})


def make_loop(tmp_path, monkeypatch):
    """The matrix of a release stack, the stand-ins patched in, the test's clock (the tests' `loop` fixture)."""
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SGLSTACK_CA_BUNDLE", raising=False)
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(STACKS)
    fakes = Fakes()
    clock = Clock()
    monkeypatch.setattr(driver, "build_stack", fakes.build_stack)
    monkeypatch.setattr(driver, "run_smoke", fakes.run_smoke)
    monkeypatch.setattr(refs, "available_versions",
                        lambda name: ["0.4.9", *RELEASES, "0.6.0"] if name == "sglang" else [])
    monkeypatch.setattr(driver, "time", SimpleNamespace(monotonic=clock.monotonic))
    return SimpleNamespace(matrix=matrix, fakes=fakes, clock=clock, folder=tmp_path / "build" / "rel" / "bisect",
                           build=tmp_path / "build")


def bisect(loop, good="0.5.0", bad="0.5.6", **kw) -> tuple[driver.BisectResult, list[str]]:
    lines: list[str] = []
    request = BisectRequest(stack="rel", good=good, bad=bad, stacks_file=loop.matrix, smoke={"gpus": 0}, **kw)
    return run_bisect(request, log=lines.append), lines


def events(loop) -> list[dict]:
    return BisectLog(loop.folder).read()


STEPS = [
    "bisect: ref 0/6 0.5.0 (sglang 0.5.0): good endpoint",
    "bisect: 0.5.0: batch 1: median 300.00 tok/s -> good",
    "bisect: ref 0/6 0.5.0 (sglang 0.5.0): good endpoint",
    "bisect: 0.5.0: batch 2: median 300.00 tok/s -> good",
    "bisect: ref 6/6 0.5.6 (sglang 0.5.6): bad endpoint",
    "bisect: 0.5.6: batch 1: median 270.00 tok/s -> bad",
    "bisect: ref 6/6 0.5.6 (sglang 0.5.6): bad endpoint",
    "bisect: 0.5.6: batch 2: median 270.00 tok/s -> bad",
    "bisect: ref 3/6 0.5.3 (sglang 0.5.3): bisect between 0 and 6 of 6",
    "bisect: 0.5.3: batch 1: median 300.00 tok/s -> good (vs good p=1, vs bad p=0.000666)",
    "bisect: ref 4/6 0.5.4 (sglang 0.5.4): bisect between 3 and 6 of 6",
    "bisect: 0.5.4: batch 1: median 270.00 tok/s -> bad (vs good p=0.000666, vs bad p=1)",
    "bisect: ref 4/6 0.5.4 (sglang 0.5.4): confirm: one more server start of the answer",
    "bisect: 0.5.4: batch 2: median 270.00 tok/s -> bad (vs good p=1.08e-05, vs bad p=1)",
    "bisect: ref 3/6 0.5.3 (sglang 0.5.3): confirm: one more server start of the answer",
    "bisect: 0.5.3: batch 2: median 300.00 tok/s -> good (vs good p=1, vs bad p=1.08e-05)",
]
FAST = [300.0, 301.2, 298.8, 300.6, 299.4]
SLOW = [270.0, 271.08, 268.92, 270.54, 269.46]


def without_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time"} for r in records]


def interrupt_after(loop, smokes: int) -> None:
    real = loop.fakes.run_smoke

    def run_smoke(stack, image, options):
        if len(loop.fakes.smokes) == smokes:
            raise KeyboardInterrupt
        return real(stack, image, options)

    driver.run_smoke = run_smoke  # restored by the fixture's monkeypatch
