"""Streamed blob uploads and downloads (`registry/blobs.py`) against the registry stand-in
(tests/lib/registry_double) that speaks the upload protocol of the Distribution API as distribution 2.8 does
(POST → 202 + Location, PATCH with Content-Range → 202 + Range + a new Location, PUT ?digest= → 201 after
checking the digest) and records each request; and the answers a registry or a man in the middle may give
instead: a Range that is not what was sent, a body longer or shorter than declared, without a Content-Length, of
another digest, an expired token in the middle of an upload. The real registry's cases are
tests/e2e/test_kernel_cache_streaming.py."""

from __future__ import annotations

import hashlib
import io
import time

import pytest
from registry_double import RegistryDouble

from sglstack.core.errors import RegistryError
from sglstack.registry.blobs import FileSlice
from sglstack.registry.client import RegistryClient
from sglstack.registry.transport import TooLarge

DATA = bytes(range(256)) * 41  # 10496 bytes: three chunks of 4096 and a short last one
DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def registry():
    """Blobs kept in a dict; uploads as distribution keeps them; `faults`: what to answer wrong (tests/lib)."""
    with RegistryDouble() as reg:
        yield reg


def _seen(registry: RegistryDouble) -> list[tuple[str, str, dict[str, str], int]]:
    """Each request: method, path, headers, body length."""
    return [(r.method, r.path, r.headers, len(r.body)) for r in registry.log]


@pytest.fixture
def blob_file(tmp_path):
    path = tmp_path / "layer"
    path.write_bytes(DATA)
    return path


def test_a_file_is_uploaded_in_chunks_each_confirmed_then_closed_by_its_digest(registry, blob_file):
    said: list[int] = []
    assert registry.client().push_blob_file("a", blob_file, DIGEST, len(DATA), chunk_bytes=4096,
                                            progress=said.append) is True
    assert registry.blobs == {("a", DIGEST): DATA}
    patches = [(h["Content-Range"], h["Content-Length"], n) for m, _, h, n in _seen(registry) if m == "PATCH"]
    assert patches == [("0-4095", "4096", 4096), ("4096-8191", "4096", 4096), ("8192-10495", "2304", 2304)]
    # Each PATCH went to the Location the previous answer gave, and the PUT carries the digest and no body.
    paths = [p for m, p, _, _ in _seen(registry) if m in ("PATCH", "PUT")]
    assert paths[1].endswith("?_state=s4096") and paths[2].endswith("?_state=s8192")
    assert paths[3] == f"/v2/a/blobs/uploads/1?_state=s10496&digest={DIGEST}"
    assert _seen(registry)[-1][3] == 0 and said == [4096, 8192, 10496]
    # Present at that size: not sent again.
    registry.log.clear()
    assert registry.client().push_blob_file("a", blob_file, DIGEST, len(DATA)) is False
    assert [m for m, *_ in _seen(registry)] == ["HEAD"]


def test_a_range_the_registry_does_not_hold_stops_the_upload_in_one_line(registry, blob_file):
    registry.faults.add("short-range")
    with pytest.raises(RegistryError) as info:
        registry.client().push_blob_file("a", blob_file, DIGEST, len(DATA), chunk_bytes=4096)
    assert str(info.value) == (f"registry {registry.served.host}: PATCH blob a@{DIGEST[:19]} bytes 0-4095: the "
                               "registry holds 0-4094, not 0-4095")
    assert registry.blobs == {} and registry.uploads == {}  # the upload was cancelled
    assert _seen(registry)[-1][:2] == ("DELETE", "/v2/a/blobs/uploads/1?_state=s0")  # the last one it confirmed


