"""`invoke bake`: every bake target passes what `invoke build` passes; the `cache:` key; `--builder`."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
from pathlib import Path
from typing import Literal

import pytest
from buildkit_fixtures import fake_cli
from clirun import run_invoke
from pydantic import BaseModel, ConfigDict, Field

from sglstack.adapters.buildkit import Builder, BuildRequest, build_argv
from sglstack.cli.build import bake_command, build_command
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import BuildError, ConfigError, DockerUnavailable
from sglstack.imagebuild.bake import BAKE_FILE, STAGES, plan_targets, target_name
from sglstack.imagebuild.flow import FINAL_TARGET, describe_build
from sglstack.imagebuild.plan import BuildSettings, stack_folder_name
from sglstack.lock.trust import lock_for_build

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks.yaml"
CACHE_DEFAULT = "cache:\n    registry: registry.example.com:5000/team/sglstack-cache:{stack}\n    mode: max\n"


def matrix_with(tmp_path: Path, defaults_extra: str = "", stacks_extra: str = "") -> Path:
    """stacks.yaml (with its locks) in `tmp_path`, plus `defaults_extra` under defaults and
    `stacks_extra` appended under stacks."""
    text = STACKS.read_text()
    assert "\ndefaults:\n" in text and "\nstacks:\n" in text
    if defaults_extra:
        text = text.replace("\ndefaults:\n", "\ndefaults:\n  " + defaults_extra, 1)
    path = tmp_path / "m" / "stacks.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text + stacks_extra)
    shutil.copytree(REPO / "locks", path.parent / "locks")
    return path


@pytest.fixture
def buildx_env(monkeypatch, tmp_path):
    """A buildx client (a double answering `version` and `buildx version` as the real one does), an
    absolute build root, both secrets set."""
    cli = fake_cli(tmp_path / "bin", "28.2.2", buildx=True)
    monkeypatch.setenv("PATH", f"{cli.parent}:/usr/bin:/bin")
    monkeypatch.setenv("SGLSTACK_DOCKER_CLI", str(cli))
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("SGLSTACK_CA_BUNDLE", str(ca))
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    return cli


def parse_buildx_argv(argv: list[str]) -> dict:
    """`docker buildx build ...` back into bake's fields (the flags `build_argv` may pass)."""
    assert argv[1:3] == ["buildx", "build"], argv
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--builder")
    parser.add_argument("--load", action="store_true")
    parser.add_argument("--progress")
    parser.add_argument("--file")
    parser.add_argument("--iidfile")
    parser.add_argument("--target")
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--platform")
    for flag in ("--build-arg", "--label", "--secret", "--cache-from", "--cache-to", "--tag"):
        parser.add_argument(flag, action="append", default=[])
    parser.add_argument("context")
    ns = parser.parse_args(argv[3:])
    fields = {
        "context": str(Path(ns.context).resolve()),
        "dockerfile": str(Path(ns.file).resolve()),
        "args": dict(a.split("=", 1) for a in ns.build_arg),
        "labels": dict(a.split("=", 1) for a in ns.label),
        "tags": ns.tag,
        "secret": ns.secret,
        "output": ["type=docker"] if ns.load else [],
        "target": ns.target,
    }
    if ns.platform:
        fields["platforms"] = [ns.platform]
    if ns.cache_from:
        fields["cache-from"] = ns.cache_from
    if ns.cache_to:
        fields["cache-to"] = ns.cache_to
    if ns.no_cache:
        fields["no-cache"] = True
    return {"builder": ns.builder, "fields": fields}


