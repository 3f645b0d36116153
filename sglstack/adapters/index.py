"""A release's METADATA from the package index's metadata file (PEP 658), not from its whole wheel.

`invoke releases` needs only each SGLang release's Requires-Dist. An index that serves PEP 691's JSON
(`Accept: application/vnd.pypi.simple.v1+json`) names, per wheel, a `core-metadata` file (PEP 714; the
older key `data-dist-info-metadata`) with its sha256: that file is the wheel's METADATA, a few kB instead
of a 15 MB wheel. Its bytes are checked against the index's sha256 (a mismatch is an error, never a
fallback), and cached under that sha256. Where an index lists the wheel with no hashed metadata file, the
wheel's METADATA member is read by HTTP range requests (the zip's directory and that one member, as uv
does; zipfile checks its CRC). `IndexMetadata.metadata` returns None where neither works (an HTML-only or
local index, a host without ranges, no such wheel): the caller then reads the whole wheel through pip.

The index is the one pip (or uv) is configured for, found as they find it: PIP_INDEX_URL, UV_DEFAULT_INDEX
or UV_INDEX_URL, pip's configuration (`pip config list`), else pip's own default; the extra indexes
likewise. No index host is written here. TLS trusts PIP_CERT (pip's `cert`), else REQUESTS_CA_BUNDLE.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from packaging.tags import Tag, sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ..core.credentials import redact_url, tool_environment
from ..core.safefiles import write_bytes
from .wheels import WheelFetchError, cache_root, tls_verify

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
TIMEOUT_S = 60
# pip's order for `pip download`: its environment, then the command's section, then [global]
_SECTIONS = (":env:", "download", "index", "install", "global")


class MetadataMismatch(WheelFetchError):
    """The metadata file's bytes do not hash to what the index says: refused, never used."""


@dataclass(frozen=True)
class IndexSettings:
    indexes: tuple[str, ...]  # the main index first, then the extra ones, as pip asks them
    verify: str | bool  # requests' `verify`: a CA bundle path, or the system's trust


@dataclass(frozen=True)
class Fetched:
    """What reading one release's metadata cost: the bytes that came over the network, and from where."""

    metadata: dict[str, list[str]]
    bytes_fetched: int
    source: str  # "metadata file", "cache", "range requests"


def _pip_config_items() -> list[tuple[str, str]]:
    """pip's configuration as `pip config list` shows it (`section.key`, value), read by pip itself: in this
    process where pip can be imported (a second interpreter costs a second), else by `pip config list`."""
    try:
        from pip._internal.configuration import Configuration  # at call time: only `releases` asks

        config = Configuration(isolated=False)
        config.load()
        return [(str(k), str(v)) for k, v in config.items()]
    except Exception:  # any pip that cannot do it in process: ask its command line
        cmd = [sys.executable, "-m", "pip", "config", "list", "--disable-pip-version-check"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=tool_environment())
        pairs = (line.partition("=") for line in proc.stdout.splitlines())
        return [(key, value.strip().strip("'\"")) for key, eq, value in pairs if eq]


def _pip_config() -> dict[str, str]:
    """pip's configuration keys (`index-url`, `extra-index-url`, `cert`), each from the section pip uses."""
    found: dict[str, tuple[int, str]] = {}
    for key, value in _pip_config_items():
        section, _, name = key.rpartition(".")
        if name not in ("index-url", "extra-index-url", "cert"):
            continue
        rank = _SECTIONS.index(section) if section in _SECTIONS else len(_SECTIONS)
        if name not in found or rank < found[name][0]:
            found[name] = (rank, value)
    return {name: value for name, (_, value) in found.items()}


def _pip_default_index() -> str | None:
    """pip's own default index, read from pip (None when this pip does not say where)."""
    try:
        from pip._internal.models.index import PyPI  # at call time: only when nothing names an index
    except ImportError:
        return None
    return str(PyPI.simple_url)


def index_settings(env: Mapping[str, str] | None = None,
                   pip_config: Callable[[], dict[str, str]] = _pip_config) -> IndexSettings:
    """The indexes and CA trust pip (or uv) would use here."""
    env = os.environ if env is None else env
    config = pip_config()
    main = (env.get("PIP_INDEX_URL") or env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL")
            or config.get("index-url") or _pip_default_index())
    extra = (env.get("PIP_EXTRA_INDEX_URL") or env.get("UV_INDEX") or env.get("UV_EXTRA_INDEX_URL")
             or config.get("extra-index-url") or "")
    indexes = tuple(dict.fromkeys(u for u in (main, *extra.split()) if u))
    return IndexSettings(indexes, tls_verify(config.get("cert"), env))


@dataclass(frozen=True)
class _WheelFile:
    filename: str
    url: str
    metadata_sha256: str | None  # None: the index offers no metadata file with a hash
    sha256: str | None = None  # the wheel's own, from the index


