"""`invoke build`: render -> config hash -> (skip if built) -> BuildKit build -> read the facts the image
verified about itself -> stamp them as labels -> tag -> build record -> (optionally) release.

A tag is only ever set on an image that built and verified. Whatever ends the run (a failed step, a
failed check, Ctrl-C, SIGTERM, SIGHUP), it leaves no tag, no container, no temporary folder, and no
secret on a disk: the HF token reaches BuildKit from this process's environment, never from a file.
The pure planning (options, tags, secrets, the BuildKit request, the config hash) is `plan`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shlex
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from rich.console import Console

from ..adapters.buildkit import (
    Builder,
    BuildRequest,
    build_argv,
    build_env,
    classic_cache_notice,
    detect_builder,
    run_build,
)
from ..adapters.docker import PullFailed, docker_client, engine_image, local_image, present_or_pulled
from ..config.imageref import registry_digest
from ..config.schema import Stack
from ..core.clock import utc_now, utc_timestamp
from ..core.console import console as make_console
from ..core.console import plain, printable_lines
from ..core.errors import BuildError, SglstackError
from ..core.records import require_writable, stack_lock
from ..core.resources import DEFAULT_PATCHES_DIR
from ..coverage.image import BuildCoverage
from ..inventory.model import Inventory
from ..size.cudacopies import copies_line, cuda_copies, lock_parts
from ..size.measure import measure_and_gate
from .context import RenderedContext, write_build_context
from .identity import sglstack_identity, tree_sha256
from .images import ImageVanished, existing_verified_image, held_image, stamp_labels
from .incremental import verify_incrementally
from .judge import lock_mismatches
from .plan import (
    BuildResult,
    BuildSettings,
    add_git_source,
    build_request,
    compute_config_hash,
    index_netrc_secret,
    local_tag,
    out_dir_for,
    resolve_ca_bundle,
    secret_sources,
    temporary_ref,
)
from .record import (
    lock_labels,
    lock_record,
    lock_summary,
    record_for_reused_image,
    record_path_for,
    write_record,
    write_sbom,
)
from .verify import (
    FINAL_TARGET,
    check_base_image,
    sbom_inventory,
    verified_facts,
    verified_labels,
)


@dataclass
class PhaseTimer:
    durations: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.durations[name] = round(time.monotonic() - start, 3)


# ---- the build -------------------------------------------------------------------------------------

def build_stack(stack: Stack, options: BuildSettings) -> BuildResult:
    """Build, verify, stamp and tag one stack; skip when a verified image of this config exists.

    Under the stack's lock: two builds of one stack would render into one context and hash it half
    written; the second is refused at once with one line."""
    check_build_folder(stack, options)
    with stack_lock(stack.name, "build"):
        return _build_stack(stack, options)


def check_build_folder(stack: Stack, options: BuildSettings) -> None:
    """A build folder that cannot be written is one line before anything (its lock included) is made."""
    require_writable(record_path_for(out_dir_for(stack, options), options.effective_target),
                     what="build record (under the build folder)")


def _build_stack(stack: Stack, options: BuildSettings) -> BuildResult:
    console = make_console()
    timer = PhaseTimer()
    out_dir = out_dir_for(stack, options)
    target = options.effective_target
    with timer.phase("render"):
        rendered = write_build_context(stack, out_dir, options.patches_dir or DEFAULT_PATCHES_DIR,
                                       lock=options.lock)
        rendered = add_git_source(stack, rendered)
        config_hash = compute_config_hash(rendered, target, stack.build_platform)
    tag = local_tag(stack, config_hash, target)
    client = docker_client(options.docker_host)
    check_base_image(client, stack)
    if not options.force and not options.no_cache:
        reused = _reused_image(client, stack, options, config_hash, tag, out_dir)
        if reused:
            return reused
    builder = detect_builder(options.docker_cli, options.builder_name)
    started_at = utc_timestamp()
    console.print(f"[bold]{stack.name}[/]: building target '{target}' (config {config_hash[:12]}) "
                  f"with {builder.describe()}")
    if builder.kind == "classic" and stack.cache_ref:
        console.print(f"[yellow]warning[/]: stack '{stack.name}': {classic_cache_notice(stack.cache_ref)}",
                      highlight=False)
    request = build_request(stack, dockerfile=rendered.dockerfile, context=rendered.context,
                            config_hash=config_hash, target=target, builder_kind=builder.kind,
                            secrets=secret_sources(resolve_ca_bundle(options.ca_bundle)),
                            no_cache=options.no_cache)
    with contextlib.ExitStack() as hold:
        held = _build_and_hold(hold, client, builder, request, stack, options, config_hash, timer, out_dir)
        facts = _verify(client, held, stack, options, timer, out_dir, console)
        with timer.phase("stamp"):
            final_id = stamp_labels(builder, held, {**verified_labels(facts.manifest, facts.info),
                                                    **facts.coverage.labels,
                                                    **lock_labels(options.lock, facts.base_digest)},
                                    options.docker_host, stack.build_platform)
            engine_image(client, final_id).tag(tag)
    built_at = utc_now()
    record = _build_record(stack, options, facts, rendered, builder, timer,
                           image_id=final_id, tag=tag, config_hash=config_hash, built_at=built_at,
                           started_at=started_at, labels=engine_image(client, final_id).labels or {})
    if facts.inventory is not None:
        record["sbom"] = write_sbom(out_dir, facts.inventory, tag=tag, image_id=final_id, built_at=built_at,
                                    lock=options.lock)
    record_path = record_path_for(out_dir, target)
    write_record(record_path, record)
    console.print(f"[green]{stack.name}[/]: built and verified {plain(tag)} ({final_id[:19]}); "
                  f"record {plain(record_path)}")
    return BuildResult(stack.name, target, config_hash, final_id, tag, False, record_path, builder.kind)


def _reused_image(client: docker.DockerClient, stack: Stack, options: BuildSettings, config_hash: str, tag: str,
                  out_dir: Path) -> BuildResult | None:
    """The result of a verified image of this config, here or (the serving target) in the registry; None if none."""
    console = make_console()
    target = options.effective_target
    found = existing_verified_image(client, tag, config_hash)
    if found:
        console.print(f"[green]{stack.name}[/]: {tag} already built from config {config_hash[:12]} "
                      f"({found[:19]}): skipping the build (--force rebuilds)")
        record_path = record_for_reused_image(client, stack, found, tag, config_hash, target, out_dir)
        return BuildResult(stack.name, target, config_hash, found, tag, True, record_path, "none")
    remote = options.remote_lookup(stack, config_hash) if options.remote_lookup and target == FINAL_TARGET \
        else None
    if not remote:
        return None
    console.print(f"[green]{stack.name}[/]: {remote} was built and verified from config {config_hash[:12]}: "
                  f"pulling it instead of rebuilding (--force rebuilds)")
    try:
        pulled = present_or_pulled(client, remote)
    except PullFailed as exc:
        raise BuildError(f"stack '{stack.name}': pulling {remote}: {exc} (--force rebuilds instead)") from None
    engine_image(client, pulled.id).tag(tag)
    record_path = record_for_reused_image(client, stack, pulled.id, tag, config_hash, target, out_dir,
                                          source=remote)
    return BuildResult(stack.name, target, config_hash, pulled.id, tag, True, record_path, "none")


def _build_and_hold(hold: contextlib.ExitStack, client: docker.DockerClient, builder: Builder, request: BuildRequest,
                    stack: Stack, options: BuildSettings, config_hash: str, timer: PhaseTimer, out_dir: Path) -> str:
    """Run BuildKit and hold its image under a temporary tag of this build's (released when `hold` closes)."""
    for attempt in range(2):
        with timer.phase("build"):
            image_id = run_build(builder, request, log_path=out_dir / "build.log",
                                 docker_host=options.docker_host, show_progress=options.show_progress)
        try:
            return hold.enter_context(held_image(client, image_id, temporary_ref(stack, config_hash)))
        except ImageVanished:
            # A concurrent build of this config removed its own hold on the same image between our
            # export and our hold: the image went with it. BuildKit's cache makes it again at once.
            if attempt:
                raise
    raise AssertionError("unreachable: the second attempt returns or raises")


