"""A non-editable `pip install` of the project works: templates, default patches and the in-image tools
ship as package data, so rendering needs no checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.network

RENDER = """
import json, sys
from pathlib import Path
import sglstack
from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.context import write_build_context
from sglstack.core.resources import COMPOSE_DIR

stacks_file, out = sys.argv[1], Path(sys.argv[2])
rendered = write_build_context(load_matrix(stacks_file).get("cu130"), out)
print(json.dumps({
    "package": sglstack.__file__,
    "files": sorted(p.relative_to(rendered.context).as_posix() for p in rendered.files),
    "compose_templates": sorted(p.name for p in COMPOSE_DIR.glob("*.j2")),
}))
"""


def test_non_editable_install_renders_a_stack(tmp_path):
    # Install from a copy of the project, so that the build neither writes into the checkout nor can
    # find anything through it.
    source = tmp_path / "src"
    caches = shutil.ignore_patterns(".git", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")

    def ignore(folder: str, names: list[str]) -> set[str]:
        # The build root is the checkout's top-level build/ only (the image build's package is imagebuild).
        top = {"build"} if Path(folder) == REPO else set()
        return set(caches(folder, names)) | (top & set(names))

    shutil.copytree(REPO, source, ignore=ignore)
    venv = tmp_path / "venv"
    # The system site's packages (the dependencies) are visible; sglstack itself comes from the venv.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              str(source)], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(source)  # nothing may be read from the source tree any more

    work = tmp_path / "elsewhere"
    work.mkdir()
    proc = subprocess.run([str(python), "-P", "-c", RENDER, str(REPO / "stacks.yaml"), str(work / "out")],
                          cwd=work, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["package"].startswith(str(venv)), result["package"]
    assert {"tools/pip-env.sh", "tools/wheelkit.py", "tools/imageinfo.py", "tools/patchkit/__main__.py",
            "patches/kimi-k25-eagle3/patch.toml", "patches/kimi-k25-eagle3/methods.py",
            "stack.json"} <= set(result["files"])
    assert result["compose_templates"] == ["compose.env.example.j2", "compose.yaml.j2"]
    golden = (REPO / "tests" / "golden" / "cu130.Dockerfile").read_text()
    assert (work / "out" / "Dockerfile").read_text() == golden

    # the console script, from a project folder of its own (a copy of stacks.yaml), nothing of the checkout
    script = venv / "bin" / "sglstack"
    version = subprocess.run([str(script), "--version"], cwd=work, capture_output=True, text=True, env=env,
                             timeout=120, check=False)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert (version.returncode, version.stdout) == (0, f"sglstack {declared}\n"), version.stderr
    project = tmp_path / "project"
    (project / "below").mkdir(parents=True)
    shutil.copyfile(REPO / "stacks.yaml", project / "stacks.yaml")
    rendered = subprocess.run([str(script), "render", "--stack", "cu130"], cwd=project / "below",
                              capture_output=True, text=True, env=env, timeout=120, check=False)
    assert rendered.returncode == 0, rendered.stderr
    assert (project / "build" / "cu130" / "Dockerfile").read_text() == golden
