"""`invoke status`: one row per deployed service container, found by its sglstack labels on the engine,
plus the recorded stacks that have no container any more.

A records line that does not read is named (file:line and why) and skipped: the rows show what the
other lines and the engine know, and the task exits 1 (it ran, and found a problem)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..adapters.docker import docker_client
from ..config.imageref import image_label, pinned_digest
from ..config.matrix import load_matrix
from ..core.clock import parse_utc, utc_now
from ..core.console import console, fitted_table, plain
from ..core.records import BadLine
from ..core.records import build_root as default_build_root
from ..render import compose as cmp
from .health import COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL
from .store import RECORDS_FILE, DeploymentRecord, bad_record_line, read_records_lenient, records_path


@dataclass(frozen=True)
class StackStatus:
    stack: str
    project: str
    container: str
    state: str
    health: str
    uptime: str
    image: str
    digest: str  # the registry digest; "" for a local build, which only has its image id
    model: str
    speculative: str
    node: str
    smoke_report: str = ""
    image_id: str = ""
    start: str = ""  # the start by phase its deployment record holds ("" when none was read)
    kernel_cache: str = ""  # that deployment's kernel-cache line


def start_cell(phases: Mapping[str, Any]) -> str:
    """`healthy 63.0s: imports 37.1, weights 1.0, cuda_graphs 5.2, to_healthy 19.7` ("" when none was read)."""
    milestones = phases.get("milestones_s") or {}
    if not milestones:
        return ""
    parts = ", ".join(f"{name} {'?' if value is None else f'{value:.1f}'}"
                      for name, value in (phases.get("phases_s") or {}).items() if name != "first_token")
    healthy = milestones.get("healthy")
    return f"healthy {'?' if healthy is None else f'{healthy:.1f}s'}: {parts}"


def status_rows(stack: str | None = None, *, docker_host: str | None = None, build_root: Path | None = None
                ) -> tuple[list[StackStatus], list[str]]:
    """`invoke status`: each deployed stack's row (or `stack`'s, a name: a stack since removed from the matrix
    still shows), and a line for each records line that did not read (file:line and why)."""
    root = build_root or default_build_root()
    if stack and not records_path(root, stack).parent.is_dir():
        # No records of it: a stack of stacks.yaml not deployed yet ("nothing deployed"), or a typo, which
        # gets the refusal (and "did you mean") of every task's --stack, not an empty table and exit 0.
        load_matrix().get(stack)
    bad: list[BadLine] = []
    rows = deployment_status(build_root=root, docker_host=docker_host, stack=stack, bad_lines=bad)
    return rows, [bad_record_line(line) for line in bad]


def deployment_status(
    *,
    build_root: Path | None = None,
    docker_host: str | None = None,
    stack: str | None = None,
    project: str | None = None,
    now: dt.datetime | None = None,
    bad_lines: list[BadLine] | None = None,
) -> list[StackStatus]:
    """One row per deployed service container (found by its sglstack labels), plus recorded stacks that
    have no container any more. The records lines that do not read are added to `bad_lines`."""
    client = docker_client(docker_host)
    label_filter = [cmp.LABEL_STACK + (f"={stack}" if stack else "")]
    if project:
        label_filter.append(f"{COMPOSE_PROJECT_LABEL}={project}")
    # The server's containers: not the kernel-cache init service's, which carries the stack's label too.
    containers = [c for c in client.containers.list(all=True, filters={"label": label_filter})
                  if c.labels.get(COMPOSE_SERVICE_LABEL, cmp.SERVICE) == cmp.SERVICE]
    build_root = build_root or default_build_root()
    now = now or utc_now()
    store = _Records(build_root)
    rows = [_container_row(c, store, now)
            for c in sorted(containers, key=lambda c: (c.labels.get(cmp.LABEL_STACK, ""), c.name))]
    if build_root.is_dir() and not project:
        rows += _recorded_rows(build_root, stack, {(r.stack, r.project) for r in rows}, store)
    if bad_lines is not None:
        bad_lines.extend(line for _, bad in sorted(store.read.items()) for line in bad)
    return rows


class _Records:
    """Each stack's records read once, leniently: the lines that read, and each one that does not."""

    def __init__(self, build_root: Path) -> None:
        self.build_root = build_root
        self.read: dict[str, list[BadLine]] = {}
        self._records: dict[str, list[DeploymentRecord]] = {}

    def of(self, stack_name: str) -> list[DeploymentRecord]:
        if stack_name not in self._records:
            self._records[stack_name], self.read[stack_name] = read_records_lenient(self.build_root, stack_name)
        return self._records[stack_name]


