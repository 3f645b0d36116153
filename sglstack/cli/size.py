"""`invoke size --stack NAME [--image REF] [--json]`: the size report of a stack's image, and its budget.

The image is the one the stack's last build recorded (`build/NAME/record.json`), or `--image`. Exit 0,
1 when the image is over the stack's `size.max_gb` (with what grew since the recorded build), 2 for bad input.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from ..adapters.docker import docker_client
from ..config.matrix import load_matrix
from ..core.console import console as make_console
from ..core.console import printable_lines
from ..core.errors import ConfigError, one_line
from ..core.inputs import loads, read_bytes
from ..core.jsonreport import NO_JSON, JsonReport
from ..core.progress import progress
from ..core.records import build_root
from ..size.measure import measure
from ..size.report import (
    copies_message,
    over_budget,
    recorded_size,
    report_text,
    report_to_json,
    size_summary,
    undeclared_copies,
)


def recorded_build(stack: str) -> tuple[Path, dict[str, Any] | None]:
    path = build_root() / stack / "record.json"
    if not os.path.lexists(path):
        return path, None
    try:  # bounded, never from a FIFO put in its place
        record = loads(read_bytes(path, what="build record"))
    except ConfigError as exc:
        raise ConfigError(f"the build record cannot be read ({exc.reason})", file=str(path), stack=stack) from None
    except ValueError as exc:
        raise ConfigError(f"the build record cannot be read ({exc})", file=str(path), stack=stack) from None
    return path, record if isinstance(record, dict) else None


def size_command(stacks_file: str, stack_name: str, *, image: str | None = None, as_json: JsonReport = NO_JSON,
                 docker_host: str | None = None) -> int:
    stack = load_matrix(stacks_file).get(stack_name)
    path, record = recorded_build(stack.name)
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
    data["max_gb"] = max_gb
    data["over_budget"] = verdict.headline if verdict else None
    data["undeclared_library_copies"] = [c.name for c in copies]
    as_json.emit(data)
    if not as_json.stdout:
        console = make_console()
        console.print(printable_lines(report_text(report)), markup=False, highlight=False, soft_wrap=True)
        if max_gb and verdict is None:
            console.print(f"within the size budget: {report.bytes / 1e9:.3f} GB <= size.max_gb {max_gb:g}",
                          markup=False, highlight=False)
        elif verdict is not None:
            console.print(printable_lines(verdict.table), markup=False, highlight=False, soft_wrap=True)
        if stack.size and not copies:
            console.print("each CUDA library once, beside the copies size.library_copies declares",
                          markup=False, highlight=False)
    for problem in problems:
        print(f"error: {one_line(problem)}", file=sys.stderr)
    return 1 if problems else 0
