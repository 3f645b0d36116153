"""The kernel-cache init container of a Kubernetes deployment (standard library only: it runs in the serving
image, as `python3 -c` of this file's text).

`invoke deploy --on k8s --kernel-cache` found the image's kernel-cache artifacts whose key matches the deployment
in everything but the node's GPU (and, with --verify-key, signed for the image by that key), and hands them in
SGLSTACK_KC_CANDIDATES (JSON: artifact, layer digest and size, gpu_name, compute_capability, driver_major).
Here, on the node, `nvidia-smi` says which GPU it is: the candidate with exactly these three is downloaded by
digest from SGLSTACK_KC_BLOBS (the registry's blob URL of the repository, read anonymously), checked against
its sha256 and unpacked into SGLSTACK_KC_DIR (the pod's cache volume). Anything else: one line saying why, an
empty volume, and the server starts cold. It always exits 0: a cache is a speed-up, never a reason not to serve.
"""

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request

FIELDS = ("gpu_name", "compute_capability", "driver_major")


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


def fetch(url):
    """GET `url`, answering an anonymous Bearer challenge once (a public repository's pull token)."""
    try:
        return urllib.request.urlopen(url, timeout=600)
    except urllib.error.HTTPError as exc:
        challenge = exc.headers.get("WWW-Authenticate", "")
        if exc.code != 401 or not challenge.lower().startswith("bearer "):
            raise
    params = dict(part.split("=", 1) for part in challenge[7:].replace('"', "").split(","))
    realm = params.pop("realm")
    with urllib.request.urlopen(realm + "?" + urllib.parse.urlencode(params), timeout=60) as resp:
        token = json.loads(resp.read()).get("token") or ""
    return urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Bearer " + token}),
                                  timeout=600)


def unpack(layer_path, target):
    count = 0
    with tarfile.open(layer_path, mode="r:gz") as tar:
        for member in tar:
            name = member.name
            if name.startswith("/") or ".." in name.split("/") or not (member.isfile() or member.isdir()):
                raise ValueError("a member outside the cache folder or not a file: " + name[:80])
            path = os.path.join(target, name)
            if member.isdir():
                os.makedirs(path, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            src = tar.extractfile(member)
            if src is None:
                raise ValueError("an unreadable member: " + name[:80])
            with src, open(path, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(path, 0o755 if member.mode & 0o111 else 0o644)
            count += 1
    return count


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
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target, prefix=".layer.", delete=False) as tmp, \
            fetch(os.environ["SGLSTACK_KC_BLOBS"] + cand["layer"]) as resp:
        while chunk := resp.read(1 << 20):
            digest.update(chunk)
            tmp.write(chunk)
    try:
        if "sha256:" + digest.hexdigest() != cand["layer"] or os.path.getsize(tmp.name) != cand["size"]:
            return "kernel cache: the layer does not hash to its digest; starting cold"
        files = unpack(tmp.name, target)
    finally:
        os.unlink(tmp.name)
    return f"kernel cache: restored {files} files from {cand['artifact'][:19]} (key matched on this node)"


if __name__ == "__main__":
    try:
        line = main()
    except Exception as exc:  # a cache is a speed-up: whatever went wrong, the server starts cold
        with contextlib.suppress(OSError):
            empty(os.environ.get("SGLSTACK_KC_DIR", "/cache"))
        line = f"kernel cache: not restored ({type(exc).__name__}: {str(exc)[:200]}); starting cold"
    print(line, flush=True)
    sys.exit(0)
