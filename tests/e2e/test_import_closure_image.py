"""The import closure on a real image (dockerd + BuildKit): the SGLang double with a served model module that
imports an installed distribution (`servingplug`), whose module imports a module no distribution provides,
the way upstream images shipped without `distro` (sgl-project/sglang#25693). `pip check` cannot see it; the
build's in-image checks (the same `run_image_checks` a build calls, network off, no GPU) name module and
importer, and a stack that declares it as an exception, with its reason, passes with the reason recorded."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from sglstack.config.schema import Stack
from sglstack.core.errors import ImageCheckFailed
from sglstack.imagebuild.checkparts import SERVER, SHARED_LIBRARIES, imagecheck_argvs
from sglstack.imagebuild.verify import image_check_argv, image_check_report, judged_image_checks, run_image_checks

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "sglstack" / "inimage" / "incontainer"
SITE = "/usr/local/lib/python3.11/dist-packages"  # Debian 12's python3: sysconfig's purelib
FILES = {
    # The served architecture's model module, in the double's SGLang tree.
    "model/llama.py": "import servingplug\n\nclass LlamaForCausalLM:\n    pass\n\nEntryClass = LlamaForCausalLM\n",
    "site/servingplug/__init__.py": "from servingplug import transport\n",
    "site/servingplug/transport.py": "import undeclared_runtime_dep\n",
    "site/servingplug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: servingplug\nVersion: 1.0\n",
    "site/servingplug-1.0.dist-info/RECORD": "servingplug/__init__.py,,\nservingplug/transport.py,,\n",
    "site/servingplug-1.0.dist-info/top_level.txt": "servingplug\n",
    # Off the serving path: a listed warning, not an error.
    "site/sideplug/__init__.py": "import cachetools_not_installed\n",
}


@pytest.fixture(scope="module")
def undeclared_image(tmp_path_factory, docker_cli, docker_client, sglang_double_image):
    ctx = tmp_path_factory.mktemp("imports-image")
    for name, text in FILES.items():
        (ctx / name).parent.mkdir(parents=True, exist_ok=True)
        (ctx / name).write_text(text)
    shutil.copytree(TOOLS, ctx / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "Dockerfile").write_text(
        f"FROM {sglang_double_image}\n"
        "RUN ln -s /usr/bin/python3 /usr/local/bin/python\n"
        "COPY tools/ /opt/sglstack/tools/\n"
        f"COPY site/ {SITE}/\n"
        "COPY model/llama.py /opt/sglang-double/sglang/srt/models/llama.py\n")
    tag = f"sglstack-test/imports:{secrets.token_hex(4)}"
    proc = subprocess.run([docker_cli, "build", "-q", "-t", tag, str(ctx)], env={"DOCKER_BUILDKIT": "1",
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    yield tag
    docker_client.images.remove(tag, force=True)


def stack(**extra) -> Stack:
    return Stack.model_validate({
        "name": "imports", "base_image": "debian:bookworm-slim", "python": "3.11", "sglang": {"version": "0.5.9"},
        "serving": {"model": "test-org/tiny-model", "gpus": 0},
        "runtime_imports": {"architectures": ["LlamaForCausalLM"], **extra}})


def test_an_undeclared_runtime_import_on_the_serving_path_fails_verification_naming_module_and_importer(
        undeclared_image, docker_client):
    with pytest.raises(ImageCheckFailed) as err:
        run_image_checks(docker_client, undeclared_image, stack())
    assert str(err.value) == (
        "stack 'imports': the image fails its in-image checks: import closure: importing sglang.srt.models.llama "
        "(serving path) fails: module 'undeclared_runtime_dep', imported by servingplug/transport.py, is provided by "
        "no installed distribution; import closure: module 'undeclared_runtime_dep', imported by "
        "servingplug/transport.py:1 (serving path), is provided by no installed distribution")


def test_a_declared_exception_passes_with_its_reason_and_the_rest_is_listed(undeclared_image, docker_client):
    reason = "servingplug's transport is loaded only for a fabric this image does not serve"
    checks = run_image_checks(docker_client, undeclared_image, stack(
        exceptions=[{"module": "undeclared_runtime_dep", "importer": "servingplug/*", "reason": reason}]))
    closure = checks["import_closure"]
    assert closure["errors"] == [] and closure["stale"] == []
    assert closure["waived"] == {"undeclared_runtime_dep (servingplug/transport.py)": reason,
                                 "undeclared_runtime_dep (servingplug/transport.py:1)": reason}
    assert closure["warnings"] == ["module 'cachetools_not_installed', imported by sideplug/__init__.py:1, is "
                                   "provided by no installed distribution"]
    assert closure["architectures"] == {"LlamaForCausalLM": "sglang.srt.models.llama"}
    assert [m["module"] for m in closure["modules"]] == [
        "sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.models.llama"]
    assert checks["server_help"]["returncode"] == 0  # the other in-image checks ran as before


def _without_seconds(value):
    if isinstance(value, dict):
        return {k: _without_seconds(v) for k, v in value.items() if not k.startswith("seconds")}
    if isinstance(value, list):
        return [_without_seconds(v) for v in value]
    return value


def test_the_import_closure_in_a_container_of_its_own_reports_as_the_one_run(undeclared_image, docker_client):
    """A build's verify runs the import closure beside imagecheck.py's other parts, in a container of its own:
    the merged report is the one run's (`run_image_checks`), and judged the same (the undeclared import fails)."""
    s = stack()
    argvs = imagecheck_argvs(s, {SHARED_LIBRARIES, SERVER})
    assert len(argvs) == 2 and not [a for a in argvs[0] if a.startswith("--import-closure")]
    parts = [image_check_report(docker_client, undeclared_image, s, argv) for argv in argvs]
    # the server's --help and argv in the closure's process, after its imports (SGLang imported once)
    assert set(parts[1]) == {"import_closure", "python", "server_help", "serving_argv"}
    assert "import_closure" not in parts[0] and "server_help" not in parts[0]
    whole = image_check_report(docker_client, undeclared_image, s, image_check_argv(s))
    assert _without_seconds({**parts[0], **parts[1]}) == _without_seconds(whole)
    with pytest.raises(ImageCheckFailed, match="module 'undeclared_runtime_dep', imported by servingplug"):
        judged_image_checks(s, {**parts[0], **parts[1]})
