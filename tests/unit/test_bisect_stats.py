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


# ---- exact edges of every decision (what the mutation run showed unchecked) ------------------------
# The rank tests' p-values are not set by hand; where an edge needs one, the comparison is replaced by a
# fixed one and the decision around it is what is tested. Batch levels and noise are built so that the
# distances come out exact (one batch each: z = distance / sqrt(2 * batch_variance)).

import math  # noqa: E402

from sglstack.bisect.stats import Comparison, EndpointCheck, LevelNoise, StepClass  # noqa: E402


def test_compare_of_an_empty_side_and_its_records():
    assert compare([1.0, 2.0], [], 1.0) == compare([], [1.0], 1.0) == Comparison(UNKNOWN, None, 0.01, 1.0)
    assert Comparison(SAME, 0.5, 0.01, 0.25).to_dict() == {"result": "same", "p_value": 0.5, "low": 0.01,
                                                           "high": 0.25}


@pytest.mark.parametrize(("p", "high", "result"), [
    (0.01, 0.5, DIFFERENT), (0.0100001, 0.5, UNKNOWN), (0.5, 0.5, UNKNOWN), (0.5000001, 0.5, SAME)])
def test_compare_edges_at_the_low_and_the_high_threshold(monkeypatch, p, high, result):
    calls = []
    monkeypatch.setattr(stats, "p_value", lambda a, b: p)
    monkeypatch.setattr(stats, "high_threshold", lambda m, n_a, n_b: calls.append((m, n_a, n_b)) or high)
    assert compare([1.0, 2.0], [3.0], 1.5) == Comparison(result, p, 0.01, high)
    assert calls == [(1.5, 2, 1)]


def test_high_threshold_edges_of_magnitude_and_sample_size():
    assert high_threshold(0.09, 20, 20) == 1.0  # rounds down to 0 on the 0.1 grid
    assert high_threshold(-2.0, 20, 20) == 1.0
    assert high_threshold(25.0, 5, 6) == high_threshold(20.0, 6, 5)  # clipped at MAX_MAGNITUDE
    assert high_threshold(1.0, 0, 5) == high_threshold(1.0, 5, 0) == 1.0
    assert high_threshold(1.0, 40, 40) < 0.1  # a magnitude of one SD is simulated like any other
    # one run against many, far apart: every simulated p-value is the smallest U allows (2 / 41), not 1
    assert high_threshold(20.0, 1, 40) == pytest.approx(2 / 41) == high_threshold(20.0, 40, 1)
    assert stats._grid(0.3) == 0.3 and stats._grid(0.19) == 0.1  # 0.3 / 0.1 is 2.9999...: still 0.3


def test_quartiles_and_relative_change_edges():
    assert stats.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 4.0)  # inclusive quartiles
    assert stats.quartiles([3]) == (3.0, 3.0)
    assert stats.quartiles([1.0, 5.0]) == (2.0, 4.0)
    assert all(math.isnan(q) for q in stats.quartiles([]))
    assert stats.relative_change([100.0], [92.0]) == pytest.approx(-0.08)
    assert stats.relative_change([0.0], [5.0]) == math.inf


def test_noise_sd_pools_each_sample_around_its_own_mean_and_has_a_floor():
    assert stats.noise_sd([1.0, 2.0, 3.0], [10.0, 12.0]) == pytest.approx(math.sqrt(4 / 3))
    assert stats.noise_sd([1.0, 2.0, 3.0], [50.0]) == pytest.approx(1.0)  # a single run adds no degree of freedom
    assert stats.noise_sd([5.0, 5.0], [5.0, 5.0]) == pytest.approx(5e-6)
    assert stats.noise_sd([5.0], [-7.0]) == pytest.approx(7e-6)  # the floor follows the largest level
    assert stats.noise_sd([0.0, 0.0]) == 1e-12 and stats.noise_sd() == pytest.approx(1e-6)


def test_level_noise_from_batches_of_several_refs():
    assert level_noise([]) == level_noise([[]]) == LevelNoise(0.0, 0)
    floor = math.pi / 2 * 1.0 / 3  # within-batch SD 1, three runs a batch
    assert level_noise([[[1.0, 2.0, 3.0]]]) == LevelNoise(pytest.approx(floor), 0)
    assert level_noise([[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]]) == LevelNoise(pytest.approx(floor), 1)
    wide = math.pi / 2 * 4.0 / 3  # within-batch SD 2
    assert level_noise([[[2.0, 4.0, 6.0]]]) == LevelNoise(pytest.approx(wide), 0)
    from scipy import stats as scipy_stats

    two = level_noise([[[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0], [10.0, 11.0, 12.0]], []])
    assert two == LevelNoise(pytest.approx(2.0 / scipy_stats.chi2.ppf(0.25, 2)), 2)


