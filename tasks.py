"""Invoke tasks: parse options, call one sglstack function per task. No logic lives here.

`invoke --list` shows every task; `invoke --help TASK` its options.
"""

from __future__ import annotations

import functools
import inspect
import signal
import sys
from pathlib import Path

from invoke import Argument, Collection, Exit, Program, Task
from invoke import task as _invoke_task

from sglstack.core.errors import SglstackError
from sglstack.core.signals import exit_code_of, signals_raise

# Standard library only: the deployment tasks' options, read when invoke loads this file.
from sglstack.deploy.options import (
    DeployOptions,
    LogsOptions,
    RollbackOptions,
    StatusOptions,
    UndeployOptions,
    task_options,
)

# The repo root's matrix, wherever invoke runs from (`invoke --search-root REPO ...` from another folder).
DEFAULT_STACKS = str(Path(__file__).resolve().parent / "stacks.yaml")


def task(**kwargs):
    """`invoke.task` with every option a --flag: a required option left positional would swallow
    `invoke TASK --help` as its value (invoke's parser fills positionals first)."""
    return _invoke_task(positional=[], **kwargs)


def _user_errors(fn):
    """Print an sglstack error as its one line and exit non-zero, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        params = list(inspect.signature(fn).parameters.values())[1:]
        given = {**dict(zip((p.name for p in params), args[1:], strict=False)), **kwargs}
        missing = [p.name for p in params if p.default is p.empty and given.get(p.name) is None]
        if missing:
            flags = ", ".join("--" + name.replace("_", "-") for name in missing)
            print(f"error: {fn.__name__.replace('_', '.')}: missing required option {flags}", file=sys.stderr)
            raise Exit(code=2)
        try:
            # SIGTERM and SIGHUP unwind like Ctrl-C, so every task's cleanup runs for all three.
            with signals_raise():
                return fn(*args, **kwargs)
        except SglstackError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise Exit(code=exc.exit_code) from None
        except KeyboardInterrupt as exc:
            code = exit_code_of(exc)
            print(f"interrupted ({signal.Signals(code - 128).name}): cleaned up", file=sys.stderr)
            raise Exit(code=code) from None

    return wrapper


def _exit_with(code: int) -> None:
    if code:
        raise Exit(code=code)


# ---- the matrix and rendering ----------------------------------------------------------------------

@task(help={"stacks-file": "the matrix file (default: stacks.yaml)",
            "check": "validate, and compare pins with SGLang's own requirements",
            "resolve": "with --check: also run the real resolver (uv) and name both sides of any conflict"})
@_user_errors
def stacks(c, stacks_file=DEFAULT_STACKS, check=False, resolve=False):
    """Print the stack matrix as a table; --check validates it and checks pin conflicts."""
    from sglstack.lock.conflicts import stacks_command

    _exit_with(stacks_command(stacks_file, check=check, resolve=resolve))


@task(help={"stack": "stack name from the matrix", "stacks-file": "the matrix file",
            "upgrade-package": "re-resolve only this package and what depends on it (repeatable)"},
      iterable=["upgrade_package"])
@_user_errors
def lock(c, stack, stacks_file=DEFAULT_STACKS, upgrade_package=None):
    """Resolve everything the stack's image installs (uv, with hashes) into locks/STACK.txt."""
    from sglstack.lock.flow import lock_command

    _exit_with(lock_command(stacks_file, stack, upgrade_packages=upgrade_package or []))


@task(help={"stack": "only this stack (default: every stack with a release pin)", "stacks-file": "the matrix file",
            "json": "also write the releases and their requirements as JSON to PATH"})
@_user_errors
def releases(c, stack=None, stacks_file=DEFAULT_STACKS, json=None):
    """SGLang releases on the index newer than each stack's pin, with the torch, kernel package and FlashInfer
    each requires."""
    from sglstack.upgrade.releases import releases_command

    _exit_with(releases_command(stacks_file, stack_name=stack, json_path=json))


@task(help={"stack": "stack name from the matrix", "sglang": "the SGLang release to move to",
            "as": "write the upgraded entry as a new stack NEW (inherits NAME; default: NAME in place)",
            "write": "edit the stacks file (comments kept) and write locks/NEW.txt, when the entry would pass "
                     "`invoke stacks --check`",
            "json": "also write the report as JSON to PATH", "stacks-file": "the matrix file"})
