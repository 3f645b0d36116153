"""How sglstack talks HTTP to a registry: one retry policy, one deadline per operation, and wait notices.

Transient failures (5xx, 429, connection errors, resets) are retried by one urllib3 `Retry` mounted on the
requests session, with bounded exponential backoff. Every operation (one API call: its auth round trips,
its retries and the waits between them) has one total deadline, and while it waits longer than a few
seconds the user is told what for. A registry that accepts the connection and never answers thus costs
at most the deadline, never silent minutes. `RegistryClient` (the API and its auth) sends through this.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry
from urllib3.util.timeout import Timeout

from ..core.console import console
from ..core.errors import RegistryError, first_line
from ..core.inputs import loads

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
ENV_TIMEOUT = "SGLSTACK_REGISTRY_TIMEOUT"  # seconds one registry operation may take, retries included
DEFAULT_TIMEOUT_S = 60.0


def default_timeout_s() -> float:
    """SGLSTACK_REGISTRY_TIMEOUT (seconds per operation), or 60."""
    value = os.environ.get(ENV_TIMEOUT, "")
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise RegistryError(f"{ENV_TIMEOUT}={value!r} is not a positive number of seconds")
    return seconds


def error_detail(resp: requests.Response) -> str:
    """The first error of a registry's JSON error body (`CODE: message`), else the HTTP reason."""
    try:  # what a registry says is shown, not trusted: any shape, any depth, one short line
        errors = loads(resp.content).get("errors") or []
        if errors:
            first = errors[0]
            text = f"{first.get('code', '')}: {first.get('message', '')}".strip(": ")
            return first_line(text)
    except (ValueError, AttributeError, KeyError, TypeError):
        pass
    return resp.reason or ""


@dataclass
class Operation:
    """One API call in flight: what it is (for the user), when it must end, why its attempts failed."""

    what: str
    deadline: float  # time.monotonic()
    total_s: float
    sleep: Callable[[float], None]
    failures: list[str] = field(default_factory=list)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


# The operation of this thread. The retry policy lives on the (shared) adapter; it finds the deadline
# and the injectable sleep of the call it is retrying here, without the adapter holding per-call state.
_CURRENT: contextvars.ContextVar[Operation | None] = contextvars.ContextVar("sglstack_registry_op", default=None)


class _DeadlineTimeout(Timeout):
    """Connect and read timeouts never reach past the operation's deadline, whichever attempt this is.

    urllib3 clones the timeout for each attempt and asks it for the values when it connects and reads,
    so the values shrink as the deadline nears.
    """

    def __init__(self, deadline: float, connect: float, read: float) -> None:
        super().__init__(connect=connect, read=read)
        self.deadline, self.connect_cap, self.read_cap = deadline, connect, read

    def clone(self) -> _DeadlineTimeout:
        return _DeadlineTimeout(self.deadline, self.connect_cap, self.read_cap)

    def _left(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    @property
    def connect_timeout(self) -> float:
        return min(self.connect_cap, self._left())

    @property
    def read_timeout(self) -> float:
        return min(self.read_cap, self._left())


class _RetryPolicy(Retry):
    """urllib3's Retry, with the backoff `backoff * 2**(n-1)` (capped) from the first retry on, each
    failure noted on the operation, the sleep injectable, and no retry once the deadline has passed."""

    def increment(self, method: str | None = None, url: str | None = None, *args: Any, **kwargs: Any) -> _RetryPolicy:
        op = _CURRENT.get()
        response, error = kwargs.get("response"), kwargs.get("error")
        if op is not None:
            op.failures.append(failure_reason(response, error))
        new = super().increment(method, url, *args, **kwargs)
        if op is not None and op.remaining() <= 0:
            raise MaxRetryError(kwargs.get("_pool"), url or "", error or ValueError("deadline"))  # type: ignore[arg-type]
        return new

    def get_backoff_time(self) -> float:
        failed = len(self.history)
        if failed == 0:
            return 0.0
        return float(min(self.backoff_max, self.backoff_factor * 2 ** (failed - 1)))

    def sleep(self, response: Any = None) -> None:
        delay = self.get_backoff_time()
        retry_after = self.get_retry_after(response) if response is not None else None
        if retry_after:
            delay = min(max(delay, retry_after), self.backoff_max)
        op = _CURRENT.get()
        if op is None:
            time.sleep(delay)
            return
        delay = min(delay, max(0.0, op.remaining()))
        if delay > 0:
            op.sleep(delay)


class TooLarge(RegistryError):
    """A manifest or blob is larger than the caller will read: refused before it is held in memory."""


def read_capped(resp: requests.Response, what: str, limit: int) -> bytes:
    """A streamed body, refused (`TooLarge`, naming `what`) as soon as it passes `limit` bytes."""
    try:
        length = resp.headers.get("Content-Length") or ""
        if length.isdigit() and int(length) > limit:
            raise TooLarge(f"{what}: {length} bytes, over the {limit}-byte limit")
        chunks, total = [], 0
        for chunk in resp.iter_content(64 * 1024):
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"{what}: over the {limit}-byte limit")
            chunks.append(chunk)
        return b"".join(chunks)
    except requests.RequestException as exc:
        raise RegistryError(f"{what}: the answer broke off ({type(exc).__name__})") from None
    finally:
        resp.close()


