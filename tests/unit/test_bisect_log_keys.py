"""Another bisect is another log: a key that differs in any one field (the metric, the threshold, the runs as
much as an endpoint) starts afresh and moves the earlier log aside, never mixing its measurements in."""

from __future__ import annotations

import json

import pytest

from sglstack.bisect.log import BisectLog

KEY = {"stack": "synth", "stack_fingerprint": "0123456789abcdef", "mode": "git", "source": "/src", "good": "a",
       "bad": "b", "metric": "baseline", "threshold": 0.05, "runs_per_batch": 5, "max_batches": 4,
       "smoke": {"max_new_tokens": 48}}
REFS = ["a", "m", "b"]
CHANGED = {"metric": "eagle3", "threshold": 0.1, "runs_per_batch": 6, "max_batches": 5, "good": "a2", "bad": "b2",
           "stack_fingerprint": "fedcba9876543210", "smoke": {"max_new_tokens": 96}}


def _log_with_a_batch(folder):
    log = BisectLog(folder)
    assert not log.open(KEY, REFS).resumed
    log.append({"event": "batch", "ref": "m", "samples": [100.0] * 5})
    return log


def test_the_same_key_and_refs_resume(tmp_path):
    _log_with_a_batch(tmp_path)
    again = BisectLog(tmp_path).open(dict(KEY), list(REFS))
    assert again.resumed and again.archived is None
    assert [e["event"] for e in again.events] == ["start", "batch"]


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_a_key_differing_in_one_field_is_another_bisect(tmp_path, field):
    _log_with_a_batch(tmp_path)
    other = BisectLog(tmp_path).open({**KEY, field: CHANGED[field]}, REFS)
    assert not other.resumed and [e["event"] for e in other.events] == ["start"]
    assert other.archived is not None
    archived = [json.loads(line) for line in other.archived.read_text().splitlines()]
    assert [e["event"] for e in archived] == ["start", "batch"] and archived[0]["key"] == KEY


def test_other_refs_are_another_bisect(tmp_path):
    _log_with_a_batch(tmp_path)
    assert not BisectLog(tmp_path).open(KEY, ["a", "b"]).resumed


def test_every_earlier_log_is_kept_when_several_bisects_start_within_a_second(tmp_path):
    log = _log_with_a_batch(tmp_path)
    for field in sorted(CHANGED):  # each moves the one before aside, all within the same second or so
        log.open({**KEY, field: CHANGED[field]}, REFS)
    archives = sorted(tmp_path.glob("log-*.jsonl"))
    assert len(archives) == len(CHANGED)
    keys = [json.loads(path.read_text().splitlines()[0])["key"] for path in archives]
    assert sorted(json.dumps(k, sort_keys=True) for k in keys) == sorted(
        json.dumps(k, sort_keys=True) for k in [KEY, *({**KEY, f: CHANGED[f]} for f in sorted(CHANGED)[:-1])])