@_user_errors
def upgrade(c, stack, sglang, as_=None, write=False, json=None, stacks_file=DEFAULT_STACKS):
    """Move a stack to an SGLang release: derived pins, overrides, patches, lock, coverage, argv; a review
    report. Exit 0 ready, 1 review, 2 bad input."""
    from sglstack.upgrade.command import upgrade_command

    _exit_with(upgrade_command(stacks_file, stack, sglang, as_name=as_, write=write, json_path=json))


class _Positional(Argument):
    """A positional argument that takes `--help` / `-h` as a request for help, not as its value.

    invoke fills pending positional arguments before it looks at flags, so without this `invoke diff --help`
    would become A='--help' and then fail for want of B.
    """

    siblings: list[Argument]

    def set_value(self, value, cast=True):
        if value in HELP_FLAGS:
            for arg in self.siblings:
                Argument.set_value(arg, HELP_FLAGS[0], cast=False)
            return
        super().set_value(value, cast)


class _PositionalTask(Task):
    def get_arguments(self, ignore_unknown_help=None):
        args = super().get_arguments(ignore_unknown_help)
        positional = [arg for arg in args if arg.positional]
        for arg in positional:
            arg.__class__ = _Positional
            arg.siblings = positional
        return args


HELP_FLAGS = ("--help", "-h")


@_invoke_task(klass=_PositionalTask, positional=["a", "b"],
              help={"a": "A, the first argument (before): an image (tag, id, repo@sha256:...), a build record, "
                         "or a lock",
                    "b": "B, the second argument (after): the same kinds", "json": "print the diff as JSON",
                    "docker-host": "Docker engine URL to read images from (default: DOCKER_HOST / local socket)"})
@_user_errors
def diff(c, a, b, json=False, docker_host=None):
    """invoke diff A B [--json]: what changed from A to B (base image, pins, packages, patches, SGLang, labels)."""
    from sglstack.diff.sources import diff_command

    if a in HELP_FLAGS:
        Program(namespace=ns).run(["invoke", "--help", "diff"], exit=False)
        return
    _exit_with(diff_command(a, b, as_json=json, docker_host=docker_host))


@task(help={"stack": "stack name from the matrix", "stacks-file": "the matrix file",
            "out": "output folder (default: build/STACK, under SGLSTACK_BUILD_DIR if set)",
            "image": "image reference the compose file serves (default: the moving tag REPOSITORY:STACK); "
                     "REPO@sha256:... also writes the Kubernetes manifests (k8s/)",
            "nnodes": "k8s: pods (nodes) per LeaderWorkerSet group (default 1)",
            "host-network": "k8s: pods use the node's network (NCCL over the host's NICs)",
            "rdma": "k8s: an RDMA device-plugin resource per pod, RESOURCE[=COUNT] (e.g. rdma/ib)",
            "verify-key": "refuse --image unless it verifies against this ed25519 public key (PEM); "
                          "the manifests then name the verified digest"})
@_user_errors
def render(c, stack, stacks_file=DEFAULT_STACKS, out=None, image=None, nnodes=None, host_network=False, rdma=None,
           verify_key=None):
    """Render build/STACK/Dockerfile, its build context, compose file and (by digest) k8s manifests."""
    from sglstack.render.dockerfile import render_command
    from sglstack.render.k8s import K8sOptions  # at call time: pydantic and jinja2 would slow `invoke --list`

    if verify_key:
        from sglstack.attest.commands import verified_for_render  # at call time: only with --verify-key

        image = verified_for_render(image, verify_key)
    options = K8sOptions(nnodes=_whole_number(nnodes, "--nnodes", 1), host_network=host_network, rdma=rdma)
    render_command(stacks_file, stack, out_dir=out, image=image, k8s_options=options)


def _whole_number(raw, flag, default):
    if raw is None:
        return default
    try:
        return int(str(raw).strip())
    except ValueError:
        raise SglstackError(f"{flag} '{raw}': not a whole number") from None


# ---- build -----------------------------------------------------------------------------------------

