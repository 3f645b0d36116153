"""Inputs that ended in a traceback: `diff` on a damaged record or odd registry blobs, `coverage --json-out` to a
path it cannot write, `diff --docker-host` to an engine that is down. Each is one line now (or, for a
registry layer this host cannot read, an image known by its labels), decided before the long work."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import tracemalloc

import pytest
from clirun import run_invoke

from sglstack.cli.coverage import CoverageOptions
from sglstack.cli.reporting import json_report
from sglstack.core.errors import ConfigError, DockerUnavailable, RegistryError
from sglstack.core.options import BadOption
from sglstack.diff import sources as diffsources
from sglstack.diff.sources import _facts_in_layer, load_snapshot
from sglstack.registry.client import Manifest

RECORD = {"stack": "cu130", "config_hash": "a" * 64, "pins": {"torch": "2.9.1"}, "installed": {"torch": "2.9.1"},
          "labels": {"io.sglstack.stack": "cu130"}, "base_image": {"name": "debian", "digest": None},
          "patches": [{"id": "p", "status": "applied"}], "sglang": {"version": "0.5.9"}}


# ---- diff on a damaged build record ------------------------------------------------------------------

@pytest.mark.parametrize(("change", "key", "why"), [
    ({"pins": ["torch==2.9.1"]}, "pins", "not an object of names to versions"),
    ({"installed": {"torch": {"version": "2.9.1"}}}, "installed", "not an object of names"),
    ({"labels": "io.sglstack.stack=cu130"}, "labels", "not an object"),
    ({"sglang": {"git": "https://example.invalid/sglang"}}, "sglang", "not {version} or {git: {repo, ref}}"),
    ({"sglang": "0.5.9"}, "sglang", "not {version}"),
    ({"base_image": ["debian"]}, "base_image", "not an object with text 'name'"),
    ({"patches": "applied"}, "patches", "not a list of patch entries"),
    ({"stack": ["cu130"]}, "stack", "not text"),
])
def test_a_damaged_record_is_one_line_naming_its_key(tmp_path, change, key, why):
    path = tmp_path / "record.json"
    path.write_text(json.dumps({**RECORD, **change}))
    with pytest.raises(ConfigError) as caught:
        load_snapshot(str(path))
    assert str(caught.value).startswith(f"{path}: key '{key}': not a build record diff can read: {why}")


def test_diff_task_on_a_damaged_record_exits_2_without_a_traceback(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(RECORD))
    bad.write_text(json.dumps({**RECORD, "sglang": {"git": "x"}}))
    proc = run_invoke("diff", str(good), str(bad), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {bad}: key 'sglang': not a build record diff can read: "
                                                "not {version} or {git: {repo, ref}}"]


# ---- diff on odd registry blobs --------------------------------------------------------------------------

def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


INSTALLED = json.dumps({"distributions": {"torch": "2.9.1"}}).encode()
FACTS_LAYER = gzip.compress(_tar({"opt/sglstack/installed.json": INSTALLED}))
GOOD_CONFIG = json.dumps({"config": {"Labels": {"io.sglstack.stack": "cu130"}}}).encode()


class StubRegistry:
    """The two RegistryClient calls diff makes, answering a manifest and blobs as a registry stores them."""

    registry = "registry.test:5000"

    def __init__(self, manifest: dict, blobs: list[bytes]) -> None:
        self.body = json.dumps(manifest).encode()
        self.blobs = {_digest(b): b for b in blobs}
        self.fetched: list[str] = []

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        return Manifest("application/vnd.oci.image.manifest.v1+json", self.body, _digest(self.body))

    def get_blob(self, repo: str, digest: str) -> bytes:
        self.fetched.append(digest)
        return self.blobs[digest]


def _manifest(config: bytes | None, *layers: tuple[bytes, str, object]) -> dict:
    out: dict = {"schemaVersion": 2, "layers": [{"mediaType": m, "digest": _digest(b), "size": s}
                                                for b, m, s in layers]}
    if config is not None:
        out["config"] = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _digest(config),
                         "size": len(config)}
    return out


def _snapshot(monkeypatch, stub: StubRegistry):
    monkeypatch.setattr(diffsources.RegistryClient, "from_environment", lambda registry: stub)
    return load_snapshot("registry.test:5000/sglstack/sglang:cu130")


GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"


def test_a_zstd_layer_is_skipped_and_the_gzip_one_below_read(monkeypatch):
    zstd_blob = b"\x28\xb5\x2f\xfd" + b"\0" * 64
    stub = StubRegistry(_manifest(GOOD_CONFIG, (FACTS_LAYER, GZ, len(FACTS_LAYER)), (zstd_blob, ZSTD, 68)),
                        [GOOD_CONFIG, FACTS_LAYER, zstd_blob])
    snap = _snapshot(monkeypatch, stub)
    assert snap.packages == {"torch": "2.9.1"} and snap.stack == "cu130"
    assert _digest(zstd_blob) not in stub.fetched
    assert _facts_in_layer(zstd_blob) == {}  # also when the media type does not say zstd


@pytest.mark.parametrize(("config", "why"), [
    (json.dumps(["not", "an", "object"]).encode(), "is a JSON list, not an object"),
    (b"\x00\x01 not json", "is not JSON"),
    (None, "the manifest has no config descriptor"),
])
def test_an_odd_config_is_one_line(monkeypatch, config, why):
    stub = StubRegistry(_manifest(config, (FACTS_LAYER, GZ, len(FACTS_LAYER))), [FACTS_LAYER, *([config] if config
                                                                                             else [])])
    with pytest.raises(RegistryError, match=f"^registry registry.test:5000: registry.test:5000/sglstack/sglang:"
                                            f"cu130: .*{why}"):
        _snapshot(monkeypatch, stub)


def test_a_config_without_labels_and_a_non_numeric_size(monkeypatch):
    bare = json.dumps({"config": ["no", "labels"]}).encode()
    snap = _snapshot(monkeypatch, StubRegistry(_manifest(bare, (FACTS_LAYER, GZ, len(FACTS_LAYER))),
                                               [bare, FACTS_LAYER]))
    assert snap.labels == {} and snap.packages == {"torch": "2.9.1"}
    stub = StubRegistry(_manifest(GOOD_CONFIG, (FACTS_LAYER, GZ, "12kB")), [GOOD_CONFIG, FACTS_LAYER])
    with pytest.raises(RegistryError, match="has size '12kB', not a number of bytes"):
        _snapshot(monkeypatch, stub)


def test_a_gzip_layer_is_read_as_a_stream_in_bounded_memory():
    """64 MiB of zeros before the facts compress to ~64 KB; the old whole-blob decompress held all of it."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        big = tarfile.TarInfo("usr/lib/zeros.bin")
        big.size = 64 * 1024 * 1024
        tar.addfile(big, io.BytesIO(bytes(big.size)))
        info = tarfile.TarInfo("opt/sglstack/installed.json")
        info.size = len(INSTALLED)
        tar.addfile(info, io.BytesIO(INSTALLED))
    blob = out.getvalue()
    assert len(blob) < 1024 * 1024
    tracemalloc.start()
    try:
        found = _facts_in_layer(blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == {"installed.json": INSTALLED}
    assert peak < 8 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"
    assert _facts_in_layer(blob, limit=1024 * 1024) == {}  # past the limit: the rest is not read


# ---- coverage --json-out to a path it cannot write, before any wheel is fetched ----------------------------

STACKS = """stacks:
  fake:
    base_image: nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
    python: "3.12"
    cuda_arch_list: ["9.0"]
    sglang: {version: "0.5.9"}
    serving: {model: m}
"""


@pytest.mark.parametrize(("target", "why"), [
    (lambda tmp: tmp, "is a folder (give the path of a file)"),
    (lambda tmp: tmp / "no-such-folder" / "c.json", "its folder does not exist"),
])
def test_coverage_json_that_cannot_be_written_is_refused_before_the_work(tmp_path, target, why):
    """The face refuses it before the task is called (`sglstack.cli.reporting`): no wheel is fetched."""
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(STACKS)
    with pytest.raises(BadOption) as caught:
        json_report(CoverageOptions(stack="fake", stacks_file=str(stacks), json_out=str(target(tmp_path))),
                    "coverage")
    assert (caught.value.exit_code, str(caught.value)) == (2, f"coverage: --json-out {target(tmp_path)}: {why}")


# ---- diff --docker-host to an engine that is down --------------------------------------------------------

def test_diff_with_an_engine_that_is_down_says_so():
    with pytest.raises(DockerUnavailable, match=r"^cannot reach the Docker engine at tcp://127\.0\.0\.1:9: "):
        load_snapshot("sglstack/cu130:abc", docker_host="tcp://127.0.0.1:9")


def test_a_registry_image_is_still_read_when_the_engine_is_down(monkeypatch):
    stub = StubRegistry(_manifest(GOOD_CONFIG, (FACTS_LAYER, GZ, len(FACTS_LAYER))), [GOOD_CONFIG, FACTS_LAYER])
    monkeypatch.setattr(diffsources.RegistryClient, "from_environment", lambda registry: stub)
    snap = load_snapshot("registry.test:5000/sglstack/sglang:cu130", docker_host="tcp://127.0.0.1:9")
    assert snap.kind == "image" and snap.packages == {"torch": "2.9.1"}
