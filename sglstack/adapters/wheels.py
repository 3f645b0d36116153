"""Fetch single wheels with `pip download --no-deps`, cached on disk and checked by hash on every use.

pip knows which index to use (the user's pip config, PIP_INDEX_URL, a corporate mirror), so sglstack
never names an index itself. The cache is keyed by name and version; a wheel is fetched once.

pip checks a download against the sha256 the index gives; the cache keeps that file's sha256 in a
sidecar, `<wheel>.sha256`, written before the wheel is renamed into place. A cached wheel is used only
when its sidecar matches its bytes; any other file (truncated, corrupt, or dropped there by hand without
a sidecar) is removed and fetched again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from email.parser import Parser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from ..core.credentials import HostLogin, netrc_environment, redact_text, secret_values, tool_environment
from ..core.errors import SglstackError
from ..core.network import explained
from ..core.safefiles import write_text
from ..core.versions import version_problem

SIDECAR_SUFFIX = ".sha256"


class WheelFetchError(SglstackError):
    """pip could not download the requested wheel."""


class BadWheel(SglstackError):
    """A wheel file cannot be read as a wheel (not a zip, truncated, no METADATA)."""


def cache_root() -> Path:
    """sglstack's cache folder: SGLSTACK_CACHE, else ~/.cache/sglstack (wheels/, git/ below it)."""
    root = os.environ.get("SGLSTACK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglstack"
    )
    return Path(root)


def cache_dir() -> Path:
    return cache_root() / "wheels"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sidecar(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + SIDECAR_SUFFIX)


def _is_verified(wheel: Path) -> bool:
    try:
        recorded = sidecar(wheel).read_text(encoding="ascii").split()
        return bool(recorded) and recorded[0] == file_sha256(wheel)
    except (OSError, UnicodeDecodeError):
        return False


def _cached(dest: Path, name: str, version: str) -> Path | None:
    """The verified cached wheel of `name==version`; unverifiable candidates are removed."""
    want = canonicalize_name(name)
    for whl in sorted(dest.glob("*.whl")):
        parts = whl.name.split("-")
        if len(parts) < 3 or canonicalize_name(parts[0]) != want or parts[1] != version:
            continue
        if _is_verified(whl):
            return whl
        for stale in (whl, sidecar(whl)):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    return None


def fetch_wheel(name: str, version: str, *, dest: Path | None = None, python_version: str | None = None,
                platforms: tuple[str, ...] = ()) -> Path:
    """Return the path of `name==version`'s wheel, downloading it once with pip."""
    dest = dest or cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    hit = _cached(dest, name, version)
    if hit:
        return hit
    args: list[str] = []
    if python_version:
        args += ["--python-version", python_version]
        for plat in platforms:
            args += ["--platform", plat]
    return _download(f"{name}=={version}", args, dest)