@task(
    help={
        "stack": "stack name from the matrix",
        "stacks-file": "the matrix file",
        "target": "build one stage only (e.g. sglang-src)",
        "no-cache": "build without BuildKit's cache",
        "force": "rebuild even when an image of this config hash exists",
        "dry-run": "print the plan (render, build command, tags, smoke) without touching Docker",
        "push": "release: push a candidate, smoke it by digest, promote the tested digest",
        "ca-bundle": "extra CA bundle passed as a BuildKit secret (also SGLSTACK_CA_BUNDLE)",
        "docker-cli": "BuildKit-capable docker client binary (also SGLSTACK_DOCKER_CLI)",
        "docker-host": "Docker engine URL for the build (default: DOCKER_HOST / local socket)",
        "registry": "registry repository to push to (default: the stack's publish.repository)",
        "smoke-opt": "extra option for the release smoke, KEY=VALUE (repeatable)",
        "builder": "buildx builder instance to build on (docker buildx create --name NAME: docker-container, "
                   "remote buildkitd, kubernetes); needs buildx",
        "key": "--push: the ed25519 private key (PEM) that signs the release's attestations "
               "(also SGLSTACK_SIGNING_KEY: a path or the PEM; never written anywhere)",
        "unsigned": "--push without a signature (SBOM and provenance are still attached)",
    },
    iterable=["smoke_opt"],
)
@_user_errors
def build(c, stack, stacks_file=DEFAULT_STACKS, target=None, no_cache=False, force=False, dry_run=False,
          push=False, ca_bundle=None, docker_cli=None, docker_host=None, registry=None, smoke_opt=None,
          builder=None, key=None, unsigned=False):
    """Render and build a stack with BuildKit, verify the image, record it; --push releases it."""
    from sglstack.build.pipeline import build_command

    _exit_with(build_command(stacks_file, stack, target=target, no_cache=no_cache, force=force,
                             dry_run=dry_run, push=push, ca_bundle=ca_bundle, docker_cli=docker_cli,
                             docker_host=docker_host, registry=registry, smoke_opts=smoke_opt or [],
                             builder_name=builder, key=key, unsigned=unsigned))


# ---- attestations ----------------------------------------------------------------------------------

@_invoke_task(klass=_PositionalTask, positional=["ref"],
              help={"ref": "the image: REPO:TAG or REPO@sha256:... in a registry (or a local image)",
                    "json": "write the CycloneDX JSON to PATH instead of printing it",
                    "generate": "list the image itself even when the registry has an SBOM attached",
                    "docker-host": "Docker engine URL to list images on (default: DOCKER_HOST / local socket)"})
@_user_errors
def sbom(c, ref, json=None, generate=False, docker_host=None):
    """invoke sbom REF [--json PATH]: the image's SBOM (the attached one, else listed from the image)."""
    from sglstack.attest.commands import sbom_command  # at call time: cyclonedx is slow to import

    if ref in HELP_FLAGS:
        Program(namespace=ns).run(["invoke", "--help", "sbom"], exit=False)
        return
    _exit_with(sbom_command(ref, json_path=json, docker_host=docker_host, generate=generate))


@_invoke_task(klass=_PositionalTask, positional=["ref"], name="verify-image",
              help={"ref": "the image in its registry: REPO:TAG or REPO@sha256:...",
                    "key": "the signer's ed25519 public key (PEM)",
                    "json": "write what was checked (or why it was refused) to PATH as JSON"})
@_user_errors
def verify_image(c, ref, key=None, json=None):
    """invoke verify-image REF --key PUB: exit 0 only when a signature by that key covers exactly REF's digest
    and the SBOM and provenance it names (1: refused, 2: bad input)."""
    from sglstack.attest.commands import verify_image_command  # at call time: cryptography and the registry

    if ref in HELP_FLAGS:
        Program(namespace=ns).run(["invoke", "--help", "verify-image"], exit=False)
        return
    _exit_with(verify_image_command(ref, key=key, json_path=json))


@task(help={"stack": "only this stack (repeatable; default: the whole matrix)", "stacks-file": "the matrix file",
            "out": "the bake file (default: build/docker-bake.json, under SGLSTACK_BUILD_DIR if set)",
            "print": "print the bake file's JSON instead of the summary",
            "builder": "buildx builder instance for the printed (or run) bake command",
            "ca-bundle": "extra CA bundle passed as a BuildKit secret (also SGLSTACK_CA_BUNDLE)",
            "docker-cli": "docker client with buildx, for --run (also SGLSTACK_DOCKER_CLI)",
            "run": "run docker buildx bake too (needs buildx)"},
      iterable=["stack"])