def _preference(filename: str, tags: list[Tag]) -> int:
    """Lower is better: the wheel pip would install here first; pure wheels before any other."""
    _, _, _, wheel_tags = parse_wheel_filename(filename)
    ranks = [tags.index(t) for t in wheel_tags if t in tags]
    if any(t.abi == "none" and t.platform == "any" for t in wheel_tags):
        return -1
    return min(ranks) if ranks else len(tags)


def _wheel_of(page: dict, page_url: str, name: str, version: str) -> _WheelFile | None:
    """The wheel of `name==version` on a PEP 691 project page that pip would pick here, if any."""
    want = canonicalize_name(name)
    candidates = []
    for entry in page.get("files") or []:
        filename = entry.get("filename", "") if isinstance(entry, dict) else ""
        if not filename.endswith(".whl"):
            continue
        try:
            wname, wversion, _, _ = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if wname != want or str(wversion) != version:
            continue
        meta = entry.get("core-metadata", entry.get("data-dist-info-metadata"))
        sha = meta.get("sha256") if isinstance(meta, dict) else None
        hashes = entry.get("hashes")
        own = hashes.get("sha256") if isinstance(hashes, dict) else None
        candidates.append(_WheelFile(filename, urljoin(page_url, entry.get("url", "")),
                                     sha if isinstance(sha, str) else None,
                                     own if isinstance(own, str) and re.fullmatch(r"[0-9a-f]{64}", own) else None))
    if not candidates:
        return None
    tags = list(sys_tags())
    return min(candidates, key=lambda c: (_preference(c.filename, tags), c.filename))


