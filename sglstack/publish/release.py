"""The release (`invoke build --push`): push a candidate, smoke-test that digest, promote exactly it.

Every step is recorded (`candidate`, `smoke-failed`, `published`, or `reverted`/`partial` when the
promotion failed and its tags were put back). A smoke failure moves no release tag and keeps the
candidate for inspection.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
from rich.console import Console

from ..adapters.docker import docker_client, engine_image
from ..attest.kernelcache import attach_kernel_cache
from ..config.imageref import Repository
from ..config.schema import Stack
from ..core.clock import utc_timestamp, utc_today
from ..core.console import console
from ..core.errors import RegistryError, first_line, one_line
from ..core.records import build_root
from ..core.safefiles import containing_root, make_folder, write_text
from ..kernelcache import KernelCacheError, LayoutStore
from ..registry.client import RegistryClient
from .history import (
    PublishError,
    append_records,
    publish_dir,
    read_records,
    records_path,
    tag_record,
    unresolved_partial,
)
from .promotion import already_published, check_immutable, promote_recorded, target_repository
from .tags import ReleaseTags, release_tags

# (stack, image reference by digest, smoke options) -> (passed, report as a dict)
SmokeRunner = Callable[[Stack, str, Sequence[str]], tuple[bool, dict[str, Any]]]
# (client, repository, tested digest) -> a one-line summary: attaches SBOM, provenance and signature
# (`attest.release.AttestPlan`; the pipeline passes it, Publish knows no build record)
Attester = Callable[[RegistryClient, Repository, str], str]


def parse_smoke_opts(opts: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings -> smoke overrides, read by smoke's one parser (`smoke.options`)."""
    # smoke's package (docker, charts) loads only when a release smoke's options are read
    from ..smoke.options import SmokeOptionError
    from ..smoke.options import parse_smoke_opts as smoke_option_pairs

    try:
        return smoke_option_pairs(opts)
    except SmokeOptionError as exc:
        raise PublishError(str(exc)) from None


def release_smoke_options(stack: Stack, smoke_opts: Sequence[str], *, docker_host: str | None = None) -> Any:
    """The release smoke's options, read and checked as the smoke will: `invoke build --push` calls this
    before it builds, so a bad `--smoke-opt` (bad input, exit 2) costs no build."""
    # Imported here, not at the top: the smoke package brings its chart and runner dependencies, which
    # `invoke publish`, `registry.cleanup` and Deploy (reading `published_release`) never need.
    from ..smoke import smoke_options
    from ..smoke.options import parse_smoke_opts as smoke_option_pairs

    overrides = smoke_option_pairs(smoke_opts)
    if docker_host and "docker_host" not in overrides:
        overrides["docker_host"] = docker_host
    return smoke_options(stack, **overrides)


def run_real_smoke(
    stack: Stack, image: str, smoke_opts: Sequence[str], *, docker_host: str | None = None
) -> tuple[bool, dict[str, Any]]:
    """The production smoke (`sglstack.smoke`) on the image by digest, on `docker_host` unless overridden."""
    from ..smoke import run_smoke  # at call time, as in `release_smoke_options`

    report = run_smoke(stack, image, release_smoke_options(stack, smoke_opts, docker_host=docker_host))
    return bool(report.passed), report.to_dict()


def push_candidate(engine: Any, image_ref: str, repo: Repository, tag: str, client: RegistryClient) -> str:
    """Tag the local image as repo:tag, push it with the Docker engine, return the pushed digest."""
    try:
        image = engine_image(engine, image_ref)
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
                    f"registry {repo.registry}: push of {repo.ref(tag)} failed: {first_line(str(detail))}"
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


@dataclass(frozen=True)
class ReleaseResult:
    digest: str | None  # the candidate's digest (None: the config was already published, nothing pushed)
    tags: ReleaseTags
    published: bool
    smoke_report: Path | None
    # one platform of a stack of several: smoke-tested and attested, released later as part of the index
    awaits_index: bool = False

    @property
    def exit_code(self) -> int:
        """0: published, already published, or (one platform of several) passed; 1: the smoke failed (no release
        tag moved)."""
        return 0 if self.published or self.awaits_index or self.digest is None else 1