@_user_errors
def bake(c, stack=None, stacks_file=DEFAULT_STACKS, out=None, print=False, builder=None, ca_bundle=None,
         docker_cli=None, run=False):
    """Write build/docker-bake.json (a target per stack and stage) and its contexts; print the bake command."""
    from sglstack.build.bake import bake_command

    _exit_with(bake_command(stacks_file, stack or [], out=out, print_only=print, builder_name=builder,
                            ca_bundle=ca_bundle, docker_cli=docker_cli, run=run))


@task(help={"stack": "stack name from the matrix", "stacks-file": "the matrix file",
            "json": "also write the table and the verdict as JSON to this path"})
@_user_errors
def coverage(c, stack, stacks_file=DEFAULT_STACKS, json=None):
    """Which kernels each GPU of cuda_arch_list gets from the stack's wheels (cuobjdump; no Docker, no GPU).

    Exit 0 covered, 1 a required capability missing, 2 bad input, 3 incomplete (a wheel out of reach)."""
    from sglstack.coverage.command import coverage_command

    _exit_with(coverage_command(stacks_file, stack, json_path=json))


@task(help={"stack": "stack name from the matrix", "stacks-file": "the matrix file",
            "image": "the image to measure (default: the one the stack's last build recorded)",
            "json": "print the report as JSON",
            "docker-host": "Docker engine URL the image is on (default: DOCKER_HOST / local socket)"})
@_user_errors
def size(c, stack, stacks_file=DEFAULT_STACKS, image=None, json=False, docker_host=None):
    """The image's size by layer, its 20 largest packages, files present twice; exit 1 over size.max_gb."""
    from sglstack.size.command import size_command  # at call time: the docker SDK is slow to import

    _exit_with(size_command(stacks_file, stack, image=image, as_json=json, docker_host=docker_host))


# ---- GPU node --------------------------------------------------------------------------------------

@task(help={"stack": "stack name from the matrix", "stacks-file": "the matrix file",
            "json": "also write the report as JSON to this path",
            "docker-host": "run the checks inside --image on this Docker engine (ssh://, tcp://, unix://)",
            "image": "the stack image to run the checks in (with every GPU requested)",
            "sizes": "all-reduce message sizes (default: 1M,64M,1G)"})
@_user_errors
def preflight(c, stack, stacks_file=DEFAULT_STACKS, json=None, docker_host=None, image=None, sizes=None):
    """Check a GPU node before the expensive run: driver, GPUs, topology, copy and NCCL bandwidth, limits."""
    from sglstack.preflight.command import preflight_command

    _exit_with(preflight_command(stacks_file, stack, json_path=json, docker_host=docker_host, image=image,
                                 sizes=sizes))


ns = Collection()
ns.add_task(preflight)
for _t in (stacks, lock, diff, render, build, sbom, verify_image, bake, coverage, size, releases, upgrade):
    ns.add_task(_t)


# ---- smoke -----------------------------------------------------------------------------------------

