"""A classic (non-BuildKit) build with a registry cache: it reads the cache, warns, and still builds (split from
tests/cli/test_bake.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.plan import BuildSettings

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.docker
def test_classic_build_with_a_registry_cache_reads_it_warns_and_still_builds(tmp_path, docker_cli, ca_bundle, capsys):
    """A real build on this engine's classic builder, with `cache:` set: the command reads the cache
    (an unreachable one: BuildKit goes on without it), writes none, and says so in one line."""
    from sglstack.imagebuild.flow import build_stack

    text = (REPO / "tests" / "fixtures" / "stacks-cpu.yaml").read_text()
    assert "\ndefaults:\n" in text
    matrix_file = tmp_path / "stacks.yaml"
    matrix_file.write_text(text.replace("\ndefaults:\n", "\ndefaults:\n  cache:\n    registry: "
                                        "127.0.0.1:1/sglstack-cache:{stack}\n", 1))
    stack = load_matrix(matrix_file).get("cpu-test")
    result = build_stack(stack, BuildSettings(force=True, ca_bundle=str(ca_bundle), docker_cli=docker_cli,
                                             out_dir=tmp_path / "out", show_progress=False))
    assert not result.skipped and result.builder == "classic"
    command = (tmp_path / "out" / "build.log").read_text().splitlines()[0]
    assert "--cache-from=127.0.0.1:1/sglstack-cache:cpu-test" in command and "--cache-to" not in command
    warnings = [line for line in capsys.readouterr().out.splitlines() if "not exported with the classic" in line]
    assert len(warnings) == 1 and "127.0.0.1:1/sglstack-cache:cpu-test" in warnings[0]
