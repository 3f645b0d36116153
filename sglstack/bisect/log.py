"""The resumable bisect log: `build/NAME/bisect/log.jsonl`, one JSON object per line.

The first line (`start`) names the bisect: its key (stack config, source, endpoints, metric,
threshold, runs, smoke settings) and its ordered refs. Then one line per thing that happened, written
only once it is complete (an interrupted step leaves nothing half-recorded):

    {"event": "build", "ref", "built", "config_hash", "image", "tag", "seconds"}
    {"event": "skip", "ref", "kind": "patch"|"source"|"build"|"serve", "reason"}
    {"event": "batch", "ref", "samples": [...], "image", "digest", "report", "seconds"}
    {"event": "done", "status", "first_bad", "last_good", "reason"}

Running the same bisect again replays the log into the planner and continues where it stopped; a log
that ends in `done` is answered from the log alone. A different bisect (another key) moves the old log
aside as `log-<UTC time>.jsonl` and starts a new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.clock import utc_now, utc_timestamp
from ..core.errors import SglstackError
from ..core.records import append_jsonl, build_root, read_jsonl
from ..core.safefiles import containing_root, rename_inside
from .metrics import MalformedReport, measured_value
from .planner import Planner

LOG_FILE = "log.jsonl"
FORMAT = 1
# Skips that say something about the ref itself, kept across runs. A failed build or a server that did
# not start may be the machine's fault (network, memory): a new run of an unfinished bisect retries them.
LASTING_SKIPS = ("patch", "source")


class BisectLogError(SglstackError, ValueError):
    """The log cannot be replayed (bad input, exit 2, before any build); the message names file and event."""

    exit_code = 2


def event_problem(event: Mapping[str, Any]) -> str | None:
    """What is wrong with one event's content for replaying it (None: nothing): a line that parsed as JSON
    can still hold a sample that is not a number, or lack the ref it is about."""
    kind = event.get("event")
    if kind == "start":
        refs = event.get("refs")
        if not isinstance(event.get("key"), dict):
            return "'key' is not an object"
        if not isinstance(refs, list) or not refs or not all(isinstance(r, str) and r for r in refs):
            return "'refs' is not a list of refs"
        return None
    if kind in ("batch", "skip", "build") and not (isinstance(event.get("ref"), str) and event["ref"]):
        return "'ref' is not a ref"
    if kind == "batch":
        samples = event.get("samples")
        if not isinstance(samples, list) or not samples:
            return "'samples' is not a list of numbers"
        try:
            for i, value in enumerate(samples):
                measured_value(value, f"'samples[{i}]'")
        except MalformedReport as exc:
            return str(exc)
    if kind == "skip" and not isinstance(event.get("reason"), str):
        return "'reason' is not text"
    return None


def check_events(path: Path, events: Sequence[Mapping[str, Any]]) -> None:
    """Refuse, in one line, a log whose events cannot be replayed (rather than a traceback mid-replay)."""
    for n, event in enumerate(events, 1):
        problem = event_problem(event)
        if problem:
            raise BisectLogError(f"{path}: event {n} ({event.get('event')}): {problem}: remove that line, or move "
                                 f"the log aside to start the bisect over")


@dataclass(frozen=True)
class Resumed:
    events: list[dict[str, Any]]
    resumed: bool  # True: this bisect was started before
    archived: Path | None  # the previous bisect's log, moved aside

    @property
    def done(self) -> dict[str, Any] | None:
        finished = [e for e in self.events if e.get("event") == "done"]
        return finished[-1] if finished else None


class BisectLog:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / LOG_FILE

    def read(self) -> list[dict[str, Any]]:
        """Every event; a torn last line (the process was killed while writing it) is skipped."""

        def event(row: Any) -> dict[str, Any]:
            if not isinstance(row, dict) or "event" not in row:
                raise TypeError("not a bisect event")
            return row

        return read_jsonl(self.path, event, lambda n: BisectLogError(f"{self.path}:{n}: not a bisect event"))

    def open(self, key: Mapping[str, Any], refs: Sequence[str]) -> Resumed:
        """Continue the bisect of this key, or start it (moving another bisect's log aside)."""
        events = self.read()
        if events:
            start = events[0]
            if start.get("event") == "start" and start.get("key") == dict(key) and start.get("refs") == list(refs):
                return Resumed(events, True, None)
        archived = None
        if self.path.exists():
            archived = self._archive_path()
            rename_inside(containing_root(self.folder, build_root()), self.path, archived)
        start = {"event": "start", "format": FORMAT, "key": dict(key), "refs": list(refs)}
        self.append(start)
        return Resumed([{**start, "time": utc_timestamp()}], False, archived)

    def _archive_path(self) -> Path:
        """A name no earlier archive holds: two bisects moved aside within one second keep both logs."""
        stamp = utc_now().strftime('%Y%m%dT%H%M%SZ')
        path, n = self.folder / f"log-{stamp}.jsonl", 1
        while path.exists():
            n += 1
            path = self.folder / f"log-{stamp}-{n}.jsonl"
        return path

    def append(self, event: Mapping[str, Any]) -> dict[str, Any]:
        row = {**event, "time": utc_timestamp()}
        append_jsonl(self.path, [row])
        return row


def replay(planner: Planner, events: Sequence[Mapping[str, Any]], *, lasting_only: bool = True) -> None:
    """Feed the measured batches and the skips of `events` to the planner, in order."""
    for event in events:
        kind = event.get("event")
        if kind == "batch":
            planner.record_batch(str(event["ref"]), [float(x) for x in event["samples"]])
        elif kind == "skip" and (not lasting_only or event.get("kind") in LASTING_SKIPS):
            planner.record_skip(str(event["ref"]), str(event["reason"]))


def builds_by_ref(events: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last build of each ref, with `built` true when any build of this bisect ran BuildKit for it."""
    out: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("event") == "build":
            ref = str(event["ref"])
            built = bool(event.get("built")) or bool(out.get(ref, {}).get("built"))
            out[ref] = {**event, "built": built}
    return out
