"""`stacks --check` refuses a stack whose platforms' locks pin one package at two versions: the silent fallback of
a resolver to a placeholder (sgl-deep-gemm 0.0.1rc1) or an older release where one platform lacks a wheel."""

from __future__ import annotations

import dataclasses
import shutil

from clirun import REPO, run_invoke

from sglstack.lockfile.text import read_lock, render_lock


def test_a_stack_whose_arm64_lock_fell_back_to_a_placeholder_is_refused_naming_the_package_and_both_versions(
        tmp_path):
    shutil.copytree(REPO / "locks", tmp_path / "locks")
    shutil.copy(REPO / "stacks.yaml", tmp_path / "stacks.yaml")
    path = tmp_path / "locks" / "pypi-cu130-gb.linux-arm64.txt"
    arm = read_lock(path)
    amd_version = read_lock(tmp_path / "locks" / "pypi-cu130-gb.txt").get("sgl-deep-gemm").version
    fallen = tuple(dataclasses.replace(p, version="0.0.1rc1") if p.name == "sgl-deep-gemm" else p
                   for p in arm.packages)
    agreeing = run_invoke("stacks", "--check", "--stacks-file", str(tmp_path / "stacks.yaml"), cwd=tmp_path,
                          timeout=120)
    assert agreeing.returncode == 0, agreeing.stdout + agreeing.stderr
    path.write_text(render_lock(dataclasses.replace(arm, packages=fallen), stacks_file="stacks.yaml"))
    proc = run_invoke("stacks", "--check", "--stacks-file", str(tmp_path / "stacks.yaml"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())  # the table wraps long lines
    assert ("conflict stacks.yaml: stack 'pypi-cu130-gb': the platforms resolve 1 package(s) to different versions: "
            f"sgl-deep-gemm {amd_version} on linux/amd64, 0.0.1rc1 on linux/arm64") in said
    assert "1 problem(s)" in said
