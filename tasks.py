"""Invoke tasks: parse options, call one sglstack function per task. No logic lives here.

`invoke --list` shows every task; `invoke --help TASK` its options.
"""

from __future__ import annotations

import functools
import inspect
import signal
import sys
from pathlib import Path

from invoke import Collection, Exit
from invoke import task as _invoke_task

from sglstack.errors import SglstackError
from sglstack.signals import exit_code_of, signals_raise

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
            "check": "validate, and compare pins with SGLang's own requirements"})
@_user_errors
def stacks(c, stacks_file=DEFAULT_STACKS, check=False):
    """Print the stack matrix as a table; --check validates it and checks pin conflicts."""
    from sglstack.conflicts import stacks_command

    _exit_with(stacks_command(stacks_file, check=check))


@task(help={"stack": "stack name from the matrix", "stacks-file": "the matrix file",
            "out": "output folder (default: build/STACK)"})
@_user_errors
def render(c, stack, stacks_file=DEFAULT_STACKS, out=None):
    """Render build/STACK/Dockerfile, its build context and compose file; print the paths."""
    from sglstack.render import render_command

    render_command(stacks_file, stack, out_dir=out)


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
    },
    iterable=["smoke_opt"],
)
@_user_errors
def build(c, stack, stacks_file=DEFAULT_STACKS, target=None, no_cache=False, force=False, dry_run=False,
          push=False, ca_bundle=None, docker_cli=None, docker_host=None, registry=None, smoke_opt=None):
    """Render and build a stack with BuildKit, verify the image, record it; --push releases it."""
    from sglstack.build import build_command

    _exit_with(build_command(stacks_file, stack, target=target, no_cache=no_cache, force=force,
                             dry_run=dry_run, push=push, ca_bundle=ca_bundle, docker_cli=docker_cli,
                             docker_host=docker_host, registry=registry, smoke_opts=smoke_opt or []))


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
for _t in (stacks, render, build):
    ns.add_task(_t)


# ---- smoke -----------------------------------------------------------------------------------------

@task(
    help={
        "image": "image reference to test (tag, id, or repo@sha256:... which the Docker host pulls)",
        "stack": "stack whose smoke settings and gates apply", "stacks-file": "the matrix file",
        "model": "target model path or HF repo", "draft-model": "EAGLE-3 draft model path or HF repo",
        "tp": "tensor parallel size", "gpus": "GPUs to request (0: none, for CPU test doubles)",
        "mount": "HOST:CONTAINER bind mount, e.g. the HF cache (repeatable)",
        "env": "K=V for the server container (repeatable); HF_TOKEN is passed from the environment",
        "label": "K=V label on the server containers (repeatable)",
        "docker-host": "Docker engine URL (e.g. ssh://user@gpu-node; default: DOCKER_HOST / local socket)",
        "timeout": "seconds each server may take to answer /health_generate",
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
    },
    iterable=["mount", "env", "label"],
)
@_user_errors
def smoke(c, image, stack=None, stacks_file=DEFAULT_STACKS, model=None, draft_model=None, tp=None, gpus=None,
          mount=None, env=None, label=None, docker_host=None, timeout=None, concurrency=None, num_prompts=None,
          max_new_tokens=None, min_speedup=None, min_accept_length=None, min_agreement=None, max_regression=None,
          report=None, no_history=False, skip_preflight=False, bisect_exit=None, bisect_metric="baseline",
          bisect_threshold="5", runs=None):
    """Serve IMAGE with and without EAGLE-3, measure, gate; exit 0 only on pass (--bisect-exit: 0/1/125)."""
    from sglstack.smoke import smoke_command

    if bisect_exit:
        from sglstack.bisect.driver import smoke_bisect_exit

        _exit_with(smoke_bisect_exit(image, bisect_exit, stack=stack, stacks_file=stacks_file, metric=bisect_metric,
                                     threshold=bisect_threshold, runs=int(runs) if runs else None, model=model,
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
                             skip_preflight=skip_preflight or None))


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
def registry_up(c, port=5000):
    """Start the local registry on 127.0.0.1:PORT (registry:2 container, else docker-registry binary)."""
    from sglstack.localregistry import registry_up as up

    print(up(port=int(port)))


@task(name="down")
@_user_errors
def registry_down(c):
    """Stop the local registry; its data stays for the next `registry.up`."""
    from sglstack.localregistry import registry_down as down

    print(down())


@task(name="cleanup", help={"stack": "only this stack (default: all)", "stacks-file": "the matrix file",
                            "registry": "registry host or repository (default: each stack's repository)",
                            "older-than-days": "remove candidates older than this (default 7)",
                            "dry-run": "list what would be removed"})
@_user_errors
def registry_cleanup(c, stack=None, stacks_file=DEFAULT_STACKS, registry=None, older_than_days=7.0,
                     dry_run=False):
    """Remove old candidate tags (and the manifests of candidates that were never released)."""
    from sglstack.publish import cleanup_command

    _exit_with(cleanup_command(stacks_file, stack_name=stack, registry=registry,
                               older_than_days=float(older_than_days), dry_run=dry_run))


ns.add_task(publish)
ns.add_collection(Collection("registry", registry_up, registry_down, registry_cleanup))


# ---- patches ---------------------------------------------------------------------------------------

@task(name="list", help={"stacks-file": "the matrix file (to show which stacks use each patch)"})
@_user_errors
def patches_list(c, stacks_file=DEFAULT_STACKS):
    """List the patches, their SGLang version ranges, targets, and the stacks that use them."""
    from sglstack.patches import list_command

    _exit_with(list_command(stacks_file))


