"""The bisect driver's world, shared by the bisect tests: a synthetic SGLang history whose commit 9 serves
slower (commit 6 cannot take the patch), and `Fakes` for `build_stack` and `run_smoke` that answer at once."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from bisect_fixtures import make_history, stack_yaml

from sglstack.bisect import driver
from sglstack.bisect.driver import BisectRequest
from sglstack.bisect.log import BisectLog
from sglstack.core.errors import BuildError
from sglstack.imagebuild.plan import BuildResult
from sglstack.smoke import SmokeReport

N = 12
BAD_FROM = 9  # the first midpoint (6) cannot take the patch: the search steps around it
SPEEDS = [300.0 if i < BAD_FROM else 270.0 for i in range(N + 1)]


class Fakes:
    """build_stack / run_smoke stand-ins: images by config (ref), a server as fast as its commit says."""

    def __init__(self, shas: list[str], *, seed: int = 0) -> None:
        self.shas = shas
        self.rng = random.Random(seed)
        self.images: set[str] = set()
        self.builds: list[str] = []
        self.smokes: list[str] = []
        self.fail_build: set[str] = set()
        self.no_serve: set[str] = set()
        self.interrupt_at: int | None = None

    def build_stack(self, stack, options):
        ref = stack.sglang.git.ref
        if ref in self.fail_build:
            raise BuildError(f"stack '{stack.name}': BuildKit failed: network unreachable")
        skipped = ref in self.images
        if not skipped:
            self.builds.append(ref)
            self.images.add(ref)
        return BuildResult(stack.name, "runtime", f"hash-{ref[:8]}", f"sha256:{ref}", f"sglstack/synth:{ref[:12]}",
                           skipped, None, "none" if skipped else "classic")

    def run_smoke(self, stack, image, options):
        if self.interrupt_at is not None and len(self.smokes) == self.interrupt_at:
            raise KeyboardInterrupt
        ref = stack.sglang.git.ref
        self.smokes.append(ref)
        assert options.kinds == ("baseline",) and options.flush_cache and options.no_history
        speed = SPEEDS[self.shas.index(ref)]
        level = speed * (1 + self.rng.gauss(0, 0.004))
        runs = [{"tokens_per_s": level * (1 + self.rng.gauss(0, 0.01)), "completed": 3, "requests": 3,
                 "ttft_s": 0.01, "flushed": True, "accept_length": None} for _ in range(options.runs)]
        started = ref not in self.no_serve
        baseline = {"started": started, "failure": None if started else "the server exited with code 1",
                    "runs": runs if started else []}
        return SmokeReport({"verdict": "pass", "failures": [], "image": {"digest": f"sha256:{ref}"},
                            "baseline": baseline, "eagle3": {"started": False}})


@pytest.fixture(scope="module")
def history_template(tmp_path_factory):
    """The synthetic history, made once per module: each test gets its own copy (the same shas)."""
    repo = tmp_path_factory.mktemp("history") / "sglang"
    return repo, make_history(repo, SPEEDS, patch_breaks=(6,))


@pytest.fixture
def history(tmp_path, monkeypatch, history_template):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "sglang"
    shutil.copytree(history_template[0], repo, symlinks=True)
    shas = list(history_template[1])
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(stack_yaml(str(repo), shas[-1]))
    fakes = Fakes(shas)
    monkeypatch.setattr(driver, "build_stack", fakes.build_stack)
    monkeypatch.setattr(driver, "run_smoke", fakes.run_smoke)
    return shas, matrix, fakes, tmp_path / "build" / "synth" / "bisect"


def request(matrix: Path, good: str, bad: str, **kw) -> BisectRequest:
    return BisectRequest(stack="synth", good=good, bad=bad, stacks_file=matrix, smoke={"gpus": 0}, **kw)


def events(folder: Path) -> list[dict]:
    return BisectLog(folder).read()
