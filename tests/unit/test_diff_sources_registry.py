"""What `invoke diff` reads of a registry image: its config and top layers (a stand-in registry), and the facts in one
layer. No Docker: DOCKER_HOST names a socket that does not exist, so the engine is never what answers."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import tarfile
from pathlib import Path

import pytest
from diff_inputs import DOWN, IMAGE_ID, NO_ENGINE, RECORD, _write
from engine_double import Engine

from sglstack.cli.diff import diff_command
from sglstack.core.errors import ConfigError, DockerUnavailable, RegistryError
from sglstack.core.jsonreport import JsonReport
from sglstack.diff import sources
from sglstack.diff.compare import Snapshot, image_snapshot
from sglstack.diff.snapshots import local_snapshot
from sglstack.diff.sources import _facts_in_layer, load_snapshot
from sglstack.registry.client import Manifest


@pytest.fixture(autouse=True)
def no_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))


# ---- a registry image (a stand-in registry) ------------------------------------------------------------

def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar(files: dict[str, bytes], *, kinds: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.type = (kinds or {}).get(name, tarfile.REGTYPE)
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return out.getvalue()


def _fact(name: str, value: object) -> bytes:
    return gzip.compress(_tar({f"opt/sglstack/{name}": json.dumps(value).encode()}))


INSTALLED = {"distributions": {"torch": "2.9.1"}}
STACK = {"sglang": {"version": "0.5.9"}}
PATCHES = [{"id": "p", "status": "applied", "sha256_before": "b" * 64, "sha256_after": "c" * 64}]
LABELS = {"io.sglstack.stack": "cu130", "io.sglstack.config-hash": "a" * 64}
CONFIG = json.dumps({"config": {"Labels": LABELS}}).encode()
GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
REF = "reg.test:5000/sglstack/sglang:cu130"


class Registry:
    """The RegistryClient calls diff makes: manifests by reference, blobs by digest; every call recorded."""

    registry = "reg.test:5000"

    def __init__(self, manifests: dict[str, tuple[str, dict]], blobs: list[bytes]) -> None:
        self.manifests = {ref: Manifest(media, json.dumps(body).encode(), "sha256:" + "e" * 64)
                          for ref, (media, body) in manifests.items()}
        self.blobs = {_digest(b): b for b in blobs}
        self.calls: list[tuple[str, str, str]] = []

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        self.calls.append(("manifest", repo, reference))
        return self.manifests[reference]

    def get_blob(self, repo: str, digest: str) -> bytes:
        self.calls.append(("blob", repo, digest))
        return self.blobs[digest]


def _manifest(config: bytes | None, layers: list) -> dict:
    out: dict = {"schemaVersion": 2, "layers": layers}
    if config is not None:
        out["config"] = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _digest(config)}
    return out


def _layer(blob: bytes, *, size: object = None, media: str = GZ) -> dict:
    return {"mediaType": media, "digest": _digest(blob), "size": len(blob) if size is None else size}


def _serve(monkeypatch, registry: Registry) -> list[str]:
    asked: list[str] = []

    def from_environment(name: str) -> Registry:
        asked.append(name)
        return registry

    monkeypatch.setattr(sources.RegistryClient, "from_environment", from_environment)
    return asked


def test_a_registry_image_is_read_from_its_config_and_top_layers(monkeypatch):
    layers = [_fact("installed.json", {"distributions": {"torch": "2.8.0"}}), _fact("stack.json", STACK),
              _fact("patches.json", PATCHES), _fact("installed.json", INSTALLED)]
    registry = Registry({"cu130": (OCI_MANIFEST, _manifest(CONFIG, [_layer(b) for b in layers]))},
                        [CONFIG, *layers])
    asked = _serve(monkeypatch, registry)
    files = {"installed.json": json.dumps(INSTALLED).encode(), "patches.json": json.dumps(PATCHES).encode(),
             "stack.json": json.dumps(STACK).encode()}
    assert load_snapshot(REF) == image_snapshot(REF, LABELS, files)
    assert asked == ["reg.test:5000"]
    # top-down, and no further once every fact is found: the bottom layer's older installed.json is never read
    assert registry.calls == [("manifest", "sglstack/sglang", "cu130"), ("blob", "sglstack/sglang", _digest(CONFIG)),
                              *(("blob", "sglstack/sglang", _digest(b)) for b in reversed(layers[1:]))]


@pytest.mark.parametrize(("ref", "reference"), [
    ("reg.test:5000/sglstack/sglang", "latest"),
    ("reg.test:5000/sglstack/sglang:t@sha256:" + "d" * 64, "sha256:" + "d" * 64),
])
def test_the_manifest_asked_for_is_the_digest_then_the_tag_then_latest(monkeypatch, ref, reference):
    registry = Registry({reference: (OCI_MANIFEST, _manifest(CONFIG, []))}, [CONFIG])
    _serve(monkeypatch, registry)
    assert load_snapshot(ref) == image_snapshot(ref, LABELS, {})
    assert registry.calls[0] == ("manifest", "sglstack/sglang", reference)


def test_an_index_is_read_through_its_first_manifest(monkeypatch):
    first, second = "sha256:" + "5" * 64, "sha256:" + "6" * 64
    index = {"schemaVersion": 2, "manifests": [{"digest": first}, {"digest": second}]}
    other = json.dumps({"config": {"Labels": {"io.sglstack.stack": "other"}}}).encode()
    registry = Registry({"cu130": (OCI_INDEX, index), first: (OCI_MANIFEST, _manifest(CONFIG, [])),
                         second: (OCI_MANIFEST, _manifest(other, []))}, [CONFIG, other])
    _serve(monkeypatch, registry)
    assert load_snapshot(REF).labels == LABELS
    assert [c for c in registry.calls if c[0] == "manifest"] == [("manifest", "sglstack/sglang", "cu130"),
                                                                ("manifest", "sglstack/sglang", first)]


def test_an_index_of_no_manifests_is_one_line(monkeypatch):
    _serve(monkeypatch, Registry({"cu130": (OCI_INDEX, {"schemaVersion": 2, "manifests": []})}, []))
    with pytest.raises(RegistryError) as caught:
        load_snapshot(REF)
    assert str(caught.value) == f"registry reg.test:5000: index {REF} lists no manifests"


def test_layers_that_cannot_hold_the_facts_are_not_fetched(monkeypatch):
    """Largest first read is 64 MiB (by the size the manifest gives); a zstd layer, a layer without a digest
    and an entry that is not an object are passed over; the top-most copy of a fact wins."""
    at_limit = _fact("stack.json", STACK)
    too_large = _fact("patches.json", [])
    zstd = _fact("installed.json", {"distributions": {"zstd": "1"}})
    top = _fact("installed.json", INSTALLED)
    layers = [_layer(at_limit, size=64 * 1024 * 1024), _layer(too_large, size=64 * 1024 * 1024 + 1),
              _layer(zstd, media="application/vnd.oci.image.layer.v1.tar+zstd"), {"digest": 5, "size": 0},
              "not a layer", _layer(top, size=0)]
    registry = Registry({"cu130": (OCI_MANIFEST, _manifest(CONFIG, layers))}, [CONFIG, at_limit, too_large, zstd, top])
    _serve(monkeypatch, registry)
    snap = load_snapshot(REF)
    assert (snap.packages, snap.sglang, snap.patches) == ({"torch": "2.9.1"}, "0.5.9", {})
    assert [c[2] for c in registry.calls if c[0] == "blob"] == [_digest(CONFIG), _digest(top), _digest(at_limit)]


def test_at_most_twelve_layers_are_read_from_the_top(monkeypatch):
    empty = [gzip.compress(_tar({f"layer{i}": b"x"})) for i in range(12)]
    bottom = _fact("installed.json", INSTALLED)
    layers = [bottom, *empty]
    registry = Registry({"cu130": (OCI_MANIFEST, _manifest(CONFIG, [_layer(b) for b in layers]))}, [CONFIG, *layers])
    _serve(monkeypatch, registry)
    assert load_snapshot(REF).packages is None
    assert [c[2] for c in registry.calls if c[0] == "blob"] == [_digest(CONFIG), *(_digest(b) for b in reversed(empty))]
    registry = Registry({"cu130": (OCI_MANIFEST, _manifest(CONFIG, [_layer(b) for b in layers[:12]]))},
                        [CONFIG, *layers])
    _serve(monkeypatch, registry)
    assert load_snapshot(REF).packages == {"torch": "2.9.1"}  # the twelfth from the top is still read


@pytest.mark.parametrize("layers", [{"not": "a list"}, None])
def test_a_manifest_without_a_list_of_layers_is_known_by_its_labels(monkeypatch, layers):
    body = _manifest(CONFIG, [])
    body["layers"] = layers
    _serve(monkeypatch, Registry({"cu130": (OCI_MANIFEST, body)}, [CONFIG]))
    assert load_snapshot(REF) == image_snapshot(REF, LABELS, {})


@pytest.mark.parametrize(("config", "labels"), [
    ({"config": {"Labels": {"a": "x", "b": 1, "c": {"k": ["v"]}, "d": None}}},
     {"a": "x", "b": "1", "c": '{"k": ["v"]}', "d": "null"}),
    ({"config": {"Labels": None}}, {}),
    ({"config": {}}, {}),
    ({"config": "text"}, {}),
    ({}, {}),
])
def test_config_labels_are_text(monkeypatch, config, labels):
    blob = json.dumps(config).encode()
    _serve(monkeypatch, Registry({"cu130": (OCI_MANIFEST, _manifest(blob, []))}, [blob]))
    assert load_snapshot(REF).labels == labels


TEXT = b'"text"'


@pytest.mark.parametrize(("descriptor", "why"), [
    (None, "the manifest has no config descriptor (not an image manifest)"),
    ("sha256:x", "the manifest has no config descriptor (not an image manifest)"),
    ({"digest": 5}, "the manifest has no config descriptor (not an image manifest)"),
    ({"digest": _digest(b"{nope")}, f"the image config {_digest(b'{nope')} is not JSON"),
    ({"digest": _digest(b"[1]")}, f"the image config {_digest(b'[1]')} is a JSON list, not an object"),
    ({"digest": _digest(TEXT)}, f"the image config {_digest(TEXT)} is a JSON str, not an object"),
])
def test_a_config_diff_cannot_read_is_one_line(monkeypatch, descriptor, why):
    body = _manifest(None, [])
    if descriptor is not None:
        body["config"] = descriptor
    _serve(monkeypatch, Registry({"cu130": (OCI_MANIFEST, body)}, [b"{nope", b"[1]", b'"text"']))
    with pytest.raises(RegistryError) as caught:
        load_snapshot(REF)
    assert str(caught.value) == f"registry reg.test:5000: {REF}: {why}"


@pytest.mark.parametrize(("size", "shown"), [(True, "True"), (-1, "-1"), (None, "None"), ("12kB", "'12kB'"),
                                             (1.5, "1.5")])
def test_a_layer_size_that_is_not_a_number_of_bytes_is_one_line(monkeypatch, size, shown):
    layer = {"mediaType": GZ, "digest": "sha256:" + "7" * 64}
    if size is not None:
        layer["size"] = size
    _serve(monkeypatch, Registry({"cu130": (OCI_MANIFEST, _manifest(CONFIG, [layer]))}, [CONFIG]))
    with pytest.raises(RegistryError) as caught:
        load_snapshot(REF)
    assert str(caught.value) == (f"registry reg.test:5000: {REF}: layer sha256:{'7' * 64} has size {shown}, "
                                 "not a number of bytes")


def test_a_docker_hub_name_without_its_host_is_not_looked_up():
    with pytest.raises(ConfigError) as caught:
        load_snapshot("sglstack/cu130:abc")
    assert str(caught.value) == ("'sglstack/cu130:abc' is not a file, a local image or a build record's image; name a "
                                 "registry image with its host (host:port/path:tag or ...@sha256:...)")


def test_a_docker_hub_image_named_with_its_host_is_read(monkeypatch):
    registry = Registry({"22.04": (OCI_MANIFEST, _manifest(CONFIG, []))}, [CONFIG])
    asked = _serve(monkeypatch, registry)
    assert load_snapshot("docker.io/library/ubuntu:22.04").labels == LABELS
    assert asked == ["docker.io"] and registry.calls[0] == ("manifest", "library/ubuntu", "22.04")


def test_an_engine_that_is_down_is_the_answer_when_the_registry_has_none(monkeypatch):
    class Failing(Registry):
        def get_manifest(self, repo: str, reference: str) -> Manifest:
            raise RegistryError("registry reg.test:5000: no such manifest")

    _serve(monkeypatch, Failing({}, []))
    for spec in (REF, "sglstack/cu130:abc"):  # a registry error, a name the registry cannot be asked for
        with pytest.raises(DockerUnavailable) as caught:
            load_snapshot(spec, docker_host=DOWN)
        assert str(caught.value).startswith(f"cannot reach the Docker engine at {DOWN}: ")


# ---- the facts in one layer ----------------------------------------------------------------------------

def test_the_facts_of_a_plain_tar_and_their_spellings():
    blob = _tar({"./opt/sglstack/stack.json": b"s", "/opt/sglstack/patches.json": b"p", "opt/sglstack/other.json": b"o",
                 "opt/sglstack/installed.json": b"i", "X/opt/sglstack/stack.json": b"x",
                 "Xopt/sglstack/stack.json": b"x"})
    assert _facts_in_layer(blob) == {"stack.json": b"s", "patches.json": b"p", "installed.json": b"i"}


def test_a_blob_with_zstd_s_magic_is_never_read_as_a_tar():
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        for name in ("\x28\xb5\x2f\xfd", "opt/sglstack/stack.json"):  # a first member whose name is zstd's magic
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"s"))
    blob = out.getvalue()
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:  # a tar that the standard library reads
        assert tar.getnames()[1:] == ["opt/sglstack/stack.json"]
    assert blob[:4] == b"\x28\xb5\x2f\xfd"
    assert _facts_in_layer(blob) == {}


def test_a_fact_that_is_not_a_regular_file_is_passed_over():
    blob = _tar({"opt/sglstack/installed.json": b"", "opt/sglstack/stack.json": b"s"},
                kinds={"opt/sglstack/installed.json": tarfile.DIRTYPE})
    assert _facts_in_layer(blob) == {"stack.json": b"s"}


def test_a_fact_of_more_than_16_mib_is_passed_over():
    limit = 16 * 1024 * 1024
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        for name, size in (("opt/sglstack/installed.json", limit + 1), ("opt/sglstack/stack.json", limit)):
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    found = _facts_in_layer(out.getvalue())
    assert list(found) == ["stack.json"] and len(found["stack.json"]) == limit


def test_a_layer_that_is_no_tar_or_breaks_off_gives_what_was_found_before_it():
    assert _facts_in_layer(b"not a tar at all" * 100) == {}
    assert _facts_in_layer(b"\x1f\x8b" + b"not gzip" * 100) == {}
    noise = random.Random(0).randbytes(100_000)  # incompressible: a cut halfway through the gzip is halfway through it
    whole = _tar({"opt/sglstack/stack.json": b"s", "usr/big.bin": noise, "opt/sglstack/patches.json": b"p"})
    assert _facts_in_layer(gzip.compress(whole)[:50_000]) == {"stack.json": b"s"}  # the gzip cut short
    assert _facts_in_layer(whole[:50_000]) == {"stack.json": b"s"}  # the tar cut short


def test_a_layer_is_read_up_to_its_uncompressed_limit_and_no_further():
    blob = _tar({"opt/sglstack/stack.json": b"s", "usr/big.bin": bytes(100_000), "opt/sglstack/patches.json": b"p"})
    assert _facts_in_layer(blob, limit=len(blob)) == {"stack.json": b"s", "patches.json": b"p"}
    assert _facts_in_layer(gzip.compress(blob), limit=len(blob)) == {"stack.json": b"s", "patches.json": b"p"}
    assert _facts_in_layer(blob, limit=len(blob) - 1) == {"stack.json": b"s"}  # the last one reads to the end
    assert _facts_in_layer(blob, limit=50_000) == {"stack.json": b"s"}


# ---- the task ----------------------------------------------------------------------------------------------

def test_diff_prints_the_table_or_json_and_exits_0(tmp_path, capsys):
    a = _write(tmp_path / "a.json", RECORD)
    b = _write(tmp_path / "b" / "record.json", {**RECORD, "installed": {"torch": "2.9.2", "idna": "3.7"}})
    unknown = [f"{what}: not known for {a} and {b.parent}"
               for what in ("base image", "stack pins", "patches", "sglang", "labels")]
    assert diff_command(str(a), str(b.parent), as_json=JsonReport(stdout=True)) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {
        "a": f"{a} (record)", "b": f"{b.parent} (record)", "base": [], "config_hash": None, "identical": False,
        "labels": [], "platform": None, "packages": [{"after": "3.7", "before": None, "kind": "added", "name": "idna"},
                                   {"after": "2.9.2", "before": "2.9.1", "kind": "changed", "name": "torch"}],
        "patches": [], "pins": [], "sglang": None, "sglang_commits": None, "size": [], "unknown": unknown}
    assert out == json.dumps(json.loads(out), indent=2, sort_keys=True) + "\n"
    assert diff_command(str(a), str(b.parent)) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"A = {a} (record)",
        f"B = {b.parent} (record)",
        "┏━━━━━━━━━┳━━━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━┓",
        "┃ section ┃ name  ┃ change  ┃ A     ┃ B     ┃",
        "┡━━━━━━━━━╇━━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━┩",
        "│ package │ idna  │ added   │ -     │ 3.7   │",
        "│ package │ torch │ changed │ 2.9.1 │ 2.9.2 │",
        "└─────────┴───────┴─────────┴───────┴───────┘",
        "packages: 1 added, 0 removed, 1 changed",
        *unknown]


def test_diff_asks_the_engine_named_for_both_sides(tmp_path):
    a = str(_write(tmp_path / "a.json", RECORD))
    for sides in (("sglstack/cu130:abc", a), (a, "sglstack/cu130:abc")):
        with pytest.raises(DockerUnavailable) as caught:
            diff_command(*sides, docker_host=DOWN)
        assert str(caught.value).startswith(f"cannot reach the Docker engine at {DOWN}: ")


# ---- an image the engine holds (docker-py's images.get and the adapter's file reader, stood in for) -----


class _EngineImage:
    def __init__(self, labels, size):
        self.id, self.labels, self.attrs = IMAGE_ID, labels, {"Size": size} if size is not None else {}


@pytest.fixture
def engine(monkeypatch):
    import sglstack.adapters.docker as adapter

    state = {"engine": Engine(), "hosts": [], "reads": [], "files": {}}

    def client(host):
        state["hosts"].append(host)
        return state["engine"]

    def read(client_, image, paths):
        state["reads"].append((client_, image, list(paths)))
        return {p: b for p, b in state["files"].items() if p in paths}

    monkeypatch.setattr(adapter, "docker_client", client)
    monkeypatch.setattr(adapter, "read_image_files", read)
    return state


def test_an_engine_image_is_known_by_its_labels_facts_and_size(engine):
    labels = {"org.opencontainers.image.title": "x", "io.sglstack.stack": "cu130", "io.sglstack.config-hash": "c" * 64}
    engine["engine"] = Engine({"sglstack/cu130:abc": _EngineImage(labels, 123456789)})
    engine["files"] = {"/opt/sglstack/installed.json": json.dumps({"distributions": {"torch": "2.9.1"}}).encode(),
                       "/opt/sglstack/stack.json": json.dumps({"sglang": {"version": "0.5.9"}}).encode(),
                       "/opt/sglstack/other.json": b"{}"}
    snap = local_snapshot("sglstack/cu130:abc", docker_host="tcp://node:2375")
    expected = image_snapshot("sglstack/cu130:abc", labels, {
        "installed.json": engine["files"]["/opt/sglstack/installed.json"],
        "stack.json": engine["files"]["/opt/sglstack/stack.json"]})
    assert snap == Snapshot(**{**expected.__dict__, "size": {"bytes": 123456789}})
    assert snap.packages == {"torch": "2.9.1"} and snap.sglang == "0.5.9" and snap.stack == "cu130"
    assert engine["hosts"] == ["tcp://node:2375"]
    assert engine["reads"] == [(engine["engine"], IMAGE_ID, ["/opt/sglstack/installed.json",
                                                            "/opt/sglstack/patches.json", "/opt/sglstack/stack.json"])]


def test_an_engine_image_without_labels_or_size_is_known_as_empty(engine):
    engine["engine"] = Engine({"img:1": _EngineImage(None, None)})
    snap = local_snapshot("img:1")
    assert snap == Snapshot(**{**image_snapshot("img:1", {}, {}).__dict__, "size": {"bytes": 0}})
    assert engine["hosts"] == [None]


def test_an_image_the_engine_lacks_or_cannot_give_is_not_known_here(engine):
    import docker.errors

    assert local_snapshot("missing:1") is None
    assert engine["engine"].asked == ["missing:1"] and engine["reads"] == []
    engine["engine"] = Engine(get_error=docker.errors.APIError("500 Server Error: engine broke"))
    assert local_snapshot("img:1") is None and engine["reads"] == []
    # a bare image id the engine lacks is still answered by a build record naming it
    _write(Path(build_root_of()) / "cu130" / "record.json", RECORD)
    engine["engine"] = Engine()
    assert local_snapshot(IMAGE_ID).config_hash == "a" * 64


def build_root_of() -> str:
    import os
    return os.environ["SGLSTACK_BUILD_DIR"]