def test_an_interrupted_upload_is_cancelled_and_the_interrupt_goes_on(registry, blob_file):
    def interrupt(done: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        registry.client().push_blob_file("a", blob_file, DIGEST, len(DATA), chunk_bytes=4096, progress=interrupt)
    assert [m for m, *_ in _seen(registry)] == ["HEAD", "POST", "PATCH", "DELETE"]
    assert registry.blobs == {} and registry.uploads == {}


def test_a_chunk_the_registry_took_half_of_before_the_connection_dropped_stops_the_upload(registry, blob_file):
    """The retry sends the chunk again and the registry appends it after the half it kept (as distribution 2.8
    does): the Range it answers is not what was sent, so the upload stops there and is cancelled."""
    registry.faults.add("take-half-then-drop")
    client = RegistryClient(registry.served.host, sleep=lambda _s: None, attempts=2)
    with pytest.raises(RegistryError, match=r"bytes 4096-8191: the registry holds 0-10239, not 0-8191$"):
        client.push_blob_file("a", blob_file, DIGEST, len(DATA), chunk_bytes=4096)
    assert [m for m, *_ in _seen(registry)] == ["HEAD", "POST", "PATCH", "PATCH", "PATCH", "DELETE"]
    assert registry.blobs == {} and registry.uploads == {}


def test_a_file_that_is_not_its_digest_is_refused_by_the_registry(registry, blob_file):
    wrong = "sha256:" + "0" * 64
    with pytest.raises(RegistryError, match=r"PUT blob a@sha256:0{64}: HTTP 400 DIGEST_INVALID: digest did not "):
        registry.client().push_blob_file("a", blob_file, wrong, len(DATA))
    assert _seen(registry)[-1][0] == "DELETE"
    with pytest.raises(RegistryError, match=r"is not the 10 bytes its manifest declares$"):
        registry.client().push_blob_file("a", blob_file, DIGEST, 10)
    assert registry.blobs == {}


def test_an_expired_token_in_the_middle_of_an_upload_sends_the_chunk_again_whole(registry, blob_file):
    registry.faults.add("expire-token-once")
    registry.client().push_blob_file("a", blob_file, DIGEST, len(DATA), chunk_bytes=4096)
    assert registry.blobs == {("a", DIGEST): DATA}
    first_two = [(h.get("Authorization"), n) for m, _, h, n in _seen(registry) if m == "PATCH"][:2]
    assert first_two == [(None, 4096), ("Bearer t2", 4096)]  # the answer to the challenge carried the same bytes


def test_a_download_is_written_as_it_comes_and_checked(registry):
    registry.blobs[("a", DIGEST)] = DATA
    out, said = io.BytesIO(), []
    registry.client().fetch_blob_to("a", DIGEST, len(DATA), out, limit=1 << 20, progress=said.append)
    assert out.getvalue() == DATA and said[-1] == len(DATA)


@pytest.mark.parametrize(("faults", "message"), [
    ({"flip"}, f"blob a@{DIGEST} content does not match its digest"),
    ({"longer"}, f"blob a@{DIGEST} is 15496 bytes, not the 10496 its manifest declares"),
    ({"shorter"}, f"blob a@{DIGEST} is 10486 bytes, not the 10496 its manifest declares"),
    ({"longer", "no-length"}, f"blob a@{DIGEST} is more than the 10496 bytes its manifest declares"),
    ({"shorter", "no-length"}, f"blob a@{DIGEST} ended after 10486 of the 10496 bytes its manifest declares"),
], ids=["flipped", "longer", "shorter", "longer-no-length", "shorter-no-length"])
def test_a_download_of_another_size_or_digest_is_one_line(registry, faults, message):
    registry.blobs[("a", DIGEST)] = DATA
    registry.faults |= faults
    out = io.BytesIO()
    with pytest.raises(RegistryError) as info:
        registry.client().fetch_blob_to("a", DIGEST, len(DATA), out, limit=1 << 20)
    assert str(info.value) == f"registry {registry.served.host}: {message}"
    assert len(out.getvalue()) <= len(DATA)  # never a byte past the declared size


def test_a_declared_size_over_the_limit_is_refused_before_any_request(registry):
    with pytest.raises(TooLarge, match=r"declared 10496 bytes, over the 10495-byte limit$"):
        registry.client().fetch_blob_to("a", DIGEST, len(DATA), io.BytesIO(), limit=len(DATA) - 1)
    assert _seen(registry) == []


def test_a_file_slice_reads_seeks_and_measures_only_its_bytes():
    part = FileSlice(io.BytesIO(DATA), 100, 50)
    assert len(part) == 50 and part.read(10) == DATA[100:110] and part.tell() == 10
    assert part.read() == DATA[110:150] and part.read() == b""
    part.seek(0)
    assert part.read(1000) == DATA[100:150]
    assert part.seek(-5, 2) == 45 and part.read() == DATA[145:150]


def test_a_chunks_operation_gets_time_for_its_size_beyond_the_deadline(registry, blob_file, monkeypatch):
    """A registry that answers a chunk after 1 s, under a 0.5 s operation deadline: refused as "no answer" when
    the chunk earns no time, accepted when its size at the floor rate gives it the second it needs."""
    from sglstack.registry import blobs

    registry.faults.add("slow-answer")
    client = RegistryClient(registry.served.host, sleep=lambda _s: None, attempts=1, timeout_s=0.5,
                            attempt_timeout_s=5)
    monkeypatch.setattr(blobs, "FLOOR_BYTES_S", 1 << 30)  # 4096 bytes earn 4 microseconds
    with pytest.raises(RegistryError, match=r"PATCH blob a@sha256:\w{12} bytes 0-4095: no answer within \d s"):
        client.push_blob_file("a", blob_file, DIGEST, len(DATA), chunk_bytes=4096)
    monkeypatch.setattr(blobs, "FLOOR_BYTES_S", 1024)  # 4096 bytes earn 4 s
    assert client.push_blob_file("a", blob_file, DIGEST, len(DATA), chunk_bytes=4096) is True
    assert registry.blobs == {("a", DIGEST): DATA}


def test_a_registry_without_chunked_uploads_gets_the_file_in_one_streamed_put(registry, blob_file):
    registry.faults.add("no-patch")
    said: list[int] = []
    assert registry.client().push_blob_file("a", blob_file, DIGEST, len(DATA), chunk_bytes=4096,
                                            progress=said.append) is True
    assert [(m, n) for m, _, _, n in _seen(registry)] == [("HEAD", 0), ("POST", 0), ("PATCH", 4096), ("DELETE", 0),
                                                        ("POST", 0), ("PUT", len(DATA))]
    assert registry.blobs == {("a", DIGEST): DATA} and registry.uploads == {} and said == [len(DATA)]


def test_a_registry_that_trickles_a_blob_is_given_up_on_not_waited_for(registry, monkeypatch):
    """Each piece comes within the read timeout, so only the time the whole may take stops it: the deadline
    plus the size at the floor rate."""
    from sglstack.registry import blobs

    registry.blobs[("a", DIGEST)] = DATA
    registry.faults.add("trickle")
    monkeypatch.setattr(blobs, "FLOOR_BYTES_S", 1 << 30)
    client = RegistryClient(registry.served.host, sleep=lambda _s: None, attempts=1, timeout_s=0.3)
    out, started = io.BytesIO(), time.monotonic()
    with pytest.raises(RegistryError, match=rf"GET blob a@{DIGEST}: \d+ of 10496 bytes in 0 s, slower than 1048576 "
                                            r"KiB/s; given up$"):
        client.fetch_blob_to("a", DIGEST, len(DATA), out, limit=1 << 20)
    assert time.monotonic() - started < 0.9 and 0 < len(out.getvalue()) < len(DATA)
    monkeypatch.setattr(blobs, "FLOOR_BYTES_S", 1024)  # 10 s for these 10 KiB: enough for a second of trickle
    out = io.BytesIO()
    client.fetch_blob_to("a", DIGEST, len(DATA), out, limit=1 << 20)
    assert out.getvalue() == DATA
