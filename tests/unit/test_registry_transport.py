"""The registry transport's own rules, word for word: the deadline setting, the reason of a failed attempt,
capped reads of an answer, an index read from the referrers API, the retry policy mounted on the session
and the backoff a Retry-After stretches. Answers are real `requests` responses or an in-test server."""

from __future__ import annotations

import io
import re
import threading
import time
from http.client import RemoteDisconnected
from types import SimpleNamespace

import pytest
import requests
from engine_refs import free_port
from fake_clock import FakeClock
from registry_double import RegistryDouble

from sglstack.core.errors import RegistryError
from sglstack.registry import transport as transport_mod
from sglstack.registry.client import RegistryClient
from sglstack.registry.transport import (
    ReferrersUnreadable,
    TooLarge,
    Transport,
    default_timeout_s,
    error_detail,
    failure_reason,
    read_capped,
    read_index,
)


class _Status:
    def __init__(self, status):
        self.status = status


@pytest.mark.parametrize(("response", "error", "reason"), [
    (_Status(503), None, "HTTP 503"),
    (_Status(429), ConnectionError("reset"), "HTTP 429"),
    (_Status(0), ConnectionRefusedError("[Errno 111] Connection refused"), "connection refused"),
    (None, ConnectionResetError("[Errno 104] Connection reset by peer"), "connection reset"),
    (None, ConnectionAbortedError("software caused connection abort"), "connection reset"),
    (None, OSError("connection aborted."), "connection reset"),
    (None, TimeoutError("The read operation timed out"), "no answer (timed out)"),
    (None, OSError("x"), "OSError"),
    (None, OSError("read timed out"), "no answer (timed out)"),
    (None, requests.ConnectTimeout("pool"), "no answer (timed out)"),
    (None, RemoteDisconnected("Remote end closed connection without response"), "connection closed without an answer"),
    (None, OSError("peer closed connection early"), "connection closed without an answer"),
    (None, RemoteDisconnected(""), "connection closed without an answer"),
    (None, ValueError("odd"), "ValueError"),
    (None, None, "no answer"),
    (_Status(None), None, "no answer"),
])
def test_the_reason_of_a_failed_attempt_is_short_and_says_what_happened(response, error, reason):
    assert failure_reason(response, error) == reason


@pytest.mark.parametrize(("value", "seconds"), [(None, 60.0), ("", 60.0), ("2.5", 2.5), ("600", 600.0),
                                                 ("0.5", 0.5)])
