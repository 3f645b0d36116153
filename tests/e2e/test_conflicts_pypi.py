"""The repo's matrix against SGLang's real wheels from the package index, and `invoke stacks --check` on an
undeclared conflict (split from tests/unit/test_conflicts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.adapters.wheels import fetch_wheel, wheel_metadata
from sglstack.config.matrix import load_matrix
from sglstack.lock.conflicts import (
    check_matrix,
    sglang_requires_dist,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.network
def test_real_matrix_against_real_wheels():
    matrix = load_matrix(REPO / "stacks.yaml")
    findings = check_matrix(matrix)
    assert not [f for f in findings if f.is_failure], findings
    requires = wheel_metadata(fetch_wheel("sglang", "0.5.9"))["Requires-Dist"]
    assert "flashinfer_python==0.6.3" in requires
    assert sglang_requires_dist("0.5.9") == requires


@pytest.mark.network
def test_stacks_check_cli_fails_on_an_undeclared_conflict(tmp_path):
    text = (REPO / "stacks.yaml").read_text()
    start = text.index("    overrides:\n", text.index("  cu130:"))
    end = text.index("    patches:", start)
    broken = tmp_path / "stacks.yaml"
    broken.write_text(text[:start] + text[end:])
    proc = run_invoke("stacks", "--check", "--stacks-file", str(broken), cwd=tmp_path)
    assert proc.returncode == 1
    expected = "stack 'cu130': pins flashinfer-python==0.6.4 but sglang 0.5.9 requires 'flashinfer_python==0.6.3'"
    assert expected in proc.stdout
    ok = run_invoke("stacks", "--check", cwd=tmp_path)
    assert ok.returncode == 0 and "matrix OK" in ok.stdout
