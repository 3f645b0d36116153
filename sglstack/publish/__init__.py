"""Publish: candidate -> smoke -> promote, promotion alone and rollback, cleanup; Publish owns its records.

- `release` (`invoke build --push`): push a candidate, smoke-test that digest, promote exactly it;
- `publish_digest` (`invoke publish --digest`): promote a digest tested elsewhere, or roll back to one;
- `cleanup_candidates` (`invoke registry.cleanup`): remove old candidate tags;
- `published_release`: what a stack's moving tags point to now, the one thing Deploy reads.

Promotion moves every release tag or none (`promotion`); `history` is the records file.
"""

from __future__ import annotations

from .cleanup import cleanup_candidates
from .digest import publish_digest
from .history import (
    PublishedRelease,
    PublishError,
    append_records,
    published_release,
    read_records,
    records_path,
)
from .platforms import check_node_platform, engine_platform, reference_platforms
from .promotion import (
    ImmutableTagCollision,
    PromotionError,
    TagState,
    already_published,
    check_immutable,
    promote,
    target_repository,
)
from .release import ReleaseResult, parse_smoke_opts, push_candidate, release, release_smoke_options

__all__ = [
    "ImmutableTagCollision",
    "PromotionError",
    "PublishError",
    "PublishedRelease",
    "ReleaseResult",
    "TagState",
    "already_published",
    "append_records",
    "check_immutable",
    "check_node_platform",
    "cleanup_candidates",
    "engine_platform",
    "parse_smoke_opts",
    "promote",
    "publish_digest",
    "published_release",
    "push_candidate",
    "read_records",
    "records_path",
    "reference_platforms",
    "release",
    "release_smoke_options",
    "target_repository",
]
