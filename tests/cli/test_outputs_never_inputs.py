"""No task writes a file a flag names over one of the checkout's inputs (the stacks file, a lock, a patch).

`upgrade --json stacks.yaml` was fixed last round; `bake --out stacks.yaml` still replaced the matrix with the
bake file's JSON and exited 0, and coverage, preflight, smoke --report, verify-image and sbom had no check at
all. Each is refused in one line, exit 2, before any work (these runs have no network and no GPU).
"""

from __future__ import annotations

import pytest
from clirun import REPO, run_invoke

STACKS = """\
defaults:
  python: "3.12"
  serving:
    model: org/model
stacks:
  a:
    base_image: debian:bookworm-slim
    cuda_arch_list: ["9.0"]
    sglang:
      version: 0.5.9
"""


def _line(option: str, path: str, what: str, task: str) -> str:
    # the report's --json-out is checked by the face, which names the task first
    where = f"{task}: " if option == "--json-out" else ""
    return f"error: {where}{option} {path}: is {what}, an input of `invoke {task}` (never overwritten): give " \
           "another path"


MATRIX = "the stacks file stacks.yaml"


@pytest.mark.parametrize(("args", "line"), [
    (("bake", "--stack", "a", "--out", "stacks.yaml", "--print"), _line("--out", "stacks.yaml", MATRIX, "bake")),
    (("coverage", "--stack", "a", "--json-out", "stacks.yaml"), _line("--json-out", "stacks.yaml", MATRIX, "coverage")),
    (("preflight", "--stack", "a", "--json-out", "stacks.yaml"),
     _line("--json-out", "stacks.yaml", MATRIX, "preflight")),
    (("smoke", "--stack", "a", "--image", "x:y", "--report", "stacks.yaml"),
     _line("--report", "stacks.yaml", MATRIX, "smoke")),
    (("verify-image", "reg.example/x:y", "--verify-key", "k.pem", "--stack", "a", "--json-out", "stacks.yaml"),
     _line("--json-out", "stacks.yaml", MATRIX, "verify-image")),
    (("coverage", "--stack", "a", "--json-out", "locks/a.json"),
     "error: coverage: --json-out locks/a.json: is in locks, the folder of the stacks' locks: give another path"),
])
def test_an_output_flag_naming_an_input_is_refused_before_any_work(tmp_path, args, line) -> None:
    (tmp_path / "stacks.yaml").write_text(STACKS)
    (tmp_path / "locks").mkdir()
    proc = run_invoke(*args[:1], "--stacks-file", "stacks.yaml", *args[1:], cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, [line])
    assert (tmp_path / "stacks.yaml").read_text() == STACKS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locks", "stacks.yaml"]


def test_sbom_never_writes_into_the_checkout_s_locks(tmp_path) -> None:
    """sbom reads no matrix of its own: the checkout's is the one its --json-out must spare."""
    target = REPO / "locks" / "sbom-test.json"
    proc = run_invoke("sbom", "nosuch.invalid/x:y", "--json-out", str(target), cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (
        2, [f"error: sbom: --json-out {target}: is in {REPO / 'locks'}, the folder of the stacks' locks: give "
            "another path"])
    assert not target.exists()