@task(
    help={
        "image": "image reference to test (tag, id, or repo@sha256:... which the Docker host pulls)",
        "stack": "stack whose serving settings, smoke settings and gates apply", "stacks-file": "the matrix file",
        "model": "target model path or HF repo", "draft-model": "EAGLE-3 draft model path or HF repo",
        "tp": "tensor parallel size", "gpus": "GPUs to request (0: none, for CPU test doubles)",
        "mount": "HOST:CONTAINER[:ro] bind mount of an existing host folder, e.g. the HF cache (repeatable)",
        "env": "K=V for the server container (repeatable); HF_TOKEN is passed from the environment",
        "label": "K=V label on the server containers (repeatable)",
        "docker-host": "Docker engine URL (e.g. ssh://user@gpu-node; default: DOCKER_HOST / local socket)",
        "timeout": "seconds each server may take to answer /health_generate (default: serving.startup_timeout_s)",
        "concurrency": "the higher concurrency measured after concurrency 1",
        "num-prompts": "prompts per phase", "max-new-tokens": "tokens generated per request",
        "min-speedup": "gate: EAGLE-3 tok/s over baseline tok/s", "min-accept-length": "gate: accept length",
        "min-agreement": "gate: share of identical greedy outputs",
        "max-regression": "gate: allowed tok/s drop against the stack's last passing run (0.05 = 5%)",
        "report": "JSON report path (a .md summary and .png chart are written next to it)",
        "no-history": "neither compare with nor append to build/STACK/smoke-history.jsonl",
        "skip-preflight": "do not run `invoke preflight` on the GPU node first",
        "bisect-exit": "for `git bisect run`: exit 0 good, 1 bad, 125 skip against BASELINE, the good commit's "
                       "smoke report (JSON) or a number",
        "bisect-metric": "with --bisect-exit: baseline (default), eagle3, speedup, accept_length",
        "bisect-threshold": "with --bisect-exit: the change that counts as bad, in percent (default 5)",
        "runs": "with --bisect-exit: measured runs, cache flushed before each (default 5)",
        "runner": "docker (default: a container from --image) or process (local processes from --python-env)",
        "python-env": "with --runner process: a venv or prefix whose bin/python3 runs the serving argv",
    },
    iterable=["mount", "env", "label"],
)
@_user_errors
def smoke(c, image=None, stack=None, stacks_file=DEFAULT_STACKS, model=None, draft_model=None, tp=None, gpus=None,
          mount=None, env=None, label=None, docker_host=None, timeout=None, concurrency=None, num_prompts=None,
          max_new_tokens=None, min_speedup=None, min_accept_length=None, min_agreement=None, max_regression=None,
          report=None, no_history=False, skip_preflight=False, bisect_exit=None, bisect_metric="baseline",
          bisect_threshold="5", runs=None, runner=None, python_env=None):
    """Serve IMAGE with and without EAGLE-3, measure, gate; exit 0 only on pass (--bisect-exit: 0/1/125)."""
    from sglstack.smoke import smoke_command

    if bisect_exit:
        from sglstack.bisect.driver import smoke_bisect_exit

        _exit_with(smoke_bisect_exit(image, bisect_exit, stack=stack, stacks_file=stacks_file, metric=bisect_metric,
                                     threshold=bisect_threshold, runs=runs, model=model,
                                     draft_model=draft_model, tp=tp, gpus=gpus, mounts=mount or None,
                                     env=env or None, labels=label or None, docker_host=docker_host,
                                     timeout=timeout, concurrency=concurrency, num_prompts=num_prompts,
                                     max_new_tokens=max_new_tokens, report=report,
                                     skip_preflight=skip_preflight or None))
        return
    _exit_with(smoke_command(image, stack=stack, stacks_file=stacks_file, model=model, draft_model=draft_model,
                             tp=tp, gpus=gpus, mounts=mount or None, env=env or None, labels=label or None,
                             docker_host=docker_host, timeout=timeout, concurrency=concurrency,
                             num_prompts=num_prompts, max_new_tokens=max_new_tokens, min_speedup=min_speedup,
                             min_accept_length=min_accept_length, min_agreement=min_agreement,
                             max_regression=max_regression, report=report, no_history=no_history or None,
                             skip_preflight=skip_preflight or None, runner=runner, python_env=python_env))


ns.add_task(smoke)


# ---- bisect ----------------------------------------------------------------------------------------

@task(
    auto_shortflags=False,
    help={
        "stack": "stack name from the matrix", "stacks-file": "the matrix file",
        "good": "the last known good SGLang ref: a release (PyPI stacks) or a commit, tag, branch (git stacks)",
        "bad": "the first known bad SGLang ref (a newer release, or a descendant commit)",
        "metric": "baseline (default: only the baseline server, no draft model), eagle3, speedup, accept_length",
        "repeats": "measured runs per server start (default 5); undecided refs get more server starts",
        "threshold": "the smallest change that matters, in percent (default 5)",
        "max-batches": "server starts per ref at most (default 4): the bound on repeats",
        "ca-bundle": "extra CA bundle passed to builds as a BuildKit secret (also SGLSTACK_CA_BUNDLE)",
        "docker-cli": "BuildKit-capable docker client binary (also SGLSTACK_DOCKER_CLI)",
        "docker-host": "Docker engine that builds and serves (default: DOCKER_HOST / local socket)",
        "gpus": "GPUs per server (0: none, for CPU test doubles)", "tp": "tensor parallel size",
        "model": "target model path or HF repo", "draft-model": "EAGLE-3 draft model (eagle3/speedup metrics)",
        "mount": "HOST:CONTAINER bind mount for the servers, e.g. the HF cache (repeatable)",
        "env": "K=V for the server containers (repeatable)",
        "timeout": "seconds each server may take to answer /health_generate",
        "num-prompts": "prompts per measured run", "max-new-tokens": "tokens generated per request",
        "skip-preflight": "do not run `invoke preflight` on the GPU node first",
        "smoke-opt": "any other smoke option, KEY=VALUE (repeatable)",
    },
    iterable=["mount", "env", "smoke_opt"],
)
@_user_errors
def bisect(c, stack, good, bad, stacks_file=DEFAULT_STACKS, metric="baseline", repeats=5, threshold="5",
           max_batches=4, ca_bundle=None, docker_cli=None, docker_host=None, gpus=None, tp=None, model=None,
           draft_model=None, mount=None, env=None, timeout=None, num_prompts=None, max_new_tokens=None,
           skip_preflight=False, smoke_opt=None):
    """Find the SGLang commit or release that changed a serving metric: build, smoke, decide; resumable.

    Exit 0 when a first bad change is named, 1 when the range can't be decided, 2 for bad input."""
    from sglstack.bisect.driver import bisect_command, smoke_overrides

    _exit_with(bisect_command(stacks_file, stack, good=good, bad=bad, metric=metric, repeats=repeats,
                              threshold=threshold, max_batches=max_batches, ca_bundle=ca_bundle,
                              docker_cli=docker_cli, docker_host=docker_host,
                              smoke=smoke_overrides(smoke_opt or [], gpus=gpus, tp=tp, model=model,
                                                    draft_model=draft_model, mounts=mount or None, env=env or None,
                                                    timeout=timeout, num_prompts=num_prompts,
                                                    max_new_tokens=max_new_tokens,
                                                    skip_preflight=skip_preflight or None)))


