"""The Docker side of `invoke size`: an image's layers from the engine, its files from a container of it.

Thin on purpose: the report, the budget and the growth table are `size/report.py`'s (tested without Docker).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ..config.settings import SizePolicy
from ..core.errors import BuildError, ConfigError, last_line
from ..core.inputs import loads, read_bytes
from ..core.resources import TOOLS_DIR
from .report import (
    Layer,
    SizeReport,
    copies_message,
    layers_from_history,
    over_budget,
    recorded_size,
    report_from,
    size_summary,
    undeclared_copies,
)


class SizeOverBudget(BuildError):
    """The verified image weighs more than its stack's `size.max_gb`."""


class ImageNotInEngine(BuildError):
    """The image named is not in the engine: bad input."""

    exit_code = 2


class LibraryCopies(BuildError):
    """The verified image holds a CUDA library in two builds that its stack does not declare."""


IMAGEFILES = TOOLS_DIR / "imagefiles.py"
IMAGEFILES_TIMEOUT_S = 900  # one walk of a 10 GB image took 9 s here; a loaded 2-core machine is far slower
# A build measures the size beside its verify, which waits on the in-image checks (the serving path's imports):
# the walk yields the CPU to them (a quarter of a default container's weight, only while both want it).
IMAGEFILES_CPU_SHARES = 256


def image_layers(client: docker.DockerClient, ref: str) -> tuple[str, int, tuple[Layer, ...]]:
    """(image id, uncompressed bytes, layers bottom first) as the engine has them."""
    from ..adapters.docker import engine_image  # here, as in image_files: `size.report` needs no Docker adapter

    image = engine_image(client, ref)
    history = client.api.history(image.id)
    diff_ids = list((image.attrs.get("RootFS") or {}).get("Layers") or [])
    return str(image.id), int(image.attrs.get("Size") or 0), layers_from_history(history, diff_ids)


def image_files(client: docker.DockerClient, ref: str, shown: str | None = None) -> dict:
    """What `inimage/incontainer/imagefiles.py` says of the image, run as `python3 -c` with the network off.

    Given as a program text rather than copied into the image, so it reads images built before it existed."""
    shown = shown or ref
    # Imported here: dockerhost imports the docker SDK's container helpers, which `size.report` does not need.
    from ..adapters.docker import run_to_completion

    try:
        code, out = run_to_completion(client, ref, ["python3", "-c", IMAGEFILES.read_text(encoding="utf-8")],
                                      name_prefix="sglstack-size", timeout=IMAGEFILES_TIMEOUT_S, entrypoint=[],
                                      network_disabled=True, cpu_shares=IMAGEFILES_CPU_SHARES)
    except docker.errors.APIError as exc:  # an image without python3 (a bare base) cannot list its files
        raise BuildError(f"image {shown}: its files cannot be listed in a container: "
                         f"{exc.explanation or exc}") from None
    lines = out.strip().splitlines()
    if code != 0 or not lines:
        raise BuildError(f"image {shown}: listing its files failed (exit {code}): "
                         f"{last_line(out)}")
    try:
        return loads(lines[-1])
    except ValueError as exc:
        raise BuildError(f"image {shown}: its file listing is not JSON ({exc})") from None


def measure(client: docker.DockerClient, ref: str) -> SizeReport:
    """The whole size report of one local image."""
    start = time.monotonic()
    try:
        image_id, size, layers = image_layers(client, ref)
    except docker.errors.ImageNotFound:
        raise ImageNotInEngine(f"image {ref}: not in the Docker engine") from None
    files = image_files(client, image_id, shown=ref)
    return report_from(ref, image_id, size, layers, files, seconds=round(time.monotonic() - start, 1))


def measure_and_gate(client: docker.DockerClient, image: str, stack: str, policy: SizePolicy | None,
                     last_record: Path, show: Callable[[str], None]) -> dict[str, Any]:
    """The size summary a build records. With a size policy, the build fails over `max_gb` (after `show`ing
    what grew since the record the stack's last build left at `last_record`, read before this build
    replaces it), and on a CUDA library present in two builds that the policy does not declare."""
    report = measure(client, image)
    summary = size_summary(report)
    if policy is None:
        return summary
    copies = undeclared_copies(report.same_name, [c.file for c in policy.library_copies])
    if copies:
        raise LibraryCopies(copies_message(stack, copies))
    if policy.max_gb is None:
        return summary
    try:
        previous = recorded_size(loads(read_bytes(last_record, what="build record")), stack)
    except (ConfigError, ValueError):
        previous = None  # no earlier build, or a record this build will replace anyway
    verdict = over_budget(stack, summary, policy.max_gb, previous)
    if verdict is not None:
        show(verdict.table)
        raise SizeOverBudget(verdict.headline)
    return summary
