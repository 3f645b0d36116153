"""`invoke releases` reads each release's METADATA from the index's metadata file (PEP 658 / 714), found
through the index's JSON API (PEP 691), checked against the index's sha256; the whole wheel only where an
index offers no hashed metadata file.

The index is a local HTTP double serving the JSON shape PyPI serves (`core-metadata` with a sha256, the
older `data-dist-info-metadata`, `true` without a hash, none at all), an HTML page, and bytes that do not
match their hash.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from httpserve import ThreadedServer

from sglstack.adapters import index as idx
from sglstack.adapters.index import IndexMetadata, IndexSettings, MetadataMismatch, index_settings
from sglstack.cli.upgrade import releases_command
from sglstack.core.jsonreport import JsonReport
from sglstack.upgrade import releases

METADATA = {
    "0.5.10": b"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.10\nRequires-Python: >=3.10\n"
              b"Requires-Dist: torch==2.9.1\nRequires-Dist: sglang-kernel==0.4.1\n"
              b"Requires-Dist: flashinfer-python==0.6.4\n",
    "0.5.11": b"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.11\nRequires-Dist: torch==2.10.0\n",
}
SHA = {v: hashlib.sha256(b).hexdigest() for v, b in METADATA.items()}


class _Index(BaseHTTPRequestHandler):
    files: list[dict] = []
    content_type = idx.SIMPLE_JSON
    served: dict[str, bytes] = {}
    asked: list[str] = []
    ranges = True

    def do_GET(self):
        self.asked.append(self.path)
        if self.path == "/simple/sglang/":
            body, kind = json.dumps({"meta": {"api-version": "1.1"}, "name": "sglang",
                                     "files": self.files}).encode(), self.content_type
        elif self.path in self.served:
            body, kind = self.served[self.path], "application/octet-stream"
            if self.ranges and (spec := self.headers.get("Range")):
                self._partial(body, spec)
                return
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _partial(self, body: bytes, spec: str) -> None:
        first, _, last = spec.removeprefix("bytes=").partition("-")
        start, end = (len(body) - int(last), len(body) - 1) if not first else (int(first), int(last))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(body[start:end + 1])

    def log_message(self, *args):
        pass


def _file(version: str, metadata, tag: str = "py3-none-any", key: str = "core-metadata") -> dict:
    entry = {"filename": f"sglang-{version}-{tag}.whl", "url": f"../../files/sglang-{version}-{tag}.whl",
             "hashes": {"sha256": hashlib.sha256(f"{version}-{tag}".encode()).hexdigest()}}
    if metadata is not None:
        entry[key] = metadata
    return entry


@pytest.fixture
def index(tmp_path, monkeypatch):
    """The double's URL; its files, type and metadata bodies are set per test."""
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    handler = type("Index", (_Index,), {"files": [], "served": {}, "asked": [], "content_type": idx.SIMPLE_JSON,
                                        "ranges": True})
    for version, body in METADATA.items():
        handler.served[f"/files/sglang-{version}-py3-none-any.whl.metadata"] = body
    with ThreadedServer(handler) as served:
        yield handler, f"{served.url}/simple"


def _no_wheels(monkeypatch):
    asked: list[str] = []
    monkeypatch.setattr(releases, "fetch_wheel", lambda name, version: asked.append(version) or Path("x.whl"))
    monkeypatch.setattr(releases, "wheel_metadata", lambda wheel: {"Name": ["sglang"], "From": ["wheel"]})
    return asked


@pytest.mark.parametrize("key", ["core-metadata", "data-dist-info-metadata"])
def test_the_metadata_file_is_read_and_no_wheel(index, monkeypatch, key):
    handler, url = index
    handler.files = [_file("0.5.10", {"sha256": SHA["0.5.10"]}, key=key),
                     _file("0.5.10", {"sha256": SHA["0.5.10"]}, tag="cp311-cp311-manylinux_2_34_x86_64")]
    wheels = _no_wheels(monkeypatch)
    source = IndexMetadata(IndexSettings((url,), True))
    meta = releases.release_metadata(source, "sglang", "0.5.10")
    assert meta["Requires-Dist"] == ["torch==2.9.1", "sglang-kernel==0.4.1", "flashinfer-python==0.6.4"]
    assert wheels == []
    assert handler.asked == ["/simple/sglang/", "/files/sglang-0.5.10-py3-none-any.whl.metadata"]