class ReferrersUnreadable(RegistryError):
    """The referrers API answered 200 with something that is not an image index (HTML from a proxy, JSON
    of another shape, an answer over the cap): the tag scheme is still there to read."""


def read_index(resp: requests.Response, what: str, limit: int) -> list[dict[str, Any]]:
    """The `manifests` of an image index answered 200, read up to `limit` bytes; ReferrersUnreadable else."""
    try:
        body = read_capped(resp, what, limit)
    except RegistryError as exc:
        raise ReferrersUnreadable(str(exc)) from None
    try:
        data = loads(body)
    except ValueError:
        kind = (resp.headers.get("Content-Type") or "no content type").split(";")[0]
        raise ReferrersUnreadable(f"{what} answered HTTP 200 with a body that is not JSON ({kind}, {len(body)} "
                                  "bytes)") from None
    found = data.get("manifests") if isinstance(data, dict) else None
    if not isinstance(found, list) or not all(isinstance(d, dict) for d in found):
        raise ReferrersUnreadable(f"{what} answered JSON without a list of manifests")
    return found


def failure_reason(response: Any, error: BaseException | None) -> str:
    """A short, secret-free reason for one failed attempt."""
    if response is not None and getattr(response, "status", None):
        return f"HTTP {response.status}"
    text = f"{type(error).__name__}: {error}".lower() if error else ""
    if "refused" in text:
        return "connection refused"
    # Before "aborted": urllib3 wraps a connection closed without an answer as ProtocolError('Connection aborted.',
    # RemoteDisconnected(...)), which is no reset.
    if "remotedisconnected" in text or "closed connection" in text:
        return "connection closed without an answer"
    if "reset" in text or "aborted" in text:
        return "connection reset"
    if "timed out" in text or "timeout" in text:
        return "no answer (timed out)"
    return type(error).__name__ if error else "no answer"