def release(
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
    attest: Attester | None = None,
    sign_published: Attester | None = None,
) -> ReleaseResult:
    """Push `image_ref` as a candidate, smoke it by digest, promote on pass (all release tags or none).

    A failed promotion raises `PromotionError` after putting the tags back. `smoke` replaces the production
    smoke (tests); `today` (UTC) dates the immutable tag. `attest` attaches the attestations to the tested
    digest before any release tag moves: when it fails (it removes what it pushed), no tag moves.
    `sign_published` (a signing release) signs the digest of a config already published, unless its key
    already did: `--signing-key` never ends with a release nothing signed.
    """
    out = console()
    tags = release_tags(stack, config_hash, today or utc_today())
    repo = target_repository(stack, registry)
    client = RegistryClient.from_environment(repo.registry)
    records = records_path(build_dir)
    client.ping()
    found = None if force else _already_released(out, client, repo, stack, config_hash, records)
    if found is not None:
        if sign_published is not None:
            _sign_published(out, sign_published, client, repo, stack, found, config_hash, records)
        return ReleaseResult(digest=None, tags=tags, published=False, smoke_report=None)

    out.print(f"{stack.name}: pushing candidate {repo.ref(tags.candidate)}")
    digest = push_candidate(docker_client(docker_host), image_ref, repo, tags.candidate, client)
    append_records(
        records,
        [tag_record("candidate", stack, repo, tags.candidate, "candidate", digest, config_hash, image=image_ref)],
    )
    check_immutable(client, repo, tags.immutable, digest)  # fail before a long smoke, not after

    image = repo.ref(digest)
    out.print(f"{stack.name}: smoke-testing {image}")
    passed, report, report_path = _smoke_candidate(stack, image, digest, smoke_opts, docker_host, build_dir, smoke)
    if not passed:
        _record_smoke_failure(out, stack, repo, tags, digest, config_hash, records, report, report_path)
        return ReleaseResult(digest=digest, tags=tags, published=False, smoke_report=report_path)

    if attest is not None:
        _attest_candidate(out, attest, client, repo, stack, tags, digest, config_hash, records)
        _attach_kernel_caches(out, client, repo, stack, digest, report, getattr(attest, "key", None))
    if len(stack.whole_platforms) > 1:
        _say_awaits_index(out, stack, repo, digest)
        return ReleaseResult(digest=digest, tags=tags, published=False, smoke_report=report_path, awaits_index=True)
    promote_recorded(client, repo, stack, digest, config_hash=config_hash, immutable=tags.immutable,
                     moving=tags.moving, event="published", records=records, smoke_report=str(report_path))
    out.print(f"{stack.name}: published {digest} as " + ", ".join(repo.ref(t) for t in tags.release))
    return ReleaseResult(digest=digest, tags=tags, published=True, smoke_report=report_path)


def _say_awaits_index(out: Console, stack: Stack, repo: Repository, digest: str) -> None:
    """One platform of several passed: one platform's image under the stack's tags would reach the other
    platform's nodes (and each platform's release would overwrite the other's), so the index is what is released."""
    out.print(f"{stack.name}: {stack.platforms[0]} candidate {repo.ref(digest)} passed its smoke; no release tag "
              f"moved: a stack of {' '.join(stack.whole_platforms)} is released as one index "
              f"(invoke publish-index --stack {stack.name} --platform-digest {stack.platforms[0]}={digest} ..., "
              "then invoke publish --digest INDEX)")


def _already_released(
    out: Console, client: RegistryClient, repo: Repository, stack: Stack, config_hash: str, records: Path
) -> tuple[str, str] | None:
    """(immutable tag, digest) (said on the console) when this config is already published; an error when its
    promotion was left partial (it is finished with `invoke publish`, not pushed again)."""
    found = already_published(client, repo, stack, config_hash)
    if found and unresolved_partial(read_records(records), stack, repo, found[1]):
        raise PublishError(
            f"stack '{stack.name}': the promotion of {repo.ref(found[1])} was left partial (see {records}); "
            f"finish it with `invoke publish --stack {stack.name} --digest {found[1]}`"
        )
    if found:
        out.print(
            f"{stack.name}: config {config_hash[:12]} is already published as {repo.ref(found[0])} "
            f"({found[1]}); nothing to push (--force publishes it again)"
        )
    return found


