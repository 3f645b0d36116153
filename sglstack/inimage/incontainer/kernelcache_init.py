"""The kernel-cache init container of a Kubernetes deployment (standard library only: it runs in the serving
image, as `python3 -c` of this file's text).

`invoke deploy --on k8s --kernel-cache` found the image's kernel-cache artifacts whose key matches the deployment
in everything but the node's GPU (and, with --verify-key, signed for the image by that key), and hands them in
SGLSTACK_KC_CANDIDATES (JSON: artifact, layer digest and size, gpu_name, compute_capability, driver_major).
Here, on the node, `nvidia-smi` says which GPU it is: the candidate with exactly these three is downloaded by
digest from SGLSTACK_KC_BLOBS (the registry's blob URL of the repository), checked against its sha256 and
unpacked into SGLSTACK_KC_DIR (the pod's cache volume). Anything else: one line saying why, an empty volume, and
the server starts cold. It always exits 0: a cache is a speed-up, never a reason not to serve.

A private registry: the credentials are the pod's image pull Secret's (`--image-pull-secret`), its
`.dockerconfigjson` mounted read-only as `config.json` in the folder DOCKER_CONFIG names, read here as the Docker
CLI reads an `auths` entry (base64 `auth`, or `username` and `password`). A registry's 401 is answered as
distribution answers it: `Basic` with them, or `Bearer` with a token its realm gives for them (anonymously
when there are none). They are sent to the registry's own host only (never along a redirect to a blob store)
and never printed.
"""

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

FIELDS = ("gpu_name", "compute_capability", "driver_major")
# As on the host (`kernelcache/layout.py`): no cache is 64 GiB unpacked; a download slower than 256 KiB/s over
# its whole length (after a minute's grace) is given up: a registry that trickles must not hold the pod.
MAX_UNPACKED_BYTES = 64 * 1024**3
SLOWEST_BYTES_PER_S = 256 * 1024


def node_gpu():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ("none", "none", "none")
    lines = [line for line in out.splitlines() if line.strip()]
    parts = [p.strip() for p in lines[0].split(",")] if lines else []
    if len(parts) != 3:
        return ("unknown", "unknown", "unknown")
    return (parts[0], parts[1], parts[2].split(".")[0])


class Refused(Exception):
    """The registry (or its token service) wants credentials this pod does not have, or refused them."""


HUB_NAMES = ("registry-1.docker.io", "index.docker.io", "docker.io")


def config_folder():
    return os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")


