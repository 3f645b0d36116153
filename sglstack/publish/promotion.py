"""Promotion: point the release tags at one tested digest, all of them or none of them.

Promotion copies manifest bytes inside the registry (GET by digest, PUT under each release tag), so no
layer moves and the published digest is, by construction and by a final check, the tested one.

The v2 API has no transaction, so all-or-nothing is made by hand. Before any PUT, promotion reads what
every release tag points to (and keeps those manifests' bytes). Transient failures of one request are
retried by the registry client's bounded policy. If a request still fails, or a signal arrives, every tag
that moved is put back: re-PUT of its old manifest, or, for a tag that did not exist before, removed
again. That includes a newly created immutable tag: it would otherwise name a digest that was never
published, and it is removed rather than overwritten (an immutable tag that existed before is never
touched). Putting back runs with signals held and within one deadline. What happened is handed to
`on_failed` (the caller records `reverted`, or `partial` when the registry refused to be put back) and
said in one line: which tags moved, and whether they were put back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config.imageref import Repository, parse_repository
from ..config.schema import Stack
from ..core.console import console
from ..core.errors import RegistryError, first_line, one_line
from ..core.records import require_store_writable
from ..core.safefiles import OutputNotWritable
from ..core.signals import Interrupted, deferred
from ..registry.client import Manifest, RegistryClient
from .history import PublishError, append_records, file_sha256, tag_record
from .tags import immutable_tag_pattern


class ImmutableTagCollision(PublishError):
    """The immutable tag already points to a different digest: it is never overwritten."""


@dataclass(frozen=True)
class TagState:
    """One release tag across a failed promotion."""

    tag: str
    kind: str  # "immutable" or "moving"
    before: str | None  # digest it pointed to before the promotion (None: no such tag)
    now: str | None  # digest it points to after putting back (None: no such tag)
    moved: bool  # the promotion had changed it (or may have: its request got no answer)
    known: bool = True  # `now` was read back from the registry; False: it did not answer
    error: str | None = None  # why it could not be put back

    @property
    def put_back(self) -> bool:
        return self.known and self.now == self.before


class PromotionError(PublishError):
    """A promotion failed; `states` says, per release tag, where it pointed before and points now."""

    def __init__(self, message: str, *, digest: str, cause: str, states: Sequence[TagState]) -> None:
        super().__init__(message)
        self.digest, self.cause, self.states = digest, cause, tuple(states)

    @property
    def reverted(self) -> bool:
        """Every release tag points where it pointed before: nothing was left half-moved."""
        return all(s.put_back for s in self.states)

    @property
    def moved(self) -> tuple[str, ...]:
        return tuple(s.tag for s in self.states if s.moved)


def target_repository(stack: Stack, registry: str | None) -> Repository:
    """`--registry` overrides the stack's repository: a full repository, or a host keeping the path."""
    default = parse_repository(stack.publish.repository, stack=stack.name, key="publish.repository")
    if not registry:
        return default
    if "/" in registry:
        return parse_repository(registry, stack=stack.name, key="--registry")
    return parse_repository(f"{registry}/{default.path}", stack=stack.name, key="--registry")


def check_immutable(client: RegistryClient, repo: Repository, tag: str, digest: str) -> str | None:
    """The digest the immutable tag has now (None: free); refuse when it is another one."""
    existing = client.manifest_digest(repo.path, tag)
    if existing is not None and existing != digest:
        raise ImmutableTagCollision(
            f"registry {repo.registry}: immutable tag {repo.ref(tag)} already points to "
            f"{existing}, not {digest}; immutable tags are never overwritten"
        )
    return existing


def already_published(
    client: RegistryClient, repo: Repository, stack: Stack, config_hash: str
) -> tuple[str, str] | None:
    """(tag, digest) of an immutable tag of this config on any date, if the registry has one."""
    pattern = immutable_tag_pattern(stack, config_hash)
    for tag in sorted(client.list_tags(repo.path)):
        if pattern.fullmatch(tag):
            digest = client.manifest_digest(repo.path, tag)
            if digest:
                return tag, digest
    return None


def _check_complete(client: RegistryClient, repo: Repository, manifest: Manifest) -> None:
    """An index is promoted only when every manifest it lists is in the repository."""
    for child in manifest.children():
        if client.manifest_digest(repo.path, child) is None:
            raise PublishError(
                f"registry {repo.registry}: index {repo.ref(manifest.digest)} lists {child}, "
                "which the repository does not have"
            )


