"""Pure statistics of a performance bisect: is this sample the same as, or different from, that one?

The comparison follows Chromium Pinpoint (`pinpoint/models/compare`): the p-value is the smaller of the
two-sample Kolmogorov-Smirnov and Mann-Whitney U tests (U misses changes of spread, K-S is weak on
discrete values). At or below `LOW_THRESHOLD` (0.01) the samples are DIFFERENT. Above a *high*
threshold they are the SAME: the high threshold is the 99th percentile of that p-value when two normal
samples of these sizes really are `magnitude` standard deviations apart, so a p-value above it means a
shift that large is unlikely (less than 1% of the time). In between is UNKNOWN: take more samples. The
high threshold falls as samples grow until it crosses the low one, which bounds the repeats.

Pinpoint reads its high thresholds from tables simulated offline (in IQR units, Mann-Whitney alone);
here they are simulated on demand, for the exact sample sizes and the combined p-value actually used,
with a fixed random seed so the same samples always give the same answer (a resumed bisect replays
its log to the same decisions).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

DIFFERENT = "different"
SAME = "same"
UNKNOWN = "unknown"

LOW_THRESHOLD = 0.01  # p at or below: different
SAME_PERCENTILE = 99.0  # of the p-values under a real shift of `magnitude`: above it, same
SIMULATIONS = 2000
SEED = 20181  # any fixed value: determinism, not a tuned number
MAX_MAGNITUDE = 20.0  # in noise standard deviations; beyond it two samples never overlap anyway
MAGNITUDE_STEP = 0.1  # magnitudes are rounded down to this grid (down: a stricter SAME), as Pinpoint's
# Normal noise: the interquartile range is 1.349 standard deviations.
# (The standard library's NormalDist gives the same float as scipy's norm.ppf, without importing scipy.)
IQR_PER_SD = statistics.NormalDist().inv_cdf(0.75) - statistics.NormalDist().inv_cdf(0.25)

# Step verdicts against the two endpoints.
GOOD = "good"
BAD = "bad"
NEITHER = "neither"  # different from both endpoints, between them: more than one change?
# How far (as a share of the good->bad shift) a step may sit from an endpoint and still count as that
# endpoint, when the tests call it different from both: restarts move a server's level a little.
NEAR = 0.25

Sample = Sequence[float]


@dataclass(frozen=True)
class Comparison:
    result: str  # DIFFERENT, SAME or UNKNOWN
    p_value: float | None
    low_threshold: float
    high_threshold: float

    def to_dict(self) -> dict[str, object]:
        return {"result": self.result, "p_value": self.p_value, "low": self.low_threshold,
                "high": self.high_threshold}


def p_value(a: Sample, b: Sample) -> float:
    """min(Kolmogorov-Smirnov, Mann-Whitney U), both two-sided; 1.0 for identical constant samples."""
    return _p_value(tuple(map(float, a)), tuple(map(float, b)))


@functools.lru_cache(maxsize=4096)
def _p_value(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    # Cached: a bisect re-classifies every measured ref against the endpoints after each new batch.
    if len(set(a) | set(b)) == 1:
        return 1.0
    from scipy import stats as scipy_stats  # why here: scipy takes ~1 s to import; only a bisect's numbers need it

    ks = float(scipy_stats.ks_2samp(a, b).pvalue)
    mwu = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    return min(ks, mwu)


def _grid(magnitude: float) -> float:
    clipped = min(max(magnitude, 0.0), MAX_MAGNITUDE)
    return round(math.floor(clipped / MAGNITUDE_STEP + 1e-9) * MAGNITUDE_STEP, 1)


@functools.cache
def _simulated_threshold(magnitude: float, n_a: int, n_b: int) -> float:
    # Mann-Whitney alone, as Pinpoint's tables: min(K-S, U) is never above U, so this threshold is never
    # below the combined test's own, and SAME stays the stricter call (and K-S is slow to vectorize).
    import numpy as np  # why here (as scipy): importing sglstack.bisect must not cost a second of start-up
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(SEED)
    a = rng.normal(0.0, 1.0, (SIMULATIONS, n_a))
    b = rng.normal(magnitude, 1.0, (SIMULATIONS, n_b))
    mwu = scipy_stats.mannwhitneyu(a, b, axis=1, alternative="two-sided").pvalue
    return float(np.percentile(mwu, SAME_PERCENTILE))


def high_threshold(magnitude: float, n_a: int, n_b: int) -> float:
    """The p-value above which samples of sizes n_a, n_b are SAME, for a shift of `magnitude` SDs.

    A magnitude of 0 would need infinitely many samples: the threshold is then 1 (never SAME).
    """
    grid = _grid(magnitude)
    if grid <= 0 or n_a < 1 or n_b < 1:
        return 1.0
    return _simulated_threshold(grid, *sorted((n_a, n_b)))


def compare(a: Sample, b: Sample, magnitude: float) -> Comparison:
    """SAME, DIFFERENT or UNKNOWN, for a shift of interest of `magnitude` noise SDs."""
    if not a or not b:
        return Comparison(UNKNOWN, None, LOW_THRESHOLD, 1.0)
    p = p_value(a, b)
    if p <= LOW_THRESHOLD:
        return Comparison(DIFFERENT, p, LOW_THRESHOLD, high_threshold(magnitude, len(a), len(b)))
    high = high_threshold(magnitude, len(a), len(b))
    return Comparison(SAME if p > high else UNKNOWN, p, LOW_THRESHOLD, high)


# ---- describing samples ------------------------------------------------------------------------


def median(sample: Sample) -> float:
    return float(statistics.median(sample))


def quartiles(sample: Sample) -> tuple[float, float]:
    if len(sample) < 2:
        value = float(sample[0]) if sample else math.nan
        return value, value
    q1, _, q3 = statistics.quantiles(sample, n=4, method="inclusive")
    return float(q1), float(q3)


def noise_sd(*samples: Sample) -> float:
    """The noise of one measurement, as a standard deviation pooled over samples of different levels.

    The classic pooled estimate (each sample around its own mean, one degree of freedom per sample
    spent): an outlier makes the noise look larger, which only ever makes SAME harder to reach. Never
    zero: a perfectly steady metric gets a floor of a millionth of its level.
    """
    squares, df = 0.0, 0
    for s in samples:
        if len(s) > 1:
            mean = statistics.fmean(s)
            squares += sum((x - mean) ** 2 for x in s)
            df += len(s) - 1
    level = max((abs(median(s)) for s in samples if s), default=1.0)
    floor = max(level * 1e-6, 1e-12)
    return max(math.sqrt(squares / df), floor) if df else floor


def relative_change(before: Sample, after: Sample) -> float:
    """median(after) / median(before) - 1: -0.08 is the seed's 89 -> 82 tok/s."""
    base = median(before)
    return median(after) / base - 1.0 if base else math.inf


