"""The pure state machine of a bisect: which ref to measure next, and when the answer is known.

Refs are ordered oldest first: refs[0] is the good endpoint, refs[-1] the bad one. The planner holds a
results cache per ref (its samples, batch by batch, or the reason it was skipped) and derives
everything else from it, so replaying a log of the same results gives the same decisions.

- The endpoints are measured first (`endpoint_batches` server starts each) and must differ by at
  least the threshold; when the tests cannot tell yet, both get more batches, up to `max_batches`.
- Then the classic search: `lo` is the newest ref known good below `hi`, the oldest ref known bad.
  The next ref is the testable one closest to the middle of (lo, hi). A ref the tests call UNKNOWN
  gets another batch (server restart) until it is decided or reaches `max_batches`: then, like a ref
  whose patch does not apply (git bisect's 125) or one that lies between the endpoints, it is left
  out and its neighbours are tested instead.
- It ends when lo and hi are adjacent and both were measured in `confirm_batches` server starts (the
  first bad ref is named), or when only untestable refs are left between them: then the answer is
  "undecided", with the refs the change may be in. A wrong commit is never named to have an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from . import stats

# What a ref is, as the report shows it.
GOOD = "good"
BAD = "bad"
SKIP = "skip"  # could not be built or served (a patch does not apply, the server does not start)
UNDECIDED = "undecided"  # measured as much as allowed and still UNKNOWN, or between the endpoints
PENDING = "pending"  # measured, needs another batch
UNTESTED = "untested"

FOUND = "found"
NOT_FOUND = "undecided"


@dataclass(frozen=True)
class PlannerConfig:
    runs_per_batch: int = 5  # measured runs per server start (samples per batch)
    endpoint_batches: int = 2  # server starts per endpoint before comparing them
    step_batches: int = 1  # server starts per tested ref before classifying it
    max_batches: int = 4  # the bound on repeats, per ref
    confirm_batches: int = 2  # server starts behind each ref of the answer (last good, first bad)
    threshold: float = 0.05  # the smallest relative change worth a bisect
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if self.runs_per_batch < 1 or self.endpoint_batches < 1 or self.step_batches < 1:
            raise ValueError("runs per batch and batches per ref must be at least 1")
        if self.max_batches < max(self.endpoint_batches, self.step_batches, self.confirm_batches):
            raise ValueError("max_batches must be at least the initial batches")
        if not 0 < self.threshold < 1:
            raise ValueError("threshold is a fraction between 0 and 1 (0.05 = 5%)")


@dataclass
class RefResults:
    batches: list[tuple[float, ...]] = field(default_factory=list)
    skip: str | None = None

    @property
    def samples(self) -> tuple[float, ...]:
        return tuple(x for batch in self.batches for x in batch)


@dataclass(frozen=True)
class Measure:
    """Run one more batch (a server start of `runs_per_batch` runs) of `ref`."""

    ref: str
    index: int
    why: str


@dataclass(frozen=True)
class Outcome:
    status: str  # FOUND or NOT_FOUND
    reason: str
    first_bad: str | None = None
    last_good: str | None = None
    candidates: tuple[str, ...] = ()  # where the first bad change may be (FOUND: just first_bad)
    notes: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return self.status == FOUND


@dataclass(frozen=True)
class RefView:
    """One ref as the report shows it."""

    ref: str
    index: int
    status: str
    samples: tuple[float, ...]
    batches: int
    skip: str | None
    classification: stats.StepClass | None


@dataclass(frozen=True)
class _Snapshot:
    noise: stats.LevelNoise
    check: stats.EndpointCheck | None
    classes: dict[str, stats.StepClass]


class Planner:
    def __init__(self, refs: Sequence[str], config: PlannerConfig | None = None) -> None:
        if len(refs) < 2:
            raise ValueError("a bisect needs a good and a bad ref")
        if len(set(refs)) != len(refs):
            raise ValueError("refs must be distinct")
        self.refs = tuple(refs)
        self.config = config or PlannerConfig()
        self.results: dict[str, RefResults] = {}
        self._index = {ref: i for i, ref in enumerate(self.refs)}
        self._version = 0
        self._cached: tuple[int, _Snapshot] | None = None

    # ---- the results cache -----------------------------------------------------------------

    def _entry(self, ref: str) -> RefResults:
        if ref not in self._index:
            raise KeyError(f"'{ref}' is not in the bisect range")
        return self.results.setdefault(ref, RefResults())

    def record_batch(self, ref: str, samples: Sequence[float]) -> None:
        if not samples:
            raise ValueError("a batch needs samples (record a skip instead)")
        self._entry(ref).batches.append(tuple(float(x) for x in samples))
        self._version += 1

    def record_skip(self, ref: str, reason: str) -> None:
        # No new version: the derived state (noise, endpoint check, classes) is a function of the batches alone.
        self._entry(ref).skip = reason

    def samples(self, ref: str) -> tuple[float, ...]:
        entry = self.results.get(ref)
        return entry.samples if entry else ()

    def batches(self, ref: str) -> int:
        entry = self.results.get(ref)
        return len(entry.batches) if entry else 0

    def skipped(self, ref: str) -> str | None:
        entry = self.results.get(ref)
        return entry.skip if entry else None

    @property
    def good(self) -> str:
        return self.refs[0]

    @property
    def bad(self) -> str:
        return self.refs[-1]

    def _oriented(self, ref: str) -> tuple[tuple[float, ...], ...]:
        """Batches as "higher is better", so that the statistics never see the metric's direction."""
        entry = self.results.get(ref)
        batches = entry.batches if entry else []
        sign = 1.0 if self.config.higher_is_better else -1.0
        return tuple(tuple(sign * x for x in batch) for batch in batches)

    # ---- derived state (a function of the results cache, recomputed when it changes) ---------

    def _snapshot(self) -> _Snapshot:
        if self._cached is None or self._cached[0] != self._version:
            self._cached = (self._version, self._compute())
        return self._cached[1]

    def _compute(self) -> _Snapshot:
        measured = {ref: self._oriented(ref) for ref in self.refs if self.batches(ref)}
        noise = stats.level_noise(list(measured.values()))
        good, bad = measured.get(self.good), measured.get(self.bad)
        if not good or not bad:
            return _Snapshot(noise, None, {})
        check = stats.check_endpoints(good, bad, self.config.threshold, noise)
        classes = {ref: stats.classify(batches, good, bad, noise) for ref, batches in measured.items()
                   if ref not in (self.good, self.bad)}
        return _Snapshot(noise, check, classes)

    def endpoint_check(self) -> stats.EndpointCheck | None:
        return self._snapshot().check

    def classification(self, ref: str) -> stats.StepClass | None:
        return self._snapshot().classes.get(ref)

    def status(self, ref: str) -> str:
        if ref == self.good and self.batches(ref):
            return GOOD
        if ref == self.bad and self.batches(ref):
            return BAD
        if self.skipped(ref):
            return SKIP
        cls = self.classification(ref)
        if cls is None:
            return UNTESTED
        if cls.verdict == stats.GOOD:
            return GOOD
        if cls.verdict == stats.BAD:
            return BAD
        done = self.batches(ref) >= self.config.max_batches
        # Between the endpoints after one server start may be that start's level: confirm it once.
        if done or (cls.verdict == stats.NEITHER and self.batches(ref) >= min(2, self.config.max_batches)):
            return UNDECIDED
        return PENDING

    def views(self) -> list[RefView]:
        """Every ref that was measured or skipped, oldest first."""
        out = []
        for ref in self.refs:
            if ref in self.results:
                entry = self.results[ref]
                out.append(RefView(ref, self._index[ref], self.status(ref), entry.samples, len(entry.batches),
                                   entry.skip, self.classification(ref)))
        return out

    # ---- the next step -----------------------------------------------------------------------

    def next(self) -> Measure | Outcome:
        """What to do now: measure a ref once more, or the answer."""
        cfg = self.config
        for ref, name in ((self.good, "good"), (self.bad, "bad")):
            if self.skipped(ref):
                return Outcome(NOT_FOUND, f"the {name} endpoint {ref} cannot be tested: {self.skipped(ref)}")
        for ref, name in ((self.good, "good"), (self.bad, "bad")):
            if self.batches(ref) < cfg.endpoint_batches:
                return Measure(ref, self._index[ref], f"{name} endpoint")
        check = self.endpoint_check()
        assert check is not None
        change = f"{check.change:+.1%}"
        if not check.decided:
            fewer = min((self.good, self.bad), key=self.batches)
            if self.batches(fewer) < cfg.max_batches:
                return Measure(fewer, self._index[fewer],
                               f"more repeats: the endpoints are not told apart yet (p={check.comparison.p_value:.3g})")
            return Outcome(NOT_FOUND, f"the endpoints could not be told apart after {cfg.max_batches} batches "
                                      f"each (median change {change}, p={check.comparison.p_value:.3g})")
        if not check.differ:
            if check.comparison.result == stats.SAME:
                why = (f"the good and bad endpoints measure the same (median change {change}, "
                       f"p={check.comparison.p_value:.3g}): no change of {cfg.threshold:.0%} or more to bisect")
            else:
                why = (f"the endpoints differ by only {change}, below the threshold of {cfg.threshold:.0%}: "
                       "nothing worth a bisect")
            return Outcome(NOT_FOUND, why)

        statuses = {ref: self.status(ref) for ref in self.refs}
        hi = min((self._index[r] for r, s in statuses.items() if s == BAD), default=len(self.refs) - 1)
        lo = max((self._index[r] for r, s in statuses.items() if s == GOOD and self._index[r] < hi), default=0)
        notes = tuple(f"{r} measures like the good endpoint but comes after the first bad {self.refs[hi]}: "
                      "the metric may have changed more than once" for r, s in statuses.items()
                      if s == GOOD and self._index[r] > hi)
        inside = self.refs[lo + 1:hi]
        for ref in inside:
            if statuses[ref] == PENDING:
                return Measure(ref, self._index[ref], "more repeats: not decided yet")
        testable = [r for r in inside if statuses[r] == UNTESTED]
        if not testable:
            if hi - lo == 1:
                # The answer rests on two refs: one unlucky server start must not be what names it.
                for ref in (self.refs[hi], self.refs[lo]):
                    if self.batches(ref) < cfg.confirm_batches:
                        return Measure(ref, self._index[ref], "confirm: one more server start of the answer")
                return Outcome(FOUND, f"{self.refs[hi]} is the first bad ref ({change} against the good endpoint)",
                               first_bad=self.refs[hi], last_good=self.refs[lo], candidates=(self.refs[hi],),
                               notes=notes)
            left_out = [f"{r} ({statuses[r]}: {self._why_left_out(r)})" for r in inside]
            return Outcome(NOT_FOUND, f"the first bad ref is one of {', '.join(self.refs[lo + 1:hi + 1])}: "
                                      f"the refs between {self.refs[lo]} (good) and {self.refs[hi]} (bad) could "
                                      f"not be decided: {'; '.join(left_out)}",
                           last_good=self.refs[lo], candidates=self.refs[lo + 1:hi + 1], notes=notes)
        middle = (lo + hi) / 2
        pick = min(testable, key=lambda r: (abs(self._index[r] - middle), self._index[r]))
        return Measure(pick, self._index[pick], f"bisect between {lo} and {hi} of {len(self.refs) - 1}")

    def _why_left_out(self, ref: str) -> str:
        if self.skipped(ref):
            return str(self.skipped(ref))
        cls = self.classification(ref)
        if cls is not None and cls.verdict == stats.NEITHER:
            return (f"differs from both endpoints, {cls.position:.0%} of the way from good to bad: "
                    "more than one change?")
        return f"still not told apart after {self.batches(ref)} batches"
