"""Are a distribution's installed files the ones its RECORD names? (stdlib only.) Run by `invoke build` in a
container of the built image with the network off, as `python3 -c` (so it reads any image with a Python, and
changing it rebuilds no image), with the site-packages folder and the dist-info folder names as arguments.

pip writes RECORD from the wheel's own: a shared object, cubin or module keeps the wheel's sha256 there, so a
file whose bytes no longer hash to its RECORD entry (a changed binary, a file copied over it by a later layer)
is named here. Entries without a hash (RECORD itself, the .pyc files pip compiled) have nothing to compare.

Prints one JSON object: {dist_info: {"files": N, "bytes": B, "mismatched": [[path, want, got], ...],
"missing": [path, ...], "error": null or why the RECORD could not be read}} (hashes as lowercase hex).
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import json
import os
import posixpath
import sys
from concurrent.futures import ThreadPoolExecutor

BLOCK = 1 << 22


def record_sha256(field: str) -> str | None:
    """`sha256=<urlsafe base64, unpadded>` -> hex; None for another algorithm or no hash."""
    algorithm, _, value = field.partition("=")
    if algorithm != "sha256" or not value:
        return None
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    except (binascii.Error, ValueError):
        return "unreadable:" + value


def file_sha256(path: str) -> tuple[str, int] | None:
    """(sha256 hex, bytes read) of a file; None when it cannot be read (missing, a folder, a dangling link)."""
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(BLOCK), b""):
                digest.update(block)
                size += len(block)
    except OSError:
        return None
    return digest.hexdigest(), size


def entries(site: str, dist_info: str) -> dict[str, str]:
    """{absolute path: expected sha256 hex} of one RECORD (only entries with a sha256)."""
    out: dict[str, str] = {}
    with open(os.path.join(site, dist_info, "RECORD"), encoding="utf-8", newline="") as fh:
        for row in csv.reader(fh):
            if len(row) < 2 or not row[0]:
                continue
            want = record_sha256(row[1])
            if want is not None:
                out[posixpath.normpath(posixpath.join(site, row[0]))] = want
    return out


def check(site: str, dist_infos: list[str], jobs: int = 2) -> dict:
    report: dict = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # hashlib lets go of the GIL: two files at once
        for dist_info in dist_infos:
            try:
                wanted = entries(site, dist_info)
            except (OSError, UnicodeDecodeError, csv.Error) as exc:
                report[dist_info] = {"files": 0, "bytes": 0, "mismatched": [], "missing": [],
                                     "error": f"{type(exc).__name__}: {exc}"}
                continue
            paths = sorted(wanted)
            got = dict(zip(paths, pool.map(file_sha256, paths), strict=True))
            report[dist_info] = {
                "files": len(paths), "bytes": sum(g[1] for g in got.values() if g), "error": None,
                "missing": [p for p in paths if got[p] is None],
                "mismatched": [[p, wanted[p], g[0]] for p in paths if (g := got[p]) and g[0] != wanted[p]],
            }
    return report


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1], sys.argv[2:]), sort_keys=True))
