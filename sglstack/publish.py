"""The release: push a candidate, smoke-test that digest, promote exactly the tested manifest.

Promotion copies manifest bytes inside the registry (GET by digest, PUT under each release tag), so no
layer moves and the published digest is, by construction and by a final check, the tested one. Every
tag move is appended to `build/publish/records.jsonl`: what each tag pointed to, when, and the smoke
report that let it through. A rollback re-points the moving tags at an older digest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import RegistryError, SglstackError
from .matrix import Stack, load_matrix
from .records import append_jsonl, build_root, read_jsonl
from .registry import Manifest, ManifestNotFound, RegistryClient, resolve_credentials
from .tags import (
    ReleaseTags,
    Repository,
    candidate_tag_pattern,
    immutable_tag_pattern,
    is_digest,
    parse_repository,
    release_tags,
)
from .ui import console

CONFIG_HASH_LABEL = "io.sglstack.config-hash"
RECORDS_NAME = "records.jsonl"

# (stack, image reference by digest, smoke options) -> (passed, report as a dict)
SmokeRunner = Callable[[Stack, str, Sequence[str]], tuple[bool, dict[str, Any]]]


class PublishError(SglstackError):
    """A release step was refused (collision, unknown digest, missing image)."""


class ImmutableTagCollision(PublishError):
    """The immutable tag already points to a different digest: it is never overwritten."""


# ---- records ---------------------------------------------------------------------------------------


def publish_dir(build_dir: Path | None = None) -> Path:
    return (build_dir or build_root()) / "publish"


def records_path(build_dir: Path | None = None) -> Path:
    return publish_dir(build_dir) / RECORDS_NAME


def append_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append JSON lines under an exclusive lock: concurrent releases never interleave lines."""
    append_jsonl(path, records)