@dataclass(frozen=True)
class _Facts:
    """What the built image verified about itself, and what the build measured of it."""

    manifest: list[dict[str, Any]]
    info: dict[str, Any] | None
    checks: dict[str, Any] | None
    coverage: BuildCoverage
    size: dict[str, Any] | None
    inventory: Inventory | None
    lock_notes: list[str]
    base_digest: str | None
    base_image_id: str | None
    verification: dict[str, Any] | None = None  # per costly check: ran or reused, and why


def _verify(client: docker.DockerClient, held: str, stack: Stack, options: BuildSettings, timer: PhaseTimer,
            out_dir: Path, console: Console) -> _Facts:
    target = options.effective_target
    # The size is measured in a container of its own while the verify runs (neither reads what the other
    # writes); its gate is applied once the verify has passed, before the image is stamped and tagged: an
    # image over budget is not released. Its phase overlaps the verify's in the record's durations.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sglstack-size") as pool:
        sized = pool.submit(_measured_size, client, held, stack, timer, record_path_for(out_dir, target), console) \
            if target == FINAL_TARGET else None
        with timer.phase("verify"):
            manifest, info = verified_facts(client, held, stack, target, options.lock)
            checks, coverage, verification = None, BuildCoverage({}, None), None
            if target == FINAL_TARGET:
                verified = verify_incrementally(client, held, stack, installed=(info or {}).get("distributions"),
                                                docker_host=options.docker_host, full=options.full_verify)
                checks, coverage, verification = verified.checks, verified.coverage, verified.verification
        size = sized.result() if sized else None
    inventory = None
    if target == FINAL_TARGET:
        with timer.phase("sbom"):
            inventory = sbom_inventory(client, held, stack, options.lock)
    lock_notes = lock_mismatches(options.lock, info)[1] if options.lock and info else []
    for note in lock_notes:
        console.print(f"[yellow]{stack.name}[/]: {plain(note)}", highlight=False)
    base = local_image(client, stack.base_image)
    base_digest = registry_digest(stack.base_image, base.repo_digests) if base else None
    return _Facts(manifest, info, checks, coverage, size, inventory, lock_notes, base_digest, base.id if base else None,
                  verification)