def _sign_published(out: Console, sign: Attester, client: RegistryClient, repo: Repository, stack: Stack,
                    found: tuple[str, str], config_hash: str, records: Path) -> None:
    """Sign the published digest of this config (a release published `--unsigned` before), recorded."""
    tag, digest = found
    try:
        summary = sign(client, repo, digest)
    except Exception as exc:
        raise PublishError(f"stack '{stack.name}': {repo.ref(tag)} is published but could not be signed: "
                           f"{exc}") from None
    append_records(records, [tag_record("attested", stack, repo, tag, "immutable", digest, config_hash,
                                        summary=summary)])
    out.print(f"{stack.name}: {summary}", markup=False, highlight=False)


def _smoke_candidate(
    stack: Stack, image: str, digest: str, smoke_opts: Sequence[str], docker_host: str | None,
    build_dir: Path | None, smoke: SmokeRunner | None,
) -> tuple[bool, dict[str, Any], Path]:
    """Smoke the candidate by digest; (passed, report, where the report was kept under the publish folder)."""
    folder = publish_dir(build_dir) / "smoke"
    root = containing_root(folder, build_dir or build_root())
    make_folder(root, folder)  # a link out of the build folder is refused before the smoke, not after it
    if smoke is None:
        passed, report = run_real_smoke(stack, image, smoke_opts, docker_host=docker_host)
    else:
        passed, report = smoke(stack, image, smoke_opts)
    report_path = folder / f"{stack.name}-{digest[7:19]}-{utc_timestamp()}.json"
    write_text(root, report_path, json.dumps({"image": image, "passed": passed, "report": report}, indent=2,
                                             default=str))
    return passed, report, report_path


def _record_smoke_failure(
    out: Console, stack: Stack, repo: Repository, tags: ReleaseTags, digest: str, config_hash: str, records: Path,
    report: dict[str, Any], report_path: Path,
) -> None:
    """Record the failed smoke and say which gates failed; the candidate stays, no release tag moves."""
    append_records(
        records,
        [
            tag_record("smoke-failed", stack, repo, tags.candidate, "candidate", digest, config_hash,
                       smoke_report=str(report_path))
        ],
    )
    for failure in report.get("failures") or []:
        out.print(f"  FAIL {one_line(str(failure))}", markup=False, highlight=False)
    out.print(
        f"{stack.name}: smoke FAILED ({report_path}); no release tag moved, candidate "
        f"{repo.ref(tags.candidate)} kept for inspection"
    )


def _attach_kernel_caches(out: Console, client: RegistryClient, repo: Repository, stack: Stack, digest: str,
                          report: Mapping[str, Any], key: Any) -> None:
    """The kernel caches the passing smoke packed (`smoke.kernel_cache`), attached to the tested digest and
    signed with the release's key. A cache is a speed-up, not a promise: one that cannot be attached is said
    in one line, and deployments of this digest start cold."""
    caches = report.get("kernel_cache") or {}
    for kind, packed in (caches.get("packed") or {}).items():
        try:
            line = attach_kernel_cache(client, repo.path, digest, LayoutStore(Path(caches["store"])),
                                       packed["artifact"], key)
        except (KernelCacheError, RegistryError, OSError, KeyError, ValueError) as exc:
            line = f"kernel cache of {kind} not attached ({one_line(str(exc))[:200]}); deployments start cold"
        out.print(f"{stack.name}: {kind}: {line}", markup=False, highlight=False)


def _attest_candidate(
    out: Console, attest: Attester, client: RegistryClient, repo: Repository, stack: Stack, tags: ReleaseTags,
    digest: str, config_hash: str, records: Path,
) -> None:
    """Attach the attestations to the tested digest, recorded either way; a failure (or Ctrl-C, SIGTERM) is
    recorded and moves no release tag."""
    try:
        summary = attest(client, repo, digest)
    except BaseException as exc:
        append_records(records, [tag_record("attest-failed", stack, repo, tags.candidate, "candidate", digest,
                                            config_hash, cause=first_line(str(exc)) if str(exc) else
                                            type(exc).__name__)])
        if isinstance(exc, Exception):
            raise PublishError(f"stack '{stack.name}': attaching the attestations to {repo.ref(digest)} failed, no "
                               f"release tag moved (candidate {repo.ref(tags.candidate)} kept): {exc}") from None
        raise
    append_records(records, [tag_record("attested", stack, repo, tags.candidate, "candidate", digest,
                                        config_hash, summary=summary)])
    out.print(f"{stack.name}: {one_line(str(summary))}", markup=False, highlight=False)
