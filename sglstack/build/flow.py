"""`invoke build`: render -> config hash -> (skip if built) -> BuildKit build -> read the facts the image
verified about itself -> stamp them as labels -> tag -> build record -> (optionally) release.

A tag is only ever set on an image that built and verified. Whatever ends the run (a failed step, a
failed check, Ctrl-C, SIGTERM, SIGHUP), it leaves no tag, no container, no temporary folder, and no
secret on a disk: the HF token reaches BuildKit from this process's environment, never from a file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import io
import json
import os
import secrets as pysecrets
import shlex
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from ..adapters.buildkit import (
    Builder,
    BuildRequest,
    build_argv,
    build_env,
    classic_cache_notice,
    detect_builder,
    run_build,
)
from ..adapters.docker import created_container, docker_client, local_image, running_container
from ..adapters.git import GitSource
from ..attest.identity import sglstack_identity
from ..attest.image import image_inventory
from ..attest.provenance import tree_sha256
from ..attest.sbom import SBOM_FILE, Inventory, lock_problems, sbom_document
from ..config.imageref import parse_image_reference, registry_digest
from ..config.matrix import Stack
from ..core import labels as lb
from ..core.console import console as make_console
from ..core.credentials import netrc_text
from ..core.errors import BuildError, ImageCheckFailed, PinMismatch, SglstackError
from ..core.labels import BUILDER_LABEL, CONFIG_HASH_LABEL, PATCH_LABEL_PREFIX, TARGET_LABEL, VERIFIED_LABEL
from ..core.records import build_root, require_writable, stack_lock, utc_now, utc_timestamp
from ..core.resources import DEFAULT_PATCHES_DIR
from ..core.safefiles import containing_root, write_text
from ..coverage.image import build_coverage
from ..lock.file import Lock, lock_content_sha256, source_mismatches
from ..render import confighash
from ..render.dockerfile import GIT_SOURCE_DIR, INDEX_NETRC_SECRET
from ..serving import LAUNCH, serving_argv, serving_spec
from ..size.cudacopies import copies_line, cuda_copies, lock_parts
from ..size.measure import measure_and_gate
from .context import RenderedContext, write_build_context
from .verify import image_check_problems, lock_mismatches, pin_mismatches, pip_check_problems, waived_libraries

CA_BUNDLE_ENV = "SGLSTACK_CA_BUNDLE"
HF_TOKEN_ENV = "HF_TOKEN"
# The client's variable holding the stack's netrc (`invoke bake` users set it themselves; see README).
INDEX_NETRC_ENV = "SGLSTACK_INDEX_NETRC"
FINAL_TARGET = "runtime"
# The build's own short-lived tags live in a repository of their own, named after the stack and config
# hash, and end with a random part: a tag is only ever removed by the build that set it.
TEMP_REPOSITORY = "sglstack-unverified"
# Containers a build starts carry the stack's name here (and OWNER_LABEL), so that they can be found.
BUILD_CONTAINER_LABEL = lb.BUILD_CONTAINER_LABEL
# What the runtime stage's last RUN step verified and measured, inside the image (see Dockerfile.j2).
RUNTIME_MANIFEST = "/opt/sglstack/patches.json"
RUNTIME_INSTALLED = "/opt/sglstack/installed.json"
SRC_TREE, SRC_MANIFEST = "/src/tree", "/out/patches.json"
UNTAG_ATTEMPTS = 5


RemoteLookup = Callable[[Stack, str], str | None]


@dataclass(frozen=True)
class BuildOptions:
    target: str | None = None
    no_cache: bool = False
    force: bool = False
    ca_bundle: str | None = None
    docker_cli: str | None = None
    docker_host: str | None = None
    builder_name: str | None = None  # a buildx builder instance (`--builder NAME`)
    out_dir: Path | None = None  # default: records.build_root() / STACK
    show_progress: bool = True
    # Where else a verified image of this config may already be (a registry's candidate, found by
    # Publish's tags): `(stack, config_hash) -> repo@sha256:...`. The pipeline passes it; Build knows
    # no registry.
    remote_lookup: RemoteLookup | None = None
    patches_dir: Path | None = None
    lock: Lock | None = None  # the stack's current lock: layers install it exactly, verify compares with it

    @property
    def effective_target(self) -> str:
        return self.target or FINAL_TARGET


@dataclass(frozen=True)
class BuildResult:
    stack: str
    target: str
    config_hash: str
    image_id: str
    tag: str
    skipped: bool
    record_path: Path | None
    builder: str


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


# ---- pure planning ---------------------------------------------------------------------------------

def out_dir_for(stack: Stack, options: BuildOptions) -> Path:
    return options.out_dir or build_root() / stack.name


def local_tag(stack: Stack, config_hash: str, target: str) -> str:
    suffix = "" if target == FINAL_TARGET else f"{target}-"
    return f"sglstack/{stack.name}:{suffix}{config_hash[:12]}"


def temporary_ref(stack: Stack, config_hash: str) -> str:
    """A tag of this build alone: two builds of one config never share (or remove) each other's."""
    return f"{TEMP_REPOSITORY}/{stack.name}:{config_hash[:12]}-{pysecrets.token_hex(4)}"


