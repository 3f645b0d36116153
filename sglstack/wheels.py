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


def cache_root() -> Path:
    """sglstack's cache folder: SGLSTACK_CACHE, else ~/.cache/sglstack (wheels/, git/ below it)."""
    root = os.environ.get("SGLSTACK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglstack"
    )
    return Path(root)


def cache_dir() -> Path:
    return cache_root() / "wheels"


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


def available_versions(name: str) -> list[str]:
    """Every version of `name` on the package index pip is configured for (pre-releases included).

    `pip index versions` asks the index the user's pip config, PIP_INDEX_URL or a mirror names, so no
    index host is written here.
    """
    cmd = [sys.executable, "-m", "pip", "index", "versions", name, "--pre", "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if not line.startswith("WARNING")]
    raise WheelFetchError(f"pip index versions {name}: {lines[-1] if lines else 'no versions listed'}")
