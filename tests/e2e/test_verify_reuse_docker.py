# ruff: noqa: F811 - pytest fixtures imported from coverage_fixtures are parameters here
"""Incremental verify on a real engine (dockerd, overlay2): a second verify of the same image reuses every
costly check; an image whose layer was rebuilt by hand with one byte of one shared object changed, or with a
later layer copied over that object, fails as a full verify would (the file is not its RECORD's); and
`--full-verify` runs everything again."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
from coverage_fixtures import FAKE_SGL_KERNEL, cuobjdump_tool, write_site_packages  # noqa: F401 - fixtures

from sglstack.config.schema import Stack
from sglstack.core.errors import ImageCheckFailed
from sglstack.core.resources import TOOLS_DIR
from sglstack.imagebuild.incremental import verify_incrementally

pytestmark = [pytest.mark.docker, pytest.mark.network]

SITE = "/opt/venv/lib/python3.12/site-packages"
CHANGED = "sgl_kernel/sm90/common_ops.abi3.so"


def stack() -> Stack:
    return Stack.model_validate({
        "name": "reuse", "base_image": "debian:bookworm-slim", "python": "3.12",
        "cuda_arch_list": ["9.0", "10.0"], "sgl_kernel": {"version": "0.0.1"},
        "sglang": {"version": "0.5.9", "install_deps": False}, "serving": {"model": "m"},
        "coverage": {"require": "ptx", "exceptions": [
            {"extension": "sgl_kernel.flash_ops", "reason": "FA3 is Hopper-only"}]},
        "shared_libraries": {"exceptions": [{"file": "*", "reason": "compiled test fixtures, never loaded"}]}})


def _build(docker_cli: str, ctx: Path, dockerfile: str) -> str:
    (ctx / "Dockerfile").write_text(dockerfile)
    tag = f"sglstack-test/verify-reuse:{secrets.token_hex(4)}"
    proc = subprocess.run([docker_cli, "build", "-q", "-t", tag, str(ctx)], env={"DOCKER_BUILDKIT": "1",
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return tag


@pytest.fixture(scope="module")
def images(tmp_path_factory, docker_cli, docker_client, sglang_double_image):
    """The original image; the same built again with one byte of one shared object changed in its site layer
    (RECORD untouched); and the original with a later layer copying the changed object over its own."""
    ctx = tmp_path_factory.mktemp("verify-reuse")
    write_site_packages(ctx / "site", "sgl-kernel", "0.0.1", FAKE_SGL_KERNEL)
    (ctx / "tools").mkdir()
    for name in ("imagecheck.py", "elfdeps.py", "importcheck.py", "filefacts.py", "codemap.py",
                 "codewatch.py"):  # and its siblings
        shutil.copy(TOOLS_DIR / name, ctx / "tools" / name)
    head = (f"FROM {sglang_double_image}\nENV VIRTUAL_ENV=/opt/venv\n"
            "RUN ln -s /usr/bin/python3 /usr/local/bin/python\n"
            "COPY tools/ /opt/sglstack/tools/\n")
    original = _build(docker_cli, ctx, head + f"COPY site/ {SITE}/\n")
    changed = ctx / "site" / CHANGED
    data = bytearray(changed.read_bytes())
    data[len(data) // 2] ^= 0x01
    (ctx / "changed.so").write_bytes(bytes(data))
    changed.write_bytes(bytes(data))
    by_hand = _build(docker_cli, ctx, head + f"COPY site/ {SITE}/\n")
    copied_over = _build(docker_cli, ctx, f"FROM {original}\nCOPY changed.so {SITE}/{CHANGED}\n")
    yield {"original": original, "by_hand": by_hand, "copied_over": copied_over}
    for tag in (copied_over, by_hand, original):
        docker_client.images.remove(tag, force=True)


def _ran(verification) -> dict[str, bool]:
    return {c["check"]: c["ran"] for c in verification["checks"]}


def test_a_second_verify_reuses_and_a_changed_shared_object_is_caught(images, docker_client, cuobjdump_tool,
                                                                       monkeypatch, tmp_path):
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SGLSTACK_CUOBJDUMP", str(cuobjdump_tool.binary))
    record_check = f"installed_files:{SITE}/sgl_kernel-0.0.1.dist-info"

    first = verify_incrementally(docker_client, images["original"], stack(), installed=None, docker_host=None)
    assert first.verification["layers_listed"] is True
    assert _ran(first.verification) == {"shared_libraries": True, record_check: True}
    assert first.coverage.record is not None and first.coverage.record["objects"]["listed"] > 0

    again = verify_incrementally(docker_client, images["original"], stack(), installed=None, docker_host=None)
    assert _ran(again.verification) == {"shared_libraries": False, record_check: False}
    assert all(c["why"].startswith("reused: passed on the same files (by layer; a small layer's by content) in image ")
               for c in again.verification["checks"])
    assert again.coverage.labels == first.coverage.labels
    assert again.coverage.record is not None and again.coverage.record["objects"]["listed"] == 0
    assert again.checks == first.checks

    for name in ("by_hand", "copied_over"):
        with pytest.raises(ImageCheckFailed) as caught:
            verify_incrementally(docker_client, images[name], stack(), installed=None, docker_host=None)
        assert str(caught.value).startswith(
            f"stack 'reuse': the image's CUDA files are not what their RECORD names: {SITE}/{CHANGED} is not the "
            f"file its RECORD names (sha256 ")

    full = verify_incrementally(docker_client, images["original"], stack(), installed=None, docker_host=None,
                                full=True)
    assert [(c["ran"], c["why"]) for c in full.verification["checks"]] == [(True, "ran: --full-verify")] * 2
    assert full.coverage.labels == first.coverage.labels
