"""A clock the test holds: `time.monotonic` and `time.sleep` of the code under test, so no test waits for real
time or depends on the machine's speed."""

from __future__ import annotations


class FakeClock:
    """A sleep moves the clock at once and is remembered; the test may also set `now` itself."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
