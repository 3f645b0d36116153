"""The size report of real images built by the real engine (BuildKit): layers, duplicates, the bytes a node
re-pulls, `invoke size` and its budget, and a build that fails over its budget after verification."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest
from clirun import run_invoke
from docker import errors as docker_errors

from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.flow import build_stack
from sglstack.imagebuild.plan import TEMP_REPOSITORY, BuildSettings
from sglstack.size.measure import SizeOverBudget, image_layers, measure
from sglstack.size.report import pull_bytes

REPO = Path(__file__).resolve().parents[2]
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
PAYLOAD = 300_000  # bytes of the duplicated file: over imagefiles' 64 KiB threshold

pytestmark = pytest.mark.docker


def docker_build(docker_cli: str, folder: Path, dockerfile: str, tag: str) -> None:
    (folder / "Dockerfile").write_text(dockerfile)
    proc = subprocess.run([docker_cli, "build", "-q", "-t", tag, str(folder)], capture_output=True, text=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"}, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def two_images(tmp_path_factory, docker_cli, docker_client, sglang_double_image):
    """A small image with one file copied (a duplicate), and the same image plus one more layer."""
    repo = f"sglstack-test/size-{secrets.token_hex(4)}"
    folder = tmp_path_factory.mktemp("size-image")
    first = (f"FROM {sglang_double_image}\n"
             f"RUN head -c {PAYLOAD} /dev/urandom > /opt/a.bin && cp /opt/a.bin /opt/b.bin\n")
    docker_build(docker_cli, folder, first, f"{repo}:one")
    docker_build(docker_cli, folder, first + "RUN head -c 123456 /dev/urandom > /opt/patch.bin\n", f"{repo}:two")
    yield f"{repo}:one", f"{repo}:two"
    for tag in (f"{repo}:one", f"{repo}:two"):
        with contextlib.suppress(docker_errors.ImageNotFound):
            docker_client.images.remove(tag)


def test_report_of_a_real_image(two_images, docker_client):
    one, _ = two_images
    report = measure(docker_client, one)
    image = docker_client.images.get(one)
    assert report.bytes == image.attrs["Size"]
    assert [la.diff_id for la in report.layers] == image.attrs["RootFS"]["Layers"]  # history mapped onto RootFS
    top = report.layers[-1]
    assert top.step.startswith("RUN head -c 300000") and PAYLOAD * 2 <= top.bytes < PAYLOAD * 2 + 16_384
    copies = [d for d in report.duplicates if d.bytes == PAYLOAD]
    assert [[p for p, _ in d.paths] for d in copies] == [["/opt/a.bin", "/opt/b.bin"]]
    assert report.seconds is not None and report.files > 100


def test_a_node_holding_the_first_image_pulls_only_the_new_layer(two_images, docker_client):
    one, two = two_images
    _, _, old = image_layers(docker_client, one)
    _, _, new = image_layers(docker_client, two)
    fetched, which = pull_bytes([la.diff_id for la in old if la.diff_id], new)
    assert [la.step for la in which] == ["RUN head -c 123456 /dev/urandom > /opt/patch.bin"]
    assert 123_456 <= fetched < 123_456 + 16_384


def test_invoke_size_json_and_its_budget(two_images, tmp_path, docker_client):
    one, _ = two_images
    matrix = tmp_path / "stacks.yaml"
    text = CPU_MATRIX.read_text()
    matrix.write_text(text.replace("  cpu-test:\n", "  cpu-test:\n    size: {max_gb: 0.001}\n", 1))
    env = {"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    proc = run_invoke("size", "--stack", "cpu-test", "--stacks-file", str(matrix), "--image", one, "--json",
                      cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["bytes"] == docker_client.images.get(one).attrs["Size"] and data["max_gb"] == 0.001
    ours = [d for d in data["duplicates"] if d["bytes"] == PAYLOAD]
    assert [d["paths"] for d in ours] == [[{"path": "/opt/a.bin", "distribution": None},
                                           {"path": "/opt/b.bin", "distribution": None}]]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: stack 'cpu-test': image is 0.")  # one line, the size against the budget
    matrix.write_text(text.replace("  cpu-test:\n", "  cpu-test:\n    size: {max_gb: 5}\n", 1))
    proc = run_invoke("size", "--stack", "cpu-test", "--stacks-file", str(matrix), "--image", one,
                      cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "within the size budget" in proc.stdout and "/opt/a.bin" in proc.stdout
    proc = run_invoke("size", "--stack", "cpu-test", "--stacks-file", str(matrix), cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "no image to measure" in proc.stderr  # nothing recorded under this build root


def test_a_build_over_its_budget_fails_after_verification_and_tags_nothing(tmp_path, docker_cli, docker_client,
                                                                           ca_bundle, capsys):
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(CPU_MATRIX.read_text().replace("  cpu-test:\n", "  cpu-test:\n    size: {max_gb: 0.01}\n", 1))
    stack = load_matrix(matrix).get("cpu-test")
    options = BuildSettings(force=True, ca_bundle=str(ca_bundle), docker_cli=docker_cli, out_dir=tmp_path / "out",
                           show_progress=False)
    with pytest.raises(SizeOverBudget) as err:
        build_stack(stack, options)
    assert str(err.value).startswith("stack 'cpu-test': image is 0.")
    assert "over its size budget (size.max_gb: 0.01)" in str(err.value) and "\n" not in str(err.value)
    assert "layer: apt:" in capsys.readouterr().out  # the table of its largest parts (no earlier build)
    assert not (tmp_path / "out" / "record.json").exists()
    temporary = f"{TEMP_REPOSITORY}/cpu-test:"
    tags = [t for image in docker_client.images.list() for t in image.tags if t.startswith(temporary)]
    assert tags == []  # the held temporary reference went with the failure


def test_a_build_over_budget_compares_with_the_last_recorded_build(tmp_path, docker_cli, ca_bundle, capsys):
    text = CPU_MATRIX.read_text()
    matrix = tmp_path / "stacks.yaml"
    options = BuildSettings(force=True, ca_bundle=str(ca_bundle), docker_cli=docker_cli, out_dir=tmp_path / "out",
                           show_progress=False)
    matrix.write_text(text.replace("  cpu-test:\n", "  cpu-test:\n    size: {max_gb: 5}\n", 1))
    result = build_stack(load_matrix(matrix).get("cpu-test"), options)
    recorded = json.loads(result.record_path.read_text())["size"]
    assert recorded["bytes"] > 0 and recorded["layers"][0]["step"] == "base image" and "sglang" in recorded["packages"]
    capsys.readouterr()
    matrix.write_text(text.replace("  cpu-test:\n", "  cpu-test:\n    size: {max_gb: 0.01}\n", 1))
    with pytest.raises(SizeOverBudget) as err:
        build_stack(load_matrix(matrix).get("cpu-test"), options)
    assert "since the last recorded build" in str(err.value)
    table = capsys.readouterr().out
    image_row = next(line for line in table.splitlines() if line.startswith("image "))
    assert image_row.split()[-1] == "+0.0"  # the same image again: nothing grew
    assert json.loads(result.record_path.read_text())["size"] == recorded  # the failed build replaced no record


def test_invoke_size_on_an_absent_image_or_one_without_python(tmp_path):
    env = {"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    args = ("size", "--stack", "cpu-test", "--stacks-file", str(CPU_MATRIX), "--image")
    proc = run_invoke(*args, f"sglstack-test/absent-{secrets.token_hex(4)}:x", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not in the Docker engine" in proc.stderr
    proc = run_invoke(*args, "debian:bookworm-slim", cwd=tmp_path, env=env)  # a bare base: no python3 in it
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: image debian:bookworm-slim: its files cannot be listed in a container")
