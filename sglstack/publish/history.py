"""Publish's own records: `build/publish/records.jsonl`, one JSON line per tag and event.

Events:
- `candidate`: the candidate tag was pushed; `smoke-failed`: its smoke failed, no release tag moved;
- `published`: a release tag points to the tested digest; `rollback`: a moving tag was pointed back at a
  digest published before (both carry `previous`, what the tag pointed to until then);
- `reverted`: a promotion failed and every tag it had moved was put back (`previous` == `now`);
- `partial`: a promotion failed and some tags could not be put back; `now` says where each points.

Every line of one call shares one UTC timestamp. Deploy reads only `published_release` of all this.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.imageref import Repository, is_digest
from ..config.schema import Stack
from ..core.clock import utc_timestamp
from ..core.errors import SglstackError
from ..core.records import append_jsonl, build_root, read_jsonl

RECORDS_NAME = "records.jsonl"
RELEASE_EVENTS = ("published", "rollback")  # the events that say "the moving tags point here now"
FAILED_EVENTS = ("reverted", "partial")


class PublishError(SglstackError):
    """A release step was refused (collision, unknown digest, missing image)."""


def publish_dir(build_dir: Path | None = None) -> Path:
    return (build_dir or build_root()) / "publish"


def records_path(build_dir: Path | None = None) -> Path:
    """The publish records file under the build root (or `build_dir`)."""
    return publish_dir(build_dir) / RECORDS_NAME


def append_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append records as one locked write; lines without a `time` get this call's UTC timestamp."""
    now = utc_timestamp()
    append_jsonl(path, ({"time": now, **row} for row in records))


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of `path`, oldest first; a line that is not a JSON object is a one-line error."""

    def parse(row: Any) -> dict[str, Any]:
        if not isinstance(row, dict):
            raise TypeError("not an object")
        return row

    return read_jsonl(
        path,
        parse=parse,
        bad_line=lambda n: PublishError(f"{path}:{n}: not a JSON record (the records file is append-only)"),
    )


def tag_record(
    event: str,
    stack: Stack,
    repo: Repository,
    tag: str,
    kind: str,
    digest: str,
    config_hash: str | None,
    **extra: Any,
) -> dict[str, Any]:
    """One records line: the fields every event shares (deploy and rollback read them back), plus `extra`."""
    return {
        "event": event,
        "stack": stack.name,
        "repository": str(repo),
        "tag": tag,
        "kind": kind,
        "digest": digest,
        "config_hash": config_hash,
        **extra,
    }


def file_sha256(path: str | Path | None) -> str | None:
    """`sha256:<hex>` of a file, or None when there is no such file."""
    if not path or not Path(path).is_file():
        return None
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _of(records: Iterable[dict[str, Any]], stack: str, repo: str, digest: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("stack") == stack and r.get("repository") == repo and r.get("digest") == digest]


def released_records(
    records: Iterable[dict[str, Any]], stack: Stack, repo: Repository, digest: str
) -> list[dict[str, Any]]:
    """The `published` and `rollback` lines of this digest of this stack in this repository."""
    return [r for r in _of(records, stack.name, str(repo), digest) if r.get("event") in RELEASE_EVENTS]


def unresolved_partial(
    records: Iterable[dict[str, Any]], stack: Stack, repo: Repository, digest: str
) -> dict[str, dict[str, Any]]:
    """tag -> its `partial` line, when the last promotion of `digest` ended partial (empty otherwise)."""
    events = (*RELEASE_EVENTS, *FAILED_EVENTS)
    mine = [r for r in _of(records, stack.name, str(repo), digest) if r.get("event") in events]
    if not mine or mine[-1].get("event") != "partial":
        return {}
    last_time = mine[-1].get("time")
    return {r["tag"]: r for r in mine if r.get("event") == "partial" and r.get("time") == last_time and "tag" in r}


@dataclass(frozen=True)
class PublishedRelease:
    """What a stack's moving tags point to now, by the publish records: the one thing Deploy reads of them."""

    stack: str
    repository: str
    digest: str
    smoke_report: str | None  # path of the smoke report that let this digest through, when recorded
    smoke_report_sha256: str | None  # its sha256 at promotion time, when recorded

    @property
    def ref(self) -> str:
        return f"{self.repository}@{self.digest}"


def published_release(stack_name: str, build_dir: Path | None = None) -> PublishedRelease | None:
    """The stack's current release: the digest of its last `published` or `rollback` event (None: never).

    A failed promotion (`reverted`, `partial`) never counts: its tags were put back, or are being fixed.
    """
    found: PublishedRelease | None = None
    for entry in read_records(records_path(build_dir)):
        if entry.get("stack") != stack_name or entry.get("event") not in RELEASE_EVENTS:
            continue
        digest, repo = entry.get("digest"), entry.get("repository")
        if isinstance(digest, str) and is_digest(digest) and isinstance(repo, str):
            found = PublishedRelease(
                stack=stack_name,
                repository=repo,
                digest=digest,
                smoke_report=entry.get("smoke_report"),
                smoke_report_sha256=entry.get("smoke_report_sha256"),
            )
    return found