def test_the_project_page_is_asked_once_and_a_cached_file_is_checked_not_fetched(index, monkeypatch):
    handler, url = index
    handler.files = [_file(v, {"sha256": SHA[v]}) for v in METADATA]
    _no_wheels(monkeypatch)
    first = IndexMetadata(IndexSettings((url,), True))
    assert {v: first.metadata("sglang", v).source for v in METADATA} == {v: "metadata file" for v in METADATA}
    assert first.fetched == len(json.dumps({"meta": {"api-version": "1.1"}, "name": "sglang",
                                            "files": handler.files})) + sum(map(len, METADATA.values()))
    handler.asked.clear()
    again = IndexMetadata(IndexSettings((url,), True))
    assert again.metadata("sglang", "0.5.11").source == "cache"
    assert handler.asked == ["/simple/sglang/"]


@pytest.mark.parametrize("metadata", [None, True, {"md5": "0" * 32}])
def test_no_hashed_metadata_file_falls_back_to_the_wheel(index, monkeypatch, metadata):
    handler, url = index
    handler.files = [_file("0.5.10", metadata)]
    wheels = _no_wheels(monkeypatch)
    meta = releases.release_metadata(IndexMetadata(IndexSettings((url,), True)), "sglang", "0.5.10")
    assert (meta, wheels) == ({"Name": ["sglang"], "From": ["wheel"]}, ["0.5.10"])


def test_an_index_without_the_json_api_falls_back_to_the_wheel(index, monkeypatch):
    handler, url = index
    handler.files, handler.content_type = [_file("0.5.10", {"sha256": SHA["0.5.10"]})], "text/html"
    wheels = _no_wheels(monkeypatch)
    releases.release_metadata(IndexMetadata(IndexSettings((url,), True)), "sglang", "0.5.10")
    assert wheels == ["0.5.10"]


def test_the_next_index_is_asked_when_one_does_not_list_the_release(index, monkeypatch):
    handler, url = index
    handler.files = [_file("0.5.11", {"sha256": SHA["0.5.11"]})]
    wheels = _no_wheels(monkeypatch)
    source = IndexMetadata(IndexSettings(("file:///nowhere/simple", url + "/../missing", url), True))
    assert releases.release_metadata(source, "sglang", "0.5.11")["Version"] == ["0.5.11"]
    assert wheels == []


def test_a_metadata_file_that_does_not_match_its_hash_is_refused(index, monkeypatch):
    handler, url = index
    handler.files = [_file("0.5.10", {"sha256": SHA["0.5.11"]})]
    wheels = _no_wheels(monkeypatch)
    with pytest.raises(MetadataMismatch) as refused:
        releases.release_metadata(IndexMetadata(IndexSettings((url,), True)), "sglang", "0.5.10")
    port = url.split(":")[2].split("/")[0]
    assert str(refused.value) == (f"http://127.0.0.1:{port}/files/sglang-0.5.10-py3-none-any.whl.metadata: sha256 "
                                  f"{SHA['0.5.10']} is not the index's {SHA['0.5.11']}: refused")
    assert refused.value.exit_code == 1 and wheels == []
    assert not (idx.cache_root() / "metadata").exists() or not any((idx.cache_root() / "metadata").iterdir())


def test_the_releases_command_reads_metadata_files_only(index, monkeypatch, tmp_path, capsys):
    handler, url = index
    handler.files = [_file(v, {"sha256": SHA[v]}) for v in METADATA]
    wheels = _no_wheels(monkeypatch)
    monkeypatch.setenv("PIP_INDEX_URL", url)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setattr(idx, "_pip_config", dict)
    monkeypatch.setattr(releases, "available_versions", lambda name: ["0.5.9", "0.5.10", "0.5.11"])
    (tmp_path / "stacks.yaml").write_text((Path(__file__).parents[2] / "stacks.yaml").read_text())
    out = tmp_path / "r.json"
    report = JsonReport(path=out)
    assert releases_command(str(tmp_path / "stacks.yaml"), stack_name="cu130", as_json=report) == 0
    doc = json.loads(out.read_text())
    assert [(r["sglang"], r["torch"], r["kernel"]) for r in doc["cu130"]["releases"]] == [
        ("0.5.10", "2.9.1", "0.4.1"), ("0.5.11", "2.10.0", None)]
    assert wheels == []


def test_the_index_is_found_as_pip_and_uv_find_it():
    config = {"index-url": "https://mirror.example/simple", "extra-index-url": "https://extra.example/simple",
              "cert": "/etc/proxy-ca.pem"}
    assert index_settings({}, lambda: config) == IndexSettings(
        ("https://mirror.example/simple", "https://extra.example/simple"), "/etc/proxy-ca.pem")
    env = {"PIP_INDEX_URL": "https://pip.example/simple", "UV_INDEX_URL": "https://uv.example/simple",
           "PIP_EXTRA_INDEX_URL": "https://a.example/simple https://b.example/simple", "PIP_CERT": "/ca.pem"}
    assert index_settings(env, lambda: config) == IndexSettings(
        ("https://pip.example/simple", "https://a.example/simple", "https://b.example/simple"), "/ca.pem")
    assert index_settings({"UV_DEFAULT_INDEX": "https://uv.example/simple"}, dict).indexes[0] == \
        "https://uv.example/simple"
    assert index_settings({"REQUESTS_CA_BUNDLE": "/r.pem"}, dict).verify == "/r.pem"