def test_level_noise_standard_errors_and_distance():
    noise = LevelNoise(4.0, 1)
    assert noise.se(0) == noise.se(1) == 2.0 and noise.se(4) == 1.0
    assert LevelNoise(0.5, 1).z([[1.0]], [[4.0]]) == pytest.approx(3.0)
    assert LevelNoise(2.0, 1).z([[1.0], [1.0]], [[4.0], [4.0], [4.0], [4.0]]) == pytest.approx(3 / math.sqrt(1.5))
    assert LevelNoise(0.0, 0).z([[1.0]], [[4.0]]) == math.inf


GOOD_RUNS = [float(x) for x in range(100, 110)]  # median 104.5
BAD_RUNS = [78.25 + 0.5 * i for i in range(10)]  # median 80.5: 24 below and tighter; the rank tests: different


def test_check_endpoints_needs_the_batch_levels_apart_by_exactly_level_z():
    at = check_endpoints([GOOD_RUNS], [BAD_RUNS], 0.05, LevelNoise(32.0, 1))  # z = 24 / 8
    magnitude = 0.05 * 104.5 / stats.noise_sd(GOOD_RUNS, BAD_RUNS)
    assert at == EndpointCheck(compare(GOOD_RUNS, BAD_RUNS, magnitude), 80.5 / 104.5 - 1, magnitude, 3.0, True, True)
    assert at.comparison.result == DIFFERENT and at.direction == "lower"
    below = check_endpoints([GOOD_RUNS], [BAD_RUNS], 0.05, LevelNoise(32.001, 1))
    assert (below.decided, below.differ) == (False, False)
    # a change of exactly the threshold is one to bisect
    exact = check_endpoints([GOOD_RUNS], [BAD_RUNS], 1 - 80.5 / 104.5, LevelNoise(32.0, 1))
    assert (exact.decided, exact.differ) == (True, True)
    unknown = check_endpoints([GOOD_RUNS[:2]], [BAD_RUNS[:2]], 0.05, LevelNoise(32.0, 1))
    g2, b2 = GOOD_RUNS[:2], BAD_RUNS[:2]
    m2 = 0.05 * stats.median(g2) / stats.noise_sd(g2, b2)
    assert unknown == EndpointCheck(compare(g2, b2, m2), stats.relative_change(g2, b2), m2, 22 / 8,
                                    False, False)
    assert unknown.comparison.result == UNKNOWN
    # different, but by less than the threshold: decided, nothing to bisect, every figure kept
    small = check_endpoints([GOOD_RUNS], [BAD_RUNS], 0.5, LevelNoise(32.0, 1))
    m_small = 0.5 * 104.5 / stats.noise_sd(GOOD_RUNS, BAD_RUNS)
    assert small == EndpointCheck(compare(GOOD_RUNS, BAD_RUNS, m_small), 80.5 / 104.5 - 1, m_small, 3.0, True, False)
    assert small.comparison.result == DIFFERENT
    assert EndpointCheck(unknown.comparison, 0.0, 1.0, 0.0, False, False).direction == "higher"


def _classify(monkeypatch, x: float, vs_good: str, vs_bad: str, variance: float, bad: float = 100.0) -> StepClass:
    """A step at level G + x between a good endpoint at G and a bad one at G + `bad`, with fixed comparisons."""
    g = 1000.0
    good_runs, bad_runs = [g - 1, g, g + 1], [g + bad - 2, g + bad, g + bad + 2]  # two different spreads
    results = {g: vs_good, g + bad: vs_bad}
    seen = []

    def fixed(s, other, magnitude):
        seen.append(magnitude)
        return Comparison(results[stats.median(other)], 0.5, 0.01, 0.2)

    monkeypatch.setattr(stats, "compare", fixed)
    step = classify([[g + x]], [good_runs], [bad_runs], LevelNoise(variance, 1))
    assert seen == [pytest.approx(bad / stats.noise_sd(good_runs, bad_runs))] * 2
    return step


@pytest.mark.parametrize(("x", "vs_good", "vs_bad", "variance", "verdict"), [
    (24.0, DIFFERENT, DIFFERENT, 0.5, GOOD),  # within NEAR of the good level
    (25.0, DIFFERENT, DIFFERENT, 0.5, NEITHER),  # NEAR is exclusive
    (76.0, DIFFERENT, DIFFERENT, 0.5, BAD),
    (75.0, DIFFERENT, DIFFERENT, 0.5, NEITHER),
    (50.0, SAME, DIFFERENT, 0.5, UNKNOWN),  # the middle is on neither side
    (50.0, DIFFERENT, SAME, 0.5, UNKNOWN),
    (49.0, SAME, DIFFERENT, 0.5, GOOD),
    (51.0, DIFFERENT, SAME, 0.5, BAD),
    (10.0, SAME, SAME, 0.5, UNKNOWN),
    (10.0, UNKNOWN, DIFFERENT, 0.5, UNKNOWN),
    (90.0, DIFFERENT, UNKNOWN, 0.5, UNKNOWN),
])
def test_classify_decision_edges(monkeypatch, x, vs_good, vs_bad, variance, verdict):
    assert _classify(monkeypatch, x, vs_good, vs_bad, variance).verdict == verdict


