"""`invoke registry.cleanup`: remove old candidate tags, keeping every released manifest."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable

from ..attest.store import remove_attestations
from ..config.schema import Stack
from ..core.clock import parse_utc, utc_now
from ..core.console import console
from ..core.options import BadOption
from ..registry.client import RegistryClient
from .promotion import target_repository
from .tags import candidate_tag_pattern


def _created(config: dict, fallback: dt.datetime) -> dt.datetime:
    """The image's `created` time (UTC); `fallback` (treated as new) when it has none that parses."""
    return parse_utc(config.get("created")) or fallback


def cleanup_candidates(
    stacks: Iterable[Stack],
    *,
    registry: str | None = None,
    older_than_days: float = 7,
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> list[str]:
    """Remove candidate tags older than `older_than_days`; return the removed references.

    A candidate that was released keeps its manifest (and its attestations): only the candidate tag goes.
    One that was not released is deleted with its manifest and its attestation artifacts (its layers go at
    the registry's next garbage collection).
    """
    now = now or utc_now()
    cutoff = now - dt.timedelta(days=older_than_days)
    removed: list[str] = []
    seen: set[str] = set()
    for stack in stacks:
        repo = target_repository(stack, registry)
        if str(repo) in seen:
            continue
        seen.add(str(repo))
        client = RegistryClient.from_environment(repo.registry)
        pattern = candidate_tag_pattern(stack.publish)
        tags = client.list_tags(repo.path)
        candidates = [t for t in tags if pattern.fullmatch(t)]
        if not candidates:
            continue
        released = {client.manifest_digest(repo.path, t) for t in tags if t not in candidates}
        for tag in candidates:
            digest = client.manifest_digest(repo.path, tag)
            if digest is None:
                continue
            if _created(client.image_config(repo.path, digest), now) > cutoff:
                continue
            removed.append(repo.ref(tag))
            if dry_run:
                continue
            if digest in released:
                client.untag(repo.path, tag)
            else:  # its attestations go with it (they name it as their subject: nothing else can use them)
                skipped: list[str] = []
                remove_attestations(client, repo.path, digest, skipped)
                for reason in skipped:
                    console(stderr=True).print(f"warning: {repo.ref(tag)}: left an attestation artifact that is "
                                               f"not one of ours: {reason}", markup=False, highlight=False)
                client.delete_manifest(repo.path, digest)
    return removed


def parse_days(value: float | str | None, *, option: str = "--older-than-days", default: float = 7) -> float:
    """A number of days >= 0 from the command line; anything else is a one-line error naming the option."""
    if value is None or value == "":
        return default
    try:
        days = float(value)
    except (TypeError, ValueError):
        days = math.nan
    if not (days >= 0 and math.isfinite(days)):
        raise BadOption(f"{option} '{value}' is not a number of days (0 or more)")
    return days