def resolve_ca_bundle(option: str | None) -> Path | None:
    value = option or os.environ.get(CA_BUNDLE_ENV)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise BuildError(f"CA bundle '{value}' (from --ca-bundle or {CA_BUNDLE_ENV}) is not a file")
    return path


def secret_sources(ca_bundle: Path | None) -> tuple[dict[str, Path], dict[str, str]]:
    """BuildKit secrets: the CA bundle from its own file, the HF token from this process's environment.

    `--secret id=hf_token,env=HF_TOKEN` (supported by buildx and by docker 20.10's CLI with
    DOCKER_BUILDKIT=1) hands the value over the BuildKit session, so it is never written to a disk.
    """
    files = {"ca_bundle": ca_bundle} if ca_bundle else {}
    env = {"hf_token": HF_TOKEN_ENV} if os.environ.get(HF_TOKEN_ENV) else {}
    return files, env


def index_netrc_secret(stack: Stack) -> tuple[dict[str, str], dict[str, str]]:
    """({secret id: variable}, {variable: netrc}) for a stack whose URLs had credentials; empty otherwise.

    The netrc reaches the BuildKit client only through its environment (`--secret id=index_netrc,env=...`),
    so the Dockerfile, the context, the command line and the log name the URLs without credentials.
    """
    if not stack.credentials:
        return {}, {}
    return {INDEX_NETRC_SECRET: INDEX_NETRC_ENV}, {INDEX_NETRC_ENV: netrc_text(stack.credentials)}


def build_labels(stack: Stack, config_hash: str, target: str, builder: str) -> dict[str, str]:
    """Labels known before the build (the Dockerfile's own labels carry the pins and patch ids)."""
    return {CONFIG_HASH_LABEL: config_hash, TARGET_LABEL: target, BUILDER_LABEL: builder}


def build_request(stack: Stack, *, dockerfile: Path, context: Path, config_hash: str, target: str,
                  builder_kind: str, secrets: tuple[Mapping[str, Path], Mapping[str, str]],
                  no_cache: bool = False) -> BuildRequest:
    """What one build of a stack's stage passes to BuildKit: `invoke build` and `invoke bake` both use it.

    Only the serving stage exports the registry cache: in `max` mode it holds every stage's layers, and a
    second writer of the same reference (the `sglang-src` stage) would overwrite it with fewer.
    """
    files, env = secrets
    netrc_ids, netrc_values = index_netrc_secret(stack)
    return BuildRequest(dockerfile=dockerfile, context=context, target=target, no_cache=no_cache,
                        labels=build_labels(stack, config_hash, target, builder_kind),
                        secrets=dict(files), env_secrets={**env, **netrc_ids}, secret_env_values=netrc_values,
                        platform=stack.build_platform,
                        cache_ref=stack.cache_ref, cache_mode=stack.cache.mode if stack.cache else "max",
                        cache_export=target == FINAL_TARGET)


def add_git_source(stack: Stack, rendered: RenderedContext) -> RenderedContext:
    """Export a git source's tree at its commit into the context (a context file, so the config hash
    covers it): git on this host fetches it, from any repository it can clone."""
    git = stack.sglang.git
    if git is None:
        return rendered
    GitSource(git.repo, logins=stack.credentials).export(git.ref, git.subdirectory, rendered.context / GIT_SOURCE_DIR)
    files = tuple(sorted(p for p in rendered.context.rglob("*") if p.is_file()))
    return dataclasses.replace(rendered, files=files)


