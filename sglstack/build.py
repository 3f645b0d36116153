"""`invoke build`: render -> config hash -> (skip if built) -> BuildKit build -> verify in a container
-> stamp verified facts as labels -> tag -> build record -> (optionally) release.

A tag is only ever set on an image that built and verified; a failed build or verification leaves no tag.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import shlex
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .builder import Builder, BuildRequest, build_argv, build_env, detect_builder, run_build
from .confighash import config_hash, read_context
from .errors import BuildError, PinMismatch, SglstackError
from .gitsource import GitSource
from .matrix import Stack, load_matrix
from .render import GIT_SOURCE_DIR, RenderedContext, write_build_context
from .verify import pin_mismatches

CA_BUNDLE_ENV = "SGLSTACK_CA_BUNDLE"
HF_TOKEN_ENV = "HF_TOKEN"
FINAL_TARGET = "runtime"
CONFIG_HASH_LABEL = "io.sglstack.config-hash"
VERIFIED_LABEL = "io.sglstack.verified"


@dataclass(frozen=True)
class BuildOptions:
    target: str | None = None
    no_cache: bool = False
    force: bool = False
    ca_bundle: str | None = None
    docker_cli: str | None = None
    docker_host: str | None = None
    out_dir: Path | None = None
    show_progress: bool = True
    registry: str | None = None  # where to look for an already-built candidate (default: the stack's)
    check_registry: bool = True
    patches_dir: Path | None = None

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

def local_tag(stack: Stack, digest: str, target: str) -> str:
    suffix = "" if target == FINAL_TARGET else f"{target}-"
    return f"sglstack/{stack.name}:{suffix}{digest[:12]}"


def resolve_ca_bundle(option: str | None) -> Path | None:
    value = option or os.environ.get(CA_BUNDLE_ENV)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise BuildError(f"CA bundle '{value}' (from --ca-bundle or {CA_BUNDLE_ENV}) is not a file")
    return path


def build_labels(stack: Stack, digest: str, target: str, builder: str) -> dict[str, str]:
    """Labels known before the build (the Dockerfile's own labels carry the pins and patch ids)."""
    return {CONFIG_HASH_LABEL: digest, "io.sglstack.target": target, "io.sglstack.builder": builder}


def add_git_source(stack: Stack, rendered: RenderedContext) -> RenderedContext:
    """Export a git source's tree at its commit into the context (a context file, so the config hash
    covers it): git on this host fetches it, from any repository it can clone."""
    git = stack.sglang.git
    if git is None:
        return rendered
    GitSource(git.repo).export(git.ref, git.subdirectory, rendered.context / GIT_SOURCE_DIR)
    files = tuple(sorted(p for p in rendered.context.rglob("*") if p.is_file()))
    return dataclasses.replace(rendered, files=files)


def compute_config_hash(rendered: RenderedContext, target: str, platform: str | None) -> str:
    return config_hash(rendered.dockerfile.read_text(encoding="utf-8"),
                       read_context(rendered.context, rendered.files), target=target, platform=platform)


def verified_labels(manifest: list[dict[str, Any]], image_info: dict[str, Any] | None) -> dict[str, str]:
    labels = {VERIFIED_LABEL: "true"}
    for entry in manifest:
        labels[f"io.sglstack.patch.{entry.get('id')}"] = (
            f"{entry.get('status')} sha256:{entry.get('sha256_before', '')[:16]}->"
            f"{entry.get('sha256_after', '')[:16]}")
    if image_info is not None:
        freeze = "\n".join(f"{k}=={v}" for k, v in sorted(image_info.get("distributions", {}).items()))
        labels["io.sglstack.freeze-sha256"] = hashlib.sha256(freeze.encode()).hexdigest()
        if image_info.get("torch") and image_info["torch"].get("version"):
            labels["io.sglstack.torch"] = f"{image_info['torch']['version']} cuda {image_info['torch'].get('cuda')}"
    return labels


# ---- side effects ----------------------------------------------------------------------------------

@contextlib.contextmanager
def build_secrets(ca_bundle: Path | None) -> Iterator[dict[str, Path]]:
    """Secrets as files for `--secret id=...,src=...`; the HF token goes through a 0600 temp file."""
    secrets: dict[str, Path] = {}
    if ca_bundle:
        secrets["ca_bundle"] = ca_bundle
    token = os.environ.get(HF_TOKEN_ENV)
    with tempfile.TemporaryDirectory(prefix="sglstack-secrets-") as tmp:
        if token:
            path = Path(tmp) / "hf_token"
            path.touch(mode=0o600)
            path.write_text(token, encoding="utf-8")
            secrets["hf_token"] = path
        yield secrets


def _container_output(client, image: str, command: list[str]) -> tuple[int, str, str]:
    from .dockerhost import running_container

    with running_container(client, image, command=command, name_prefix="sglstack-verify", entrypoint=[],
                           network_disabled=True) as container:
        code = int(container.wait(timeout=600).get("StatusCode", 1))
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    return code, out, err


# Where each target keeps the patched tree and the patch manifest.
_PATCHED_TREE = {
    "sglang-src": ("/src/tree", "/out/patches.json"),
    FINAL_TARGET: ('"$(python3 -c \'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])\')"',
                   "/opt/sglstack/patches.json"),
}


def verify_image(client, image: str, stack: Stack, target: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Run the patch verifier and the installed-package report in containers of the built image.

    Returns the image's patch manifest and, for the serving image, what is really installed.
    """
    root, manifest_path = _PATCHED_TREE[target]
    verify = ""
    if stack.patches:
        verify = (f"PYTHONPATH=/opt/sglstack/tools python3 -m patchkit verify --root {root} "
                  f"--patches-dir /opt/sglstack/patches --manifest {manifest_path} "
                  f"{' '.join(shlex.quote(i) for i in stack.patches)} >&2 && ")
    # One container verifies and hands back the manifest it verified against.
    code, out, err = _container_output(client, image, ["bash", "-c", f"{verify}cat {manifest_path}"])
    if code != 0:
        last = (err or out).strip().splitlines()
        raise BuildError(f"stack '{stack.name}': patch verification in the built image failed: "
                         f"{last[-1] if last else f'exit {code}'}")
    manifest = json.loads(out) if out.strip() else []
    if target != FINAL_TARGET:
        return manifest, None
    code, out, err = _container_output(client, image, ["python3", "/opt/sglstack/tools/imageinfo.py"])
    if code != 0:
        raise BuildError(f"stack '{stack.name}': cannot read installed packages from the image: {err.strip()[-300:]}")
    info = json.loads(out)
    problems = pin_mismatches(stack, info)
    if problems:
        raise PinMismatch(f"stack '{stack.name}': the image does not match its pins: {'; '.join(problems)}")
    return manifest, info


def stamp_labels(builder: Builder, client, image_id: str, labels: dict[str, str],
                 docker_host: str | None) -> str:
    """Add labels to a verified image without adding a layer (a FROM-only build).

    BuildKit cannot build FROM an image id, so the image gets a short-lived tag for the stamp build.
    """
    import secrets as pysecrets

    temp_ref = f"sglstack-unverified/stamp:{pysecrets.token_hex(6)}"
    client.images.get(image_id).tag(temp_ref)
    try:
        with tempfile.TemporaryDirectory(prefix="sglstack-stamp-") as tmp:
            work = Path(tmp)
            dockerfile = work / "Dockerfile"
            dockerfile.write_text(f"FROM {temp_ref}\n", encoding="utf-8")
            empty = work / "context"
            empty.mkdir()
            req = BuildRequest(dockerfile=dockerfile, context=empty, labels=labels)
            return run_build(builder, req, log_path=work / "stamp.log", docker_host=docker_host,
                             show_progress=False)
    finally:
        with contextlib.suppress(Exception):
            client.images.remove(temp_ref, noprune=True)


def existing_verified_image(client, tag: str, digest: str) -> str | None:
    import docker.errors

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    labels = image.labels or {}
    if labels.get(CONFIG_HASH_LABEL) == digest and labels.get(VERIFIED_LABEL) == "true":
        return image.id
    return None


def image_in_registry(stack: Stack, digest: str, options: BuildOptions) -> str | None:
    """The candidate of this config in the target registry, as `repo@sha256:...`, if it is there.

    A registry that cannot be reached is not an error here: the build simply goes ahead.
    """
    import requests

    from .errors import RegistryError
    from .publish import target_repository
    from .registry import RegistryClient
    from .tags import release_tags

    try:
        repo = target_repository(stack, options.registry)
        candidate = release_tags(stack, digest, dt.date.today()).candidate
        client = RegistryClient.from_environment(repo.registry, attempts=1, timeout_s=3.0)
        found = client.manifest_digest(repo.path, candidate)
        if not found:
            return None
        labels = (client.image_config(repo.path, found).get("config") or {}).get("Labels") or {}
    except (RegistryError, requests.RequestException, OSError):
        return None
    if labels.get(CONFIG_HASH_LABEL) == digest and labels.get(VERIFIED_LABEL) == "true":
        return repo.ref(found)
    return None


def record_path_for(out_dir: Path, target: str) -> Path:
    return out_dir / ("record.json" if target == FINAL_TARGET else f"record-{target}.json")


def record_for_reused_image(client, stack: Stack, image_id: str, tag: str, digest: str, target: str, out_dir: Path,
                            source: str | None = None) -> Path:
    """Keep the build record of a reused image; write one from its labels when this folder has none."""
    path = record_path_for(out_dir, target)
    if path.exists():
        try:
            if json.loads(path.read_text()).get("config_hash") == digest:
                return path
        except ValueError:
            pass
    labels = client.images.get(image_id).labels or {}
    write_record(path, {
        "stack": stack.name, "target": target, "image_id": image_id, "tag": tag, "config_hash": digest,
        "reused": source or "local image", "pins": stack.pins(),
        "patches": {k.removeprefix("io.sglstack.patch."): v for k, v in labels.items()
                    if k.startswith("io.sglstack.patch.")},
        "labels": labels,
    })
    return path


def write_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def build_stack(stack: Stack, options: BuildOptions) -> BuildResult:
    """Build, verify, stamp and tag one stack; skip when a verified image of this config exists."""
    from .dockerhost import docker_client
    from .ui import console as make_console

    console = make_console()
    timer = PhaseTimer()
    out_dir = options.out_dir or Path("build") / stack.name
    target = options.effective_target
    with timer.phase("render"):
        rendered = (write_build_context(stack, out_dir, options.patches_dir) if options.patches_dir
                    else write_build_context(stack, out_dir))
        rendered = add_git_source(stack, rendered)
        digest = compute_config_hash(rendered, target, stack.build_platform)
    tag = local_tag(stack, digest, target)
    client = docker_client(options.docker_host)
    if not options.force and not options.no_cache:
        found = existing_verified_image(client, tag, digest)
        if found:
            console.print(f"[green]{stack.name}[/]: {tag} already built from config {digest[:12]} "
                          f"({found[:19]}): skipping the build (--force rebuilds)")
            record_path = record_for_reused_image(client, stack, found, tag, digest, target, out_dir)
            return BuildResult(stack.name, target, digest, found, tag, True, record_path, "none")
        remote = image_in_registry(stack, digest, options) if options.check_registry and target == FINAL_TARGET \
            else None
        if remote:
            console.print(f"[green]{stack.name}[/]: {remote} was built and verified from config {digest[:12]}: "
                          f"pulling it instead of rebuilding (--force rebuilds)")
            image = client.images.pull(remote)
            image.tag(tag)
            record_path = record_for_reused_image(client, stack, image.id, tag, digest, target, out_dir,
                                                  source=remote)
            return BuildResult(stack.name, target, digest, image.id, tag, True, record_path, "none")
    builder = detect_builder(options.docker_cli)
    console.print(f"[bold]{stack.name}[/]: building target '{target}' (config {digest[:12]}) "
                  f"with {builder.describe()}")
    ca_bundle = resolve_ca_bundle(options.ca_bundle)
    with build_secrets(ca_bundle) as secrets, timer.phase("build"):
        request = BuildRequest(dockerfile=rendered.dockerfile, context=rendered.context, target=target,
                               no_cache=options.no_cache, secrets=secrets,
                               labels=build_labels(stack, digest, target, builder.kind),
                               platform=stack.build_platform)
        image_id = run_build(builder, request, log_path=out_dir / "build.log", docker_host=options.docker_host,
                             show_progress=options.show_progress)
    with timer.phase("verify"):
        manifest, info = verify_image(client, image_id, stack, target)
    with timer.phase("stamp"):
        final_id = stamp_labels(builder, client, image_id, verified_labels(manifest, info), options.docker_host)
        client.images.get(final_id).tag(tag)
    record = {
        "stack": stack.name,
        "target": target,
        "image_id": final_id,
        "tag": tag,
        "config_hash": digest,
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "builder": {"kind": builder.kind, "cli": builder.cli, "client_version": builder.client_version},
        "pins": stack.pins(),
        "overrides": [o.model_dump(mode="json") for o in stack.overrides],
        "patches": manifest,
        "installed": (info or {}).get("distributions", {}),
        "torch": (info or {}).get("torch"),
        "durations_s": timer.durations,
        "dockerfile": str(rendered.dockerfile),
    }
    record_path = record_path_for(out_dir, target)
    write_record(record_path, record)
    console.print(f"[green]{stack.name}[/]: built and verified {tag} ({final_id[:19]}); record {record_path}")
    return BuildResult(stack.name, target, digest, final_id, tag, False, record_path, builder.kind)


# ---- the dry run -----------------------------------------------------------------------------------

def describe_plan(stack: Stack, options: BuildOptions, *, push: bool, registry: str | None) -> list[str]:
    """What `invoke build` would do, without touching Docker (rendering goes to a temp folder)."""
    target = options.effective_target
    with tempfile.TemporaryDirectory(prefix="sglstack-plan-") as tmp:
        rendered = add_git_source(stack, write_build_context(stack, Path(tmp)))
        digest = compute_config_hash(rendered, target, stack.build_platform)
    out_dir = options.out_dir or Path("build") / stack.name
    lines = [f"stack:        {stack.name} ({stack.description})",
             f"render:       {out_dir / 'Dockerfile'} + {out_dir / 'context'}/ ({len(rendered.files)} files)",
             f"config hash:  {digest}",
             f"local tag:    {local_tag(stack, digest, target)} (set only after verification)"]
    try:
        builder = detect_builder(options.docker_cli)
        env = build_env(builder, options.docker_host)
        fake = BuildRequest(dockerfile=out_dir / "Dockerfile", context=out_dir / "context", target=target,
                            no_cache=options.no_cache, labels=build_labels(stack, digest, target, builder.kind),
                            secrets=_planned_secrets(options), platform=stack.build_platform)
        argv = build_argv(builder, fake, out_dir / ".iid")
        prefix = " ".join(f"{k}={v}" for k, v in env.items())
        lines.append(f"build:        {prefix + ' ' if prefix else ''}{shlex.join(argv)}")
    except SglstackError as exc:
        lines.append(f"build:        not possible here: {exc}")
    lines.append(f"secrets:      {', '.join(_planned_secrets(options)) or 'none'} (BuildKit secrets, never layers)")
    lines.append("verify:       patchkit verify + installed packages vs pins, in a container of the image")
    if target != FINAL_TARGET:
        lines.append(f"push:         no (only the '{FINAL_TARGET}' target is released)")
        return lines
    from .smoke import launch_commands, smoke_options
    from .tags import release_tags

    # Without --push nothing leaves this machine, but the plan still shows what a release would do.
    when = "" if push else " (with --push)"
    tags = release_tags(stack, digest, dt.date.today())
    repo = registry or stack.publish.repository
    if not push:
        lines.append("push:         no (add --push to release: candidate push, smoke by digest, promote)")
    lines.append(f"push{when}: {repo}:{tags.candidate} (candidate)")
    for kind, cmd in launch_commands(smoke_options(stack)).items():
        lines.append(f"smoke {kind}{when}: {shlex.join(cmd)}")
    lines.append(f"promote{when}: {', '.join(f'{repo}:{t}' for t in tags.release)} -> the tested digest")
    return lines


def _planned_secrets(options: BuildOptions) -> dict[str, Path]:
    secrets: dict[str, Path] = {}
    value = options.ca_bundle or os.environ.get(CA_BUNDLE_ENV)
    if value:
        secrets["ca_bundle"] = Path(value)
    if os.environ.get(HF_TOKEN_ENV):
        secrets["hf_token"] = Path("<temp file holding $HF_TOKEN>")
    return secrets


def build_command(stacks_file: str, stack_name: str, *, target: str | None = None, no_cache: bool = False,
                  force: bool = False, dry_run: bool = False, push: bool = False, ca_bundle: str | None = None,
                  docker_cli: str | None = None, docker_host: str | None = None, registry: str | None = None,
                  smoke_opts: list[str] | None = None) -> int:
    from .ui import console as make_console

    stack = load_matrix(stacks_file).get(stack_name)
    options = BuildOptions(target=target, no_cache=no_cache, force=force, ca_bundle=ca_bundle,
                           docker_cli=docker_cli, docker_host=docker_host, registry=registry)
    if push and target and target != FINAL_TARGET:
        raise BuildError(f"stack '{stack_name}': --push releases the serving image; drop --target {target}")
    if dry_run:
        for line in describe_plan(stack, options, push=push, registry=registry):
            make_console().print(line, highlight=False, markup=False)
        return 0
    result = build_stack(stack, options)
    if not push:
        return 0
    from .publish import release

    return release(stack, image_ref=result.tag, config_hash=result.config_hash, registry=registry,
                   docker_host=docker_host, smoke_opts=list(smoke_opts or []), force=force)
