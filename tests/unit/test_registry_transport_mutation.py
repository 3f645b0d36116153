"""What the registry transport's own tests left to chance, found by mutation (`mutation.sh registry-transport`):
an error whose words begin or end in the letters a mutant strips, and a retry's wait outside an operation."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import requests
from fake_clock import FakeClock
from registry_double import RegistryDouble
from urllib3.util.retry import RequestHistory

from sglstack.core.errors import RegistryError
from sglstack.registry import transport as transport_mod
from sglstack.registry.auth import Credentials
from sglstack.registry.session import RegistrySession
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


# ---- a session's request against the registry double: bodies, redirects, streams, failures of every attempt ----

CHALLENGE = (401, {"WWW-Authenticate": 'Basic realm="registry"'}, b"")


def _session(registry: RegistryDouble, **kw) -> RegistrySession:
    return RegistrySession(registry.host, credentials=Credentials("u", "p", "a test"), sleep=lambda _s: None,
                           timeout_s=10, **kw)


def test_a_body_read_from_a_file_is_sent_again_whole_from_where_it_stood_after_a_challenge():
    with RegistryDouble({"PUT /v2/r/blobs/uploads/u": [CHALLENGE, (201, {}, b"")]}) as registry:
        body = io.BytesIO(b"headBODY")
        body.seek(4)
        resp = _session(registry).request("PUT", "r/blobs/uploads/u", scope="repository:r:push", data=body)
        assert resp.status_code == 201
        assert [(seen[0], seen[2] is not None, seen[5]) for seen in registry.seen] == [
            ("PUT", False, b"BODY"), ("PUT", True, b"BODY")]


def test_a_body_of_bytes_is_sent_again_after_a_challenge():
    with RegistryDouble({"PUT /v2/r/manifests/t": [CHALLENGE, (201, {}, b"")]}) as registry:
        resp = _session(registry).request("PUT", "r/manifests/t", scope="repository:r:push", data=b"{}")
        assert resp.status_code == 201 and [seen[5] for seen in registry.seen] == [b"{}", b"{}"]


def test_a_redirect_is_followed_unless_asked_not_to_and_the_answer_is_read_unless_streamed():
    answers = {"GET /v2/r/blobs/sha256:1": [(307, {"Location": "/store/1"}, b"")], "GET /store/1": [(200, {}, b"data")]}
    with RegistryDouble(answers) as registry:
        session = _session(registry)
        followed = session.request("GET", "r/blobs/sha256:1", scope="repository:r:pull")
        assert followed._content_consumed  # read whole before it came back: the connection is free again
        assert (followed.status_code, followed.content) == (200, b"data")
        kept = session.request("GET", "r/blobs/sha256:1", scope="repository:r:pull", allow_redirects=False)
        assert (kept.status_code, kept.headers["Location"]) == (307, "/store/1")
        streamed = session.request("GET", "r/blobs/sha256:1", scope="repository:r:pull", stream=True)
        assert not streamed._content_consumed and streamed.raw.read() == b"data"


def test_a_connection_closed_on_every_attempt_is_named_so():
    def close(handler) -> None:
        handler.close_connection = True

    with RegistryDouble({"GET /v2/": [close]}) as registry, pytest.raises(RegistryError) as err:
        _session(registry, attempts=2).request("GET", "", scope="")
    assert str(err.value) == (f"registry {registry.host}: GET /v2/ failed after 2 attempts: connection closed "
                              "without an answer")


def test_a_request_refused_before_it_is_sent_is_named_by_its_error():
    transport = transport_mod.Transport("r", timeout_s=5)
    with transport.operation("GET /v2/"), pytest.raises(RegistryError) as err:
        transport.send("GET", "http://127.0.0.1:9/v2/", headers={"X-Odd": "a\nb"})
    assert str(err.value) == "registry r: GET /v2/ failed after 1 attempts: InvalidHeader"


def test_a_close_without_an_answer_as_urllib3_wraps_it_is_no_reset():
    from http.client import RemoteDisconnected

    from urllib3.exceptions import ProtocolError

    wrapped = ProtocolError("Connection aborted.", RemoteDisconnected("Remote end closed connection without response"))
    assert transport_mod.failure_reason(None, wrapped) == "connection closed without an answer"
    reset = ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))
    assert transport_mod.failure_reason(None, reset) == "connection reset"


def test_a_large_bodys_extra_seconds_extend_its_deadline(monkeypatch):
    """The first answer (a 503) comes when the clock says 8 s: past a 5 s deadline, within 5 + 10."""
    clock = FakeClock()
    monkeypatch.setattr(transport_mod, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=lambda _s: None))

    def late_503(handler) -> None:
        clock.now = 8.0
        handler.send_response(503)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    with RegistryDouble({"PUT /v2/r/blobs/uploads/u": [late_503, (201, {}, b"")]}) as registry:
        session = RegistrySession(registry.host, sleep=lambda _s: None, timeout_s=5)
        resp = session.request("PUT", "r/blobs/uploads/u", scope="repository:r:push", data=b"x", extra_s=10)
        assert resp.status_code == 201 and len(registry.seen) == 2


def test_an_operation_is_named_by_its_path_without_the_query():
    with RegistryDouble({"GET /v2/r/tags/list?n=100": [(503, {}, b"")]}) as registry, \
            pytest.raises(RegistryError) as err:
        _session(registry, attempts=1).request("GET", "r/tags/list?n=100", scope="repository:r:pull")
    assert str(err.value).startswith(f"registry {registry.host}: GET /v2/r/tags/list failed after 1 attempts: HTTP 503")


@pytest.mark.parametrize(("answer", "credentials", "said"), [
    ((401, {}, b""), Credentials("u", "p", "a test"), "rejected the credentials from a test"),
    (CHALLENGE, None, "authentication required and no credentials found"),
])
def test_a_challenge_that_cannot_be_answered_fails_at_once(answer, credentials, said):
    from sglstack.registry.session import RegistryAuthError

    with RegistryDouble({"GET /v2/": [answer]}) as registry:
        session = RegistrySession(registry.host, credentials=credentials, sleep=lambda _s: None, timeout_s=5)
        with pytest.raises(RegistryAuthError, match=said):
            session.request("GET", "", scope="")
        assert len(registry.seen) == 1  # not asked again without what the challenge wants


def test_the_defaults_of_a_transport():
    transport = transport_mod.Transport("r", timeout_s=600)
    policy = transport.session.get_adapter("https://r/").max_retries
    assert (policy.total, policy.backoff_factor, policy.backoff_max, policy.connect) == (3, 0.5, 8.0, None)
    assert (transport.attempts, transport.connect_timeout_s, transport.notice_every_s) == (4, 10.0, 10.0)


def test_a_wait_notice_goes_to_stderr_as_it_is_written(capsys):
    transport_mod.Transport("r", timeout_s=5)._notify("waiting for registry r ([bold]GET /v2/[/bold]), 5 s of 60 s")
    out, err = capsys.readouterr()
    assert out == "" and err == "waiting for registry r ([bold]GET /v2/[/bold]), 5 s of 60 s\n"


def test_a_session_given_is_the_one_spoken_through():
    given = requests.Session()
    assert RegistrySession("r.example", session=given).transport.session is given


def test_after_a_challenge_the_redirect_is_still_followed_and_the_stream_still_streamed():
    answers = {"GET /v2/r/blobs/sha256:1": [CHALLENGE, (307, {"Location": "/store/1"}, b"")],
               "GET /store/1": [(200, {}, b"data")]}
    with RegistryDouble(answers) as registry:
        followed = _session(registry).request("GET", "r/blobs/sha256:1", scope="repository:r:pull")
        assert (followed.status_code, followed.content) == (200, b"data")
    answers = {"GET /v2/r/blobs/sha256:1": [CHALLENGE, (200, {}, b"data")]}
    with RegistryDouble(answers) as registry:
        streamed = _session(registry).request("GET", "r/blobs/sha256:1", scope="repository:r:pull", stream=True)
        assert not streamed._content_consumed and streamed.raw.read() == b"data"