def credentials(host):
    """(user, password) of `host` in the Docker config, or None (no config, or no entry for it)."""
    path = os.path.join(config_folder(), "config.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise Refused(f"the Docker config {path} cannot be read ({type(exc).__name__})") from None
    names = HUB_NAMES if host in HUB_NAMES else (host,)
    for key, entry in ((data.get("auths") if isinstance(data, dict) else None) or {}).items():
        name = key.split("://", 1)[-1].split("/", 1)[0]
        if name not in names or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                user, sep, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                sep = ""
            if not sep:
                raise Refused(f"the Docker config {path}: the 'auths' entry of {name} is not base64 user:password")
            return user, password
        if entry.get("username") and "password" in entry:
            return entry["username"], entry["password"]
    return None


def basic(user_password):
    return "Basic " + base64.b64encode(":".join(user_password).encode()).decode()


def request(url, authorization=None):
    req = urllib.request.Request(url)
    if authorization:
        req.add_unredirected_header("Authorization", authorization)  # not to a blob store it redirects to
    return req


def token(challenge, creds, host):
    """A Bearer token from the challenge's realm for its service and scope (with `creds` when there are)."""
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = params.pop("realm", "")
    if not realm:
        raise Refused(f"registry {host} answered 401 with a Bearer challenge naming no realm")
    url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(request(url, basic(creds) if creds else None), timeout=60) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise Refused(refusal(host, creds, f"its token service answered HTTP {exc.code}")) from None
        raise
    return body.get("token") or body.get("access_token") or ""


def refusal(host, creds, what):
    if creds is None:
        return f"registry {host}: {what}, and the Docker config in {config_folder()} has no credentials for it"
    return f"registry {host}: {what} with the credentials of the Docker config in {config_folder()}"


def fetch(url):
    """GET `url`, answering the registry's 401 challenge once: Basic or Bearer, with the pod's credentials."""
    host = urllib.parse.urlsplit(url).netloc
    try:
        return urllib.request.urlopen(request(url), timeout=600)
    except urllib.error.HTTPError as exc:
        challenge = exc.headers.get("WWW-Authenticate", "")
        if exc.code != 401:
            raise
    creds = credentials(host)  # read only when asked for: a public registry needs no Docker config
    scheme = challenge.split(" ", 1)[0].lower()
    if scheme == "basic":
        if creds is None:
            raise Refused(refusal(host, None, "it asks for credentials (HTTP 401)"))
        authorization = basic(creds)
    elif scheme == "bearer":
        authorization = "Bearer " + token(challenge, creds, host)
    else:
        raise Refused(f"registry {host}: HTTP 401 with a challenge neither Basic nor Bearer")
    try:
        return urllib.request.urlopen(request(url, authorization), timeout=600)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise Refused(refusal(host, creds, f"the blob was refused (HTTP {exc.code})")) from None
        raise


def unpack(layer_path, target, max_bytes=MAX_UNPACKED_BYTES):
    count = total = 0
    with tarfile.open(layer_path, mode="r:gz") as tar:
        for member in tar:
            name = member.name
            if name.startswith("/") or ".." in name.split("/") or not (member.isfile() or member.isdir()):
                raise ValueError("a member outside the cache folder or not a file: " + name[:80])
            path = os.path.join(target, name)
            if member.isdir():
                os.makedirs(path, exist_ok=True)
                continue
            total += member.size
            if total > max_bytes:
                raise ValueError(f"more than {max_bytes} bytes unpacked")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            src = tar.extractfile(member)
            if src is None:
                raise ValueError("an unreadable member: " + name[:80])
            with src, open(path, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(path, 0o755 if member.mode & 0o111 else 0o644)
            mtime_ns = packed_mtime_ns(member.pax_headers.get("mtime", ""))
            if mtime_ns is not None:  # ninja (FlashInfer's JIT) rebuilds an output whose time is not its build's
                os.utime(path, ns=(mtime_ns, mtime_ns))
            count += 1
    return count


def packed_mtime_ns(raw):
    """A PAX `mtime` record ("SECONDS.NANOSECONDS") as exact ns, never through a float; None if not one."""
    sec, _, frac = raw.partition(".")
    if not sec.isdigit() or (frac and not frac.isdigit()) or len(frac) > 9:
        return None
    return int(sec) * 1000000000 + int(frac.ljust(9, "0") or 0)


def download(url, cand, path):
    """The layer into `path`, never more than the manifest declared nor slower than SLOWEST_BYTES_PER_S over
    the whole; None when it is whole and hashes to its digest, else what is wrong."""
    size, digest, got = cand["size"], hashlib.sha256(), 0
    deadline = time.monotonic() + 60 + size / SLOWEST_BYTES_PER_S
    with open(path, "wb") as out, fetch(url) as resp:
        while chunk := resp.read(1 << 20):
            got += len(chunk)
            if got > size:
                return f"the layer is larger than the {size} bytes its manifest declares"
            if time.monotonic() > deadline:
                return f"the layer came slower than {SLOWEST_BYTES_PER_S // 1024} KiB/s ({got} of {size} bytes)"
            digest.update(chunk)
            out.write(chunk)
    if got != size or "sha256:" + digest.hexdigest() != cand["layer"]:
        return "the layer does not hash to its digest"
    return None


def empty(target):
    for entry in os.listdir(target):
        path = os.path.join(target, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def main():
    target = os.environ.get("SGLSTACK_KC_DIR", "/cache")
    os.makedirs(target, exist_ok=True)
    empty(target)
    candidates = json.loads(os.environ.get("SGLSTACK_KC_CANDIDATES") or "[]")
    if not candidates:
        return "kernel cache: no artifact of the image matches this deployment; starting cold"
    have = dict(zip(FIELDS, node_gpu(), strict=True))
    for cand in candidates:
        if all(cand[f] == have[f] and have[f] != "unknown" for f in FIELDS):
            break
    else:
        first = candidates[0]
        field = next(f for f in FIELDS if first[f] != have[f] or have[f] == "unknown")
        return (f"kernel cache: key differs in {field}: this node has {have[field]!r}, the artifact "
                f"{first[field]!r}; starting cold")
    with tempfile.NamedTemporaryFile(dir=target, prefix=".layer.", delete=False) as tmp:
        pass
    try:
        problem = download(os.environ["SGLSTACK_KC_BLOBS"] + cand["layer"], cand, tmp.name)
        if problem:
            return f"kernel cache: {problem}; starting cold"
        files = unpack(tmp.name, target)
    finally:
        os.unlink(tmp.name)
    return f"kernel cache: restored {files} files from {cand['artifact'][:19]} (key matched on this node)"


if __name__ == "__main__":
    try:
        line = main()
    except Refused as exc:
        with contextlib.suppress(OSError):
            empty(os.environ.get("SGLSTACK_KC_DIR", "/cache"))
        line = f"kernel cache: not restored ({exc}); starting cold"
    except Exception as exc:  # a cache is a speed-up: whatever went wrong, the server starts cold
        with contextlib.suppress(OSError):
            empty(os.environ.get("SGLSTACK_KC_DIR", "/cache"))
        line = f"kernel cache: not restored ({type(exc).__name__}: {str(exc)[:200]}); starting cold"
    print(line, flush=True)
    sys.exit(0)