ns.add_task(bisect)


# ---- publishing ------------------------------------------------------------------------------------

@task(help={"stack": "stack name from the matrix", "stacks-file": "the matrix file",
            "digest": "the smoke-tested manifest digest (sha256:...) to promote, or an older one to roll back to",
            "registry": "registry host or repository (default: the stack's publish.repository)",
            "config-hash": "config hash of the image, when no publish record or label has it",
            "smoke-report": "path of the smoke report that passed this digest (kept in the record)",
            "force": "re-point the tags even when they already point to this digest"})
@_user_errors
def publish(c, stack, digest, stacks_file=DEFAULT_STACKS, registry=None, config_hash=None, smoke_report=None,
            force=False):
    """Promote a tested digest to the stack's release tags, or roll the moving tags back to it."""
    from sglstack.publish import publish_command

    _exit_with(publish_command(stacks_file, stack, digest=digest, registry=registry, config_hash=config_hash,
                               force=force, smoke_report=smoke_report))


@task(name="up", help={"port": "loopback port (default 5000)"})
@_user_errors
def registry_up(c, port=None):
    """Start the local registry on 127.0.0.1:PORT (registry:2 container, else docker-registry binary)."""
    from sglstack.registry.local import registry_up as up

    print(up(port=port))


@task(name="down")
@_user_errors
def registry_down(c):
    """Stop the local registry; its data stays for the next `registry.up`."""
    from sglstack.registry.local import registry_down as down

    print(down())


@task(name="cleanup", help={"stack": "only this stack (default: all)", "stacks-file": "the matrix file",
                            "registry": "registry host or repository (default: each stack's repository)",
                            "older-than-days": "remove candidates older than this (default 7)",
                            "dry-run": "list what would be removed"})
@_user_errors
def registry_cleanup(c, stack=None, stacks_file=DEFAULT_STACKS, registry=None, older_than_days=None,
                     dry_run=False):
    """Remove old candidate tags (and the manifests of candidates that were never released)."""
    from sglstack.publish import cleanup_command

    _exit_with(cleanup_command(stacks_file, stack_name=stack, registry=registry,
                               older_than_days=older_than_days, dry_run=dry_run))


ns.add_task(publish)
ns.add_collection(Collection("registry", registry_up, registry_down, registry_cleanup))


# ---- patches ---------------------------------------------------------------------------------------

@task(name="list", help={"stacks-file": "the matrix file (to show which stacks use each patch)"})
@_user_errors
def patches_list(c, stacks_file=DEFAULT_STACKS):
    """List the patches, their SGLang version ranges, targets, and the stacks that use them."""
    from sglstack.build.patches import list_command

    _exit_with(list_command(stacks_file))


@task(name="check", help={"sglang": "an SGLang release: check every patch against its wheel",
                          "stack": "check this stack's patches against its SGLang, with its policy",
                          "stacks-file": "the matrix file"})
