"""The deployment records: `<build root>/<stack>/deployments.jsonl`, one JSON line per deploy, rollback,
restore and undeploy, with the image, its digest, the options it ran with and the smoke report it
carries. What runs now and what `rollback` goes back to are pure functions of these lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from ..core.errors import DeployError
from ..core.records import append_jsonl, read_jsonl

RECORDS_FILE = "deployments.jsonl"
# Actions that leave a service serving (when their result is healthy).
SERVED_ACTIONS = ("deploy", "rollback", "restore")


@dataclass(frozen=True)
class DeploymentRecord:
    stack: str
    action: str  # deploy | rollback | restore (the previous one, after a failed deploy) | undeploy
    result: str  # healthy | failed | removed
    image: str
    digest: str
    image_id: str
    time: str
    host: str
    docker_host: str
    project: str
    compose_tool: str
    compose_file: str
    options: Mapping[str, object] = field(default_factory=dict)
    smoke_report: str = "unknown"  # sha256 of the smoke report that passed the image, or "unknown"
    note: str = ""  # why an attempt failed, what a restore followed
    target: str = "compose"  # compose | k8s (a LeaderWorkerSet applied with kubectl)

    @property
    def registry_digest(self) -> str:
        """The registry digest of the image it served; "" when it has none (a local build). A record written
        before digests meant registry digests only holds the image id in `digest`: that is not one."""
        return "" if self.digest == self.image_id else self.digest

    def to_dict(self) -> dict[str, object]:
        return asdict(self) | {"options": dict(self.options)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> DeploymentRecord:
        """Raises KeyError/TypeError on a row that is not a deployment record (older rows lack the
        fields with defaults)."""
        values = {}
        for f in fields(cls):
            if f.name in data:
                values[f.name] = data[f.name]
            elif f.default is MISSING and f.default_factory is MISSING:
                raise KeyError(f.name)
        return cls(**values)  # type: ignore[arg-type]


def records_path(build_root: Path, stack_name: str) -> Path:
    return build_root / stack_name / RECORDS_FILE


def append_record(build_root: Path, record: DeploymentRecord) -> None:
    append_jsonl(records_path(build_root, record.stack), [record.to_dict()])


def read_records(build_root: Path, stack_name: str) -> list[DeploymentRecord]:
    path = records_path(build_root, stack_name)
    return read_jsonl(
        path,
        parse=DeploymentRecord.from_dict,
        bad_line=lambda n: DeployError(f"{path}:{n}: not a deployment record"),
    )


def serving_now(records: list[DeploymentRecord]) -> DeploymentRecord | None:
    """The record of what the project serves now, by its records (pure): the last deploy, rollback or
    restore if it ended healthy and nothing removed it since; None otherwise."""
    relevant = [r for r in records if r.action in (*SERVED_ACTIONS, "undeploy")]
    if not relevant:
        return None
    last = relevant[-1]
    if last.action == "undeploy" or last.result != "healthy":
        return None
    return last


def rollback_target(records: list[DeploymentRecord]) -> DeploymentRecord | None:
    """What `rollback` redeploys (pure): after a failed deploy that nothing restored, the last healthy one;
    otherwise the healthy deployment before the current one, with a different image."""
    served = [r for r in records if r.action in SERVED_ACTIONS]
    healthy = [r for r in served if r.result == "healthy"]
    if not healthy:
        return None
    if served[-1].result != "healthy":
        return healthy[-1]
    current = healthy[-1]
    for record in reversed(healthy[:-1]):
        if _identity(record) != _identity(current):
            return record
    return None


def _identity(record: DeploymentRecord) -> str:
    """Which image a record served: its registry digest, else its image id (a tag can move), else the reference."""
    return record.digest or record.image_id or record.image


def display_path(path: Path) -> str:
    """A path relative to the working folder when it is under it (shorter messages)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
