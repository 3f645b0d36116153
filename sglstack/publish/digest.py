"""`invoke publish --digest`: promote a digest smoke-tested elsewhere, or roll the moving tags back to one.

A digest this records file has published before is a rollback: it keeps its immutable tag and gets back
the moving tags it had then. Any other digest is published: it gets today's (UTC) tags of its config.
Either way the tags move all together or not at all (`promotion.promote`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console

from ..attest.errors import AttestationError, BadInput
from ..attest.provenance import BuildIdentity
from ..attest.release import ensure_signed
from ..attest.signing import KEY_ENV
from ..config.imageref import Repository, is_digest, parse_image_reference
from ..config.schema import Stack
from ..core.clock import utc_today
from ..core.console import console
from ..core.errors import ConfigError
from ..core.labels import CONFIG_HASH_LABEL
from ..registry.client import ManifestNotFound, RegistryClient
from .history import (
    PublishError,
    append_records,
    read_records,
    records_path,
    released_records,
    tag_record,
    unresolved_partial,
)
from .platforms import checked_platforms
from .promotion import already_published, promote_recorded, target_repository
from .tags import release_tags


def _config_hash_of(
    client: RegistryClient, repo: Repository, digest: str, records: list[dict[str, Any]]
) -> str | None:
    for rec in reversed(records):
        if rec.get("digest") == digest and rec.get("repository") == str(repo) and rec.get("config_hash"):
            return rec["config_hash"]
    manifest = client.get_manifest(repo.path, digest)
    if manifest.is_index:
        return _index_config_hash(client, repo, [str(m.get("digest")) for m in manifest.json().get("manifests", [])
                                                 if (m.get("platform") or {}).get("os") not in (None, "unknown")])
    return _label_config_hash(client, repo, digest)


def _label_config_hash(client: RegistryClient, repo: Repository, digest: str) -> str | None:
    labels = (client.image_config(repo.path, digest).get("config") or {}).get("Labels") or {}
    value = labels.get(CONFIG_HASH_LABEL)
    return value if isinstance(value, str) and value else None


def _index_config_hash(client: RegistryClient, repo: Repository, children: list[str]) -> str | None:
    """An index's config hash: one over every platform's (each child's label), None when one has none. The first
    child's alone named the release, so an index whose arm64 image alone was rebuilt got the same immutable tag
    as the last one (refused that day as a move of an immutable tag; a day later, a second tag of 'that config')."""
    hashes = [_label_config_hash(client, repo, child) for child in children]
    if not hashes or any(h is None for h in hashes):
        return None
    return hashlib.sha256("\n".join(sorted(h for h in hashes if h)).encode()).hexdigest()


def _bare_digest(given: str, repo: Repository) -> str:
    """`--digest` means one thing in publish and deploy (docs/options.md): sha256:... or REPO@sha256:... .
    A reference is taken when it names the repository publish promotes in; another one is refused."""
    _, at, digest = given.partition("@")
    if not at or not is_digest(digest):
        return given  # `_check_input` refuses what is not a digest
    try:
        named = parse_image_reference(given, key="--digest").repository
    except ConfigError:
        return given
    if named != repo:
        raise BadInput(f"--digest '{given}': names {named}, but publish promotes in {repo} (give sha256:... or "
                       f"{repo}@sha256:...)")
    return digest


def _check_input(digest: str, smoke_report: str | None) -> None:
    """Bad input (exit 2), refused before the registry is asked anything (four attempts when it is down)."""
    if not is_digest(digest):
        raise BadInput(f"--digest '{digest}' is not a digest (sha256:<64 hex>)")
    if smoke_report is not None and not Path(smoke_report).is_file():
        raise BadInput(f"--smoke-report {smoke_report}: not a file (the smoke report that passed this digest)")


def publish_digest(stack: Stack, digest: str, *, key: Ed25519PrivateKey | None = None, unsigned: bool = False,
                   registry: str | None = None, config_hash: str | None = None, force: bool = False,
                   smoke_report: str | None = None, build_dir: Path | None = None,
                   today: dt.date | None = None) -> int:
    """Promote `digest` (smoke-tested elsewhere) or roll back to it; 0 when the tags point to it.

    Signed with `key` (made to verify before any tag moves) or explicitly `unsigned`. `today` (UTC by
    default) dates a new immutable tag. A promotion left `partial` before is finished, recording what the
    tags pointed to before that first attempt.
    """
    signed_or_unsigned(stack.name, key is not None, unsigned)
    digest = _bare_digest(digest, target_repository(stack, registry))
    _check_input(digest, smoke_report)
    path = records_path(build_dir)
    records = read_records(path)
    day = today or utc_today()
    out = console()
    repo = target_repository(stack, registry)
    client = RegistryClient.from_environment(repo.registry)
    try:
        client.get_manifest(repo.path, digest)
    except ManifestNotFound:
        raise PublishError(f"registry {repo.registry}: {repo}@{digest} does not exist") from None
    _require_every_platform(client, repo, stack, digest)
    mine = released_records(records, stack, repo, digest)
    partial = unresolved_partial(records, stack, repo, digest)
    immutable = next((r["tag"] for r in reversed(mine) if r.get("kind") == "immutable"), None)
    moving = tuple(dict.fromkeys(r["tag"] for r in mine if r.get("kind") == "moving"))
    config_hash = config_hash or _config_hash_of(client, repo, digest, records)
    if mine:
        event = "rollback"
        if not moving and config_hash:
            moving = release_tags(stack, config_hash, day).moving
    else:
        event = "published"
        if not config_hash:
            raise PublishError(f"stack '{stack.name}': cannot tell the config hash of {digest} (no publish "
                               f"record, no {CONFIG_HASH_LABEL} label): pass --config-hash")
        tags = release_tags(stack, config_hash, day)
        found = already_published(client, repo, stack, config_hash)
        # This config's immutable tag on an earlier date (published from elsewhere, or left by a partial
        # promotion) is its immutable tag: a config gets one, whatever the date.
        immutable = found[0] if found and found[1] == digest else tags.immutable
        moving = tags.moving
    if not moving:
        raise PublishError(f"stack '{stack.name}': no moving tags known for {digest}: pass --config-hash")
    if key is not None:
        _sign(out, client, repo, stack, digest, key, config_hash, immutable or moving[0], path)
    if event == "rollback" and not force and not partial:
        current = {t: client.manifest_digest(repo.path, t) for t in moving}
        if all(d == digest for d in current.values()):
            out.print(f"{stack.name}: {repo}@{digest} is already published as "
                      + ", ".join(repo.ref(t) for t in (immutable, *moving) if t) + "; nothing to do (--force to redo)")
            return 0
    previous = promote_recorded(client, repo, stack, digest, config_hash=config_hash, immutable=immutable,
                                moving=moving, event=event, records=path, smoke_report=smoke_report,
                                previous_hint={tag: rec.get("previous") for tag, rec in partial.items()})
    verb = "rolled back" if event == "rollback" else "published"
    out.print(f"{stack.name}: {verb}: " + ", ".join(f"{repo.ref(t)} -> {digest}" for t in previous))
    return 0


def _require_every_platform(client: RegistryClient, repo: Repository, stack: Stack, digest: str) -> None:
    """A stack of several platforms is released as the index of all of them: one platform's image under its tags
    would send the other platform's nodes an image they cannot run (and the two builds would overwrite each
    other's tags)."""
    if len(stack.platforms) < 2:
        return
    serves = checked_platforms(client, repo.path, digest)  # each child read: there, and the platform it is listed for
    if missing := [p for p in stack.platforms if p not in serves]:
        raise BadInput(f"stack '{stack.name}' is released for {' '.join(stack.platforms)}: {repo}@{digest} serves "
                       f"{' '.join(serves) or 'no platform'}, not {' '.join(missing)}; promote the index of every "
                       "platform (invoke publish-index)")


def signed_or_unsigned(stack: str, has_key: bool, unsigned: bool, *, index: bool = False) -> None:
    """A release (or an index: `publish-index`) is signed or says it is not: one of the two, before a key is read
    or the registry asked."""
    if has_key and unsigned:
        raise BadInput(f"stack '{stack}': give --signing-key or --unsigned, not both")
    if not has_key and not unsigned and index:
        raise BadInput(f"stack '{stack}': publish-index needs --signing-key (or {KEY_ENV}) to sign the index and "
                       f"each platform's image, or --unsigned to write it without a signature")
    if not has_key and not unsigned:
        raise BadInput(f"stack '{stack}': publish needs --signing-key (or {KEY_ENV}) to sign the release, or "
                       f"--unsigned to promote it without a signature")


def _sign(out: Console, client: RegistryClient, repo: Repository, stack: Stack, digest: str, key: Ed25519PrivateKey,
          config_hash: str | None, tag: str, records: Path) -> None:
    """Make `digest` verify against `key` as this stack's build (and config), before any tag moves; recorded."""
    try:
        summary = ensure_signed(client, repo, digest, key, BuildIdentity(stack.name, config_hash))
    except AttestationError as exc:
        raise PublishError(f"stack '{stack.name}': {exc}; no tag moved") from None
    append_records(records, [tag_record("attested", stack, repo, tag, "release", digest, config_hash,
                                        summary=summary)])
    out.print(f"{stack.name}: {summary}", markup=False, highlight=False)
