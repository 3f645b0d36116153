"""A patch edit confined to bodies the verified import never ran keeps the server part's outcome, on a real
engine (dockerd, overlay2, BuildKit): the served model's file comes in a small last layer, as the patch overlay
does, edited four ways. An edit of a method body nothing calls at import keeps the pass (compared in the image,
the file scanned again) and its verdict is a full verify's; an edit of a body the import runs, or of the
module's own code, runs the part again and fails as a full verify fails; `--full-verify` keeps nothing."""

from __future__ import annotations

import secrets
import shutil
import subprocess

import pytest

from sglstack.config.schema import Stack
from sglstack.core.errors import ImageCheckFailed
from sglstack.core.resources import TOOLS_DIR
from sglstack.imagebuild.incremental import verify_incrementally

pytestmark = [pytest.mark.docker]

MODEL = "/opt/sglang-double/sglang/srt/models/llama.py"
ORIGINAL = '''\
import os


def configure():
    return {"threads": os.cpu_count()}


SETTINGS = configure()


class LlamaForCausalLM:
    def forward(self, x):
        return x * 2


EntryClass = LlamaForCausalLM
'''
EDITS = {
    # never called at import: kept (a function-level import is optional by convention, as a full verify says)
    "unstarted": ORIGINAL.replace("return x * 2", "import not_installed_anywhere\n        return x * 3"),
    # run at import: the import now fails, as a full verify finds
    "started": ORIGINAL.replace('return {"threads"', 'import not_installed_anywhere\n    return {"threads"'),
    # the module's own code: an unconditional import nothing provides
    "module": ORIGINAL.replace("import os\n", "import os\nimport not_installed_anywhere\n"),
}


def _dockerfile(base: str) -> str:
    """The double's image with the tools and the model file in a small last layer, as the patch overlay comes."""
    return (f"FROM {base}\nRUN ln -s /usr/bin/python3 /usr/local/bin/python\nCOPY tools/ /opt/sglstack/tools/\n"
            f"COPY llama.py {MODEL}\n")


@pytest.fixture(scope="module")
def images(tmp_path_factory, docker_cli, docker_client, sglang_double_image):
    ctx = tmp_path_factory.mktemp("body-edits")
    shutil.copytree(TOOLS_DIR, ctx / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    tags = {}
    for name, text in {"original": ORIGINAL, **EDITS}.items():
        (ctx / "llama.py").write_text(text)
        (ctx / "Dockerfile").write_text(_dockerfile(sglang_double_image))
        tags[name] = f"sglstack-test/body-edits:{name}-{secrets.token_hex(4)}"
        proc = subprocess.run([docker_cli, "build", "-q", "-t", tags[name], str(ctx)], capture_output=True, text=True,
                              env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"}, check=False, timeout=600)
        assert proc.returncode == 0, proc.stderr
    yield tags
    for tag in tags.values():
        docker_client.images.remove(tag, force=True)


def stack() -> Stack:
    return Stack.model_validate({
        "name": "edits", "base_image": "debian:bookworm-slim", "python": "3.11", "sglang": {"version": "0.5.9"},
        "serving": {"model": "test-org/tiny-model", "gpus": 0},
        "shared_libraries": {"exceptions": [{"file": "*", "reason": "no compiled files"}]},
        "runtime_imports": {"architectures": ["LlamaForCausalLM"]}})


def _verify(client, image: str, *, full: bool = False):
    return verify_incrementally(client, image, stack(), installed=None, docker_host=None, full=full)


def _server(verified) -> dict:
    return next(c for c in verified.verification["checks"] if c["check"] == "server")


def _verdict(checks: dict) -> dict:
    closure = checks["import_closure"]
    return {"errors": closure["errors"], "warnings": closure["warnings"], "modules": closure["modules"],
            "help": checks["server_help"]["returncode"], "argv": checks.get("serving_argv")}


def test_an_edit_of_a_body_the_import_never_ran_keeps_the_outcome_and_the_verdict(images, docker_client, monkeypatch,
                                                                                   tmp_path):
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    first = _verify(docker_client, images["original"])
    assert _server(first)["ran"] is True

    kept = _verify(docker_client, images["unstarted"])
    server = _server(kept)
    assert server["ran"] is False
    assert server["why"].startswith("reused: passed in image ")
    assert "only code its import never ran changed (llama.py: LlamaForCausalLM.forward)" in server["why"]
    full = _verify(docker_client, images["unstarted"], full=True)
    assert _server(full)["ran"] is True
    assert _verdict(kept.checks) == _verdict(full.checks)

    again = _verify(docker_client, images["unstarted"])  # the kept outcome is a pass of this image now
    assert _server(again)["why"].startswith("reused: passed on the same files")


@pytest.mark.parametrize("edit", ["started", "module"])
def test_an_edit_the_import_runs_is_verified_again_and_fails_as_a_full_verify(images, docker_client, monkeypatch,
                                                                             tmp_path, edit):
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    _verify(docker_client, images["original"])
    with pytest.raises(ImageCheckFailed) as incremental:
        _verify(docker_client, images[edit])
    with pytest.raises(ImageCheckFailed) as full:
        _verify(docker_client, images[edit], full=True)
    assert "not_installed_anywhere" in str(incremental.value)
    assert str(incremental.value) == str(full.value)


def test_the_verified_file_read_as_source_at_import_keeps_nothing(images, docker_client, monkeypatch, tmp_path,
                                                                  docker_cli, sglang_double_image):
    """A module that reads its own source at import (as triton's @jit does): an unstarted body may matter."""
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    ctx = tmp_path / "ctx"
    shutil.copytree(TOOLS_DIR, ctx / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    reading = "import inspect\n" + ORIGINAL.replace("EntryClass =", "SOURCE = inspect.getsource(LlamaForCausalLM)\n"
                                                                     "EntryClass =")
    tags = []
    for text in (reading, reading.replace("return x * 2", "return x * 3")):
        (ctx / "llama.py").write_text(text)
        (ctx / "Dockerfile").write_text(_dockerfile(sglang_double_image))
        tags.append(f"sglstack-test/body-edits:read-{secrets.token_hex(4)}")
        subprocess.run([docker_cli, "build", "-q", "-t", tags[-1], str(ctx)], capture_output=True, check=True,
                       env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"}, timeout=600)
    try:
        _verify(docker_client, tags[0])
        server = _server(_verify(docker_client, tags[1]))
        assert server["ran"] is True
        assert "something other than the importer read its source during the verified import" in server["why"]
    finally:
        for tag in tags:
            docker_client.images.remove(tag, force=True)
