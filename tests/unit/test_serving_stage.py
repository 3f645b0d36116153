"""The serving stage of every stack, as rendered, keeps nothing of the build: no pip or apt cache, no
package lists, no SGLang source tree or downloaded wheel (no Docker: read from the rendered Dockerfiles)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.lock.trust import lock_for_build
from sglstack.render.dockerfile import render_dockerfile
from sglstack.size.cudacopies import serving_stage

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks.yaml"


def instructions(stage: str) -> list[str]:
    """Each RUN/COPY/ADD with its continuation lines joined (comments left out)."""
    out: list[str] = []
    current: list[str] = []
    for line in stage.splitlines():
        if line.lstrip().startswith("#"):
            continue
        if current or re.match(r"^(RUN|COPY|ADD)\b", line):
            current.append(line)
            if not line.rstrip().endswith("\\"):
                out.append(" ".join(part.rstrip("\\ ").strip() for part in current))
                current = []
    return out


@pytest.mark.parametrize("name", load_matrix(STACKS).names())
def test_serving_stage_keeps_nothing_of_the_build(name):
    stack = load_matrix(STACKS).get(name)
    text = render_dockerfile(stack, lock_for_build(STACKS, stack))
    _, stage = serving_stage(text)
    steps = instructions(stage)
    # A stack built for more than amd64 unpacks its locked parts in the wheels stage (natively) and copies them.
    wheels = " AS wheels" in text
    assert any("pip install" in s for s in steps) != wheels
    for step in steps:
        if "uv pip install" in step:  # uv's cache (a locked part's) lives in a BuildKit cache mount, or is not used
            assert "--mount=type=cache,target=/root/.cache/uv," in step or " --no-cache " in step, step
        elif "pip install" in step:  # pip's cache lives in a BuildKit cache mount, or is not written at all
            assert "--mount=type=cache,target=/root/.cache/pip" in step or "--no-cache-dir" in step, step
        if "apt-get update" in step:  # the package lists go in the same layer that fetched them
            assert step.endswith("rm -rf /var/lib/apt/lists/*") or "rm -rf /var/lib/apt/lists/* &&" in step, step
        assert "pip download" not in step and "git clone" not in step, step
        if step.startswith("COPY --from="):  # only the src stage's outputs (never its tree or its wheel), and
            # each venv tree the wheels stage unpacked (never a downloaded wheel)
            assert re.match(r"^COPY --from=sglang-src /out/", step) or (
                wheels and re.match(r"^COPY --from=wheels /stage/[a-z-]+/opt/venv/ /opt/venv/$", step)), step
    # the SGLang wheel reaches the serving stage through a bind mount, or unpacked: never as a layer
    assert any("--mount=type=bind,from=sglang-src,source=/src/dist" in s for s in steps) != wheels
    if wheels:  # the wheels stage downloads into a folder it deletes in the same step
        pulls = [s for s in instructions(text.split(" AS wheels", 1)[1]) if "pip download" in s]
        assert pulls and all(s.endswith("&& rm -rf /tmp/wheels") for s in pulls)


def test_instructions_joins_continuations():
    stage = "FROM x AS runtime\nRUN a \\\n && b\n# note\nCOPY y /z\n"
    assert instructions(stage) == ["RUN a && b", "COPY y /z"]
