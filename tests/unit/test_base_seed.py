"""A seeded base (config.baseseed, imagebuild.seedbase) without an engine: the schema's rules, the one mmdebstrap
command, and a seed whose bytes are not the pinned ones refused before anything is loaded."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import docker.errors
import pytest

from sglstack.config.baseseed import BaseSeed, docker_archive, image_config, mmdebstrap_argv, seeded_tag
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import BuildError, ConfigError
from sglstack.imagebuild import seedbase

REPO = Path(__file__).resolve().parents[2]
A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64

STACKS = """\
stacks:
  s:
    base_image: sglstack/base:debian12-slim
    base_seed:
      rootfs: {ROOTFS}
    platforms: [linux/amd64, linux/arm64]
    python: "3.11"
    sglang: {version: 0.5.23}
    serving: {model: m/m, tp: 1, gpus: 1}
"""


def _matrix(tmp_path: Path, rootfs: str, extra: str = ""):
    path = tmp_path / "stacks.yaml"
    path.write_text(STACKS.replace("{ROOTFS}", rootfs) + extra)
    return load_matrix(path)


def test_a_seeded_stack_has_one_base_per_platform(tmp_path):
    stack = _matrix(tmp_path, f"{{linux/amd64: '{A}', linux/arm64: '{B}'}}").get("s")
    arm = stack.for_platform("linux/arm64")
    assert (arm.base_image, arm.platforms, arm.build_platform, arm.lock_platform) == (
        "sglstack/base:debian12-slim-arm64", ("linux/arm64",), "linux/arm64", "linux/arm64")
    amd = stack.for_platform("linux/amd64")
    assert (amd.base_image, amd.lock_platform, amd.for_platform("linux/amd64") is amd) == (
        "sglstack/base:debian12-slim-amd64", None, True)
    assert seeded_tag("r/x:t", "linux/amd64") == "r/x:t-amd64"


def test_a_platform_the_stack_does_not_build_is_one_line(tmp_path):
    stack = _matrix(tmp_path, f"{{linux/amd64: '{A}', linux/arm64: '{B}'}}").get("s")
    with pytest.raises(ConfigError) as err:
        stack.for_platform("linux/riscv64")
    assert str(err.value) == "stack 's': platform linux/riscv64 is not one of the stack's (linux/amd64 linux/arm64)"


def test_the_rootfs_pins_must_name_exactly_the_stacks_platforms(tmp_path):
    with pytest.raises(ConfigError) as err:
        _matrix(tmp_path, f"{{linux/amd64: '{A}'}}")
    assert str(err.value).endswith("stack 's': key 'base_seed.rootfs': pins linux/amd64; the stack's platforms are "
                                   "linux/amd64 linux/arm64")


def test_a_seeded_base_is_not_also_pinned_by_image_id(tmp_path):
    with pytest.raises(ConfigError) as err:
        _matrix(tmp_path, f"{{linux/amd64: '{A}', linux/arm64: '{B}'}}", f"    base_image_id: '{A}'\n")
    assert str(err.value).endswith("stack 's': key 'base_image_id': a seeded base (base_seed) is pinned by its rootfs "
                                   "digests, not by an image id: set one of the two")


def test_whole_is_never_read_from_the_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        _matrix(tmp_path, f"{{linux/amd64: '{A}', linux/arm64: '{B}'}}", "    whole: {name: x}\n")
    assert "key 'whole': unknown key" in str(err.value)


def test_the_one_mmdebstrap_command():
    assert mmdebstrap_argv(BaseSeed(rootfs={"linux/arm64": A}), "linux/arm64", "/t/rootfs.tar") == [
        "mmdebstrap", "--variant=minbase", "--arch=arm64", "--mode=root", "--format=tar", "--quiet",
        "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/info/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright", "bookworm", "/t/rootfs.tar",
        "deb http://deb.debian.org/debian bookworm main"]


def test_the_archive_is_a_tar_docker_loads_with_the_layer_last_and_whole():
    config = image_config(BaseSeed(rootfs={"linux/arm64": A}), "linux/arm64", A)
    assert json.loads(config)["architecture"] == "arm64" and json.loads(config)["rootfs"]["diff_ids"] == [A]
    layer = b"x" * 1000
    data = b"".join(docker_archive(config, "r/x:t-arm64", len(layer), [layer[:600], layer[600:]], 0))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert tar.extractfile(names[2]).read() == layer  # type: ignore[union-attr]
    config_id = hashlib.sha256(config).hexdigest()
    assert names == [f"{config_id}.json", "manifest.json", f"{config_id}/layer.tar"]
    assert manifest == [{"Config": f"{config_id}.json", "RepoTags": ["r/x:t-arm64"], "Layers": [names[2]]}]
    with pytest.raises(ValueError, match="changed while it was loaded"):
        b"".join(docker_archive(config, "r/x:t", 2000, [layer], 0))


class _Images:
    def __init__(self) -> None:
        self.loaded: list[bytes] = []

    def get(self, name):
        raise docker.errors.ImageNotFound(name)

    def load(self, data):
        self.loaded.append(b"".join(data))


class _Client:
    def __init__(self) -> None:
        self.images = _Images()


def _status_tar(path: Path, version: str) -> None:
    status = f"Package: base-files\nStatus: install ok installed\nArchitecture: arm64\nVersion: {version}\n".encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("./var/lib/dpkg/status")
        info.size = len(status)
        tar.addfile(info, io.BytesIO(status))


def test_a_root_file_system_that_is_not_the_pinned_one_is_never_loaded(tmp_path, monkeypatch):
    client = _Client()
    matrix = _matrix(tmp_path, f"{{linux/amd64: '{A}', linux/arm64: '{B}'}}")
    monkeypatch.setattr(seedbase, "docker_client", lambda host=None: client)
    monkeypatch.setattr(seedbase, "mmdebstrap_missing", lambda: False)
    made = {}

    def run(argv, epoch):
        _status_tar(Path(argv[-2]), "12.4")
        made["digest"] = "sha256:" + hashlib.sha256(Path(argv[-2]).read_bytes()).hexdigest()
        made["env"] = str(epoch)
        return None

    monkeypatch.setattr(seedbase, "run_mmdebstrap", run)
    with pytest.raises(BuildError) as err:
        seedbase.seed_stack(matrix.get("s"), platform="linux/arm64")
    manifest = "sha256:" + hashlib.sha256(b"base-files:arm64=12.4\n").hexdigest()
    assert str(err.value) == (f"stack 's': linux/arm64: the root file system made here is {made['digest']}, "
                              f"base_seed.rootfs pins {B}: another package set (the mirror moved on since the pin; "
                              f"manifest {manifest}); nothing was loaded")
    assert client.images.loaded == [] and made["env"] == "1735689600"


def test_a_stack_without_a_seed_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        seedbase.seed_stack(load_matrix(REPO / "stacks.yaml").get("cu130"))
    assert str(err.value) == ("stack 'cu130': key 'base_seed': the stack has no base_seed: its base comes from a "
                              "registry (pull it by digest)")
