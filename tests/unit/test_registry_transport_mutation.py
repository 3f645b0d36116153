"""What the registry transport's own tests left to chance, found by mutation (`mutation.sh registry-transport`):
an error whose words begin or end in the letters a mutant strips, and a retry's wait outside an operation."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import requests
from fake_clock import FakeClock
from urllib3.util.retry import RequestHistory

from sglstack.registry import transport as transport_mod
from sglstack.registry.transport import error_detail


def _answer(body: bytes) -> requests.Response:
    resp = requests.Response()
    resp.status_code, resp.reason, resp.raw = 404, "Not Found", io.BytesIO(body)
    return resp


@pytest.mark.parametrize(("body", "detail"), [
    (b'{"errors": [{"code": "", "message": "no such INDEX"}]}', "no such INDEX"),
    (b'{"errors": [{"code": "XATTR", "message": "X"}]}', "XATTR: X"),
    (b'{"errors": [{"code": " X ", "message": ""}]}', "X"),
])
def test_only_the_separator_and_blanks_are_taken_off_an_error(body, detail):
    assert error_detail(_answer(body)) == detail


def test_a_retry_outside_an_operation_waits_its_backoff_on_the_real_sleep(monkeypatch):
    """A policy used on its own (no operation in this thread) still waits `backoff * 2**(n-1)`, capped."""
    slept: list[float] = []
    monkeypatch.setattr(transport_mod.time, "sleep", slept.append)
    failed = RequestHistory("GET", "/v2/", None, 503, None)
    policy = transport_mod._RetryPolicy(total=5, backoff_factor=0.5, backoff_max=8.0)
    policy.sleep()  # no failure yet: no wait
    policy.new(history=(failed,)).sleep()
    policy.new(history=(failed,) * 3).sleep()
    policy.new(history=(failed,) * 9).sleep()
    assert slept == [0.0, 0.5, 2.0, 8.0]


def test_an_answer_without_a_status_is_no_answer():
    class Answer:  # an answer object that carries no status at all
        pass

    assert transport_mod.failure_reason(Answer(), None) == "no answer"
    assert transport_mod.failure_reason(Answer(), ConnectionRefusedError("refused")) == "connection refused"


def test_each_attempts_timeouts_shrink_to_what_is_left_of_the_deadline(monkeypatch):
    clock = FakeClock(now=100.0)
    monkeypatch.setattr(transport_mod, "time", SimpleNamespace(monotonic=clock.monotonic))
    timeout = transport_mod._DeadlineTimeout(105.0, 10.0, 3.0)
    assert (timeout.connect_timeout, timeout.read_timeout) == (5.0, 3.0)
    clock.now = 104.0
    assert (timeout.connect_timeout, timeout.read_timeout) == (1.0, 1.0)
    clone = timeout.clone()
    assert (clone.deadline, clone.connect_cap, clone.read_cap) == (105.0, 10.0, 3.0)
    clock.now = 106.0  # past the deadline: the least a socket accepts, never a negative or no timeout
    assert (clone.connect_timeout, clone.read_timeout) == (0.001, 0.001)


def test_a_request_outside_an_operation_is_a_programming_error_that_says_so():
    with pytest.raises(AssertionError, match=r"^registry requests run inside an operation$"):
        transport_mod.Transport("r", timeout_s=5).send("GET", "http://r/v2/")