def _measured_size(client: docker.DockerClient, held: str, stack: Stack, timer: PhaseTimer, last_record: Path,
                   console: Console) -> dict[str, Any]:
    with timer.phase("size"):
        return measure_and_gate(client, held, stack.name, stack.size, last_record,
                                lambda table: console.print(printable_lines(table), markup=False, highlight=False,
                                                            soft_wrap=True))


def _build_record(stack: Stack, options: BuildSettings, facts: _Facts, rendered: RenderedContext, builder: Builder,
                  timer: PhaseTimer, *, image_id: str, tag: str, config_hash: str, built_at: dt.datetime,
                  started_at: str, labels: dict[str, str]) -> dict[str, Any]:
    info = facts.info or {}
    return {
        "stack": stack.name,
        "platform": stack.platforms[0],  # what the image was built for (`--platform`; a stack's first by default)
        "target": options.effective_target,
        "image_id": image_id,
        "tag": tag,
        "config_hash": config_hash,
        "built_at": utc_timestamp(built_at),
        "builder": {"kind": builder.kind, "cli": builder.cli, "client_version": builder.client_version},
        "pins": stack.pins(),
        "overrides": [o.model_dump(mode="json") for o in stack.overrides],
        "patches": facts.manifest,
        "installed": info.get("distributions", {}),
        "torch": info.get("torch"),
        "coverage": facts.coverage.record,
        "image_checks": facts.checks,
        "verification": facts.verification,
        "size": facts.size,
        "durations_s": timer.durations,
        "dockerfile": str(rendered.dockerfile),
        "base_image": {"name": stack.base_image, "digest": facts.base_digest, "image_id": facts.base_image_id},
        "sglang": stack.sglang.model_dump(mode="json"),
        "lock": lock_record(options.lock, facts.lock_notes),
        "labels": labels,
        "provenance": {"patches": {pid: tree_sha256(rendered.context / "patches" / pid) for pid in stack.patches},
                       "sglstack": sglstack_identity(), "started_at": started_at,
                       "lock_sglang_commit": options.lock.sglang_commit if options.lock else None},
    }