# ---- server starts: the level of a batch ------------------------------------------------------

Batches = Sequence[Sequence[float]]  # one inner sequence per server start, one value per run

# The rank tests count every run as independent, but the runs of one server start share its level
# (placement, clocks, a neighbour's load). A classification must also hold at the level of batches:
# the batch-level distance between a ref and the endpoint it is said NOT to be like must be at least
# LEVEL_Z standard errors, with the variance of a batch's level estimated from every ref measured in
# more than one batch, and inflated to its upper (1 - LEVEL_ALPHA) confidence bound while that estimate
# rests on few batches.
LEVEL_Z = 3.0
LEVEL_ALPHA = 0.25
MEDIAN_EFFICIENCY = math.pi / 2  # variance of a normal sample's median over that of its mean


def flat(batches: Batches) -> tuple[float, ...]:
    return tuple(float(x) for batch in batches for x in batch)


def level(batches: Batches) -> float:
    """The mean of the batch medians: every server start weighs the same."""
    return float(statistics.fmean(median(b) for b in batches if b))


@dataclass(frozen=True)
class LevelNoise:
    batch_variance: float  # of one batch's median, as used (inflated while df is small)
    df: int  # degrees of freedom of the between-batch estimate (0: within-batch noise only)

    def se(self, batches: int) -> float:
        return math.sqrt(self.batch_variance / max(batches, 1))

    def z(self, a: Batches, b: Batches) -> float:
        spread = math.sqrt(self.se(len(a)) ** 2 + self.se(len(b)) ** 2)
        return abs(level(a) - level(b)) / spread if spread > 0 else math.inf


def level_noise(measured: Sequence[Batches]) -> LevelNoise:
    """The noise of one batch's level, from all refs measured so far (each compared with itself)."""
    measured = [m for m in measured if m]
    if not measured:
        return LevelNoise(0.0, 0)
    within = noise_sd(*(b for m in measured for b in m))
    sizes = [len(b) for m in measured for b in m]
    floor = MEDIAN_EFFICIENCY * within**2 / statistics.fmean(sizes)
    squares, df = 0.0, 0
    for m in measured:
        if len(m) > 1:
            mean = level(m)
            squares += sum((median(b) - mean) ** 2 for b in m)
            df += len(m) - 1
    if df == 0:
        return LevelNoise(floor, 0)
    from scipy import stats as scipy_stats  # why here: see _p_value

    upper = squares / float(scipy_stats.chi2.ppf(LEVEL_ALPHA, df))
    return LevelNoise(max(floor, upper), df)


# ---- the endpoints and the steps between them --------------------------------------------------


@dataclass(frozen=True)
class EndpointCheck:
    """Do the good and the bad endpoint differ, by at least the threshold that matters?"""

    comparison: Comparison
    change: float  # relative, bad against good
    magnitude: float  # of --threshold, in noise SDs
    level_z: float  # batch-level distance in standard errors
    decided: bool  # True: a change to bisect, or certainly none worth one; False: more samples
    differ: bool  # True: there is a change to bisect

    @property
    def direction(self) -> str:
        return "lower" if self.change < 0 else "higher"