def compute_config_hash(rendered: RenderedContext, target: str, platform: str | None) -> str:
    return confighash.config_hash(rendered.dockerfile.read_text(encoding="utf-8"),
                                  confighash.read_context(rendered.context, rendered.files),
                                  target=target, platform=platform)


def verified_labels(manifest: list[dict[str, Any]], image_info: dict[str, Any] | None) -> dict[str, str]:
    labels = {VERIFIED_LABEL: "true"}
    for entry in manifest:
        labels[f"{PATCH_LABEL_PREFIX}{entry.get('id')}"] = (
            f"{entry.get('status')} sha256:{entry.get('sha256_before', '')[:16]}->"
            f"{entry.get('sha256_after', '')[:16]}")
    if image_info is not None:
        freeze = "\n".join(f"{k}=={v}" for k, v in sorted(image_info.get("distributions", {}).items()))
        labels[lb.FREEZE_LABEL] = hashlib.sha256(freeze.encode()).hexdigest()
        if image_info.get("torch") and image_info["torch"].get("version"):
            labels[lb.TORCH_LABEL] = f"{image_info['torch']['version']} cuda {image_info['torch'].get('cuda')}"
    return labels


def check_pins(stack: Stack, image_info: dict[str, Any], lock: Lock | None = None) -> None:
    """The installed set against the stack's pins and, when it has one, its lock (exactly)."""
    problems = pin_mismatches(stack, image_info) + pip_check_problems(stack, image_info)
    if lock is not None:
        problems += source_mismatches(lock, stack) + lock_mismatches(lock, image_info)[0]
    if problems:
        raise PinMismatch(f"stack '{stack.name}': the image does not match its pins: {'; '.join(problems)}")


# ---- the engine: held images, containers, files --------------------------------------------------

class ImageVanished(BuildError):
    """The image a build produced was removed before the build could hold it."""


def _container_labels(stack: Stack) -> dict[str, str]:
    return {BUILD_CONTAINER_LABEL: stack.name}


def read_image_files(client: docker.DockerClient, image: str, paths: Sequence[str],
                     labels: Mapping[str, str]) -> dict[str, bytes]:
    """The bytes of each file at `paths` in `image`, without running anything in it."""
    out: dict[str, bytes] = {}
    with created_container(client, image, name_prefix="sglstack-verify", labels=labels, command=["true"],
                           entrypoint=[], network_disabled=True) as container:
        for path in paths:
            try:
                stream, _ = container.get_archive(path)
            except docker.errors.NotFound:
                raise BuildError(f"the built image has no {path}") from None
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                extracted = tar.extractfile(member) if member is not None else None
                if extracted is None:
                    raise BuildError(f"{path} in the built image is not a file")
                out[path] = extracted.read()
    return out


def _untag(client: docker.DockerClient, ref: str) -> None:
    """Remove exactly the tag `ref` (never another name of the image); retried, never silenced.

    Each build holds its image under a tag of its own, so removing ours leaves a concurrent build's
    intact. If a container we did not start uses the image under this one name, the daemon refuses a
    plain removal (409); removing the name with force then drops the name, and the daemon keeps an image
    that a running container uses (one only a stopped container uses goes, as with `docker rmi -f`; that
    container keeps its layers and still starts).
    """
    last: Exception | None = None
    for attempt in range(UNTAG_ATTEMPTS):
        try:
            client.api.remove_image(ref, noprune=True)
            return
        except docker.errors.ImageNotFound:
            return
        except docker.errors.APIError as exc:
            last = exc
            if exc.status_code == 409:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.api.remove_image(ref, force=True, noprune=True)
                return
        except requests.RequestException as exc:
            last = exc
        time.sleep(0.2 * 2 ** attempt)
    reason = str(last).splitlines()[0][:200] if last else "unknown"
    raise BuildError(f"could not remove the temporary tag {ref} ({reason}); remove it with: docker rmi {ref}")