def _cause(exc: BaseException, registry: str) -> str:
    if isinstance(exc, Interrupted):
        return f"interrupted by {exc.name}"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    text = first_line(str(exc)) if str(exc) else type(exc).__name__
    return text.removeprefix(f"registry {registry}: ")


def _short(digest: str | None) -> str:
    return digest[:19] if digest else "absent"


def describe_failure(repo: Repository, digest: str, failed_at: str | None, cause: str, states: Sequence[TagState],
                     *, stack: str | None = None) -> str:
    """The one line a failed promotion ends with: what failed, which tags moved, whether they went back."""
    head = f"stack '{stack}': " if stack else ""
    at = f" at {repo.ref(failed_at)}" if failed_at else ""
    line = f"{head}registry {repo.registry}: promotion of {repo.ref(digest)} failed{at}: {cause}"
    moved = [s for s in states if s.moved]
    if not moved:
        return f"{line}; no tag had moved, every release tag is unchanged (recorded as reverted)"
    stuck = [s for s in moved if not s.put_back]
    if not stuck:
        return (
            f"{line}; {', '.join(s.tag for s in moved)} had moved and were put back "
            "(removed again where they were new): every release tag is unchanged (recorded as reverted)"
        )
    where = "; ".join(
        f"{s.tag} -> {_short(s.now) if s.known else 'unknown'} (was {_short(s.before)})" for s in stuck
    )
    hint = f" `invoke publish --stack {stack} --digest {digest}` finishes it" if stack else ""
    return (
        f"{line}; moved {', '.join(s.tag for s in moved)}; NOT put back: {where}; "
        f"the release tags disagree (recorded as partial);{hint}".rstrip(";")
    )


def _put_back(
    client: RegistryClient,
    repo: Repository,
    digest: str,
    order: Sequence[str],
    kinds: dict[str, str],
    before: dict[str, str | None],
    touched: Sequence[str],
    manifests: dict[str, Manifest],
) -> list[TagState]:
    """Point every touched tag back where it was (newest move first); read back every release tag."""
    states: dict[str, TagState] = {}
    with client.budget(client.timeout_s):  # all of the putting back, not each request: a signal waits on it
        for tag in reversed(touched):
            want, moved, error = before[tag], True, None
            try:
                now = client.manifest_digest(repo.path, tag)
                moved = now != want
                if moved and now is not None and now != digest:
                    # Someone else moved it meanwhile: theirs, not ours to put back.
                    states[tag] = TagState(tag, kinds[tag], want, now, moved=True, error="moved by another writer")
                    continue
                if moved:
                    if want is None:
                        client.untag(repo.path, tag)
                    else:
                        old = manifests[want]
                        client.put_manifest(repo.path, tag, old.body, old.media_type)
            except RegistryError as exc:
                error = _cause(exc, repo.registry)
            try:  # read back where it points now, also (especially) when putting back failed
                states[tag] = TagState(tag, kinds[tag], want, client.manifest_digest(repo.path, tag), moved=moved,
                                       error=error)
            except RegistryError as exc:
                states[tag] = TagState(tag, kinds[tag], want, None, moved=moved, known=False,
                                       error=error or _cause(exc, repo.registry))
    return [states.get(tag) or TagState(tag, kinds[tag], before[tag], before[tag], moved=False) for tag in order]


