"""UTC time: the one clock, timestamp format and parser of every record, log line and lock sglstack writes.

Core's lowest time module (the folder lock and the records both stamp with it), so nothing above formats a
time itself.
"""

from __future__ import annotations

import datetime as dt
import re
import time

UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_now() -> dt.datetime:
    """Now, in UTC: every time sglstack records or compares is UTC."""
    return dt.datetime.now(dt.UTC)


def utc_timestamp(when: dt.datetime | None = None) -> str:
    """`2026-12-02T18:48:09Z`: the one timestamp format of every record."""
    return (when or utc_now()).astimezone(dt.UTC).strftime(UTC_FORMAT)


_FRACTION_PAST_MICROSECONDS = re.compile(r"(\.\d{6})\d+")


def parse_utc(text: object) -> dt.datetime | None:
    """An RFC 3339 / ISO 8601 time as the engine, a registry or a record writes it (`Z`, an offset, or none:
    UTC; nanoseconds cut to microseconds), in UTC; None for anything else. The one parser, so a time one
    task reads another reads the same."""
    if not isinstance(text, str):
        return None
    trimmed = _FRACTION_PAST_MICROSECONDS.sub(r"\1", text.strip())
    if trimmed[-1:] in ("Z", "z"):
        trimmed = trimmed[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(trimmed)
    except ValueError:
        return None
    return when.astimezone(dt.UTC) if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def parse_local_stamp(text: str) -> float | None:
    """`YYYY-mm-dd HH:MM:SS` in this machine's local time (how SGLang stamps its log lines) as epoch seconds;
    None for anything else."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def utc_today() -> dt.date:
    """Today's date in UTC (tags carry it): a local date would change tags at local midnight."""
    return utc_now().date()