@contextlib.contextmanager
def held_image(client: docker.DockerClient, image_id: str, ref: str) -> Iterator[str]:
    """`image_id` under the temporary tag `ref` while the block runs; the tag goes on every exit.

    The hold keeps the image alive while this build reads and stamps it: a concurrent build of the same
    config, which produced the same image and removes its own tag, cannot make it vanish in between.
    """
    held = parse_image_reference(ref)
    repo, tag = held.name, held.tag
    try:
        try:
            client.api.tag(image_id, repo, tag)
        except docker.errors.ImageNotFound:
            raise ImageVanished(f"the image {image_id[:19]} that BuildKit produced is gone (removed by another "
                                f"process before it could be held): run the build again") from None
        yield ref
    finally:
        # Also when the tag call itself was interrupted: the daemon may have set it anyway.
        _untag(client, ref)


def verified_facts(client: docker.DockerClient, image: str, stack: Stack, target: str,
                   lock: Lock | None = None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The patch manifest and, for the serving image, what is really installed in it.

    The runtime stage verified its installed, patched tree and wrote both files in its last RUN step (a
    failure there fails the build), so they are read back here without running the image again. The
    `sglang-src` stage only applies the patches (`apply` checks its result before writing), so a build
    of that target verifies its tree once, in one container.
    """
    labels = _container_labels(stack)
    if target == FINAL_TARGET:
        files = read_image_files(client, image, (RUNTIME_MANIFEST, RUNTIME_INSTALLED), labels)
        manifest, info = (json.loads(files[p]) for p in (RUNTIME_MANIFEST, RUNTIME_INSTALLED))
        check_pins(stack, info, lock)
        return manifest, info
    if not stack.patches:
        return json.loads(read_image_files(client, image, (SRC_MANIFEST,), labels)[SRC_MANIFEST]), None
    verify = (f"PYTHONPATH=/opt/sglstack/tools python3 -m patchkit verify --root {SRC_TREE} "
              f"--patches-dir /opt/sglstack/patches --manifest {SRC_MANIFEST} "
              f"{' '.join(shlex.quote(i) for i in stack.patches)} >&2 && cat {SRC_MANIFEST}")
    with running_container(client, image, command=["bash", "-c", verify], name_prefix="sglstack-verify",
                           labels=labels, entrypoint=[], network_disabled=True) as container:
        code = int(container.wait(timeout=600).get("StatusCode", 1))
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    if code != 0:
        last = (err or out).strip().splitlines()
        raise BuildError(f"stack '{stack.name}': patch verification in the built image failed: "
                         f"{last[-1] if last else f'exit {code}'}")
    return json.loads(out), None


IMAGECHECK = "/opt/sglstack/tools/imagecheck.py"
IMAGECHECK_TIMEOUT_S = 1200  # importing SGLang and torch for --help on a loaded 2-core machine takes minutes


def check_base_image(client: docker.DockerClient, stack: Stack) -> None:
    """A stack that pins its base by image id builds only on that image (one line otherwise)."""
    if not stack.base_image_id:
        return
    try:
        found = str(client.images.get(stack.base_image).id)
    except docker.errors.ImageNotFound:
        raise BuildError(f"stack '{stack.name}': base_image {stack.base_image} is not on this engine (the stack "
                         f"pins image {stack.base_image_id}: make or load that image and tag it so)") from None
    if found != stack.base_image_id:
        raise BuildError(f"stack '{stack.name}': base_image {stack.base_image} is image {found}, but the stack pins "
                         f"base_image_id {stack.base_image_id}")


def serving_argvs(stack: Stack) -> list[list[str]]:
    """The server argv of each way the stack is served (with speculation, and the smoke's baseline), after
    `python3 -m sglang.launch_server`: what smoke, compose and the manifests run."""
    spec = serving_spec(stack)
    argvs = [serving_argv(spec)[len(LAUNCH):]]
    if spec.speculative_on:
        argvs.append(serving_argv(spec.baseline())[len(LAUNCH):])
    return argvs


def image_check_command(stack: Stack) -> list[str]:
    """`imagecheck.py`'s command line: shared libraries always; the server's --help and the serving argv
    where SGLang is installed with its requirements (a `install_deps: false` test stack's
    SGLang cannot import, by design)."""
    command = ["python", IMAGECHECK]
    if stack.sglang.install_deps:
        command += ["--server-help", *(f"--argv={json.dumps(a)}" for a in serving_argvs(stack))]
    return command


def run_image_checks(client: docker.DockerClient, image: str, stack: Stack) -> dict[str, Any]:
    """Run the in-image checks in a container of `image` (network off); raise ImageCheckFailed on a problem."""
    with running_container(client, image, command=image_check_command(stack), name_prefix="sglstack-check",
                           labels=_container_labels(stack), entrypoint=[], network_disabled=True) as container:
        code = int(container.wait(timeout=IMAGECHECK_TIMEOUT_S).get("StatusCode", 1))
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    try:
        report = json.loads(out) if code == 0 else None
    except ValueError:
        report = None
    if report is None:
        last = (err or out).strip().splitlines()
        raise ImageCheckFailed(f"stack '{stack.name}': the in-image checks did not run: "
                               f"{last[-1] if last else f'exit {code}'}")
    problems = image_check_problems(report, stack.shared_libraries)
    if problems:
        raise ImageCheckFailed(f"stack '{stack.name}': the image fails its in-image checks: {'; '.join(problems)}")
    _, waived, stale = waived_libraries(report, stack.shared_libraries)
    return {**report, "waived_libraries": waived, "notes": stale}


def stamp_labels(builder: Builder, base_ref: str, labels: dict[str, str], docker_host: str | None) -> str:
    """The image `base_ref` names, with `labels` added and no layer added (a FROM-only build).

    BuildKit cannot build FROM an image id, so the caller holds the image under a temporary tag. That
    tag exists only in the local engine, which a buildx builder of its own (docker-container, remote,
    kubernetes: `--builder NAME`) cannot see: the stamp runs on the engine's own builder, `default`.
    """
    if builder.instance is not None:
        builder = dataclasses.replace(builder, instance="default")
    with tempfile.TemporaryDirectory(prefix="sglstack-stamp-") as tmp:
        work = Path(tmp)
        dockerfile = work / "Dockerfile"
        dockerfile.write_text(f"FROM {base_ref}\n", encoding="utf-8")
        empty = work / "context"
        empty.mkdir()
        req = BuildRequest(dockerfile=dockerfile, context=empty, labels=labels)
        return run_build(builder, req, log_path=work / "stamp.log", docker_host=docker_host, show_progress=False)


def existing_verified_image(client: docker.DockerClient, tag: str, config_hash: str) -> str | None:
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    labels = image.labels or {}
    if labels.get(CONFIG_HASH_LABEL) == config_hash and labels.get(VERIFIED_LABEL) == "true":
        return str(image.id)
    return None


# ---- records ---------------------------------------------------------------------------------------

def record_path_for(out_dir: Path, target: str) -> Path:
    return out_dir / ("record.json" if target == FINAL_TARGET else f"record-{target}.json")


def record_for_reused_image(client: docker.DockerClient, stack: Stack, image_id: str, tag: str, config_hash: str,
                            target: str, out_dir: Path, source: str | None = None) -> Path:
    """Keep the build record of a reused image; write one from its labels when this folder has none."""
    path = record_path_for(out_dir, target)
    if path.exists():
        try:
            if json.loads(path.read_text()).get("config_hash") == config_hash:
                return path
        except ValueError:
            pass
    labels = client.images.get(image_id).labels or {}
    write_record(path, {
        "stack": stack.name, "target": target, "image_id": image_id, "tag": tag, "config_hash": config_hash,
        "reused": source or "local image", "pins": stack.pins(),
        "patches": {k.removeprefix(PATCH_LABEL_PREFIX): v for k, v in labels.items()
                    if k.startswith(PATCH_LABEL_PREFIX)},
        "labels": labels,
    })
    return path


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write the record whole or not at all (a temp file next to it, then an atomic rename)."""
    write_text(containing_root(path.parent, build_root()), path, json.dumps(record, indent=2, sort_keys=True) + "\n")


# ---- the build -------------------------------------------------------------------------------------

def build_stack(stack: Stack, options: BuildOptions) -> BuildResult:
    """Build, verify, stamp and tag one stack; skip when a verified image of this config exists.

    Under the stack's lock: two builds of one stack would render into one context and hash it half
    written; the second is refused at once with one line."""
    check_build_folder(stack, options)
    with stack_lock(stack.name, "build"):
        return _build_stack(stack, options)


def check_build_folder(stack: Stack, options: BuildOptions) -> None:
    """A build folder that cannot be written is one line before anything (its lock included) is made."""
    require_writable(record_path_for(out_dir_for(stack, options), options.effective_target),
                     what="build record (under the build folder)")


def _build_stack(stack: Stack, options: BuildOptions) -> BuildResult:
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
        found = existing_verified_image(client, tag, config_hash)
        if found:
            console.print(f"[green]{stack.name}[/]: {tag} already built from config {config_hash[:12]} "
                          f"({found[:19]}): skipping the build (--force rebuilds)")
            record_path = record_for_reused_image(client, stack, found, tag, config_hash, target, out_dir)
            return BuildResult(stack.name, target, config_hash, found, tag, True, record_path, "none")
        remote = options.remote_lookup(stack, config_hash) if options.remote_lookup and target == FINAL_TARGET \
            else None
        if remote:
            console.print(f"[green]{stack.name}[/]: {remote} was built and verified from config {config_hash[:12]}: "
                          f"pulling it instead of rebuilding (--force rebuilds)")
            image = client.images.pull(remote)
            image.tag(tag)
            record_path = record_for_reused_image(client, stack, str(image.id), tag, config_hash, target, out_dir,
                                                  source=remote)
            return BuildResult(stack.name, target, config_hash, str(image.id), tag, True, record_path, "none")
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
        for attempt in range(2):
            with timer.phase("build"):
                image_id = run_build(builder, request, log_path=out_dir / "build.log",
                                     docker_host=options.docker_host, show_progress=options.show_progress)
            try:
                held = hold.enter_context(held_image(client, image_id, temporary_ref(stack, config_hash)))
                break
            except ImageVanished:
                # A concurrent build of this config removed its own hold on the same image between our
                # export and our hold: the image went with it. BuildKit's cache makes it again at once.
                if attempt:
                    raise
        with timer.phase("verify"):
            manifest, info = verified_facts(client, held, stack, target, options.lock)
            checks = run_image_checks(client, held, stack) if target == FINAL_TARGET else None
            coverage = build_coverage(client, held, stack, serving_image=target == FINAL_TARGET,
                                      installed=(info or {}).get("distributions"))
        size = None
        if target == FINAL_TARGET:
            # After verification, before the image is stamped and tagged: an image over budget is not released.
            with timer.phase("size"):
                size = measure_and_gate(client, held, stack.name, stack.size,
                                        record_path_for(out_dir, target),
                                        lambda table: console.print(table, markup=False, highlight=False,
                                                                    soft_wrap=True))
        inventory = None
        if target == FINAL_TARGET:
            with timer.phase("sbom"):
                inventory = sbom_inventory(client, held, stack, options.lock)
        lock_notes = lock_mismatches(options.lock, info)[1] if options.lock and info else []
        for note in lock_notes:
            console.print(f"[yellow]{stack.name}[/]: {note}", highlight=False)
        base = local_image(client, stack.base_image)
        base_digest = registry_digest(stack.base_image, base.repo_digests) if base else None
        with timer.phase("stamp"):
            final_id = stamp_labels(builder, held, {**verified_labels(manifest, info), **coverage.labels,
                                                    **lock_labels(options.lock, base_digest)},
                                    options.docker_host)
            client.images.get(final_id).tag(tag)
    built_at = utc_now()
    record = {
        "stack": stack.name,
        "target": target,
        "image_id": final_id,
        "tag": tag,
        "config_hash": config_hash,
        "built_at": utc_timestamp(built_at),
        "builder": {"kind": builder.kind, "cli": builder.cli, "client_version": builder.client_version},
        "pins": stack.pins(),
        "overrides": [o.model_dump(mode="json") for o in stack.overrides],
        "patches": manifest,
        "installed": (info or {}).get("distributions", {}),
        "torch": (info or {}).get("torch"),
        "coverage": coverage.record,
        "image_checks": checks,
        "size": size,
        "durations_s": timer.durations,
        "dockerfile": str(rendered.dockerfile),
        "base_image": {"name": stack.base_image, "digest": base_digest, "image_id": base.id if base else None},
        "sglang": stack.sglang.model_dump(mode="json"),
        "lock": _lock_record(options.lock, lock_notes),
        "labels": client.images.get(final_id).labels or {},
        "provenance": {"patches": {pid: tree_sha256(rendered.context / "patches" / pid) for pid in stack.patches},
                       "sglstack": sglstack_identity(), "started_at": started_at,
                       "lock_sglang_commit": options.lock.sglang_commit if options.lock else None},
    }
    if inventory is not None:
        record["sbom"] = write_sbom(out_dir, inventory, tag=tag, image_id=final_id, built_at=built_at,
                                    lock=options.lock)
    record_path = record_path_for(out_dir, target)
    write_record(record_path, record)
    console.print(f"[green]{stack.name}[/]: built and verified {tag} ({final_id[:19]}); record {record_path}")
    return BuildResult(stack.name, target, config_hash, final_id, tag, False, record_path, builder.kind)


def sbom_inventory(client: docker.DockerClient, image: str, stack: Stack, lock: Lock | None) -> Inventory:
    """The image's packages as listed inside it for its SBOM; a Python distribution in the image and not
    in the lock, or the reverse, fails the build (Debian packages are listed, not compared)."""
    inventory = image_inventory(client, image, labels=_container_labels(stack))
    problems = lock_problems(inventory, lock) if lock is not None else []
    if problems:
        raise PinMismatch(f"stack '{stack.name}': the image's SBOM does not match its lock: {'; '.join(problems)}")
    return inventory


def write_sbom(out_dir: Path, inventory: Inventory, *, tag: str, image_id: str, built_at: dt.datetime,
               lock: Lock | None) -> dict[str, Any]:
    """Write `sbom.cdx.json` beside the record (whole or not at all); what the record says of it."""
    body = sbom_document(inventory, image_name=tag, image_id=image_id, created=built_at, lock=lock)
    path = out_dir / SBOM_FILE
    tmp = path.with_suffix(f".json.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(body)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return {"path": str(path), "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body),
            "python": len(inventory.python), "debian": len(inventory.debian),
            "compared_with_lock": lock is not None}


def lock_labels(lock: Lock | None, base_digest: str | None) -> dict[str, str]:
    labels = {lb.BASE_DIGEST_LABEL: base_digest} if base_digest else {}
    if lock is not None:
        labels[lb.LOCK_LABEL] = lock_content_sha256(lock)
    return labels


def _lock_record(lock: Lock | None, notes: list[str]) -> dict[str, Any] | None:
    if lock is None:
        return None
    return {"stack_sha256": lock.stack_sha256, "content_sha256": lock_content_sha256(lock),
            "resolved_at": lock.resolved_at, "packages": len(lock.packages), "hashed": lock.hashed_count,
            "unresolved": [str(u) for u in lock.unresolved], "notices": notes}


def _lock_summary(lock: Lock | None) -> str:
    if lock is None:
        return "none: not reproducible to the last package"
    return f"{len(lock.packages)} packages, {lock.hashed_count} hash-checked, resolved {lock.resolved_at}"


# ---- the dry run -----------------------------------------------------------------------------------

def describe_build(stack: Stack, options: BuildOptions) -> tuple[list[str], str]:
    """What the build would do, without touching Docker (rendering goes to a temp folder), and the
    config hash it would build."""
    target = options.effective_target
    with tempfile.TemporaryDirectory(prefix="sglstack-plan-") as tmp:
        rendered = add_git_source(stack, write_build_context(stack, Path(tmp), lock=options.lock))
        config_hash = compute_config_hash(rendered, target, stack.build_platform)
        copies = cuda_copies(rendered.dockerfile.read_text(encoding="utf-8"), lock_parts(options.lock))
    out_dir = out_dir_for(stack, options)
    secret_files, secret_env = _planned_secrets(options)
    shown_secrets = [*secret_files, *secret_env, *index_netrc_secret(stack)[0]]
    lines = [f"stack:        {stack.name} ({stack.description})",
             f"render:       {out_dir / 'Dockerfile'} + {out_dir / 'context'}/ ({len(rendered.files)} files)",
             f"config hash:  {config_hash}",
             f"lock:         {_lock_summary(options.lock)}",
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
        lines.append("verify:       in the runtime stage (patchkit verify on the installed tree, installed "
                     "packages); read back and compared with the pins; kernel coverage of cuda_arch_list "
                     "(cuobjdump)")
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


def _planned_secrets(options: BuildOptions) -> tuple[dict[str, Path], dict[str, str]]:
    value = options.ca_bundle or os.environ.get(CA_BUNDLE_ENV)
    files = {"ca_bundle": Path(value)} if value else {}
    env = {"hf_token": HF_TOKEN_ENV} if os.environ.get(HF_TOKEN_ENV) else {}
    return files, env