def test_classify_needs_the_level_apart_from_the_other_endpoint_by_exactly_level_z(monkeypatch):
    assert _classify(monkeypatch, 16.0, SAME, DIFFERENT, 32.0, bad=40.0).verdict == GOOD  # z_bad = 24 / 8
    assert _classify(monkeypatch, 16.0, SAME, DIFFERENT, 32.001, bad=40.0).verdict == UNKNOWN
    assert _classify(monkeypatch, 24.0, DIFFERENT, SAME, 32.0, bad=40.0).verdict == BAD  # z_good = 24 / 8
    assert _classify(monkeypatch, 24.0, DIFFERENT, SAME, 32.001, bad=40.0).verdict == UNKNOWN


def test_classify_neither_needs_both_levels_apart_by_level_z(monkeypatch):
    assert _classify(monkeypatch, 30.0, DIFFERENT, DIFFERENT, 50.0, bad=60.0).verdict == NEITHER  # 30 / 10 each
    assert _classify(monkeypatch, 30.0, DIFFERENT, DIFFERENT, 50.001, bad=60.0).verdict == UNKNOWN


def test_a_step_class_records_its_position_and_distances(monkeypatch):
    step = _classify(monkeypatch, 24.0, DIFFERENT, SAME, 0.5)
    assert (step.position, step.z_good, step.z_bad) == (0.24, pytest.approx(24.0), pytest.approx(76.0))
    assert step.to_dict() == {"class": step.verdict, "vs_good": step.vs_good.to_dict(),
                              "vs_bad": step.vs_bad.to_dict(), "position": 0.24,
                              "level_z_good": step.z_good, "level_z_bad": step.z_bad}
    monkeypatch.undo()
    flat = classify([[5.0]], [[5.0]], [[5.0]], LevelNoise(1.0, 1))
    assert flat.position == 0.0


def test_bisect_exit_code_edges_against_a_fixed_baseline():
    assert bisect_exit_code([80.0, 90.0, 100.0], baseline=100.0, threshold=0.15) == EXIT_SKIP  # limit = q1
    assert bisect_exit_code([80.0, 90.0, 100.0], baseline=100.0, threshold=0.05) == EXIT_SKIP  # limit = q3
    assert bisect_exit_code([80.0, 100.0], baseline=100.0, threshold=0.125) == EXIT_SKIP  # two runs have an IQR
    assert bisect_exit_code([84.0], baseline=100.0, threshold=0.16) == EXIT_GOOD  # one run: at the limit is good
    assert bisect_exit_code([94.0], baseline=100.0) == EXIT_BAD  # the default threshold is 5%
    assert bisect_exit_code([96.0], baseline=100.0) == EXIT_GOOD
    assert bisect_exit_code([1.25], baseline=1.0, threshold=0.25, higher_is_better=False) == EXIT_GOOD
    assert bisect_exit_code([1.26], baseline=1.0, threshold=0.25, higher_is_better=False) == EXIT_BAD
    assert bisect_exit_code([0.5], baseline=1.0, higher_is_better=False) == EXIT_GOOD
    with pytest.raises(ValueError) as info:
        bisect_exit_code([1.0], [])
    assert str(info.value) == "bisect_exit_code needs baseline samples or a baseline value"


@pytest.mark.parametrize(("samples", "result", "higher", "code"), [
    ([75.0], DIFFERENT, True, EXIT_BAD),  # worse by exactly the threshold
    ([76.0], DIFFERENT, True, EXIT_GOOD),
    ([125.0], DIFFERENT, False, EXIT_BAD),
    ([125.0], DIFFERENT, True, EXIT_GOOD),  # better
    ([75.0], SAME, True, EXIT_GOOD),
    ([75.0], UNKNOWN, True, EXIT_SKIP),
])
def test_bisect_exit_code_against_baseline_samples_decides_on_the_comparison(monkeypatch, samples, result, higher,
                                                                             code):
    seen = []
    monkeypatch.setattr(stats, "compare", lambda a, b, m: seen.append((list(a), list(b), m)) or
                        Comparison(result, 0.5, 0.01, 0.2))
    assert bisect_exit_code(samples, [100.0], threshold=0.25, higher_is_better=higher) == code
    assert seen == [(samples, [100.0], pytest.approx(0.25 * 100.0 / stats.noise_sd(samples, [100.0])))]
