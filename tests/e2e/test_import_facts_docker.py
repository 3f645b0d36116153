"""The import closure made incremental, on a real engine (dockerd, BuildKit, overlay2): a re-verify takes each
file's imports from the fact cache by its sha256 and still resolves every import in the image, so an image
whose site layer was rebuilt by hand with one file changed so that an import breaks, or with one module removed,
fails exactly as `--full-verify` (no reuse at all) fails it; the record says what was reused and derived."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from sglstack.config.schema import Stack
from sglstack.core.errors import ImageCheckFailed
from sglstack.imagebuild.importfacts import facts_path
from sglstack.imagebuild.incremental import verify_incrementally

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "sglstack" / "inimage" / "incontainer"
SITE = "/usr/local/lib/python3.11/dist-packages"  # Debian 12's python3: sysconfig's purelib
FILES = {
    "model/llama.py": "import servingplug\n\nclass LlamaForCausalLM:\n    pass\n\nEntryClass = LlamaForCausalLM\n",
    "site/servingplug/__init__.py": "from servingplug import transport\n",
    "site/servingplug/transport.py": "import json\nimport wirehelper\n",
    "site/servingplug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: servingplug\nVersion: 1.0\n",
    "site/servingplug-1.0.dist-info/RECORD": "servingplug/__init__.py,,\nservingplug/transport.py,,\n",
    "site/servingplug-1.0.dist-info/top_level.txt": "servingplug\n",
    "site/wirehelper.py": "import json\n",
    "site/wirehelper-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: wirehelper\nVersion: 1.0\n",
    "site/wirehelper-1.0.dist-info/RECORD": "wirehelper.py,,\n",
    "site/wirehelper-1.0.dist-info/top_level.txt": "wirehelper\n",
}


def _build(docker_cli: str, ctx: Path, files: dict[str, str], double: str) -> str:
    """The double with `files` in one site layer (as a rebuilt install layer is: the whole site again)."""
    if ctx.exists():
        shutil.rmtree(ctx)
    for name, text in files.items():
        (ctx / name).parent.mkdir(parents=True, exist_ok=True)
        (ctx / name).write_text(text)
    shutil.copytree(TOOLS, ctx / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "Dockerfile").write_text(
        f"FROM {double}\nRUN ln -s /usr/bin/python3 /usr/local/bin/python\nCOPY tools/ /opt/sglstack/tools/\n"
        f"COPY site/ {SITE}/\nCOPY model/llama.py /opt/sglang-double/sglang/srt/models/llama.py\n")
    tag = f"sglstack-test/import-facts:{secrets.token_hex(4)}"
    proc = subprocess.run([docker_cli, "build", "-q", "-t", tag, str(ctx)], env={"DOCKER_BUILDKIT": "1",
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tag


@pytest.fixture(scope="module")
def images(tmp_path_factory, docker_cli, docker_client, sglang_double_image):
    """The original; its site layer rebuilt with transport.py importing a module nothing provides; rebuilt
    without wirehelper (the module transport.py imports, whose file is then unchanged); and rebuilt with the
    same Python files and one more metadata file."""
    root = tmp_path_factory.mktemp("import-facts")
    broken = {**FILES, "site/servingplug/transport.py": "import json\nimport wirehelper_renamed\n"}
    removed = {k: v for k, v in FILES.items() if "wirehelper" not in k}
    rebuilt = {**FILES, "site/servingplug-1.0.dist-info/INSTALLER": "pip\n"}  # another layer, the same .py files
    tags = {name: _build(docker_cli, root / name, files, sglang_double_image)
            for name, files in (("original", FILES), ("changed", broken), ("removed", removed), ("rebuilt", rebuilt))}
    yield tags
    for tag in tags.values():
        docker_client.images.remove(tag, force=True)


def stack() -> Stack:
    return Stack.model_validate({
        "name": "facts", "base_image": "debian:bookworm-slim", "python": "3.11", "sglang": {"version": "0.5.9"},
        "serving": {"model": "test-org/tiny-model", "gpus": 0},
        "runtime_imports": {"architectures": ["LlamaForCausalLM"]}})


def _facts(verified) -> dict:
    return next(c for c in verified.verification["checks"] if c["check"] == "import_closure_facts")


def _failure(docker_client, image: str, *, full: bool) -> str:
    with pytest.raises(ImageCheckFailed) as caught:
        verify_incrementally(docker_client, image, stack(), installed=None, docker_host=None, full=full)
    return str(caught.value)


def test_a_reused_verify_fails_what_a_full_verify_fails(images, docker_client, monkeypatch, tmp_path):
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    first = verify_incrementally(docker_client, images["original"], stack(), installed=None, docker_host=None)
    cold = _facts(first)
    assert cold["ran"] is True and cold["reused"] == 0 and cold["derived"] == cold["files"] >= 5
    assert facts_path().is_file()
    assert first.checks is not None and first.checks["import_closure"]["errors"] == []
    assert "new_facts" not in first.checks["import_closure"]  # kept in the store, not in the record

    # Same bytes but for transport.py: its facts derived, every other file's reused; the break is found.
    incremental = _failure(docker_client, images["changed"], full=False)
    assert "module 'wirehelper_renamed', imported by servingplug/transport.py" in incremental
    assert incremental == _failure(docker_client, images["changed"], full=True)

    # wirehelper gone, transport.py unchanged (its facts reused): resolved again, the import fails.
    incremental = _failure(docker_client, images["removed"], full=False)
    assert "module 'wirehelper', imported by servingplug/transport.py" in incremental
    assert incremental == _failure(docker_client, images["removed"], full=True)

    # A rebuilt layer with the same Python files and one more file: the server part runs again (a small layer,
    # keyed by its files' content: one more file), every file's facts are reused, and it passes as the original did.
    again = verify_incrementally(docker_client, images["rebuilt"], stack(), installed=None, docker_host=None)
    server = next(c for c in again.verification["checks"] if c["check"] == "server")
    assert server["ran"] is True and server["why"] == (
        "ran: its inputs differ from every earlier pass (files added, removed or moved between verified layers, or "
        "other bytes in a small layer, keyed by its files' content)")
    warm = _facts(again)
    assert (warm["ran"], warm["reused"], warm["derived"]) == (False, cold["files"], 0)
    assert warm["why"].startswith(f"facts of {cold['files']} of {cold['files']} files reused (by sha256, cpython-3.11.")
    assert again.checks is not None and again.checks["import_closure"]["errors"] == []
    assert again.checks["import_closure"]["warnings"] == first.checks["import_closure"]["warnings"]

    # --full-verify reuses no fact.
    full = verify_incrementally(docker_client, images["rebuilt"], stack(), installed=None, docker_host=None, full=True)
    assert (_facts(full)["reused"], _facts(full)["derived"]) == (0, cold["files"])
    assert _facts(full)["why"].endswith("--full-verify reuses none; every import resolved again against this image's "
                                        "files")