def check_endpoints(good: Batches, bad: Batches, threshold: float, noise: LevelNoise) -> EndpointCheck:
    """DIFFERENT (and apart at the batch level) by >= threshold: bisect. SAME for a threshold-sized
    shift, or a real change smaller than the threshold: nothing to bisect. Otherwise more samples."""
    g, b = flat(good), flat(bad)
    magnitude = threshold * abs(median(g)) / noise_sd(g, b)
    comparison = compare(g, b, magnitude)
    change = relative_change(g, b)
    z = noise.z(good, bad)
    if comparison.result == DIFFERENT and abs(change) < threshold:
        return EndpointCheck(comparison, change, magnitude, z, True, False)
    if comparison.result == DIFFERENT:
        apart = z >= LEVEL_Z
        return EndpointCheck(comparison, change, magnitude, z, apart, apart)
    return EndpointCheck(comparison, change, magnitude, z, comparison.result == SAME, False)


@dataclass(frozen=True)
class StepClass:
    """A tested ref against the endpoints: GOOD, BAD, NEITHER or UNKNOWN (more samples)."""

    verdict: str
    vs_good: Comparison
    vs_bad: Comparison
    position: float  # 0 at the good endpoint's level, 1 at the bad one's
    z_good: float  # batch-level distance from the good endpoint, in standard errors
    z_bad: float

    def to_dict(self) -> dict[str, object]:
        return {"class": self.verdict, "vs_good": self.vs_good.to_dict(), "vs_bad": self.vs_bad.to_dict(),
                "position": self.position, "level_z_good": self.z_good, "level_z_bad": self.z_bad}


def classify(step: Batches, good: Batches, bad: Batches, noise: LevelNoise) -> StepClass:
    """Which endpoint does `step` belong with?

    The shift of interest is the one between the endpoints. GOOD: different from the bad endpoint and
    the same as the good one (or, different from both, within NEAR of the good one); BAD the other way
    round. Either needs the batch level to be LEVEL_Z standard errors away from the other endpoint
    and on the near side of the middle. Different from both, apart from both and in the middle is
    NEITHER: the range holds more than one change, and no answer is safer than a guess. Anything else
    is UNKNOWN until more samples decide it.
    """
    s, g, b = flat(step), flat(good), flat(bad)
    span_runs = median(b) - median(g)
    magnitude = abs(span_runs) / noise_sd(g, b)
    vs_good = compare(s, g, magnitude)
    vs_bad = compare(s, b, magnitude)
    span = level(bad) - level(good)
    position = (level(step) - level(good)) / span if span else 0.0
    z_good, z_bad = noise.z(step, good), noise.z(step, bad)
    like_good = vs_good.result == SAME or (vs_good.result == DIFFERENT and position < NEAR)
    like_bad = vs_bad.result == SAME or (vs_bad.result == DIFFERENT and position > 1 - NEAR)
    if vs_bad.result == DIFFERENT and like_good and z_bad >= LEVEL_Z and position < 0.5:
        verdict = GOOD
    elif vs_good.result == DIFFERENT and like_bad and z_good >= LEVEL_Z and position > 0.5:
        verdict = BAD
    elif vs_good.result == DIFFERENT and vs_bad.result == DIFFERENT and min(z_good, z_bad) >= LEVEL_Z:
        verdict = NEITHER
    else:
        verdict = UNKNOWN
    return StepClass(verdict, vs_good, vs_bad, position, z_good, z_bad)


# ---- `git bisect run` exit codes -----------------------------------------------------------------

EXIT_GOOD = 0
EXIT_BAD = 1
EXIT_SKIP = 125


def bisect_exit_code(samples: Sample, baseline_samples: Sample | None = None, *,
                     baseline: float | None = None, threshold: float = 0.05,
                     higher_is_better: bool = True) -> int:
    """0 (good), 1 (bad) or 125 (skip) for `git bisect run`, against a known-good baseline.

    With `baseline_samples` (the good commit's runs) the decision is statistical: bad only when the
    samples are DIFFERENT and worse by at least `threshold`; good when they are the SAME, better, or
    worse by less; 125 when the tests cannot tell yet (UNKNOWN) or nothing was measured. With a
    single `baseline` value (TorchBench-style): bad when the median is worse than the baseline by
    `threshold`, 125 when that limit falls inside the samples' interquartile range.
    """
    if not samples:
        return EXIT_SKIP
    sign = 1.0 if higher_is_better else -1.0
    if baseline_samples:
        noise = noise_sd(samples, baseline_samples)
        comparison = compare(samples, baseline_samples, threshold * abs(median(baseline_samples)) / noise)
        worse = -sign * relative_change(baseline_samples, samples)
        if comparison.result == UNKNOWN:
            return EXIT_SKIP
        return EXIT_BAD if comparison.result == DIFFERENT and worse >= threshold else EXIT_GOOD
    if baseline is None:
        raise ValueError("bisect_exit_code needs baseline samples or a baseline value")
    limit = baseline * (1.0 - sign * threshold)
    q1, q3 = quartiles(samples)
    if len(samples) > 1 and q1 <= limit <= q3:
        return EXIT_SKIP
    worse_than_limit = median(samples) < limit if higher_is_better else median(samples) > limit
    return EXIT_BAD if worse_than_limit else EXIT_GOOD