def _container_row(c: Any, store: _Records, now: dt.datetime) -> StackStatus:
    """A deployed service container's row, its digest from the records of its stack where they know it."""
    labels = c.labels
    name, proj = labels.get(cmp.LABEL_STACK, "?"), labels.get(COMPOSE_PROJECT_LABEL, "")
    records = [r for r in store.of(name) if r.project == proj and r.action != "undeploy"]
    image = labels.get(cmp.LABEL_IMAGE, "")
    digest = next((r.registry_digest for r in reversed(records) if r.image == image), "") or (
        pinned_digest(image) or ""
    )
    state = c.attrs.get("State") or {}
    verdict = (state.get("Health") or {}).get("Status", "none")
    served = next((r for r in reversed(records) if r.image == image and r.result == "healthy"), None)
    return StackStatus(
        stack=name,
        project=proj,
        container=c.name,
        state=state.get("Status", "?"),
        health=verdict,
        uptime=_uptime(state.get("StartedAt"), now) if state.get("Status") == "running" else "-",
        image=image,
        digest=digest,
        model=labels.get(cmp.LABEL_MODEL, ""),
        speculative=labels.get(cmp.LABEL_SPECULATIVE, ""),
        node=labels.get(cmp.LABEL_NODE, ""),
        smoke_report=labels.get(cmp.LABEL_SMOKE_REPORT, ""),
        image_id=c.attrs.get("Image", ""),
        start=start_cell(served.phases) if served else "",
        kernel_cache=served.kernel_cache if served else "",
    )


def _recorded_rows(build_root: Path, stack: str | None, seen: set[tuple[str, str]], store: _Records
                   ) -> list[StackStatus]:
    """The recorded stacks that have no container any more."""
    rows: list[StackStatus] = []
    for path in sorted(build_root.glob(f"{stack or '*'}/{RECORDS_FILE}")):
        records = store.of(path.parent.name)
        if not records or (records[-1].stack, records[-1].project) in seen:
            continue
        last = records[-1]
        rows.append(
            StackStatus(
                stack=last.stack,
                project=last.project,
                container="-",
                state=("removed" if last.action == "undeploy" else
                       # status asks Docker only: a LeaderWorkerSet's state is the cluster's
                       f"k8s, {last.result} when recorded" if last.target == "k8s" else
                       f"not running ({last.result})"),
                health="-",
                uptime="-",
                image=last.image,
                digest=last.registry_digest,
                model="",
                speculative="",
                node="",
                smoke_report=last.smoke_report,
                image_id=last.image_id,
            )
        )
    return rows


def _uptime(started_at: str | None, now: dt.datetime) -> str:
    if not started_at:
        return "-"
    started = parse_utc(started_at)
    if started is None:
        return "-"
    return format_duration(max(int((now - started).total_seconds()), 0))


def format_duration(seconds: int) -> str:
    days, rem = divmod(seconds, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12] if digest.startswith("sha256:") else (digest or "-")


COLUMNS = ("stack", "project", "state", "health", "uptime", "digest", "smoke report", "model", "EAGLE-3", "node",
           "start by phase (s)", "kernel cache")
NARROW = ("stack", "state", "health", "uptime", "digest", "model")  # at a narrow terminal, without -o wide


def print_status(rows: list[StackStatus], *, wide: bool = False) -> None:
    cells_of = []
    for r in rows:
        cells = (
            r.stack,
            r.project,
            r.state,
            r.health,
            r.uptime,
            image_label(r.digest and _short(r.digest), r.image_id and _short(r.image_id)) or "-",
            _short(r.smoke_report),
            r.model or "-",
            r.speculative or "-",
            r.node or "-",
            r.start or "-",
            r.kernel_cache or "-",
        )
        cells_of.append(tuple(map(plain, cells)))  # records, the engine and the server say these
    table = fitted_table(console(), COLUMNS, cells_of, narrow=NARROW, wide=wide, title="sglstack deployments")
    if not rows:
        table.caption = "nothing deployed"
    console().print(table)

