"""The image references (tags and repo digests) tests leave on the shared Docker engine, and their removal.

Every registry and proxy a test session starts listens on a loopback port from `free_port()`, which
claims it for this session: a reference under `127.0.0.1:PORT/` of a claimed port can only be this
session's (a pushed candidate that the smoke pulled, a release tag), so it is removed after each test.
The session's last check lists whatever a test still left: under a claimed port it fails the run;
another new `sglstack-test*` or `127.0.0.1:` reference (perhaps another session's, sharing the engine)
is reported, never removed.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable

CLAIMED_HOSTS: set[str] = set()  # "127.0.0.1:PORT" of this session's registries and proxies
TEST_REFERENCE = re.compile(r"^(127\.0\.0\.1:\d+/|sglstack-test)")
# Kept on purpose between sessions: the double is rebuilt from BuildKit's cache in a second.
KEPT = frozenset({"sglstack-test/sglang-double:latest-test"})


def free_port() -> int:
    """A free loopback port, claimed for this session's registries and proxies."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return claim_port(port)


def claim_port(port: int) -> int:
    """Claim a loopback port this session listens on (`httpserve.ThreadedServer` claims its own)."""
    CLAIMED_HOSTS.add(f"127.0.0.1:{port}")
    return port


def references(client) -> set[str]:
    """Every tag and repo digest the engine holds."""
    out: set[str] = set()
    for image in client.images.list():
        out.update(image.attrs.get("RepoTags") or ())
        out.update(image.attrs.get("RepoDigests") or ())
    return {r for r in out if not r.startswith("<none>")}


def claimed(refs: Iterable[str]) -> list[str]:
    return sorted(r for r in refs if r.split("/", 1)[0] in CLAIMED_HOSTS)


def test_references(refs: Iterable[str]) -> list[str]:
    return sorted(r for r in refs if TEST_REFERENCE.match(r) and r not in KEPT)


def remove_references(client, refs: Iterable[str]) -> list[str]:
    """Untag each reference (the image goes only with its last one); return those that would not go."""
    import docker.errors

    stuck = []
    for ref in refs:
        try:
            client.images.remove(ref, noprune=True)
        except docker.errors.ImageNotFound:
            continue
        except docker.errors.APIError as exc:
            stuck.append(f"{ref} ({exc.explanation or exc})")
    return stuck