def promote(client: RegistryClient, repo: Repository, digest: str, *, immutable: str | None, moving: Sequence[str],
            on_promoted: Callable[[dict[str, str | None]], None] | None = None,
            on_failed: Callable[[PromotionError], None] | None = None, stack: str | None = None,
            ) -> dict[str, str | None]:
    """Point the release tags at `digest`, all or none; return tag -> the digest it had before.

    `on_promoted(previous)` runs once every tag points to `digest` (signals held: a signal then ends the
    task after it, with the promotion complete). After any failure, or a signal, the tags are put back and
    `on_failed(error)` runs; a `PromotionError` is raised (a signal is re-raised after saying what moved).
    Only manifest bytes travel: the layers are already in the repository under the candidate.
    """
    manifest = client.get_manifest(repo.path, digest)  # verifies the bytes hash to `digest`
    _check_complete(client, repo, manifest)
    order = [*([immutable] if immutable else []), *(t for t in moving if t != immutable)]
    kinds = {tag: "immutable" if tag == immutable else "moving" for tag in order}
    before: dict[str, str | None] = {tag: check_immutable(client, repo, tag, digest) if tag == immutable
                                     else client.manifest_digest(repo.path, tag) for tag in order}
    # The manifests to put back, read before anything moves: putting back then needs only PUTs.
    manifests = {d: client.get_manifest(repo.path, d) for d in dict.fromkeys(before.values()) if d and d != digest}

    touched: list[str] = []
    failed_at: str | None = None
    recorded = False
    try:
        for tag in order:
            if before[tag] == digest:
                continue  # already there (an immutable tag is never re-written)
            touched.append(tag)
            failed_at = tag
            client.put_manifest(repo.path, tag, manifest.body, manifest.media_type)
        for tag in order:
            failed_at = tag
            now = client.manifest_digest(repo.path, tag)
            if now != digest:
                raise RegistryError(
                    f"registry {repo.registry}: {repo.ref(tag)} resolves to {now} after promotion, "
                    f"not the tested {digest}"
                )
        with deferred():
            if on_promoted is not None:
                on_promoted(before)
            recorded = True
    except BaseException as exc:
        if recorded:
            raise  # a signal held during the recording: the promotion is complete and recorded
        cause = _cause(exc, repo.registry)
        with deferred():
            states = _put_back(client, repo, digest, order, kinds, before, touched, manifests)
            error = PromotionError(describe_failure(repo, digest, failed_at, cause, states, stack=stack),
                                   digest=digest, cause=cause, states=states)
            if on_failed is not None:
                on_failed(error)
            if not isinstance(exc, Exception):
                console(stderr=True).print(one_line(str(error)), markup=False, highlight=False)
        if isinstance(exc, Exception):
            raise error from None
        raise
    return before


def promote_recorded(
    client: RegistryClient,
    repo: Repository,
    stack: Stack,
    digest: str,
    *,
    config_hash: str | None,
    immutable: str | None,
    moving: Sequence[str],
    event: str,
    records: Path,
    smoke_report: str | None = None,
    previous_hint: Mapping[str, str | None] | None = None,
) -> dict[str, str | None]:
    """`promote`, with its outcome in the records: `event` lines on success, `reverted`/`partial` lines
    on failure, one line per release tag either way.

    `previous_hint` (tag -> digest) says what a tag pointed to before an earlier, partial promotion of the
    same digest moved it: finishing that promotion then records the real previous digest, not this one.
    """
    hint = dict(previous_hint or {})
    report_sha = file_sha256(smoke_report)
    # Before any tag moves: a promotion its records would not name is not started. (Should the disk fill
    # meanwhile, `promote` puts the tags back when the record is not written: records and tags agree.)
    require_store_writable(records, what=f"stack '{stack.name}': the publish records")

    def kind(tag: str) -> str:
        return "immutable" if tag == immutable else "moving"

    def promoted(before: dict[str, str | None]) -> None:
        rows = []
        for tag, prev in before.items():
            if prev == digest and tag in hint:
                prev = hint[tag]
            rows.append(
                tag_record(event, stack, repo, tag, kind(tag), digest, config_hash, previous=prev,
                           smoke_report=smoke_report, smoke_report_sha256=report_sha)
            )
        append_records(records, rows)

    def failed(error: PromotionError) -> None:
        outcome = "reverted" if error.reverted else "partial"
        rows = [tag_record(outcome, stack, repo, s.tag, s.kind, digest, config_hash, previous=s.before,
                           now=s.now if s.known else None, now_known=s.known, moved=s.moved, put_back=s.put_back,
                           error=s.error, cause=error.cause, smoke_report=smoke_report)
                for s in error.states]
        try:
            append_records(records, rows)
        except OutputNotWritable as exc:  # the error that follows says what happened to the tags
            console(stderr=True).print(f"warning: {exc}: this outcome is not recorded", markup=False,
                                       highlight=False)

    return promote(client, repo, digest, immutable=immutable, moving=moving, on_promoted=promoted,
                   on_failed=failed, stack=stack.name)
