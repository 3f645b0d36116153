"""A stack's image measured against its size budget: the image the last build recorded (or one named), its
report, what grew since the recorded build, and the CUDA libraries held twice (`invoke size` prints them)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..adapters.docker import docker_client, local_image
from ..config.platforms import platform_of_image
from ..config.schema import Stack
from ..core.errors import ConfigError
from ..core.inputs import loads, read_bytes
from ..core.progress import progress
from ..core.records import RECORD_FILE, stack_dir
from .measure import measure
from .report import (
    OverBudget,
    SameName,
    SizeReport,
    copies_message,
    over_budget,
    recorded_size,
    report_to_json,
    size_summary,
    undeclared_copies,
)


@dataclass(frozen=True)
class StackSize:
    report: SizeReport
    max_gb: float | None
    verdict: OverBudget | None  # None: within the budget, or no budget
    copies: list[SameName]  # CUDA libraries held twice that size.library_copies does not declare
    problems: list[str]  # one line each: over the budget, undeclared copies
    data: dict[str, Any]  # the JSON report


def recorded_build(stack: str, platform: str | None = None) -> tuple[Path, dict[str, Any] | None]:
    """The build record of the stack (of `platform`, a lock platform: build/STACK.OS-ARCH past the first)."""
    path = stack_dir(stack, platform=platform) / RECORD_FILE
    if not os.path.lexists(path):
        return path, None
    try:  # bounded, never from a FIFO put in its place
        record = loads(read_bytes(path, what="build record"))
    except ConfigError as exc:
        raise ConfigError(f"the build record cannot be read ({exc.reason})", file=str(path), stack=stack) from None
    except ValueError as exc:
        raise ConfigError(f"the build record cannot be read ({exc})", file=str(path), stack=stack) from None
    return path, record if isinstance(record, dict) else None


def measure_stack(stack: Stack, image: str | None = None, docker_host: str | None = None) -> StackSize:
    """`image` (default: the image the stack's last build recorded) measured and held to `size.max_gb`; `stack`
    is one platform's (`Stack.for_platform`), whose build record is read."""
    path, record = recorded_build(stack.name, stack.lock_platform)
    if image is None:
        if record is None or not record.get("image_id"):
            raise ConfigError("no image to measure: build the stack first, or name one with --image",
                              file=str(path), stack=stack.name)
        image = str(record["image_id"])  # the recorded image itself, even if its tag has moved since
    with progress(f"size: measuring {image}"):
        report = measure(docker_client(docker_host), image)
    if record and image == record.get("image_id") and record.get("tag"):
        report = dataclasses.replace(report, image=str(record["tag"]))
    summary = size_summary(report)
    # Against the recorded build, unless that build is the image measured: then nothing can have grown.
    previous = recorded_size(record, stack.name) if record and record.get("image_id") != report.image_id else None
    max_gb = stack.size.max_gb if stack.size else None
    verdict = over_budget(stack.name, summary, max_gb, previous) if max_gb else None
    copies = undeclared_copies(report.same_name, [c.file for c in stack.size.library_copies]) if stack.size else []
    problems = [*([verdict.headline] if verdict else []), *([copies_message(stack.name, copies)] if copies else [])]
    data = report_to_json(report)
    data["stack"] = stack.name
    data["platform"] = stack.platforms[0]
    data["max_gb"] = max_gb
    data["over_budget"] = verdict.headline if verdict else None
    data["undeclared_library_copies"] = [c.name for c in copies]
    return StackSize(report, max_gb, verdict, copies, problems, data)


def measure_platforms(stack: Stack, image: str | None = None, docker_host: str | None = None,
                      platform: str | None = None) -> tuple[list[StackSize], list[str]]:
    """Each platform's recorded image of the stack measured (`platform`: that one alone; `image`: that image,
    against `platform`'s record, the first's by default): (the measures, one line per platform without a
    recorded build). None recorded at all is bad input, as for a stack of one platform."""
    if image is not None:
        platform = image_platform(stack, image, docker_host, platform)
    if image is not None or platform is not None or len(stack.platforms) == 1:
        return [measure_stack(stack.for_platform(platform or stack.platforms[0]), image, docker_host)], []
    views = [stack.for_platform(p) for p in stack.platforms]
    built = [v for v in views if (recorded_build(v.name, v.lock_platform)[1] or {}).get("image_id")]
    if not built:
        return [measure_stack(views[0], None, docker_host)], []  # its one-line refusal, naming the record
    missing = [f"stack '{stack.name}': {v.platforms[0]}: no build recorded "
               f"({recorded_build(v.name, v.lock_platform)[0]}): not measured (invoke build --stack {stack.name} "
               f"--platform {v.platforms[0]})" for v in views if v not in built]
    return [measure_stack(v, None, docker_host) for v in built], missing


def image_platform(stack: Stack, image: str, docker_host: str | None, platform: str | None) -> str | None:
    """The platform whose record and budget `--image` is held to: its own (the engine's Os/Architecture), which
    must be one of the stack's and `platform` when given (bad input otherwise: another platform's record would
    be compared); `platform` when the engine cannot tell (`measure` then says why)."""
    found = local_image(docker_client(docker_host), image)
    if found is None or not found.architecture:
        return platform
    own = platform_of_image(found.os, found.architecture)
    if platform is not None and own != platform:
        raise ConfigError(f"--image {image} is a {own} image, not {platform}", stack=stack.name)
    if own not in stack.platforms:
        raise ConfigError(f"--image {image} is a {own} image; the stack is built for {' '.join(stack.platforms)}",
                          stack=stack.name)
    return own
