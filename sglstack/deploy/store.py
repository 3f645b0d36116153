"""The deployment records: `<build root>/<stack>/deployments.jsonl`, one JSON line per deploy, rollback,
restore and undeploy, with the image, its digest, the options it ran with and the smoke report it
carries. What runs now and what `rollback` goes back to are pure functions of these lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from ..config.imageref import image_name
from ..core.errors import DeployError
from ..core.records import (
    BadLine,
    append_jsonl,
    check_field_types,
    json_type,
    read_jsonl_lenient,
    require_store_writable,
    stack_dir,
)
from ..core.safefiles import OutputNotWritable
from ..render.compose import ComposeOptions
from ..render.k8s import K8sOptions

RECORDS_FILE = "deployments.jsonl"
# Actions that leave a service serving (when their result is healthy).
SERVED_ACTIONS = ("deploy", "rollback", "restore")


class BadRecord(DeployError):
    """A line of the records is not a deployment record: bad input (as a bad matrix or lock), exit 2."""

    exit_code = 2


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
    kernel_cache: str = ""  # the kernel-cache restore's line ("" when the deployment used none)
    phases: Mapping[str, object] = field(default_factory=dict)  # the start by phase (serving/phases.py)

    @property
    def registry_digest(self) -> str:
        """The registry digest of the image it served; "" when it has none (a local build). A record written
        before digests meant registry digests only holds the image id in `digest`: that is not one."""
        return "" if self.digest == self.image_id else self.digest

    def to_dict(self) -> dict[str, object]:
        return asdict(self) | {"options": dict(self.options), "phases": dict(self.phases)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> DeploymentRecord:
        """Raises KeyError/TypeError, naming the field, on a row that is not a deployment record: not an
        object, a field missing (older rows lack only the fields with defaults), or of the wrong type, the
        options' own fields included (a rollback serves with them)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"{json_type(data)}, not an object")
        check_field_types(cls, data)
        options = data.get("options", {})
        recorded = K8sOptions if data.get("target") == "k8s" else ComposeOptions
        try:
            check_field_types(recorded, options)  # type: ignore[arg-type]  # an object: checked above
        except TypeError as exc:
            raise TypeError(f"options: {exc}") from None
        values = {}
        for f in fields(cls):
            if f.name in data:
                values[f.name] = data[f.name]
            elif f.default is MISSING and f.default_factory is MISSING:
                raise KeyError(f.name)
        return cls(**values)  # type: ignore[arg-type]


def records_path(build_root: Path, stack_name: str) -> Path:
    return stack_dir(stack_name, build_root) / RECORDS_FILE


def append_record(build_root: Path, record: DeploymentRecord) -> None:
    append_jsonl(records_path(build_root, record.stack), [record.to_dict()])


def read_records(build_root: Path, stack_name: str) -> list[DeploymentRecord]:
    """Every record of the stack; a bad line is a one-line `BadRecord` naming file:line and why (a
    deploy, rollback or restore must not act on a store it cannot read whole)."""
    records, bad = read_records_lenient(build_root, stack_name)
    if bad:
        raise BadRecord(bad_record_line(bad[0]))
    return records


def read_records_lenient(build_root: Path, stack_name: str) -> tuple[list[DeploymentRecord], list[BadLine]]:
    """The records that read, and each line that does not (for `invoke status`, which shows what it can)."""
    return read_jsonl_lenient(records_path(build_root, stack_name), DeploymentRecord.from_dict)


def bad_record_line(bad: BadLine) -> str:
    return str(bad) if bad.line == 0 else f"{bad.path}:{bad.line}: not a deployment record ({bad.why})"


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
    return image_name(record.digest, record.image_id) or record.image


def display_path(path: Path) -> str:
    """A path relative to the working folder when it is under it (shorter messages)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def require_recordable(build_root: Path, stack_name: str) -> None:
    """Refuse, before anything changes, a deployment whose record could not be written."""
    try:
        require_store_writable(records_path(build_root, stack_name), what=f"stack '{stack_name}': the records")
    except OutputNotWritable as exc:
        raise DeployError(f"{exc}; nothing was changed (a deployment that cannot be recorded is not started)"
                          ) from None


def record_or_why(build_root: Path, record: DeploymentRecord) -> str | None:
    """Append `record`; None when written, else why not (the caller goes on undoing, and says it)."""
    try:
        append_record(build_root, record)
    except OutputNotWritable as exc:
        return str(exc)
    return None


def not_recorded(why: str | None) -> str:
    return f"; not recorded ({why})" if why else ""
