"""The image-side lock closure against real distributions: the locked http-client layer of the fixture lock
installed from PyPI into a venv (as the image's layer installs it: `--no-deps --require-hashes`), plus a
forged entry; the real in-image inventory lists the venv; the check names the forged entry and only it."""

from __future__ import annotations

import json
import subprocess
import venv

import pytest
from lock_forgery import FIXTURES, forged_lock_text

from sglstack.config.matrix import load_matrix
from sglstack.inventory.listing import LISTER
from sglstack.inventory.model import Inventory
from sglstack.lock.plan import root_names
from sglstack.lock.trust import unrequired_in_image
from sglstack.lockfile.text import parse_lock

pytestmark = pytest.mark.network


def test_real_metadata_needs_the_honest_layer_and_not_the_forged_entry(tmp_path):
    lock = parse_lock(forged_lock_text((FIXTURES / "locks" / "cpu-lock.txt").read_text()))
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = str(env / "bin" / "python")
    layer = tmp_path / "http-client.txt"
    layer.write_text(lock.part_text("http-client"))
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--require-hashes", "-r", str(layer)],
                             capture_output=True, text=True, check=False, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    listed = subprocess.run([python, "-c", LISTER.read_text(encoding="utf-8")], capture_output=True, text=True,
                            check=True, timeout=60)
    inventory = Inventory.from_listing(json.loads(listed.stdout))
    assert {"requests", "certifi", "idna", "urllib3", "charset-normalizer", "six"} <= set(inventory.python)
    assert "idna" in inventory.requires["requests"]  # read from the installed METADATA, not from the lock
    stack = load_matrix(FIXTURES / "stacks-lock.yaml").get("cpu-lock")
    assert [line.split(" ", 1)[0] for line in unrequired_in_image(
        lock, root_names(stack), inventory.python, inventory.requires)] == ["six==1.16.0"]
