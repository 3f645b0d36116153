"""The statistics of a bisect: Pinpoint-style SAME / DIFFERENT / UNKNOWN, step classes, exit codes."""

from __future__ import annotations

import random

import pytest

from sglstack.bisect import stats
from sglstack.bisect.stats import (
    BAD,
    DIFFERENT,
    EXIT_BAD,
    EXIT_GOOD,
    EXIT_SKIP,
    GOOD,
    IQR_PER_SD,
    NEITHER,
    SAME,
    UNKNOWN,
    bisect_exit_code,
    check_endpoints,
    classify,
    compare,
    high_threshold,
    level_noise,
)


def normal(rng: random.Random, mean: float, sd: float, n: int) -> list[float]:
    return [rng.gauss(mean, sd) for _ in range(n)]


def test_p_value_is_the_smaller_of_kolmogorov_smirnov_and_mann_whitney():
    # Pinpoint's own examples: U misses a change of spread, K-S is weak on discrete values.
    discrete = ([0.0] * 20, [0.0] * 15 + [1.0] * 5)
    spread = (list(map(float, range(10, 30))), [*map(float, range(10)), *map(float, range(30, 40))])
    from scipy import stats as scipy_stats

    for a, b in (discrete, spread):
        ks = scipy_stats.ks_2samp(a, b).pvalue
        mwu = scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
        assert stats.p_value(a, b) == pytest.approx(min(ks, mwu))
    assert scipy_stats.mannwhitneyu(*spread, alternative="two-sided").pvalue > 0.5  # U alone would miss it
    assert stats.p_value(*spread) < 0.02
    assert stats.p_value([5.0] * 6, [5.0] * 6) == 1.0


def test_high_threshold_falls_with_sample_size_and_magnitude_until_below_the_low_one():
    by_size = [high_threshold(1.5, n, n) for n in (3, 5, 10, 20, 40)]
    assert by_size == sorted(by_size, reverse=True) and by_size[0] == 1.0
    assert by_size[-1] < stats.LOW_THRESHOLD  # repeats are bounded: eventually SAME or DIFFERENT
    by_magnitude = [high_threshold(m, 10, 10) for m in (0.5, 1.0, 2.0, 4.0)]
    assert by_magnitude == sorted(by_magnitude, reverse=True)
    assert high_threshold(0.0, 50, 50) == 1.0  # no magnitude: SAME is never claimed


def test_high_threshold_agrees_with_pinpoints_simulated_tables():
    # Pinpoint's performance table (magnitude in IQRs, Mann-Whitney, 99th percentile): 1.1 IQR at n=10
    # is .4274 and 2.0 IQR at n=5 is .2101. Ours is simulated on demand in standard deviations.
    assert high_threshold(1.1 * IQR_PER_SD, 10, 10) == pytest.approx(0.4274, abs=0.15)
    assert high_threshold(2.0 * IQR_PER_SD, 5, 5) == pytest.approx(0.2101, abs=0.05)


def test_thresholds_are_deterministic_so_a_replayed_log_decides_the_same():
    stats._simulated_threshold.cache_clear()
    first = high_threshold(1.3, 7, 12)
    stats._simulated_threshold.cache_clear()
    assert high_threshold(1.3, 7, 12) == first == high_threshold(1.3, 12, 7)


def test_compare_says_same_different_or_unknown():
    rng = random.Random(1)
    a, b = normal(rng, 100, 1, 10), normal(rng, 100, 1, 10)
    far = normal(rng, 90, 1, 10)
    assert compare(a, far, 10).result == DIFFERENT
    assert compare(a, b, 10).result == SAME
    # three runs each can prove nothing either way
    assert compare(a[:3], far[:3], 10).result == UNKNOWN
    assert compare([], a, 10).result == UNKNOWN


def batches(rng: random.Random, level: float, sd: float, count: int, runs: int = 5) -> list[list[float]]:
    return [normal(rng, level, sd, runs) for _ in range(count)]


