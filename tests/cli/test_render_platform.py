"""`invoke render --platform`: what `build --platform` builds, rendered into that platform's build folder (its base,
its lock's wheels for its tags); the stack as a whole by default, as before; another spelling of a platform is one
line naming stack and platform, exit 2, nothing written."""

from __future__ import annotations

from clirun import run_invoke

STACK = "pypi-cu130-gb"


def _runtime_base(dockerfile: str) -> str:
    return next(line.split()[1] for line in dockerfile.splitlines() if line.endswith(" AS runtime"))


def test_each_platform_renders_its_own_base_and_tags_into_its_own_folder(tmp_path):
    env = {"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    arm = run_invoke("render", "--stack", STACK, "--platform", "linux/arm64", cwd=tmp_path, env=env, timeout=120)
    assert arm.returncode == 0, arm.stderr
    arm_file = (tmp_path / "build" / f"{STACK}.linux-arm64" / "Dockerfile").read_text()
    assert _runtime_base(arm_file) == "sglstack/base:debian12-slim-arm64"
    assert "manylinux2014_aarch64" in arm_file and "manylinux2014_x86_64" not in arm_file
    arm_lock = (tmp_path / "build" / f"{STACK}.linux-arm64" / "context" / "lock" / "sglang-requirements.txt")
    first = run_invoke("render", "--stack", STACK, "--platform", "linux/amd64", cwd=tmp_path, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    amd_file = (tmp_path / "build" / STACK / "Dockerfile").read_text()
    assert _runtime_base(amd_file) == "sglstack/base:debian12-slim-amd64" and "manylinux2014_aarch64" not in amd_file
    amd_lock = tmp_path / "build" / STACK / "context" / "lock" / "sglang-requirements.txt"
    assert arm_lock.read_bytes() != amd_lock.read_bytes()  # each platform's own lock
    whole = run_invoke("render", "--stack", STACK, cwd=tmp_path, env=env, timeout=120)
    assert whole.returncode == 0, whole.stderr
    assert (tmp_path / "build" / STACK / "Dockerfile").read_text() == amd_file  # the default: as before


def test_a_platform_spelled_another_way_is_refused_before_anything_is_written(tmp_path):
    env = {"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    for given in ("linux/arm64/v8", "linux/aarch64", "arm64", "linux/riscv64"):
        proc = run_invoke("render", "--stack", STACK, "--platform", given, cwd=tmp_path, env=env, timeout=120)
        hint = "" if given == "linux/riscv64" else "; did you mean linux/arm64?"
        assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, [
            f"error: stack '{STACK}': platform {given} is not one of the stack's (linux/amd64 linux/arm64){hint}"])
    assert not (tmp_path / "build").exists()