@task(name="check", help={"sglang": "an SGLang release: check every patch against its wheel",
                          "stack": "check this stack's patches against its SGLang, with its policy",
                          "stacks-file": "the matrix file"})
@_user_errors
def patches_check(c, sglang=None, stack=None, stacks_file=DEFAULT_STACKS):
    """Apply patches to a temporary copy of an SGLang wheel (pip download, cached); no Docker needed."""
    from sglstack.patches import check_command

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
    from sglstack.patches import apply_command

    _exit_with(apply_command(root, stack=stack, patch=patch, stacks_file=stacks_file,
                             sglang_version=sglang_version, manifest=manifest))


@task(name="verify", help={"root": "folder holding the sglang/ package", "stack": "this stack's patches",
                           "patch": "this one patch", "stacks-file": "the matrix file",
                           "manifest": "also check the sha256 recorded by apply"})
@_user_errors
def patches_verify(c, root, stack=None, patch=None, stacks_file=DEFAULT_STACKS, manifest=None):
    """Verify that patches are in place under ROOT (class members, compiles, EntryClass); change nothing."""
    from sglstack.patches import verify_command

    _exit_with(verify_command(root, stack=stack, patch=patch, stacks_file=stacks_file, manifest=manifest))


ns.add_collection(Collection("patches", patches_list, patches_check, patches_apply, patches_verify))


# ---- deployment ------------------------------------------------------------------------------------

def _int_or_none(value):
    return int(value) if value not in (None, "") else None


@task(
    auto_shortflags=False,
    help={
        "stack": "stack name from the matrix",
        "stacks-file": "the matrix file",
        "digest": "the published digest to serve (sha256:..., or a full repo@sha256:... reference)",
        "image": "serve this image reference instead (e.g. a local tag)",
        "docker-host": "Docker engine URL to deploy to (default: DOCKER_HOST / local socket)",
        "eagle3": "--no-eagle3: serve without the stack's speculative (EAGLE-3) flags",
        "gpus": "--no-gpus: no GPU reservations and no memlock/stack ulimits (CPU hosts)",
        "port": "host port (default: the stack's smoke.port)",
        "hf-cache": "host folder of the Hugging Face cache (default: the stack's smoke.mounts)",
        "start-period": "healthcheck start period in seconds (default: the stack's smoke.timeout_s)",
        "restart": "restart policy: no, always, on-failure, unless-stopped",
        "env-file": "env file with HF_TOKEN (default: build/STACK/compose.env)",
        "nnodes": "number of nodes for multi-node serving",
        "node-rank": "this node's rank (0 serves the API)",
        "dist-init-addr": "HOST:PORT of node 0 (multi-node)",
        "wait-timeout": "seconds to wait for /health (default: start period + healthcheck retries)",
        "health-interval": "seconds between healthchecks (default 30)",
        "skip-preflight": "do not run `invoke preflight` on the GPU node first",
    },
)
@_user_errors
def deploy(c, stack, stacks_file=DEFAULT_STACKS, digest=None, image=None, docker_host=None, eagle3=True,
           gpus=True, port=None, hf_cache=None, start_period=None, restart="unless-stopped", env_file=None,
           nnodes=1, node_rank=0, dist_init_addr=None, wait_timeout=None, health_interval=30, skip_preflight=False):
    """Deploy a published stack with compose, wait until /health answers, record it."""
    from sglstack.deploy import deploy_command

    deploy_command(stacks_file, stack, digest=digest, image=image, docker_host=docker_host, eagle3=eagle3,
                   gpus=gpus, port=_int_or_none(port), hf_cache=hf_cache,
                   start_period=_int_or_none(start_period), restart=restart, env_file=env_file, nnodes=nnodes,
                   node_rank=node_rank, dist_init_addr=dist_init_addr,
                   wait_timeout=_int_or_none(wait_timeout), health_interval=health_interval,
                   skip_preflight=skip_preflight)


@task(help={"stack": "only this stack (default: all)", "docker-host": "Docker engine URL"})
@_user_errors
def status(c, stack=None, docker_host=None):
    """Show each deployed stack: digest, health, uptime, model and EAGLE-3 settings."""
    from sglstack.deploy import status_command

    status_command(stack=stack, docker_host=docker_host)


@task(help={"stack": "stack name", "stacks-file": "the matrix file", "tail": "only the last N lines",
            "docker-host": "Docker engine URL (default: the one recorded at deploy)"})
@_user_errors
def logs(c, stack, stacks_file=DEFAULT_STACKS, tail=None, docker_host=None):
    """Print the deployed stack's server logs."""
    from sglstack.deploy import logs_command

    logs_command(stacks_file, stack, tail=_int_or_none(tail), docker_host=docker_host)


@task(help={"stack": "stack name", "stacks-file": "the matrix file",
            "docker-host": "Docker engine URL (default: the one recorded at deploy)"})
@_user_errors
def undeploy(c, stack, stacks_file=DEFAULT_STACKS, docker_host=None):
    """Stop and remove a deployed stack (compose down -v)."""
    from sglstack.deploy import undeploy_command

    undeploy_command(stacks_file, stack, docker_host=docker_host)


@task(help={"stack": "stack name", "stacks-file": "the matrix file",
            "docker-host": "Docker engine URL (default: the one recorded at deploy)",
            "wait-timeout": "seconds to wait for /health"})
@_user_errors
def rollback(c, stack, stacks_file=DEFAULT_STACKS, docker_host=None, wait_timeout=None):
    """Redeploy the image recorded before the current one, with the options it ran with."""
    from sglstack.deploy import rollback_command

    rollback_command(stacks_file, stack, docker_host=docker_host, wait_timeout=_int_or_none(wait_timeout))


for _t in (deploy, status, logs, undeploy, rollback):
    ns.add_task(_t)