class Transport:
    """The HTTP side of one registry: a session with the retry policy, deadlines, notices.

    `timeout_s` bounds each operation as a whole (connect, read, retries and backoff), default
    $SGLSTACK_REGISTRY_TIMEOUT or 60 s; one attempt may use at most `attempt_timeout_s` of it (default
    half), so that a connection that hangs once still leaves time for a retry. `notify` gets the
    "waiting for registry ..." lines (default: stderr), every `notice_every_s`.
    """

    def __init__(
        self,
        registry: str,
        *,
        session: requests.Session | None = None,
        attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
        connect_timeout_s: float = 10.0,
        notice_every_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.registry = registry
        self.attempts = max(1, attempts)
        self.timeout_s = timeout_s if timeout_s is not None else default_timeout_s()
        self.attempt_timeout_s = attempt_timeout_s or max(self.timeout_s / 2, min(self.timeout_s, 1.0))
        self.connect_timeout_s = connect_timeout_s
        self.notice_every_s = notice_every_s or min(10.0, max(1.0, self.timeout_s / 6))
        self._sleep = sleep
        self._notify = notify or (lambda line: console(stderr=True).print(line, markup=False, highlight=False))
        self._budget: float | None = None
        self.session = session or requests.Session()
        policy = _RetryPolicy(
            total=self.attempts - 1,
            connect=None,
            read=None,
            status=None,
            other=None,
            redirect=False,  # requests follows redirects itself
            # all idempotent here. A blob chunk (PATCH) sent again after the registry took part of it is appended
            # (distribution 2.8 does not check Content-Range) or refused by the upload's state; the Range it
            # answers and the digest it checks at the end stop the upload then: never a wrong blob stored
            allowed_methods=frozenset({"GET", "HEAD", "PUT", "DELETE", "POST", "PATCH"}),
            status_forcelist=TRANSIENT_STATUS,
            backoff_factor=backoff_s,
            backoff_max=max_backoff_s,
            raise_on_status=False,  # the last answer comes back, and is reported with the attempts
            respect_retry_after_header=True,
        )
        adapter = HTTPAdapter(max_retries=policy)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    @contextlib.contextmanager
    def budget(self, seconds: float) -> Iterator[None]:
        """Every operation inside ends within `seconds` from now, whatever its own deadline says.

        For work that must finish in bounded time as a whole, e.g. putting tags back after a signal.
        """
        outer, self._budget = self._budget, time.monotonic() + seconds
        if outer is not None:
            self._budget = min(self._budget, outer)
        try:
            yield
        finally:
            self._budget = outer

    @contextlib.contextmanager
    def operation(self, what: str, extra_s: float = 0.0) -> Iterator[Operation]:
        """One operation: `send` inside it shares its deadline; `what` names it in notices and errors. `extra_s`:
        seconds more for one that carries a large body (a blob chunk at a floor rate)."""
        current = _CURRENT.get()
        if current is not None:  # a token fetch inside a request: the request's deadline covers it
            yield current
            return
        deadline = time.monotonic() + self.timeout_s + max(0.0, extra_s)
        if self._budget is not None:
            deadline = min(deadline, self._budget)
        op = Operation(what=what, deadline=deadline, total_s=max(0.0, deadline - time.monotonic()), sleep=self._sleep)
        done = threading.Event()
        started = time.monotonic()

        def tell() -> None:
            while not done.wait(self.notice_every_s):
                self._notify(
                    f"waiting for registry {self.registry} ({what}), "
                    f"{time.monotonic() - started:.0f} s of {op.total_s:.0f} s"
                )

        watcher = threading.Thread(target=tell, name="sglstack-registry-wait", daemon=True)
        token = _CURRENT.set(op)
        watcher.start()
        try:
            yield op
        finally:
            done.set()
            _CURRENT.reset(token)

    def _gave_up(self, op: Operation, last: str) -> RegistryError:
        attempts = max(1, len(op.failures))
        if op.remaining() <= 0.05:
            return RegistryError(
                f"registry {self.registry}: {op.what}: no answer within {op.total_s:.0f} s "
                f"({attempts} attempt(s), last: {last})"
            )
        return RegistryError(f"registry {self.registry}: {op.what} failed after {attempts} attempts: {last}")

    def send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """One request of the current operation, through the retry policy.

        Transient failures left after the retries (or the deadline) become one RegistryError naming the
        registry, the operation, the attempts and the last reason; every other answer is returned.
        """
        op = _CURRENT.get()
        assert op is not None, "registry requests run inside an operation"
        # requests hands a urllib3 Timeout object through to urllib3 as it is (HTTPAdapter.send).
        timeout = cast(Any, _DeadlineTimeout(op.deadline, self.connect_timeout_s, self.attempt_timeout_s))
        try:
            resp = self.session.request(method, url, timeout=timeout, **kwargs)
        except requests.RequestException as exc:
            last = op.failures[-1] if op.failures else failure_reason(None, exc)
            raise self._gave_up(op, last) from None
        if resp.status_code in TRANSIENT_STATUS:
            raise self._gave_up(op, f"HTTP {resp.status_code} {error_detail(resp)}".strip())
        return resp