@_user_errors
def patches_check(c, sglang=None, stack=None, stacks_file=DEFAULT_STACKS):
    """Apply patches to a temporary copy of an SGLang wheel (pip download, cached); no Docker needed."""
    from sglstack.build.patches import check_command

    _exit_with(check_command(sglang=sglang, stack=stack, stacks_file=stacks_file))


@task(name="apply", help={"root": "folder holding the sglang/ package (unpacked wheel or site-packages)",
                          "stack": "apply this stack's patches", "patch": "apply this one patch",
                          "stacks-file": "the matrix file",
                          "sglang-version": "default: from ROOT's sglang-*.dist-info (or the stack)",
                          "manifest": "write what was applied to this JSON file"})
@_user_errors
def patches_apply(c, root, stack=None, patch=None, stacks_file=DEFAULT_STACKS, sglang_version=None,
                  manifest=None):
    """Insert patch methods into their classes under ROOT, then verify them."""
    from sglstack.build.patches import apply_command

    _exit_with(apply_command(root, stack=stack, patch=patch, stacks_file=stacks_file,
                             sglang_version=sglang_version, manifest=manifest))


@task(name="verify", help={"root": "folder holding the sglang/ package", "stack": "this stack's patches",
                           "patch": "this one patch", "stacks-file": "the matrix file",
                           "manifest": "also check the sha256 recorded by apply"})
@_user_errors
def patches_verify(c, root, stack=None, patch=None, stacks_file=DEFAULT_STACKS, manifest=None):
    """Verify that patches are in place under ROOT (class members, compiles, EntryClass); change nothing."""
    from sglstack.build.patches import verify_command

    _exit_with(verify_command(root, stack=stack, patch=patch, stacks_file=stacks_file, manifest=manifest))


ns.add_collection(Collection("patches", patches_list, patches_check, patches_apply, patches_verify))


# ---- deployment ----------------------------------------------------------------------------------
# The options of these tasks are defined once, in sglstack.deploy.options: each task takes them as
# keyword arguments and passes them straight through. The entry points are imported when a task runs:
# they load the Docker SDK, which would slow down every `invoke` call (even `invoke --list`).


@task(auto_shortflags=False, help=DeployOptions.task_help())
@_user_errors
@task_options(DeployOptions)
def deploy(c, **options):
    """Deploy a published stack with compose, wait until /health answers, record it; a failed redeploy
    restores the previous deployment."""
    from sglstack.deploy.commands import deploy_command

    deploy_command(DeployOptions.from_cli(options))


@task(help=StatusOptions.task_help())
@_user_errors
@task_options(StatusOptions)
def status(c, **options):
    """Show each deployed stack: digest, smoke report, health, uptime, model and EAGLE-3 settings."""
    from sglstack.deploy.commands import status_command

    status_command(StatusOptions.from_cli(options))


@task(help=LogsOptions.task_help())
@_user_errors
@task_options(LogsOptions)
def logs(c, **options):
    """Print the deployed stack's server logs."""
    from sglstack.deploy.commands import logs_command

    logs_command(LogsOptions.from_cli(options))


@task(help=UndeployOptions.task_help())
@_user_errors
@task_options(UndeployOptions)
def undeploy(c, **options):
    """Stop and remove a deployed stack (compose down -v)."""
    from sglstack.deploy.commands import undeploy_command

    undeploy_command(UndeployOptions.from_cli(options))


@task(help=RollbackOptions.task_help())
@_user_errors
@task_options(RollbackOptions)
def rollback(c, **options):
    """Redeploy the image recorded before the current one, with the options it ran with."""
    from sglstack.deploy.commands import rollback_command

    rollback_command(RollbackOptions.from_cli(options))


for _t in (deploy, status, logs, undeploy, rollback):
    ns.add_task(_t)


# ---- the project's own tests -----------------------------------------------------------------------

@task(name="test", help={"all": "every tier (Docker, registries, builds, PyPI), serially, as CI runs it",
                         "pytest": "more pytest arguments, one string (e.g. \"-k render -x\")"})
def test_(c, all=False, pytest=""):
    """The fast tier (tests/unit, tests/cli: no Docker, no network) in parallel; --all: everything."""
    import shlex  # here, with the task: this block is the whole of `invoke test` in this file

    from sglstack.cli.testing import run_tests  # at call time, as every task

    _exit_with(run_tests(all_tiers=all, extra=tuple(shlex.split(pytest))))


ns.add_task(test_)