# bake's JSON for the fields sglstack writes (docs.docker.com/build/bake/reference): a field the
# reference does not have, or a value of the wrong shape, fails validation.
class _BakeTarget(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    context: str
    dockerfile: str
    target: str
    args: dict[str, str]
    labels: dict[str, str]
    tags: list[str]
    platforms: list[Literal["linux/amd64", "linux/arm64"]] = []
    secret: list[str]
    cache_from: list[str] = Field(default=[], alias="cache-from")
    cache_to: list[str] = Field(default=[], alias="cache-to")
    output: list[str]
    no_cache: bool = Field(default=False, alias="no-cache")


class _BakeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    targets: list[str]


class _BakeFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group: dict[str, _BakeGroup]
    target: dict[str, _BakeTarget]


@pytest.mark.parametrize("cached", [False, True], ids=["no-cache-key", "registry-cache"])
def test_every_bake_target_is_what_invoke_build_passes(buildx_env, tmp_path, cached):
    """For every stack of stacks.yaml and every stage: the `build:` line of `invoke build --dry-run
    --builder ci --target STAGE` (the production request and argv), parsed back, is the bake target."""
    stacks_file = matrix_with(tmp_path, CACHE_DEFAULT) if cached else STACKS
    assert bake_command(str(stacks_file), builder_name="ci") == 0
    bake = json.loads((tmp_path / "build" / BAKE_FILE).read_text())
    _BakeFile.model_validate(bake)
    matrix = load_matrix(stacks_file)
    # a target per platform of each stack, as `invoke build --platform P` builds it
    ones = [stack.for_platform(p) for stack in matrix.stacks.values() for p in stack.platforms]
    assert set(bake["target"]) == {target_name(stack_folder_name(s), stage) for s in ones for stage in STAGES}
    assert "pypi-cu130-gb_linux-arm64-runtime" in bake["target"]
    for stack in ones:
        lock = lock_for_build(stacks_file, stack)
        name = stack_folder_name(stack)
        for stage in STAGES:
            lines, config_hash = describe_build(stack, BuildSettings(target=stage, builder_name="ci", lock=lock))
            build_line = next(line for line in lines if line.startswith("build:"))
            parsed = parse_buildx_argv(shlex.split(build_line.removeprefix("build:")))
            assert parsed["builder"] == "ci"
            assert bake["target"][target_name(name, stage)] == parsed["fields"], (name, stage)
            target = bake["target"][target_name(name, stage)]
            assert target["platforms"] == list(stack.platforms)
            assert target["labels"]["io.sglstack.config-hash"] == config_hash
            assert sorted(target["secret"]) == [f"id=ca_bundle,src={tmp_path / 'ca.pem'}", "id=hf_token,env=HF_TOKEN"]
            ref = f"registry.example.com:5000/team/sglstack-cache:{stack.name}"
            assert target.get("cache-from") == ([f"type=registry,ref={ref}"] if cached else None)
            # Only the serving stage writes the cache: mode=max holds the src stage's layers too.
            exported = [f"type=registry,ref={ref},mode=max"] if cached and stage == FINAL_TARGET else None
            assert target.get("cache-to") == exported
            assert Path(target["context"]).is_dir() and Path(target["dockerfile"]).is_file()
    assert bake["group"]["default"]["targets"] == [target_name(stack_folder_name(s), FINAL_TARGET) for s in ones]


def test_classic_builder_imports_the_cache_and_says_it_cannot_export_it(tmp_path, monkeypatch):
    stacks_file = matrix_with(tmp_path, CACHE_DEFAULT)
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    stack = load_matrix(stacks_file).get("cu130")
    options = BuildSettings(docker_cli="/usr/bin/docker", lock=lock_for_build(stacks_file, stack))
    lines, _ = describe_build(stack, options)
    argv = shlex.split(next(line for line in lines if line.startswith("build:")).removeprefix("build:"))
    ref = "registry.example.com:5000/team/sglstack-cache:cu130"
    assert argv[0] == "DOCKER_BUILDKIT=1" and argv[2] == "build"
    assert f"--cache-from={ref}" in argv and not any(a.startswith("--cache-to") for a in argv)
    warning = [line for line in lines if line.startswith("cache:")]
    assert len(warning) == 1 and "not exported with the classic builder" in warning[0] and ref in warning[0]


def test_classic_argv_passes_only_flags_the_20_10_client_knows(tmp_path):
    """Every flag of the classic build line is one `/usr/bin/docker build --help` lists (20.10)."""
    import subprocess

    helptext = subprocess.run(["/usr/bin/docker", "build", "--help"], capture_output=True, text=True,
                              check=True, env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"}).stdout
    req = BuildRequest(dockerfile=tmp_path / "Dockerfile", context=tmp_path, target="runtime",
                       cache_ref="localhost:5000/c:x", platform="linux/amd64", labels={"a": "b"})
    argv = build_argv(Builder("classic", "/usr/bin/docker", "20.10.24"), req, tmp_path / ".iid")
    flags = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    assert "--cache-from" in flags
    for flag in flags:
        assert f"{flag} " in helptext or f"{flag}=" in helptext, flag


def test_builder_with_a_classic_client_is_one_line_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    with pytest.raises(DockerUnavailable) as info:
        build_command(str(STACKS), "cu130", docker_cli="/usr/bin/docker", builder_name="ci")
    message = str(info.value)
    assert "\n" not in message and "--builder ci" in message and "20.10" in message and "buildx" in message
    assert not (tmp_path / "build").exists()  # nothing rendered


def test_builder_option_through_invoke(tmp_path):
    proc = run_invoke("build", "--stack", "cu130", "--builder", "ci", "--docker-cli", "/usr/bin/docker",
                      cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --builder ci names a buildx builder"), proc.stderr
    assert not (tmp_path / "build").exists()


def test_buildx_argv_passes_the_builder_and_the_cache(tmp_path):
    req = BuildRequest(dockerfile=tmp_path / "D", context=tmp_path, target="runtime",
                       cache_ref="ghcr.io/t/c:s", cache_mode="min")
    argv = build_argv(Builder("buildx", "docker", "28.2.2", "k8s"), req, tmp_path / ".iid")
    assert argv[:5] == ["docker", "buildx", "build", "--builder", "k8s"]
    assert "--cache-from=type=registry,ref=ghcr.io/t/c:s" in argv
    assert "--cache-to=type=registry,ref=ghcr.io/t/c:s,mode=min" in argv


def test_bake_without_buildx_writes_the_file_and_fails_only_when_asked_to_run(tmp_path):
    env = {"SGLSTACK_BUILD_DIR": str(tmp_path / "build"), "SGLSTACK_DOCKER_CLI": "/usr/bin/docker"}
    proc = run_invoke("bake", "--builder", "ci", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    bake_file = tmp_path / "build" / BAKE_FILE
    assert f"docker buildx bake -f {bake_file} --builder ci" in proc.stdout.replace("\n", " ")
    _BakeFile.model_validate_json(bake_file.read_text())
    proc = run_invoke("bake", "--run", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "error: bake not run: no docker client here has buildx (docker buildx version failed); the bake file "
        "is written, run the command above where buildx is installed"]


def test_bake_of_named_stacks_only(buildx_env, tmp_path):
    assert bake_command(str(STACKS), ["cu129", "cu129"]) == 0
    bake = json.loads((tmp_path / "build" / BAKE_FILE).read_text())
    assert set(bake["target"]) == {"cu129-sglang-src", "cu129-runtime"}
    with pytest.raises(ConfigError, match="unknown stack"):
        bake_command(str(STACKS), ["nope"])


def test_stack_names_bake_spells_alike_are_an_error(tmp_path):
    req = BuildRequest(dockerfile=tmp_path / "D", context=tmp_path)
    with pytest.raises(BuildError, match="both make the bake target 'a_b-runtime'"):
        plan_targets([("a.b", "runtime", req), ("a_b", "runtime", req)])


# ---- bad `cache:` input: one line naming file, stack and key --------------------------------------

@pytest.mark.parametrize(("cache", "key", "says"), [
    ("cache:\n    registry: Bad/Cache\n", "cache.registry", "uppercase"),
    ("cache:\n    registry: ghcr.io/t/c@sha256:" + "0" * 64 + "\n", "cache.registry", "digest"),
    ("cache:\n    registry: ghcr.io/t/c:-x\n", "cache.registry", "tag"),
    ("cache:\n    registry: bad..host/t/c\n", "cache.registry", "registry host"),
    ("cache:\n    registry: ghcr.io/t/c\n    mode: maxx\n", "cache.mode", "'min' or 'max'"),
    ("cache:\n    registry: ghcr.io/t/c:{stack}\n    ref: ghcr.io/t/c\n", "cache.ref", "unknown key"),
    ("cache:\n    mode: max\n", "cache.registry", "missing required key"),
    ("cache: ghcr.io/t/c\n", "cache", ""),
    ("cache:\n    registry: ghcr.io/team/shared-cache\n", "cache.registry", "also stack"),
])
def test_bad_cache_key_is_one_line(tmp_path, cache, key, says):
    stacks_file = matrix_with(tmp_path, cache)
    with pytest.raises(ConfigError) as info:
        load_matrix(stacks_file)
    message = str(info.value)
    assert "\n" not in message and "stacks.yaml" in message and f"key '{key}'" in message, message
    assert "stack '" in message and says in message, message


def test_cache_inherits_and_a_stack_may_set_its_own(tmp_path):
    stacks_file = matrix_with(tmp_path, CACHE_DEFAULT,
                              "  cu131:\n    inherits: cu130\n    cache:\n      mode: min\n")
    matrix = load_matrix(stacks_file)
    assert matrix.get("cu131").cache_ref == "registry.example.com:5000/team/sglstack-cache:cu131"
    assert matrix.get("cu131").cache.mode == "min" and matrix.get("cu130").cache.mode == "max"


