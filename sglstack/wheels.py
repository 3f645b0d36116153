"""Fetch single wheels with `pip download --no-deps`, cached on disk.

pip knows which index to use (the user's pip config, PIP_INDEX_URL, a corporate mirror), so sglstack
never names an index itself. The cache is keyed by name and version; a wheel is fetched once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.utils import canonicalize_name

from .errors import SglstackError


class WheelFetchError(SglstackError):
    """pip could not download the requested wheel."""


def cache_dir() -> Path:
    root = os.environ.get("SGLSTACK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglstack"
    )
    return Path(root) / "wheels"


def _cached(dest: Path, name: str, version: str) -> Path | None:
    want = canonicalize_name(name)
    for whl in sorted(dest.glob("*.whl")):
        dist, ver = whl.name.split("-")[:2]
        if canonicalize_name(dist) == want and ver == version:
            return whl
    return None


def fetch_wheel(name: str, version: str, *, dest: Path | None = None, python_version: str | None = None,
                platforms: tuple[str, ...] = ()) -> Path:
    """Return the path of `name==version`'s wheel, downloading it once with pip."""
    dest = dest or cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    hit = _cached(dest, name, version)
    if hit:
        return hit
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "--disable-pip-version-check", "-d", str(dest), f"{name}=={version}"]
    if python_version:
        cmd += ["--python-version", python_version]
        for plat in platforms:
            cmd += ["--platform", plat]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    hit = _cached(dest, name, version)
    if proc.returncode != 0 or hit is None:
        last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise WheelFetchError(f"pip download {name}=={version}: {last}")
    return hit


def wheel_metadata(wheel: Path) -> dict[str, list[str]]:
    """The wheel's METADATA as {header: [values]} (Requires-Dist has many)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        msg = Parser().parsestr(zf.read(name).decode("utf-8"))
    out: dict[str, list[str]] = {}
    for key, value in msg.items():
        out.setdefault(key, []).append(value)
    return out


class WheelUnreachable(WheelFetchError):
    """The index or URL a pin names cannot be reached from here (pip itself would only say "not found")."""


def _unreachable(url: str) -> str | None:
    """Why `url`'s host cannot be reached (name resolution, connection, timeout), or None if it answers."""
    import requests  # only pins with their own index or URL need the probe

    verify: str | bool = os.environ.get("PIP_CERT") or os.environ.get("REQUESTS_CA_BUNDLE") or True
    try:
        requests.head(url, timeout=10, allow_redirects=False, verify=verify)
    except requests.exceptions.SSLError:
        return None  # a TLS handshake happened: the host answers
    except requests.exceptions.Timeout:
        return "timed out"
    except requests.exceptions.ConnectionError as exc:
        text = str(exc)
        return "name resolution failed" if "resolve" in text or "Name or service" in text else "connection failed"
    return None


def fetch_binary_wheel(requirement: str, *, dest: Path, python_version: str, platform_tags: tuple[str, ...],
                       index_url: str | None = None, extra_index: bool = False) -> Path:
    """One wheel of `name==version` (or a direct wheel URL) for another interpreter and platform, once.

    `dest` should be specific to the python version and platform (the cache is keyed by name and version).
    A pin's own index or URL that cannot be reached raises WheelUnreachable naming it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    url = requirement if "://" in requirement else None
    if url:
        from urllib.parse import unquote, urlsplit

        filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    else:
        name, _, version = requirement.partition("==")

    def find() -> Path | None:
        if url:
            return dest / filename if (dest / filename).is_file() else None
        return _cached(dest, name, version)

    hit = find()
    if hit:
        return hit
    remote = url or index_url
    if remote and remote.startswith(("http://", "https://")):
        why = _unreachable(remote)
        if why:
            raise WheelUnreachable(f"{remote} is unreachable from here ({why})")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "--disable-pip-version-check", "-d", str(dest), "--python-version", python_version]
    for tag in platform_tags:
        cmd += ["--platform", tag]
    if index_url:
        cmd += ["--extra-index-url" if extra_index else "--index-url", index_url]
    proc = subprocess.run([*cmd, requirement], capture_output=True, text=True, check=False)
    got = find()
    if proc.returncode != 0 or got is None:
        last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise WheelFetchError(f"pip download {requirement}: {last}")
    return got
