"""SIGINT, SIGTERM and SIGHUP during `invoke build` end it the same way: the BuildKit client is stopped,
nothing is tagged, no container or temporary folder is left, the HF token never touched a disk, and the
task exits 128 + the signal.

The processes are tracked from the one this test starts (its descendants), not by scanning every
process of the machine; containers and tags are found by this run's own stack name.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from docker.errors import ImageNotFound

from sglstack.config.matrix import load_matrix
from sglstack.core.signals import Interrupted
from sglstack.imagebuild import flow as build_mod
from sglstack.imagebuild.flow import build_stack
from sglstack.imagebuild.plan import TEMP_REPOSITORY, BuildSettings
from sglstack.imagebuild.verify import BUILD_CONTAINER_LABEL

REPO = Path(__file__).resolve().parents[2]
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
pytestmark = pytest.mark.docker


def descendants(pid: int) -> dict[int, str]:
    """pid -> command line of every process below `pid` (children lists, followed down the tree)."""
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                try:
                    found[child] = (Path(f"/proc/{child}/cmdline").read_bytes()
                                    .replace(b"\0", b" ").decode("utf-8", "replace"))
                except OSError:
                    continue
                todo.append(child)
    return found


def still_running(pid: int, cmdline: str) -> bool:
    """True while `pid` is the same live process (not a zombie, not a reused pid)."""
    try:
        now = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return now == cmdline and state != "Z"


def files_containing(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                hits.append(path)
        except OSError:
            continue
    return hits


def leftovers(docker_client, stack: str) -> dict[str, list[str]]:
    tags = [t for image in docker_client.images.list() for t in image.tags
            if t.startswith((f"sglstack/{stack}:", f"{TEMP_REPOSITORY}/{stack}:"))]
    containers = [c.name for c in docker_client.containers.list(
        all=True, filters={"label": f"{BUILD_CONTAINER_LABEL}={stack}"})]
    return {"tags": tags, "containers": containers}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_stops_the_build_and_leaves_nothing(signum, tmp_path, docker_cli, docker_client, ca_bundle):
    stack = f"cpu-test-interrupted-{signum.name.lower()}"
    matrix = tmp_path / "stacks.yaml"
    # A stack of its own; --no-cache makes its apt-get steps take seconds, long enough to interrupt.
    matrix.write_text(CPU_MATRIX.read_text().replace(
        "stacks:\n", f"stacks:\n  {stack}:\n    inherits: cpu-test\n", 1))
    temp = tmp_path / "tmp"
    temp.mkdir()
    token = f"hf_{secrets.token_hex(16)}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "build", "--stack", stack, "--stacks-file",
         str(matrix), "--no-cache", "--ca-bundle", str(ca_bundle), "--docker-cli", docker_cli],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp), "HF_TOKEN": token,
             "SGLSTACK_BUILD_DIR": str(tmp_path / "out")})
    try:
        log = tmp_path / "out" / stack / "build.log"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and "RUN apt-get update" in log.read_text(errors="replace"):
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        started = descendants(proc.pid)
        clients = {pid: cmd for pid, cmd in started.items() if f"{stack}/Dockerfile" in cmd}
        assert clients, f"the BuildKit client should be running: {started}"
        # The token reaches BuildKit by name, never on a command line or in a file.
        assert all("id=hf_token,env=HF_TOKEN" in cmd and token not in cmd for cmd in clients.values())
        assert files_containing(temp, token.encode()) == []
        assert files_containing(tmp_path / "out", token.encode()) == []
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signum, out + err
    assert f"interrupted ({signum.name})" in err and "Traceback" not in err
    assert [pid for pid, cmd in started.items() if still_running(pid, cmd)] == []
    assert leftovers(docker_client, stack) == {"tags": [], "containers": []}
    assert list(temp.iterdir()) == []
    assert files_containing(tmp_path, token.encode()) == []


def test_signal_while_the_image_is_held_removes_the_temporary_tag(tmp_path, docker_cli, docker_client, ca_bundle,
                                                                  monkeypatch):
    """A signal between verification and the final tag (the stamp): the temporary tag goes, no tag is set."""
    stack = load_matrix(CPU_MATRIX).get("cpu-test").model_copy(update={"name": "cpu-test-held"})
    seen: dict[str, list[str]] = {}

    def interrupted_stamp(builder, base_ref, labels, docker_host, platform=None):
        seen.update(leftovers(docker_client, stack.name))
        docker_client.images.get(base_ref)  # held while the stamp runs
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(build_mod, "stamp_labels", interrupted_stamp)
    with pytest.raises(Interrupted):
        build_stack(stack, BuildSettings(force=True, ca_bundle=str(ca_bundle), docker_cli=docker_cli,
                                        out_dir=tmp_path, show_progress=False))
    assert [t.split(":")[0] for t in seen["tags"]] == [f"{TEMP_REPOSITORY}/cpu-test-held"]
    assert leftovers(docker_client, stack.name) == {"tags": [], "containers": []}
    for tag in seen["tags"]:
        with pytest.raises(ImageNotFound):
            docker_client.images.get(tag)
    assert not (tmp_path / "record.json").exists()