def test_the_pip_configuration_section_pip_uses_wins(monkeypatch):
    items = [("global.index-url", "https://global.example/simple"), (":env:.index-url", "https://env.example/simple"),
             ("download.cert", "/download.pem"), ("global.cert", "/global.pem"), ("global.timeout", "60")]
    monkeypatch.setattr(idx, "_pip_config_items", lambda: items)
    assert idx._pip_config() == {"index-url": "https://env.example/simple", "cert": "/download.pem"}


def test_pip_reads_its_own_configuration(tmp_path, monkeypatch):
    (tmp_path / "pip.conf").write_text("[global]\nindex-url = https://conf.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    assert idx._pip_config()["index-url"] == "https://conf.example/simple"


def test_the_ca_bundle_is_what_requests_is_given(index, monkeypatch):
    handler, url = index
    handler.files = [_file("0.5.10", {"sha256": SHA["0.5.10"]})]
    verified: list[object] = []
    import requests

    def get(*args, **kwargs):
        verified.append(kwargs["verify"])
        return requests.get(*args, **kwargs)

    IndexMetadata(IndexSettings((url,), "/etc/ssl/certs/ca-certificates.crt"), get).metadata("sglang", "0.5.10")
    assert verified == ["/etc/ssl/certs/ca-certificates.crt"] * 2


def _wheel(version: str) -> bytes:
    """A wheel of two blocks and more: incompressible padding before its METADATA, many members after it."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("sglang/big.bin", os.urandom(3 * idx.BLOCK))
        zf.writestr(f"sglang-{version}.dist-info/METADATA", METADATA[version])
        for i in range(2000):
            zf.writestr(f"sglang/mod{i:04d}.py", "")
    return out.getvalue()


@pytest.mark.parametrize("metadata", [None, True])
def test_without_a_metadata_file_the_wheels_metadata_is_read_by_ranges(index, monkeypatch, metadata):
    handler, url = index
    handler.files = [_file("0.5.10", metadata)]
    body = _wheel("0.5.10")
    handler.served["/files/sglang-0.5.10-py3-none-any.whl"] = body
    wheels = _no_wheels(monkeypatch)
    source = IndexMetadata(IndexSettings((url,), True))
    fetched = source.metadata("sglang", "0.5.10")
    assert fetched is not None and fetched.source == "range requests"
    assert fetched.metadata["Requires-Dist"] == ["torch==2.9.1", "sglang-kernel==0.4.1", "flashinfer-python==0.6.4"]
    assert fetched.bytes_fetched < len(body) / 2 and wheels == []
    handler.asked.clear()
    again = IndexMetadata(IndexSettings((url,), True)).metadata("sglang", "0.5.10")
    assert again is not None and (again.source, again.metadata) == ("cache", fetched.metadata)
    assert handler.asked == ["/simple/sglang/"]  # the page only: the member read before is kept by the wheel's sha256


def test_a_host_without_ranges_gets_the_whole_wheel_through_pip(index, monkeypatch):
    handler, url = index
    handler.files, handler.ranges = [_file("0.5.10", None)], False
    handler.served["/files/sglang-0.5.10-py3-none-any.whl"] = _wheel("0.5.10")
    wheels = _no_wheels(monkeypatch)
    releases.release_metadata(IndexMetadata(IndexSettings((url,), True)), "sglang", "0.5.10")
    assert wheels == ["0.5.10"]


def test_a_damaged_copy_of_a_member_read_by_ranges_is_read_again(index, monkeypatch):
    handler, url = index
    handler.files = [_file("0.5.10", None)]
    handler.served["/files/sglang-0.5.10-py3-none-any.whl"] = _wheel("0.5.10")
    _no_wheels(monkeypatch)
    IndexMetadata(IndexSettings((url,), True)).metadata("sglang", "0.5.10")
    (kept,) = (idx.cache_root() / "metadata").glob("wheel-*.metadata")
    kept.write_bytes(kept.read_bytes()[:20])
    again = IndexMetadata(IndexSettings((url,), True)).metadata("sglang", "0.5.10")
    assert again is not None and again.source == "range requests"
    assert again.metadata["Version"] == ["0.5.10"]