def test_classify_against_the_endpoints():
    rng = random.Random(7)
    good, bad = batches(rng, 89, 0.8, 2), batches(rng, 82, 0.8, 2)
    noise = level_noise([good, bad])
    assert check_endpoints(good, bad, 0.05, noise).differ
    assert classify(batches(rng, 89, 0.8, 1), good, bad, noise).verdict == GOOD
    assert classify(batches(rng, 82, 0.8, 1), good, bad, noise).verdict == BAD
    middle = classify(batches(rng, 85.5, 0.8, 2), good, bad, noise)
    assert middle.verdict == NEITHER and 0.3 < middle.position < 0.7
    assert classify(batches(rng, 85.5, 0.8, 1, runs=2), good, bad, noise).verdict == UNKNOWN


def test_one_shifted_server_start_is_not_taken_for_the_other_endpoint():
    # Runs of one server start share its level. The endpoints' two starts each show how much a level moves;
    # a single start of a good ref that landed near the bad level must not be called bad on its own.
    rng = random.Random(3)
    good = [normal(rng, 89, 0.3, 5), normal(rng, 86, 0.3, 5)]  # restarts move this server by ~3%
    bad = [normal(rng, 80, 0.3, 5), normal(rng, 83, 0.3, 5)]
    noise = level_noise([good, bad])
    shifted_good_ref = [normal(rng, 84, 0.3, 5)]
    result = classify(shifted_good_ref, good, bad, noise)
    assert result.vs_good.result == DIFFERENT  # the rank tests alone would believe it
    assert result.verdict == UNKNOWN  # the batch-level guard asks for another server start


def test_endpoints_that_do_not_differ_or_differ_too_little_are_not_bisected():
    rng = random.Random(11)
    same_a, same_b = batches(rng, 89, 0.5, 2), batches(rng, 89, 0.5, 2)
    same = check_endpoints(same_a, same_b, 0.05, level_noise([same_a, same_b]))
    assert same.decided and not same.differ and same.comparison.result == SAME
    small_a, small_b = batches(rng, 89, 0.2, 2), batches(rng, 88, 0.2, 2)
    small = check_endpoints(small_a, small_b, 0.05, level_noise([small_a, small_b]))
    assert small.comparison.result == DIFFERENT and small.decided and not small.differ


def test_bisect_exit_codes_against_baseline_samples():
    rng = random.Random(5)
    baseline = normal(rng, 89, 0.8, 10)
    assert bisect_exit_code(normal(rng, 89, 0.8, 10), baseline) == EXIT_GOOD
    assert bisect_exit_code(normal(rng, 82, 0.8, 10), baseline) == EXIT_BAD
    assert bisect_exit_code(normal(rng, 95, 0.8, 10), baseline) == EXIT_GOOD  # faster is not a regression
    assert bisect_exit_code(normal(rng, 88, 0.2, 20), normal(rng, 89, 0.2, 20)) == EXIT_GOOD  # real, below 5%
    assert bisect_exit_code([82.0, 89.0], baseline) == EXIT_SKIP  # two runs cannot tell
    assert bisect_exit_code([], baseline) == EXIT_SKIP  # the server did not serve


def test_bisect_exit_codes_against_a_fixed_baseline():
    assert bisect_exit_code([82.0, 81.5, 82.4], baseline=89.0) == EXIT_BAD
    assert bisect_exit_code([88.0, 88.4, 89.1], baseline=89.0) == EXIT_GOOD
    assert bisect_exit_code([80.0, 84.5, 90.0], baseline=89.0) == EXIT_SKIP  # the limit 84.55 is inside the IQR
    # lower is better (latency): 5% slower is bad
    assert bisect_exit_code([1.10, 1.11], baseline=1.0, higher_is_better=False) == EXIT_BAD
    with pytest.raises(ValueError):
        bisect_exit_code([1.0])