def read_records(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(
        path,
        parse=lambda row: row,
        bad_line=lambda n: PublishError(f"{path}:{n}: not a JSON line (the records file is append-only)"),
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    """The stack's current release: the digest of its last `published` or `rollback` event (None: never)."""
    found: PublishedRelease | None = None
    for entry in read_records(records_path(build_dir)):
        if entry.get("stack") != stack_name or entry.get("event") not in ("published", "rollback"):
            continue
        digest, repo = entry.get("digest"), entry.get("repository")
        if isinstance(digest, str) and is_digest(digest) and isinstance(repo, str):
            found = PublishedRelease(stack=stack_name, repository=repo, digest=digest,
                                     smoke_report=entry.get("smoke_report"),
                                     smoke_report_sha256=entry.get("smoke_report_sha256"))
    return found


def file_sha256(path: str | Path | None) -> str | None:
    """`sha256:<hex>` of a file, or None when there is no such file."""
    if not path or not Path(path).is_file():
        return None
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---- smoke -----------------------------------------------------------------------------------------


def parse_smoke_opts(opts: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings -> keyword overrides; `env=K=V` accumulates a dict, repeated keys a list."""
    out: dict[str, Any] = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise PublishError(f"smoke option '{opt}' is not KEY=VALUE")
        if key == "env":
            name, sep, val = value.partition("=")
            if not sep or not name:
                raise PublishError(f"smoke option '{opt}' must be env=NAME=VALUE")
            out.setdefault("env", {})[name] = val
        elif key in out:
            prev = out[key]
            out[key] = [*prev, value] if isinstance(prev, list) else [prev, value]
        else:
            out[key] = value
    return out


def run_real_smoke(
    stack: Stack, image: str, smoke_opts: Sequence[str], *, docker_host: str | None = None
) -> tuple[bool, dict[str, Any]]:
    """The production smoke (`sglstack.smoke`) on the image by digest, on `docker_host` unless overridden."""
    from .smoke import run_smoke, smoke_options

    overrides = parse_smoke_opts(smoke_opts)
    if docker_host and "docker_host" not in overrides:
        overrides["docker_host"] = docker_host
    report = run_smoke(stack, image, smoke_options(stack, **overrides))
    return bool(report.passed), report.to_dict()


# ---- registry plumbing -----------------------------------------------------------------------------


def target_repository(stack: Stack, registry: str | None) -> Repository:
    """`--registry` overrides the stack's repository: a full repository, or a host keeping the path."""
    default = parse_repository(stack.publish.repository, stack=stack.name, key="publish.repository")
    if not registry:
        return default
    if "/" in registry:
        return parse_repository(registry, stack=stack.name, key="--registry")
    return Repository(registry=registry, path=default.path)


def registry_client(repo: Repository) -> RegistryClient:
    return RegistryClient(repo.registry, credentials=resolve_credentials(repo.registry))


def push_candidate(engine: Any, image_ref: str, repo: Repository, tag: str, client: RegistryClient) -> str:
    """Tag the local image as repo:tag, push it with the Docker engine, return the pushed digest."""
    import docker.errors

    try:
        image = engine.images.get(image_ref)
    except docker.errors.ImageNotFound:
        raise PublishError(f"local image '{image_ref}' not found: build it first") from None
    image.tag(str(repo), tag)
    auth = client.credentials.docker_auth_config(repo.registry) if client.credentials else None
    pushed = None
    try:
        for chunk in engine.api.push(str(repo), tag=tag, stream=True, decode=True, auth_config=auth):
            if "error" in chunk:
                detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                raise RegistryError(
                    f"registry {repo.registry}: push of {repo.ref(tag)} failed: {str(detail).splitlines()[0][:300]}"
                )
            pushed = (chunk.get("aux") or {}).get("Digest") or pushed
    except docker.errors.APIError as exc:
        raise RegistryError(
            f"registry {repo.registry}: push of {repo.ref(tag)} failed: {exc.explanation or exc}"
        ) from None
    finally:
        with contextlib.suppress(docker.errors.APIError):
            engine.images.remove(repo.ref(tag), noprune=True)
    digest = client.manifest_digest(repo.path, tag)
    if digest is None:
        raise RegistryError(f"registry {repo.registry}: {repo.ref(tag)} missing right after the push")
    if pushed and pushed != digest:
        raise RegistryError(f"registry {repo.registry}: {repo.ref(tag)} is {digest}, the push reported {pushed}")
    return digest


def _check_complete(client: RegistryClient, repo: Repository, manifest: Manifest) -> None:
    """An index is promoted only when every manifest it lists is in the repository."""
    for child in manifest.children():
        if client.manifest_digest(repo.path, child) is None:
            raise PublishError(
                f"registry {repo.registry}: index {repo.ref(manifest.digest)} lists {child}, "
                "which the repository does not have"
            )


def check_immutable(client: RegistryClient, repo: Repository, tag: str, digest: str) -> str | None:
    """The digest the immutable tag has now (None: free); refuse when it is another one."""
    existing = client.manifest_digest(repo.path, tag)
    if existing is not None and existing != digest:
        raise ImmutableTagCollision(
            f"registry {repo.registry}: immutable tag {repo.ref(tag)} already points to "
            f"{existing}, not {digest}; immutable tags are never overwritten"
        )
    return existing


def promote(
    client: RegistryClient, repo: Repository, digest: str, *, immutable: str | None, moving: Sequence[str]
) -> dict[str, str | None]:
    """Point the release tags at `digest` by copying its manifest bytes; return tag -> previous digest.

    Only manifest bytes travel: the layers are already in the repository under the candidate.
    """
    manifest = client.get_manifest(repo.path, digest)  # verifies the bytes hash to `digest`
    _check_complete(client, repo, manifest)
    previous: dict[str, str | None] = {}
    if immutable:
        previous[immutable] = check_immutable(client, repo, immutable, digest)
        if previous[immutable] is None:
            client.put_manifest(repo.path, immutable, manifest.body, manifest.media_type)
    for tag in moving:
        previous[tag] = client.manifest_digest(repo.path, tag)
        client.put_manifest(repo.path, tag, manifest.body, manifest.media_type)
    for tag in previous:
        now = client.manifest_digest(repo.path, tag)
        if now != digest:
            raise RegistryError(
                f"registry {repo.registry}: {repo.ref(tag)} resolves to {now} after promotion, not the tested {digest}"
            )
    return previous


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


def _tag_record(
    event: str,
    stack: Stack,
    repo: Repository,
    tag: str,
    kind: str,
    digest: str,
    config_hash: str | None,
    *,
    time: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One records line: the fields every event shares (deploy and rollback read them back), plus `extra`."""
    return {
        "time": time or _now(),
        "event": event,
        "stack": stack.name,
        "repository": str(repo),
        "tag": tag,
        "kind": kind,
        "digest": digest,
        "config_hash": config_hash,
        **extra,
    }


def _tag_records(
    stack: Stack,
    repo: Repository,
    digest: str,
    config_hash: str | None,
    previous: dict[str, str | None],
    immutable: str | None,
    *,
    event: str,
    smoke_report: str | None,
) -> list[dict[str, Any]]:
    now = _now()  # one promotion, one timestamp on all of its tag moves
    return [
        _tag_record(
            event,
            stack,
            repo,
            tag,
            "immutable" if tag == immutable else "moving",
            digest,
            config_hash,
            time=now,
            previous=prev,
            smoke_report=smoke_report,
            smoke_report_sha256=file_sha256(smoke_report),
        )
        for tag, prev in previous.items()
    ]


# ---- the release -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseResult:
    digest: str | None
    tags: ReleaseTags
    published: bool
    smoke_report: Path | None


def release(stack: Stack, **options: Any) -> int:
    """`release_image` (same keyword options) as an exit code: 0 published or already published, 1 smoke
    failed (no release tag moved, the candidate stays)."""
    # Options pass through untouched so that the one signature, release_image's, is the only one to keep.
    result = release_image(stack, **options)
    return 0 if result.published or result.digest is None else 1


def release_image(
    stack: Stack,
    *,
    image_ref: str,
    config_hash: str,
    registry: str | None = None,
    docker_host: str | None = None,
    smoke_opts: Sequence[str] = (),
    force: bool = False,
    build_dir: Path | None = None,
    today: dt.date | None = None,
    smoke: SmokeRunner | None = None,
) -> ReleaseResult:
    """Push `image_ref` as a candidate, smoke it by digest, promote on pass."""
    from .dockerhost import docker_client

    out = console()
    tags = release_tags(stack, config_hash, today or dt.datetime.now(dt.UTC).date())
    repo = target_repository(stack, registry)
    client = registry_client(repo)
    client.ping()
    if not force:
        found = already_published(client, repo, stack, config_hash)
        if found:
            out.print(
                f"{stack.name}: config {config_hash[:12]} is already published as {repo.ref(found[0])} "
                f"({found[1]}); nothing to do (--force publishes it again)"
            )
            return ReleaseResult(digest=None, tags=tags, published=False, smoke_report=None)

    records = records_path(build_dir)
    out.print(f"{stack.name}: pushing candidate {repo.ref(tags.candidate)}")
    digest = push_candidate(docker_client(docker_host), image_ref, repo, tags.candidate, client)
    append_records(
        records,
        [_tag_record("candidate", stack, repo, tags.candidate, "candidate", digest, config_hash, image=image_ref)],
    )
    check_immutable(client, repo, tags.immutable, digest)  # fail before a long smoke, not after

    image = repo.ref(digest)
    out.print(f"{stack.name}: smoke-testing {image}")
    if smoke is None:
        passed, report = run_real_smoke(stack, image, smoke_opts, docker_host=docker_host)
    else:
        passed, report = smoke(stack, image, smoke_opts)
    report_path = publish_dir(build_dir) / "smoke" / f"{stack.name}-{digest[7:19]}-{_now()}.json"
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps({"image": image, "passed": passed, "report": report}, indent=2, default=str))
    if not passed:
        append_records(
            records,
            [
                _tag_record(
                    "smoke-failed",
                    stack,
                    repo,
                    tags.candidate,
                    "candidate",
                    digest,
                    config_hash,
                    smoke_report=str(report_path),
                )
            ],
        )
        for failure in report.get("failures") or []:
            out.print(f"  FAIL {failure}", markup=False, highlight=False)
        out.print(
            f"{stack.name}: smoke FAILED ({report_path}); no release tag moved, candidate "
            f"{repo.ref(tags.candidate)} kept for inspection"
        )
        return ReleaseResult(digest=digest, tags=tags, published=False, smoke_report=report_path)

    previous = promote(client, repo, digest, immutable=tags.immutable, moving=tags.moving)
    append_records(
        records,
        _tag_records(
            stack, repo, digest, config_hash, previous, tags.immutable, event="published", smoke_report=str(report_path)
        ),
    )
    out.print(f"{stack.name}: published {digest} as " + ", ".join(repo.ref(t) for t in tags.release))
    return ReleaseResult(digest=digest, tags=tags, published=True, smoke_report=report_path)


# ---- promotion alone, rollback, cleanup --------------------------------------------------------------


def _config_hash_of(client: RegistryClient, repo: Repository, digest: str, records: list[dict[str, Any]]) -> str | None:
    for rec in reversed(records):
        if rec.get("digest") == digest and rec.get("repository") == str(repo) and rec.get("config_hash"):
            return rec["config_hash"]
    labels = (client.image_config(repo.path, digest).get("config") or {}).get("Labels") or {}
    return labels.get(CONFIG_HASH_LABEL)


def publish_digest(
    stack: Stack,
    digest: str,
    *,
    registry: str | None = None,
    config_hash: str | None = None,
    force: bool = False,
    smoke_report: str | None = None,
    build_dir: Path | None = None,
    today: dt.date | None = None,
) -> int:
    """Promote `digest` (smoke-tested elsewhere) or roll back to it: re-point the moving tags.

    A digest published before keeps its immutable tag and gets back the moving tags it had then.
    """
    if not is_digest(digest):
        raise PublishError(f"'{digest}' is not a digest (sha256:<64 hex>)")
    out = console()
    repo = target_repository(stack, registry)
    client = registry_client(repo)
    try:
        client.get_manifest(repo.path, digest)
    except ManifestNotFound:
        raise PublishError(f"registry {repo.registry}: {repo}@{digest} does not exist") from None
    records = read_records(records_path(build_dir))
    mine = [
        r
        for r in records
        if r.get("digest") == digest
        and r.get("repository") == str(repo)
        and r.get("stack") == stack.name
        and r.get("event") in ("published", "rollback")
    ]
    immutable = next((r["tag"] for r in reversed(mine) if r.get("kind") == "immutable"), None)
    moving = tuple(dict.fromkeys(r["tag"] for r in mine if r.get("kind") == "moving"))
    config_hash = config_hash or _config_hash_of(client, repo, digest, records)
    if immutable and client.manifest_digest(repo.path, immutable) == digest:
        event = "rollback"
        if not moving and config_hash:
            moving = release_tags(stack, config_hash, dt.date.today()).moving
    else:
        if not config_hash:
            raise PublishError(
                f"stack '{stack.name}': cannot tell the config hash of {digest} (no publish "
                f"record, no {CONFIG_HASH_LABEL} label): pass --config-hash"
            )
        tags = release_tags(stack, config_hash, today or dt.datetime.now(dt.UTC).date())
        found = already_published(client, repo, stack, config_hash)
        if found and found[1] == digest:
            immutable, event = found[0], "rollback"
        else:
            immutable, event = tags.immutable, "published"
        moving = moving or tags.moving
    if not moving:
        raise PublishError(f"stack '{stack.name}': no moving tags known for {digest}: pass --config-hash")
    current = {t: client.manifest_digest(repo.path, t) for t in moving}
    if event == "rollback" and not force and all(d == digest for d in current.values()):
        out.print(
            f"{stack.name}: {repo}@{digest} is already published as "
            + ", ".join(repo.ref(t) for t in (immutable, *moving))
            + "; nothing to do (--force to redo)"
        )
        return 0
    previous = promote(client, repo, digest, immutable=immutable, moving=moving)
    append_records(
        records_path(build_dir),
        _tag_records(stack, repo, digest, config_hash, previous, immutable, event=event, smoke_report=smoke_report),
    )
    verb = "rolled back" if event == "rollback" else "published"
    out.print(f"{stack.name}: {verb}: " + ", ".join(f"{repo.ref(t)} -> {digest}" for t in previous))
    return 0


def publish_command(
    stacks_file: str,
    stack_name: str,
    *,
    digest: str,
    registry: str | None = None,
    config_hash: str | None = None,
    force: bool = False,
    smoke_report: str | None = None,
) -> int:
    stack = load_matrix(stacks_file).get(stack_name)
    return publish_digest(
        stack, digest, registry=registry, config_hash=config_hash, force=force, smoke_report=smoke_report
    )


def cleanup_candidates(
    stacks: Iterable[Stack],
    *,
    registry: str | None = None,
    older_than_days: float = 7,
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> list[str]:
    """Remove candidate tags older than `older_than_days`; return the removed references.

    A candidate that was released keeps its manifest: only the candidate tag goes. One that was not
    released is deleted with its manifest (its layers go at the registry's next garbage collection).
    """
    now = now or dt.datetime.now(dt.UTC)
    cutoff = now - dt.timedelta(days=older_than_days)
    removed: list[str] = []
    seen: set[str] = set()
    for stack in stacks:
        repo = target_repository(stack, registry)
        if str(repo) in seen:
            continue
        seen.add(str(repo))
        client = registry_client(repo)
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
            created = client.image_config(repo.path, digest).get("created") or ""
            try:
                born = dt.datetime.fromisoformat(created.replace("Z", "+00:00")[:32])
                if born.tzinfo is None:
                    born = born.replace(tzinfo=dt.UTC)
            except ValueError:
                born = now
            if born > cutoff:
                continue
            removed.append(repo.ref(tag))
            if dry_run:
                continue
            if digest in released:
                client.untag(repo.path, tag)
            else:
                client.delete_manifest(repo.path, digest)
    return removed


def cleanup_command(
    stacks_file: str,
    *,
    stack_name: str | None = None,
    registry: str | None = None,
    older_than_days: float = 7,
    dry_run: bool = False,
) -> int:
    matrix = load_matrix(stacks_file)
    stacks = [matrix.get(stack_name)] if stack_name else [matrix.get(n) for n in matrix.names()]
    removed = cleanup_candidates(stacks, registry=registry, older_than_days=older_than_days, dry_run=dry_run)
    out = console()
    verb = "would remove" if dry_run else "removed"
    for ref in removed:
        out.print(f"{verb} {ref}")
    out.print(f"{len(removed)} candidate(s) {verb}")
    return 0