def test_the_deadline_comes_from_the_environment(monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv("SGLSTACK_REGISTRY_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("SGLSTACK_REGISTRY_TIMEOUT", value)
    assert default_timeout_s() == seconds
    assert Transport("r").timeout_s == seconds


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", " "])
def test_a_deadline_that_is_no_positive_number_is_one_line(monkeypatch, value):
    monkeypatch.setenv("SGLSTACK_REGISTRY_TIMEOUT", value)
    with pytest.raises(RegistryError) as err:
        default_timeout_s()
    assert str(err.value) == f"SGLSTACK_REGISTRY_TIMEOUT={value!r} is not a positive number of seconds"


@pytest.mark.parametrize(("timeout", "attempt", "notice"), [(60.0, 30.0, 10.0), (12.0, 6.0, 2.0), (1.5, 1.0, 1.0),
                                                            (0.5, 0.5, 1.0)])
def test_each_attempt_and_each_notice_take_a_share_of_the_deadline(timeout, attempt, notice):
    t = Transport("r", timeout_s=timeout)
    assert (t.timeout_s, t.attempt_timeout_s, t.notice_every_s) == (timeout, attempt, notice)
    given = Transport("r", timeout_s=timeout, attempt_timeout_s=0.25, notice_every_s=7, connect_timeout_s=3)
    assert (given.attempt_timeout_s, given.notice_every_s, given.connect_timeout_s) == (0.25, 7, 3)


def test_the_retry_policy_on_the_session():
    t = Transport("r", attempts=0, backoff_s=0.25, max_backoff_s=3, timeout_s=5)
    assert t.attempts == 1
    for scheme in ("http://", "https://"):
        policy = getattr(t.session.get_adapter(scheme + "r/"), "max_retries")  # noqa: B009 (typed BaseAdapter)
        assert (policy.total, policy.connect, policy.read, policy.status, policy.other, policy.redirect) == (
            0, None, None, None, None, False)
        assert policy.allowed_methods == frozenset({"GET", "HEAD", "PUT", "DELETE", "POST", "PATCH"})
        assert policy.status_forcelist == frozenset({429, 500, 502, 503, 504})
        assert (policy.backoff_factor, policy.backoff_max) == (0.25, 3)
        assert (policy.raise_on_status, policy.respect_retry_after_header) == (False, True)
    assert getattr(Transport("r", attempts=4, timeout_s=5).session.get_adapter("http://r/"), "max_retries").total == 3  # noqa: B009


def _response(body: bytes, headers: dict[str, str] | None = None) -> requests.Response:
    resp = requests.Response()
    resp.status_code = 200
    resp.raw = io.BytesIO(body)
    resp.headers.update(headers or {})
    return resp


def test_a_capped_read_refuses_a_declared_or_a_streamed_excess():
    assert read_capped(_response(b"abcd", {"Content-Length": "4"}), "GET x", 4) == b"abcd"
    assert read_capped(_response(b"a" * 70_000), "GET x", 70_000) == b"a" * 70_000
    messages = []
    for resp in (_response(b"abcd", {"Content-Length": "5"}), _response(b"a" * 70_001),
                 _response(b"abcde", {"Content-Length": "x"})):
        with pytest.raises(TooLarge) as err:
            read_capped(resp, "GET x", 4 if resp.headers.get("Content-Length") else 70_000)
        messages.append(str(err.value))
    assert messages == ["GET x: 5 bytes, over the 4-byte limit", "GET x: over the 70000-byte limit",
                        "GET x: over the 4-byte limit"]


def test_an_answer_that_breaks_off_is_one_line():
    class Broken(io.RawIOBase):
        def readable(self):
            return True

        def read(self, *_):
            raise requests.exceptions.ChunkedEncodingError("cut")

    resp = requests.Response()
    resp.status_code = 200
    resp.raw = Broken()
    with pytest.raises(RegistryError) as err:
        read_capped(resp, "GET y", 10)
    assert str(err.value) == "GET y: the answer broke off (ChunkedEncodingError)"


@pytest.mark.parametrize(("body", "headers", "message"), [
    (b"<html>", {"Content-Type": "text/html; charset=utf-8"},
     "GET r answered HTTP 200 with a body that is not JSON (text/html, 6 bytes)"),
    (b"<html>", {}, "GET r answered HTTP 200 with a body that is not JSON (no content type, 6 bytes)"),
    (b"[]", {}, "GET r answered JSON without a list of manifests"),
    (b'{"manifests": {}}', {}, "GET r answered JSON without a list of manifests"),
    (b'{"manifests": [1]}', {}, "GET r answered JSON without a list of manifests"),
    (b'{"manifests": [{}, 2]}', {}, "GET r answered JSON without a list of manifests"),
    (b'{"manifests": []}' + b" " * 20, {}, "GET r: over the 30-byte limit"),
])
def test_a_referrers_answer_that_is_no_index_is_unreadable_not_fatal(body, headers, message):
    with pytest.raises(ReferrersUnreadable) as err:
        read_index(_response(body, headers), "GET r", 30)
    assert str(err.value) == message


def test_an_index_gives_its_descriptors():
    assert read_index(_response(b'{"manifests": [{"digest": "d"}, {}]}'), "GET r", 100) == [{"digest": "d"}, {}]
    assert read_index(_response(b'{"manifests": []}'), "GET r", 100) == []


@pytest.mark.parametrize(("body", "reason", "detail"), [
    (b'{"errors": [{"code": "DENIED", "message": "no\\nmore"}]}', "Forbidden", "DENIED: no"),
    (b'{"errors": [{"message": "only"}]}', "Forbidden", "only"),
    (b'{"errors": [{"code": "C"}]}', "Forbidden", "C"),
    (b'{"errors": [{"code": "' + b"x" * 400 + b'"}]}', "Forbidden", "x" * 300),
    (b'{"errors": []}', "Forbidden", "Forbidden"),
    (b'{"errors": [{}]}', "Forbidden", ""),  # an error without code or message says nothing
    (b"[]", "Forbidden", "Forbidden"),
    (b"nope", None, ""),
])
def test_a_registry_error_body_becomes_one_short_line(body, reason, detail):
    resp = _response(body)
    resp.status_code, resp.reason = 403, reason
    assert error_detail(resp) == detail


def _retry_after(retry_after: str) -> RegistryDouble:
    """503 with a Retry-After header, then 200."""
    return RegistryDouble({"GET /v2/": [(503, {"Retry-After": retry_after}, b"{}"), (200, {}, b"{}")]})


@pytest.mark.parametrize(("retry_after", "backoff", "cap", "slept"), [
    ("3", 0.5, 8.0, [3.0]),
    ("3", 0.5, 2.0, [2.0]),
    ("0", 0.5, 8.0, [0.5]),
    ("1", 4.0, 8.0, [4.0]),
    ("0", 0.0, 8.0, []),  # no wait at all: not even a sleep of 0
])
def test_a_retry_after_stretches_the_backoff_up_to_its_cap(retry_after, backoff, cap, slept):
    server = _retry_after(retry_after)
    delays: list[float] = []
    try:
        RegistryClient(f"127.0.0.1:{server.port}", sleep=delays.append, backoff_s=backoff, max_backoff_s=cap,
                       timeout_s=30).ping()
    finally:
        server.close()
    assert (len(server.seen), delays) == (2, slept)


def test_a_registry_that_never_answers_costs_the_deadline_and_says_so():
    done = threading.Event()

    served = RegistryDouble({"GET /v2/": [lambda handler: done.wait(10)]})  # never answers
    port = served.port
    notices: list[str] = []
    start = time.monotonic()
    try:
        with pytest.raises(RegistryError) as err:
            RegistryClient(f"127.0.0.1:{port}", timeout_s=0.4, notify=notices.append, sleep=lambda _s: None).ping()
    finally:
        done.set()
        served.close()
    assert time.monotonic() - start < 8  # the deadline, not the server's 10 s
    assert str(err.value).startswith(f"registry 127.0.0.1:{port}: GET /v2/: no answer within 0 s (")
    assert str(err.value).endswith("last: no answer (timed out))")


def _frozen_clock(monkeypatch, now: float) -> None:
    """The transport's clock stands still: every operation has exactly its whole deadline left."""
    monkeypatch.setattr(transport_mod, "time", SimpleNamespace(monotonic=lambda: now, sleep=time.sleep))


def test_a_wait_never_reaches_past_the_deadline(monkeypatch):
    _frozen_clock(monkeypatch, 1000.0)
    server = _retry_after("3")
    delays: list[float] = []
    try:
        RegistryClient(f"127.0.0.1:{server.port}", sleep=delays.append, backoff_s=0.5, max_backoff_s=8,
                       timeout_s=0.5).ping()
    finally:
        server.close()
    assert delays == [0.5]  # Retry-After's 3 s, cut to what is left


@pytest.mark.parametrize(("timeout", "said"), [
    (0.3, "GET /v2/ failed after 1 attempts: HTTP 503 Service Unavailable"),
    (0.05, "GET /v2/: no answer within 0 s (1 attempt(s), last: "),
])
def test_giving_up_says_whether_the_deadline_or_the_attempts_ran_out(monkeypatch, timeout, said):
    _frozen_clock(monkeypatch, 0.0)
    server = _retry_after("1")
    try:
        with pytest.raises(RegistryError) as err:
            RegistryClient(f"127.0.0.1:{server.port}", sleep=lambda _s: None, attempts=1, timeout_s=timeout).ping()
    finally:
        server.close()
    assert str(err.value).startswith(f"registry 127.0.0.1:{server.port}: {said}")


def test_a_refused_connection_is_retried_with_backoff_and_named():
    port = free_port()  # nothing listens there
    delays: list[float] = []
    with pytest.raises(RegistryError) as err:
        RegistryClient(f"127.0.0.1:{port}", sleep=delays.append, attempts=3, backoff_s=0.25, timeout_s=30).ping()
    assert delays == [0.25, 0.5]
    assert str(err.value) == f"registry 127.0.0.1:{port}: GET /v2/ failed after 3 attempts: connection refused"


class _FirstFails:
    """The first request gets `first` (503, or the connection closed without an answer), moving the
    transport's clock to `then`; every later one 200."""

    def __init__(self, clock: FakeClock, then: float, first: str) -> None:
        def first_answer(handler) -> None:
            clock.now = then
            if first == "close":
                handler.close_connection = True
                return
            handler.send_response(503)
            handler.send_header("Content-Length", "2")
            handler.end_headers()
            handler.wfile.write(b"{}")

        self.registry = RegistryDouble({"GET /v2/": [first_answer, (200, {}, b"{}")]})
        self.port = self.registry.port

    @property
    def seen(self) -> int:
        return len(self.registry.seen)

    def ping(self, **kw) -> None:
        try:
            RegistryClient(f"127.0.0.1:{self.port}", sleep=lambda _s: None, timeout_s=5, attempts=3, **kw).ping()
        finally:
            self.registry.close()


@pytest.mark.parametrize("then", [5.0, 7.0])
def test_no_retry_once_the_deadline_has_come_and_the_last_answer_is_said(monkeypatch, then):
    clock = FakeClock()
    monkeypatch.setattr(transport_mod, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=time.sleep))
    server = _FirstFails(clock, then, "503")
    with pytest.raises(RegistryError) as err:
        server.ping()
    assert server.seen == 1
    # The reason phrase comes with the answer's body, read within what is left of the deadline: none. Whether the
    # server thread has written the body by then is the machine's speed, so both forms name the same answer.
    assert re.fullmatch(rf"registry 127\.0\.0\.1:{server.port}: GET /v2/: no answer within 5 s \(1 attempt\(s\), "
                        r"last: HTTP 503( Service Unavailable)?\)", str(err.value)), str(err.value)


def test_a_retry_still_fits_before_the_deadline(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(transport_mod, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=time.sleep))
    server = _FirstFails(clock, 4.5, "503")
    server.ping()
    assert server.seen == 2


def test_a_connection_closed_without_an_answer_is_retried():
    server = _FirstFails(FakeClock(), 0.0, "close")
    server.ping()
    assert server.seen == 2


def test_a_budget_bounds_every_operation_inside_it(monkeypatch):
    _frozen_clock(monkeypatch, 0.0)
    server = _retry_after("1")
    client = RegistryClient(f"127.0.0.1:{server.port}", sleep=lambda _s: None, attempts=1, timeout_s=60)
    try:
        with pytest.raises(RegistryError) as err, client.budget(0.04), client.budget(30):
            client.ping()
    finally:
        server.close()
    assert str(err.value).startswith(
        f"registry 127.0.0.1:{server.port}: GET /v2/: no answer within 0 s (1 attempt(s), ")
    assert client.timeout_s == 60
