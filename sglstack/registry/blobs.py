"""Large blobs streamed between a file and a registry, never held in memory whole (a kernel cache of GBs).

Upload (Distribution API): `POST /v2/<name>/blobs/uploads/` opens an upload, each chunk is a `PATCH` of at most
`chunk_bytes` read straight from the file (`Content-Range: start-end`, `Content-Length`), the registry's `Range`
answer must say it holds exactly the bytes sent so far, and `PUT ...?digest=` with no body closes it (the
registry checks the digest itself and answers it in `Docker-Content-Digest`). A blob the repository already
has at the same size is not sent again. Chunks keep every request short (a registry's front with a request
size limit takes them); each gets the operation deadline of `transport.py` plus its size at a floor rate. A
registry without chunked uploads (405/501 to the first PATCH) gets the file as the body of the one `PUT`. An
upload that fails or is interrupted is cancelled (`DELETE`).

Download: one streamed `GET` written to the caller's file chunk by chunk while its sha256 is taken. The size
the manifest declares is checked before the request (over the caller's limit: refused, nothing read), against
`Content-Length`, and as the bytes come (one byte over: stopped there). A short or wrong body is one line, and
the caller, who writes to a temp file (`core/safefiles.write_with`), keeps nothing of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import requests
import urllib3.exceptions

from ..core.errors import RegistryError
from .session import RegistrySession
from .transport import TooLarge, error_detail

CHUNK_BYTES = 32 * 1024 * 1024  # an upload chunk; ECR wants at least 5 MiB, fronts often cap a request at 100 MB
READ_BYTES = 1024 * 1024  # what is in memory at once, either way
CANCEL_S = 5.0  # how long a failed upload's cancellation may take
FLOOR_BYTES_S = 256 * 1024  # a chunk's operation gets the deadline plus its size at this rate (128 s for 32 MiB)
Progress = Callable[[int], None]  # told the bytes moved so far


class FileSlice:
    """`size` bytes of `fh` from `start`, as a file requests streams (and urllib3 rewinds for a retry)."""

    def __init__(self, fh: BinaryIO, start: int, size: int) -> None:
        self._fh, self._start, self._size, self._pos = fh, start, size, 0

    def __len__(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = max(0, min(self._size, base + offset))
        return self._pos

    def read(self, n: int = -1) -> bytes:
        left = self._size - self._pos
        n = left if n is None or n < 0 else min(n, left)
        if n <= 0:
            return b""
        self._fh.seek(self._start + self._pos)
        data = self._fh.read(n)
        self._pos += len(data)
        return data


class ChunksRefused(RegistryError):
    """The registry takes no chunked uploads (its first PATCH answered 405 or 501): the file goes in one PUT."""


def _upload_path(location: str) -> str:
    return location.split("/v2/", 1)[1] if "/v2/" in location else location.lstrip("/")


class BlobStreams(RegistrySession):
    """The streamed blob endpoints (`RegistryClient` has them)."""

    def blob_size(self, repo: str, digest: str) -> int | None:
        """The size of the repository's blob `digest` (HEAD), or None when it has none."""
        what = f"HEAD blob {repo}@{digest}"
        resp = self.request("HEAD", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull", what=what)
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(f"{what}: HTTP {resp.status_code}")
        length = resp.headers.get("Content-Length", "")
        return int(length) if length.isdigit() else -1

    def push_blob_file(self, repo: str, path: Path, digest: str, size: int, *, chunk_bytes: int = CHUNK_BYTES,
                       progress: Progress | None = None) -> bool:
        """Upload the file at `path` (`size` bytes, sha256 `digest`) in chunks of `chunk_bytes` (0, or a registry that
        answers the first chunk 405 or 501, which takes none: in one streamed `PUT`); False when the repository
        already had it.
        The registry refuses a file whose bytes are not `digest` (one line); nothing is kept of it."""
        if self.blob_size(repo, digest) == size:
            return False
        scope = f"repository:{repo}:pull,push"
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size != size:
                raise self._fail(f"blob {digest[:19]}: {path} is not the {size} bytes its manifest declares")
            try:
                self._upload(repo, scope, fh, digest, size, chunk_bytes, progress)
            except ChunksRefused:
                self._upload(repo, scope, fh, digest, size, 0, progress)
        return True

    def _upload(self, repo: str, scope: str, fh: BinaryIO, digest: str, size: int, chunk_bytes: int,
                progress: Progress | None) -> None:
        """One upload: opened, its chunks (none when `chunk_bytes` is 0: the whole file goes with the closing
        `PUT`), closed by the digest; cancelled on any failure or signal."""
        what = f"POST blob upload {repo}"
        resp = self.request("POST", f"{repo}/blobs/uploads/", scope=scope, what=what, allow_redirects=False)
        location = resp.headers.get("Location", "")
        if resp.status_code != 202 or not location:
            raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
        at = [location]  # the upload's latest location: each chunk's answer moves it
        try:
            done = 0
            while chunk_bytes and done < size:
                n = min(chunk_bytes, size - done)
                at[0] = self._patch(repo, scope, at[0], FileSlice(fh, done, n), done, digest)
                done += n
                if progress is not None:
                    progress(done)
            body = FileSlice(fh, done, size - done)
            path_q = _upload_path(at[0])
            path_q += ("&" if "?" in path_q else "?") + f"digest={digest}"
            what = f"PUT blob {repo}@{digest}"
            resp = self.request("PUT", path_q, scope=scope, what=what, data=body, extra_s=len(body) / FLOOR_BYTES_S,
                                headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(body))})
            if resp.status_code not in (201, 204):
                raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
        except BaseException:
            self._cancel(repo, scope, at[0])
            raise
        if progress is not None and len(body):
            progress(size)
        stored = resp.headers.get("Docker-Content-Digest")
        if stored and stored != digest:
            raise self._fail(f"{what}: registry stored {stored}, expected {digest}")

    def _cancel(self, repo: str, scope: str, location: str) -> None:
        """An upload that failed or was interrupted is cancelled (`DELETE` of the upload, within a few seconds):
        the registry keeps no half-sent blob. One that refuses (distribution 2.8, when bytes came after the
        state in `location`: a chunk cut in the middle) keeps it until it purges uploads."""
        with contextlib.suppress(RegistryError, requests.RequestException), self.budget(CANCEL_S):
            self.request("DELETE", _upload_path(location), scope=scope, what=f"DELETE blob upload {repo}").close()

    def _patch(self, repo: str, scope: str, location: str, body: FileSlice, start: int, digest: str) -> str:
        """One chunk; the upload's next location. The registry must hold exactly bytes 0..start+len-1 after it."""
        end = start + len(body) - 1
        what = f"PATCH blob {repo}@{digest[:19]} bytes {start}-{end}"
        resp = self.request("PATCH", _upload_path(location), scope=scope, what=what, data=body,
                            headers={"Content-Type": "application/octet-stream", "Content-Range": f"{start}-{end}",
                                     "Content-Length": str(len(body))}, extra_s=len(body) / FLOOR_BYTES_S)
        if resp.status_code in (405, 501) and start == 0:
            raise ChunksRefused(f"{what}: HTTP {resp.status_code}")
        if resp.status_code != 202:
            raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
        held = resp.headers.get("Range", "")
        if held not in (f"0-{end}", f"bytes=0-{end}"):
            raise self._fail(f"{what}: the registry holds {held or 'an unknown range'}, not 0-{end}")
        return resp.headers.get("Location") or location

    def fetch_blob_to(self, repo: str, digest: str, size: int, out: BinaryIO, *, limit: int,
                      progress: Progress | None = None) -> None:
        """Write blob `digest` of the declared `size` to `out`, checked: not over `limit` (refused before any
        request), exactly `size` bytes (stopped at the first byte over), hashing to `digest`, and done within the
        operation deadline plus its size at the floor rate (a registry that trickles does not hold a deploy)."""
        what = f"GET blob {repo}@{digest}"
        if size > limit:
            raise TooLarge(f"registry {self.registry}: {what}: declared {size} bytes, over the {limit}-byte limit")
        allowed_s = self.timeout_s + size / FLOOR_BYTES_S
        started = time.monotonic()
        resp = self.request("GET", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull", what=what, stream=True)
        try:
            if resp.status_code != 200:
                raise self._fail(f"{what}: HTTP {resp.status_code}")
            length = resp.headers.get("Content-Length", "")
            if length.isdigit() and int(length) != size:
                raise self._fail(f"blob {repo}@{digest} is {length} bytes, not the {size} its manifest declares")
            h, got = hashlib.sha256(), 0
            # read1: what has come, at most a MiB; a read of a fixed size would wait for all of it
            while chunk := resp.raw.read1(READ_BYTES, decode_content=True):
                got += len(chunk)
                if got > size:
                    raise self._fail(f"blob {repo}@{digest} is more than the {size} bytes its manifest declares")
                h.update(chunk)
                out.write(chunk)
                if progress is not None:
                    progress(got)
                if time.monotonic() - started > allowed_s:
                    raise self._fail(f"{what}: {got} of {size} bytes in {allowed_s:.0f} s, slower than "
                                     f"{FLOOR_BYTES_S // 1024} KiB/s; given up")
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
            raise RegistryError(f"registry {self.registry}: {what}: the answer broke off ({type(exc).__name__})"
                                ) from None
        finally:
            resp.close()
        if got != size:
            raise self._fail(f"blob {repo}@{digest} ended after {got} of the {size} bytes its manifest declares")
        if "sha256:" + h.hexdigest() != digest:
            raise self._fail(f"blob {repo}@{digest} content does not match its digest")