# ---- the dry run -----------------------------------------------------------------------------------

def describe_build(stack: Stack, options: BuildSettings) -> tuple[list[str], str]:
    """What the build would do, without touching Docker (rendering goes to a temp folder), and the
    config hash it would build."""
    target = options.effective_target
    with tempfile.TemporaryDirectory(prefix="sglstack-plan-") as tmp:
        rendered = add_git_source(stack, write_build_context(stack, Path(tmp), lock=options.lock))
        config_hash = compute_config_hash(rendered, target, stack.build_platform)
        copies = cuda_copies(rendered.dockerfile.read_text(encoding="utf-8"), lock_parts(options.lock))
    out_dir = out_dir_for(stack, options)
    # The secrets the build hands BuildKit, read as the build reads them (a CA bundle that is no file: one line).
    secret_files, secret_env = secret_sources(resolve_ca_bundle(options.ca_bundle))
    shown_secrets = [*secret_files, *secret_env, *index_netrc_secret(stack)[0]]
    lines = [f"stack:        {stack.name} ({stack.description})",
             f"render:       {out_dir / 'Dockerfile'} + {out_dir / 'context'}/ ({len(rendered.files)} files)",
             f"config hash:  {config_hash}",
             f"lock:         {lock_summary(options.lock)}",
             f"local tag:    {local_tag(stack, config_hash, target)} (set only after verification)"]
    try:
        builder = detect_builder(options.docker_cli, options.builder_name)
        env = build_env(builder, options.docker_host)
        planned = build_request(stack, dockerfile=out_dir / "Dockerfile", context=out_dir / "context",
                                config_hash=config_hash, target=target, builder_kind=builder.kind,
                                secrets=(secret_files, secret_env), no_cache=options.no_cache)
        argv = build_argv(builder, planned, out_dir / ".iid")
        prefix = " ".join(f"{k}={v}" for k, v in env.items())
        lines.append(f"build:        {prefix + ' ' if prefix else ''}{shlex.join(argv)}")
        if builder.kind == "classic" and stack.cache_ref:
            lines.append(f"cache:        warning: {classic_cache_notice(stack.cache_ref)}")
    except SglstackError as exc:
        lines.append(f"build:        not possible here: {exc}")
    lines.append(f"secrets:      {', '.join(shown_secrets) or 'none'} (BuildKit secrets, never layers; the HF "
                 f"token and the index credentials from the environment, never a file)")
    if target == FINAL_TARGET:
        jit = (f"; the JIT toolchain compiles for {', '.join(stack.cuda_arch_list)} ($CUDA_HOME/bin/nvcc)"
               if stack.cuda and stack.cuda_arch_list else "")
        lines.append("verify:       in the runtime stage (patchkit verify on the installed tree, installed "
                     "packages); read back and compared with the pins; kernel coverage of cuda_arch_list "
                     f"(cuobjdump){jit}")
        budget = (f"fails over size.max_gb {stack.size.max_gb:g}" if stack.size and stack.size.max_gb
                  else "no size.max_gb budget")
        if stack.size:
            budget += (f"; a CUDA library in two builds fails it ({len(stack.size.library_copies)} copies "
                       f"declared)")
        lines.append(f"size:         measured after verification (layers, packages, duplicates), recorded; {budget}")
        lines.append(f"cuda copies:  {copies_line(copies)}")
    else:
        lines.append("verify:       patchkit verify on the patched tree, in a container of the image")
    return lines, config_hash
