"""Pins against the pinned SGLang's own requirements (read from its real wheel METADATA)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from cli import run_invoke

from sglstack.conflicts import check_matrix, check_stack_pins
from sglstack.errors import ConfigError
from sglstack.incontainer import wheelkit
from sglstack.matrix import Override, load_matrix
from sglstack.wheels import fetch_wheel, wheel_metadata

REPO = Path(__file__).resolve().parent.parent

REQUIRES = [
    "flashinfer_python==0.6.3",
    "flashinfer_cubin==0.6.3",
    "torch==2.9.1",
    "sgl-kernel==0.3.21",
    "cuda-python==12.9",
    "av; sys_platform == 'linux' and platform_machine == 'aarch64'",
    "sglang[test]; extra == 'dev'",
]


@pytest.fixture(scope="module")
def cu130():
    return load_matrix(REPO / "stacks.yaml").get("cu130")


def test_declared_overrides_are_reported_not_failed(cu130):
    findings = check_stack_pins(cu130, REQUIRES, "0.5.9")
    assert not [f for f in findings if f.is_failure], findings
    overrides = [f.message for f in findings if f.kind == "override"]
    assert any("flashinfer-python==0.6.4 overrides sglang 0.5.9's 'flashinfer_python==0.6.3'" in m for m in overrides)


def test_local_version_labels_satisfy_plain_pins(cu130):
    # torch 2.9.1+cu130 and sgl-kernel 0.3.21+cu130 satisfy SGLang's torch==2.9.1 / sgl-kernel==0.3.21
    findings = check_stack_pins(cu130, ["torch==2.9.1", "sgl-kernel==0.3.21"], "0.5.9")
    assert not [f for f in findings if f.kind == "conflict"]


def test_undeclared_conflict_names_both_requirements(cu130):
    bare = cu130.model_copy(update={"overrides": ()})
    conflicts = [f for f in check_stack_pins(bare, REQUIRES, "0.5.9") if f.kind == "conflict"]
    flashinfer = next(f.message for f in conflicts if "flashinfer-python" in f.message)
    assert "pins flashinfer-python==0.6.4" in flashinfer and "requires 'flashinfer_python==0.6.3'" in flashinfer
    # cuda-python is pinned only through its override: without it the stack leaves SGLang's pin alone
    assert len(conflicts) == 2


def test_stale_override_fails(cu130):
    moved_on = [r.replace("0.6.3", "0.6.4") for r in REQUIRES]
    stale = [f for f in check_stack_pins(cu130, moved_on, "0.5.x") if f.kind == "stale-override"]
    assert {s.message.split("'")[1] for s in stale} == {"flashinfer_python==0.6.3", "flashinfer_cubin==0.6.3"}


def test_markers_are_evaluated_for_the_stack_platform(cu130):
    pinned_av = cu130.model_copy(update={"overrides": (), "extra_layers": (*cu130.extra_layers,
                                                           cu130.extra_layers[0].model_copy(
                                                               update={"name": "av", "requirements": ("av==1.0",)}),)})
    # 'av' is only required on aarch64: no conflict for a linux/amd64 stack whatever it pins
    assert not [f for f in check_stack_pins(pinned_av, ["av==9.9; platform_machine == 'aarch64'"], "x") if f.is_failure]


@pytest.mark.network
def test_real_matrix_against_real_wheels():
    matrix = load_matrix(REPO / "stacks.yaml")
    findings = check_matrix(matrix)
    assert not [f for f in findings if f.is_failure], findings
    requires = wheel_metadata(fetch_wheel("sglang", "0.5.9"))["Requires-Dist"]
    assert "flashinfer_python==0.6.3" in requires


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


# ---- one rule for "this override replaces that requirement", in the check and in the build ----------

SPELLINGS = ["pkg-a>=1,<2", "pkg_a<2,>=1", "pkg-a (>=1, <2)"]


def _fake_sglang_wheel(tmp_path: Path, requires: list[str]) -> Path:
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang-9.9.9.dist-info/METADATA", meta)
    return wheel


def _overriding(stack, replaces: str):
    return stack.model_copy(update={"overrides": (Override(replaces=replaces, pin="pkg-a==2.5", reason="test"),)})


@pytest.mark.parametrize("required", SPELLINGS)
@pytest.mark.parametrize("replaces", SPELLINGS)
def test_override_spellings_match_alike_in_stacks_check_and_in_the_build(cu130, tmp_path, required, replaces):
    stack = _overriding(cu130, replaces)
    findings = check_stack_pins(stack, [required], "9.9.9")
    assert [f.kind for f in findings] == ["override"], findings

    out = tmp_path / "requirements.txt"
    manifest = {"name": stack.name, "overrides": [o.model_dump(mode="json") for o in stack.overrides]}
    lines = wheelkit.requirements(_fake_sglang_wheel(tmp_path, [required]), manifest, out)
    assert lines[-1] == f"pkg-a==2.5  # override of {required}: test"


def test_an_override_of_another_range_fails_in_both(cu130, tmp_path):
    stack = _overriding(cu130, "pkg-a>=1,<3")
    findings = check_stack_pins(stack, ["pkg-a>=1,<2"], "9.9.9")
    assert [f.kind for f in findings] == ["conflict", "stale-override"] and all(f.is_failure for f in findings)
    manifest = {"name": stack.name, "overrides": [o.model_dump(mode="json") for o in stack.overrides]}
    with pytest.raises(wheelkit.WheelKitError, match="update the override"):
        wheelkit.requirements(_fake_sglang_wheel(tmp_path, ["pkg-a>=1,<2"]), manifest, tmp_path / "r.txt")


def test_an_override_wheelkit_cannot_parse_is_refused_when_the_matrix_loads(tmp_path):
    text = (REPO / "stacks.yaml").read_text().replace("replaces: flashinfer_python==0.6.3", "replaces: '>=1'", 1)
    (tmp_path / "stacks.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"key 'overrides\.0\.replaces': '>=1' is not a valid requirement"):
        load_matrix(tmp_path / "stacks.yaml")
