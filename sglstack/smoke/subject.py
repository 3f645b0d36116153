"""What a smoke run serves: an image on the Docker host, or (the process runner) a Python environment.

Both are checked and read before the first server starts, and both fill the report's `image` slot: a ref,
a registry digest (None for a local build or an environment) and an id two runs of the same thing share.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ..adapters.docker import (
    LocalImage,
    PullFailed,
    docker_client,
    engine_machine,
    local_image,
    present_or_pulled,
    registry_platforms,
)
from ..config.imageref import image_name, not_an_image, registry_digest
from ..config.platforms import platform_of_image, platform_of_machine
from ..config.schema import Stack
from ..core.errors import SmokeError, SmokeInputError, first_line, one_line, shown
from ..preflight.gate import require_ready
from .launch import env_interpreter
from .plan import SmokeOptions

Log = Callable[[str], None]


def check_what_to_serve(image: str | None, options: SmokeOptions) -> str | None:
    """The process runner's interpreter (None for docker), after checking the runner got the subject it serves."""
    if options.runner == "process":
        # Decided before anything starts: a wrong path is one line, not a server that never comes up.
        interpreter = require_interpreter(options)
        if image:
            raise SmokeInputError(f"smoke runner 'process' serves --python-env, not an image (got image '{image}')")
        return interpreter
    if not image:
        raise SmokeInputError("smoke runner 'docker': pass --image (a tag, id or repo@sha256:...)")
    if problem := not_an_image(image):  # refused here, not by the engine after the preflight
        raise SmokeInputError(one_line(f"--image '{shown(image)}': {problem}"))
    return None


def open_what_to_serve(
    stack: Stack | None, image: str | None, options: SmokeOptions, interpreter: str | None, log: Log
) -> tuple[docker.DockerClient | None, dict[str, Any]]:
    """The engine (None: the process runner) and the report's `image` slot; the GPU node's preflight first."""
    if options.runner == "process":
        assert interpreter is not None
        image_info = environment_info(options, interpreter)
        log(f"smoke: process runner, Python environment {options.python_env} ({image_label(image_info)})")
        return None, image_info
    assert image is not None
    engine = docker_client(options.docker_host)
    image_info = resolve_image(engine, image, pull=options.pull)
    log(f"smoke: image {image} ({image_label(image_info)})")
    if stack is not None and options.gpus > 0 and not options.skip_preflight:
        log(f"smoke: preflight of the GPU node ({options.docker_host or 'local engine'}) in {image}")
        require_ready(stack, docker_host=options.docker_host, image=image_info["id"])
    return engine, image_info


# ---- the Python environment (process runner) -------------------------------------------------------


def require_interpreter(options: SmokeOptions) -> str:
    """The environment's bin/python3, or a one-line error naming --python-env and the path."""
    assert options.python_env is not None
    python = env_interpreter(options.python_env)
    if not os.path.isdir(options.python_env):
        raise SmokeInputError(f"--python-env '{options.python_env}': no such folder")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise SmokeInputError(f"--python-env '{options.python_env}': no executable bin/python3 in it (a venv or "
                              "prefix)")
    return python


def environment_info(options: SmokeOptions, python: str) -> dict[str, Any]:
    """The environment in the report's `image` slot: its path, and as its id a hash of the distributions it
    and the server's PYTHONPATH hold (name-version of every *.dist-info), so two runs of one environment
    compare equal and an upgraded package shows as another id. It has no registry digest (reports before
    digests meant registry digests only kept this hash as `digest`)."""
    assert options.python_env is not None
    roots = [Path(options.python_env)]
    roots += [Path(p) for p in options.serving.environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    names = sorted({d.name for root in roots for d in _dist_infos(root)})
    env_id = "env-sha256:" + hashlib.sha256("\n".join(names).encode()).hexdigest()
    return {"ref": f"python-env:{options.python_env}", "digest": None, "id": env_id, "repo_digests": [],
            "runner": "process", "python": python, "distributions": len(names)}


def _dist_infos(root: Path) -> list[Path]:
    patterns = ("*.dist-info", "lib/python3*/site-packages/*.dist-info", "lib64/python3*/site-packages/*.dist-info",
                "local/lib/python3*/dist-packages/*.dist-info")
    return [d for pattern in patterns for d in root.glob(pattern)]


# ---- the image -------------------------------------------------------------------------------------


def resolve_image(engine: docker.DockerClient, ref: str, *, pull: bool = True) -> dict[str, Any]:
    """Find (or pull) `ref` on the engine; return its ref, registry digest (None for a local build), image id
    and repo digests. A digest ref is its own digest."""
    try:
        if pull:  # an image of no platform this host runs is refused from its registry's answer, before a pull
            found: LocalImage | None = present_or_pulled(engine, ref, before_pull=lambda: _require_served(engine, ref))
        else:
            found = local_image(engine, ref)
        if found is None:
            raise SmokeError(f"image {ref}: not found on the Docker host")
    except PullFailed as exc:
        failed = "after the pull" if exc.vanished else f"and the pull failed: {exc}"
        raise SmokeError(f"image {ref}: not on the Docker host {failed}") from None
    except docker.errors.APIError as exc:
        raise SmokeError(f"image {ref}: {first_line(exc.explanation or str(exc))}") from None
    image = platform_of_image(found.os, found.architecture) if found.architecture else None
    _require_native(engine, ref, image)
    return {"ref": ref, "digest": registry_digest(ref, found.repo_digests), "id": found.id,
            "repo_digests": list(found.repo_digests), **({"platform": image} if image else {})}


def _require_served(engine: docker.DockerClient, ref: str) -> None:
    """Refuse, before the pull (an image of ~10 GB), an image whose registry serves no platform of the Docker
    host: an index without the host's platform (the pull would say only "no matching manifest"), or another
    platform's image (it would run emulated). A registry the engine cannot ask leaves it to the pull."""
    served = registry_platforms(engine, ref)
    if served is None:
        return
    platforms = tuple(dict.fromkeys(platform_of_image(*p) for p in served))
    node = platform_of_machine(*engine_machine(engine))
    if node not in platforms:
        raise SmokeInputError(f"image {ref} is for {' '.join(platforms)}, the Docker host is {node}: nothing was "
                              f"pulled; smoke it on a {platforms[0]} node, or an index that lists {node}")


def _require_native(engine: docker.DockerClient, ref: str, image: str | None) -> None:
    """Refuse an image built for another platform than the Docker host's: the engine would run it under QEMU
    (binfmt makes that silent), so the GPU would never be touched and every figure would be the emulator's.
    An index pulled by digest is already the host's own platform's image (the engine picks it). `image`: the
    image's platform (None: the engine did not say)."""
    if not image:
        return
    node = platform_of_machine(*engine_machine(engine))
    if image != node:
        raise SmokeInputError(f"image {ref} is for {image}, the Docker host is {node}: it would run emulated, not "
                              f"on the host's GPUs; smoke it on a {image} node (an index by digest picks each "
                              "node's own)")


def image_label(image_info: Mapping[str, Any]) -> str:
    """How a log line names the image: its registry digest, else its image id."""
    return image_name(image_info.get("digest"), image_info.get("id")) or "?"