def _download(requirement: str, args: list[str], dest: Path, logins: Iterable[HostLogin] = ()) -> Path:
    """`pip download` one wheel into the cache folder `dest`, with its sha256 sidecar.

    pip writes into a private folder; the wheel enters the cache by one rename, after its sidecar, so a
    concurrent reader sees either no wheel or a complete one it can verify.
    """
    staging = Path(tempfile.mkdtemp(dir=dest, prefix=".download-"))
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--disable-pip-version-check", "-d", str(staging), *args, requirement]
        # The URLs carry no credentials; pip reads them as a netrc named in its environment (in memory).
        with netrc_environment(logins) as (netrc_env, fds):
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=tool_environment(netrc_env),
                                  pass_fds=fds)
        got = sorted(staging.glob("*.whl"))
        if proc.returncode != 0 or len(got) != 1:
            # pip's own warnings (an unusable find-links folder, say) are not why it failed.
            lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("WARNING:")]
            last = redact_text((lines or ["no wheel downloaded"])[-1], secret_values(logins))
            raise WheelFetchError(f"pip download {requirement}: {last}")
        target = dest / got[0].name
        side = staging / (got[0].name + SIDECAR_SUFFIX)
        write_text(staging, side, f"{file_sha256(got[0])}  {got[0].name}\n")
        os.replace(side, sidecar(target))
        os.replace(got[0], target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


@contextlib.contextmanager
def open_wheel(wheel: Path):
    """The wheel as an open ZipFile; a file that is not a readable zip is one `BadWheel` line."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise BadWheel(f"{wheel}: not a readable wheel ({exc}): remove it, or let sglstack fetch it again") from None
    with zf:
        yield zf


def wheel_metadata(wheel: Path) -> dict[str, list[str]]:
    """The wheel's METADATA as {header: [values]} (Requires-Dist has many)."""
    with open_wheel(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        if len(names) != 1:
            raise BadWheel(f"{wheel}: expected one .dist-info/METADATA, found {len(names)}")
        try:
            msg = Parser().parsestr(zf.read(names[0]).decode("utf-8"))
        except (zipfile.BadZipFile, OSError, EOFError, UnicodeDecodeError) as exc:
            raise BadWheel(f"{wheel}: cannot read {names[0]}: {exc}") from None
    out: dict[str, list[str]] = {}
    for key, value in msg.items():
        out.setdefault(key, []).append(value)
    return out


def tls_verify(pip_config_cert: str | None = None, env: Mapping[str, str] | None = None) -> str | bool:
    """What our own requests to an index trust, as pip does: PIP_CERT (pip's `cert`), else REQUESTS_CA_BUNDLE,
    else the system's trust (a TLS-intercepting proxy's CA reaches us the way it reaches pip)."""
    env = os.environ if env is None else env
    return env.get("PIP_CERT") or pip_config_cert or env.get("REQUESTS_CA_BUNDLE") or True


class WheelUnreachable(WheelFetchError):
    """The index or URL a pin names cannot be reached from here (pip itself would only say "not found")."""


def _unreachable(url: str) -> str | None:
    """Why `url`'s host cannot be reached (name resolution, connection, timeout), or None if it answers."""
    import requests  # only pins with their own index or URL need the probe

    try:
        requests.head(url, timeout=10, allow_redirects=False, verify=tls_verify())
    except requests.exceptions.SSLError:
        return None  # a TLS handshake happened: the host answers
    except requests.exceptions.Timeout:
        return "timed out"
    except requests.exceptions.ConnectionError as exc:
        text = str(exc)
        return "name resolution failed" if "resolve" in text or "Name or service" in text else "connection failed"
    return None


def fetch_binary_wheel(requirement: str, *, dest: Path, python_version: str, platform_tags: tuple[str, ...],
                       index_url: str | None = None, extra_index: bool = False,
                       logins: Iterable[HostLogin] = ()) -> Path:
    """One wheel of `name==version` (or a direct wheel URL) for another interpreter and platform, once.

    `dest` should be specific to the python version and platform (the cache is keyed by name and version).
    A pin's own index or URL that cannot be reached raises WheelUnreachable naming it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    url = requirement if "://" in requirement else None
    if url:
        filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    else:
        name, _, version = requirement.partition("==")

    def find() -> Path | None:
        if url:
            wheel = dest / filename
            if wheel.is_file() and _is_verified(wheel):
                return wheel
            for stale in (wheel, sidecar(wheel)):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()
            return None
        return _cached(dest, name, version)

    hit = find()
    if hit:
        return hit
    remote = url or index_url
    if remote and remote.startswith(("http://", "https://")):
        why = _unreachable(remote)
        if why:
            raise WheelUnreachable(f"{remote} is unreachable from here ({why})")
    args = ["--python-version", python_version]
    for tag in platform_tags:
        args += ["--platform", tag]
    if index_url:
        args += ["--extra-index-url" if extra_index else "--index-url", index_url]
    return _download(requirement, args, dest, logins)


def available_versions(name: str) -> list[str]:
    """Every version of `name` on the package index pip is configured for (pre-releases included).

    `pip index versions` asks the index the user's pip config, PIP_INDEX_URL or a mirror names, so no
    index host is written here.
    """
    cmd = [sys.executable, "-m", "pip", "index", "versions", name, "--pre", "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=tool_environment())
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            # the index's answer: what is not a version (or is thousands of digits long) is no release of ours
            return [v.strip() for v in line.partition(":")[2].split(",") if version_problem(v.strip()) is None]
    # pip says "No matching distribution" also when it reached no index at all: its retry warnings tell which
    said = (proc.stderr or proc.stdout).strip()
    lines = [line for line in said.splitlines() if not line.startswith("WARNING")]
    why = explained(said) or (lines[-1] if lines else "no versions listed")
    raise WheelFetchError(f"pip index versions {name}: {why}")