def parse_metadata(data: bytes, where: str) -> dict[str, list[str]]:
    """METADATA as {header: [values]}, as `wheels.wheel_metadata` reads it from a wheel."""
    try:
        msg = Parser().parsestr(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise WheelFetchError(f"{where}: not UTF-8 metadata ({exc})") from None
    out: dict[str, list[str]] = {}
    for key, value in msg.items():
        out.setdefault(key, []).append(value)
    return out


def _cache_path(sha256: str) -> Path:
    return cache_root() / "metadata" / f"{sha256}.metadata"


def _cached(sha256: str) -> bytes | None:
    try:
        data = _cache_path(sha256).read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


class IndexMetadata:
    """Releases' METADATA from the configured indexes: each project page is asked for once, and `fetched`
    counts the bytes that came over the network (pages and metadata files)."""

    def __init__(self, settings: IndexSettings, get: Callable[..., Any] | None = None) -> None:
        self.settings = settings
        self._get = get
        self._pages: dict[tuple[str, str], tuple[dict, str] | None] = {}
        self.fetched = 0

    def _page(self, index: str, name: str) -> tuple[dict, str] | None:
        import requests  # at call time: only `invoke releases` asks the index itself

        key = (index, str(canonicalize_name(name)))
        if key in self._pages:
            return self._pages[key]
        self._pages[key] = None
        page_url = f"{index.rstrip('/')}/{key[1]}/"
        get = self._get or requests.get
        try:
            resp = get(page_url, headers={"Accept": SIMPLE_JSON}, timeout=TIMEOUT_S, verify=self.settings.verify)
        except requests.RequestException:
            return None  # pip, which the fallback runs, says what is wrong with this index
        self.fetched += len(resp.content)
        if resp.status_code != 200 or not resp.headers.get("Content-Type", "").startswith(SIMPLE_JSON):
            return None
        try:
            page = resp.json()
        except ValueError:
            return None
        self._pages[key] = (page if isinstance(page, dict) else {}, resp.url or page_url)
        return self._pages[key]

    def metadata(self, name: str, version: str) -> Fetched | None:
        """`name==version`'s METADATA from the first index that lists a wheel of it with a hashed metadata
        file; None where the release must be read from its whole wheel instead."""
        for index in self.settings.indexes:
            if not index.startswith(("http://", "https://")):
                continue  # a local (file://) index is a folder on this machine: pip reads it at no cost
            found = self._page(index, name)
            wheel = _wheel_of(found[0], found[1], name, version) if found else None
            if wheel is None:
                continue
            if wheel.metadata_sha256 is None:
                # no metadata file to check by hash: the wheel's METADATA member, by range requests where the
                # host serves them, else (None) the whole wheel through pip
                fetched_or_none = _metadata_by_ranges(wheel, self._get, self.settings)
                if fetched_or_none is not None:
                    self.fetched += fetched_or_none.bytes_fetched
                return fetched_or_none
            fetched = _fetch_metadata(wheel, self._get, self.settings)
            self.fetched += fetched.bytes_fetched
            return fetched
        return None


def _fetch_metadata(wheel: _WheelFile, get: Callable[..., Any] | None, settings: IndexSettings) -> Fetched:
    import requests  # at call time: as above

    get = get or requests.get
    sha = wheel.metadata_sha256
    assert sha is not None
    where = f"{redact_url(wheel.url)}.metadata"
    if (hit := _cached(sha)) is not None:
        return Fetched(parse_metadata(hit, where), 0, "cache")
    try:
        resp = get(wheel.url + ".metadata", timeout=TIMEOUT_S, verify=settings.verify)
    except requests.RequestException as exc:
        raise WheelFetchError(f"{where}: {type(exc).__name__}") from None
    if resp.status_code != 200:
        raise WheelFetchError(f"{where}: HTTP {resp.status_code}")
    data = resp.content
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        raise MetadataMismatch(f"{where}: sha256 {got} is not the index's {sha}: refused")
    path = _cache_path(sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path.parent, path, data)
    return Fetched(parse_metadata(data, where), len(data), "metadata file")


BLOCK = 256 * 1024  # one range request: the zip's central directory and METADATA take one to three


class _NoRanges(Exception):
    """The host does not answer range requests as asked: read the whole wheel instead."""


class _RemoteFile(io.RawIOBase):
    """A file on a web server read by HTTP range requests (RFC 9110), block by block, for `zipfile`."""

    def __init__(self, url: str, get: Callable[..., Any], verify: str | bool) -> None:
        self.url, self._get, self._verify = url, get, verify
        self._blocks: dict[int, bytes] = {}
        self._pos = 0
        self.fetched = 0
        tail = self._range(f"bytes=-{BLOCK}")
        self.size = tail[1]
        start = self.size - len(tail[0])
        if start % BLOCK:  # keep blocks aligned: the tail's first, partial block is fetched again if needed
            tail = (tail[0][BLOCK - start % BLOCK:], tail[1])
            start += BLOCK - start % BLOCK
        for i in range(0, len(tail[0]), BLOCK):
            self._blocks[(start + i) // BLOCK] = tail[0][i:i + BLOCK]

    def _range(self, spec: str) -> tuple[bytes, int]:
        resp = self._get(self.url, headers={"Range": spec}, timeout=TIMEOUT_S, verify=self._verify, stream=True)
        try:
            total = resp.headers.get("Content-Range", "").rpartition("/")[2]
            if resp.status_code != 206 or not total.isdigit():
                raise _NoRanges(spec)  # a 200 would be the whole wheel: not read here
            data = resp.content
        finally:
            resp.close()
        self.fetched += len(data)
        return data, int(total)

    def _block(self, index: int) -> bytes:
        if index not in self._blocks:
            end = min(self.size, (index + 1) * BLOCK) - 1
            self._blocks[index] = self._range(f"bytes={index * BLOCK}-{end}")[0]
        return self._blocks[index]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence] + offset
        return self._pos

    def readinto(self, buffer) -> int:
        end = min(self.size, self._pos + len(buffer))
        out = bytearray()
        while self._pos + len(out) < end:
            at = self._pos + len(out)
            block = self._block(at // BLOCK)
            out += block[at % BLOCK:at % BLOCK + end - at]
        buffer[:len(out)] = out
        self._pos += len(out)
        return len(out)


def _metadata_by_ranges(wheel: _WheelFile, get: Callable[..., Any] | None, settings: IndexSettings) -> Fetched | None:
    """The wheel's `.dist-info/METADATA` read through range requests (zipfile checks its CRC), or None where
    the host does not serve ranges or the file is no readable wheel (pip then fetches and checks it whole)."""
    import requests  # at call time: as above

    where = redact_url(wheel.url)
    if wheel.sha256 and (hit := _cached_member(wheel.sha256)) is not None:
        return Fetched(parse_metadata(hit, where), 0, "cache")
    try:
        remote = _RemoteFile(wheel.url, get or requests.get, settings.verify)
        with zipfile.ZipFile(io.BufferedReader(remote, BLOCK)) as zf:
            names = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
            if len(names) != 1:
                return None
            data = zf.read(names[0])
    except (_NoRanges, requests.RequestException, zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None
    fetched = Fetched(parse_metadata(data, f"{where}!{names[0]}"), remote.fetched, "range requests")
    if wheel.sha256:
        # keyed by the wheel the index names; the file's own sha256 in its name tells a damaged copy
        path = cache_root() / "metadata" / f"wheel-{wheel.sha256}-{hashlib.sha256(data).hexdigest()}.metadata"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path.parent, path, data)
    return fetched


def _cached_member(wheel_sha256: str) -> bytes | None:
    """The METADATA read earlier from the wheel of that sha256, if a copy is whole."""
    for path in (cache_root() / "metadata").glob(f"wheel-{wheel_sha256}-*.metadata"):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if path.name == f"wheel-{wheel_sha256}-{hashlib.sha256(data).hexdigest()}.metadata":
            return data
    return None
