"""The bisect planner over a simulated noisy metric: many seeds, fast, no Docker.

A simulated history of N commits after a good one, with one commit that slows the server by 10%;
every server start has its own level (restarts are not free of noise) and every run its own noise.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglstack.bisect.planner import (
    BAD,
    FOUND,
    GOOD,
    NOT_FOUND,
    SKIP,
    UNDECIDED,
    Measure,
    Outcome,
    Planner,
    PlannerConfig,
)


class Simulation:
    def __init__(self, n: int, level: Callable[[int], float], *, seed: int, run_sd: float = 0.02,
                 start_sd: float = 0.005, skips: tuple[int, ...] = (), config: PlannerConfig | None = None):
        self.rng = random.Random(seed)
        self.refs = [f"c{i:02d}" for i in range(n + 1)]
        self.level, self.run_sd, self.start_sd, self.skips = level, run_sd, start_sd, skips
        self.planner = Planner(self.refs, config or PlannerConfig())
        self.built: set[str] = set()
        self.batches = 0

    def batch(self, index: int) -> list[float]:
        start = self.level(index) * (1 + self.rng.gauss(0, self.start_sd))
        return [start * (1 + self.rng.gauss(0, self.run_sd)) for _ in range(self.planner.config.runs_per_batch)]

    def run(self) -> Outcome:
        # A step bound on every turn of the loop, skips included: a planner that asks for a skipped ref
        # again (a skip taken for good) must fail the test, not spin until CI's own limit. At most 200
        # batches (below) and one skip per ref.
        max_steps = 200 + len(self.refs)
        for _ in range(max_steps):
            action = self.planner.next()
            if isinstance(action, Outcome):
                return action
            assert isinstance(action, Measure) and self.refs[action.index] == action.ref
            if action.index in self.skips:
                self.planner.record_skip(action.ref, "patch 'p': drift: class renamed")
                continue
            self.built.add(action.ref)  # the first batch of a ref builds it; later ones reuse the image
            self.batches += 1
            self.planner.record_batch(action.ref, self.batch(action.index))
            assert self.batches < 200, "the planner must stop"
        raise AssertionError(f"the planner did not stop within {max_steps} steps")


def step(k: int, drop: float = 0.10) -> Callable[[int], float]:
    return lambda i: 89.0 * (1 - drop if i >= k else 1.0)


@pytest.mark.parametrize(("n", "run_sd", "start_sd"), [(8, 0.01, 0.002), (16, 0.02, 0.005), (32, 0.02, 0.005),
                                                       (16, 0.03, 0.01)])
def test_names_the_slow_commit_within_log2_n_plus_3_builds_over_many_seeds(n, run_sd, start_sd):
    limit = math.ceil(math.log2(n)) + 3
    outcomes = Counter()
    for seed in range(40):
        k = 1 + (seed * 7) % n  # every position, the first and the last commit included
        sim = Simulation(n, step(k), seed=seed, run_sd=run_sd, start_sd=start_sd)
        outcome = sim.run()
        if outcome.found:
            assert outcome.first_bad == sim.refs[k], f"seed {seed}: named {outcome.first_bad}, not {sim.refs[k]}"
            assert outcome.last_good == sim.refs[k - 1]
            assert len(sim.built) <= limit, f"seed {seed}: {len(sim.built)} builds > {limit}"
        outcomes[outcome.status] += 1
    assert outcomes[FOUND] >= 38, outcomes  # at this noise nearly every bisect ends with an answer


def test_never_names_a_wrong_commit_when_the_noise_is_as_large_as_the_change():
    # Restarts move the level by 2-3% against a 10% drop: the answer may be "undecided", never wrong.
    statuses = Counter()
    for seed in range(60):
        for run_sd, start_sd in ((0.05, 0.02), (0.01, 0.03)):
            k = 1 + seed % 16
            sim = Simulation(16, step(k), seed=seed, run_sd=run_sd, start_sd=start_sd)
            outcome = sim.run()
            if outcome.found:
                assert outcome.first_bad == sim.refs[k], f"seed {seed}: wrong commit {outcome.first_bad}"
            else:
                assert sim.refs[k] in outcome.candidates or not outcome.candidates
            statuses[outcome.status] += 1
    assert statuses[FOUND] > 0 and statuses[NOT_FOUND] > 0  # both happen at this noise


def test_a_skip_is_stepped_around_and_costs_no_build():
    sim = Simulation(16, step(11), seed=1, skips=(8,))
    outcome = sim.run()
    assert outcome.found and outcome.first_bad == "c11"
    assert sim.planner.status("c08") == SKIP and "c08" not in sim.built


def test_skips_next_to_the_change_leave_a_range_not_a_guess():
    sim = Simulation(16, step(8), seed=2, skips=(8,))
    outcome = sim.run()
    assert outcome.status == NOT_FOUND and outcome.first_bad is None
    assert outcome.candidates == ("c08", "c09") and outcome.last_good == "c07"
    assert "c08 (skip: patch 'p'" in outcome.reason


def test_two_changes_in_the_range_are_never_blamed_on_an_innocent_commit():
    half = lambda i: 89.0 * (0.95 if i >= 5 else 1) * (0.95 if i >= 11 else 1)  # noqa: E731
    for seed in range(20):
        outcome = Simulation(16, half, seed=seed).run()
        assert not outcome.found or outcome.first_bad in ("c05", "c11"), outcome


def test_endpoints_that_measure_the_same_are_not_bisected():
    sim = Simulation(16, lambda i: 89.0, seed=4)
    outcome = sim.run()
    assert outcome.status == NOT_FOUND and "measure the same" in outcome.reason
    assert sim.built == {"c00", "c16"}


def test_a_change_below_the_threshold_is_not_bisected():
    sim = Simulation(16, step(5, drop=0.02), seed=4, run_sd=0.002, start_sd=0.0)
    outcome = sim.run()
    assert outcome.status == NOT_FOUND and "below the threshold of 5%" in outcome.reason


def test_an_endpoint_that_cannot_be_tested_ends_the_bisect():
    sim = Simulation(8, step(3), seed=0, skips=(0,))
    outcome = sim.run()
    assert outcome.status == NOT_FOUND and outcome.reason.startswith("the good endpoint c00 cannot be tested")


def test_lower_is_better_metrics_bisect_the_same_way():
    config = PlannerConfig(higher_is_better=False)
    latency = lambda i: 1.0 * (1.12 if i >= 6 else 1.0)  # noqa: E731
    outcome = Simulation(16, latency, seed=3, config=config).run()
    assert outcome.found and outcome.first_bad == "c06"


def test_the_same_results_replayed_give_the_same_decisions():
    sim = Simulation(16, step(9), seed=9)
    outcome = sim.run()
    again = Planner(sim.refs, PlannerConfig())
    for ref, entry in sim.planner.results.items():
        for batch in entry.batches:
            again.record_batch(ref, batch)
        if entry.skip:
            again.record_skip(ref, entry.skip)
    assert again.next() == outcome
    assert {v.ref: v.status for v in again.views()} == {v.ref: v.status for v in sim.planner.views()}


def test_statuses_and_the_answer_rest_on_two_server_starts():
    sim = Simulation(8, step(5), seed=5)
    outcome = sim.run()
    assert outcome.found
    statuses = {v.ref: v.status for v in sim.planner.views()}
    assert statuses["c04"] == GOOD and statuses["c05"] == BAD
    assert sim.planner.batches("c04") >= 2 and sim.planner.batches("c05") >= 2


def test_bad_configuration_and_refs_are_rejected():
    with pytest.raises(ValueError):
        Planner(["only-one"])
    with pytest.raises(ValueError):
        Planner(["a", "a"])
    with pytest.raises(ValueError):
        PlannerConfig(threshold=5)
    with pytest.raises(ValueError):
        PlannerConfig(max_batches=1)
    planner = Planner(["a", "b"])
    with pytest.raises(KeyError):
        planner.record_batch("z", [1.0])
    with pytest.raises(ValueError):
        planner.record_batch("a", [])


def test_an_undecided_ref_is_left_out_after_the_bound_on_repeats():
    # A ref that sits exactly between the endpoints: confirmed once, then left out; its neighbours decide.
    level = lambda i: 89.0 if i < 8 else (85.5 if i == 8 else 82.0)  # noqa: E731
    sim = Simulation(16, level, seed=6, run_sd=0.005, start_sd=0.0)
    outcome = sim.run()
    assert sim.planner.status("c08") == UNDECIDED
    assert outcome.status == NOT_FOUND and set(outcome.candidates) == {"c08", "c09"}
    assert "differs from both endpoints" in outcome.reason


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data(), n=st.integers(2, 24), seed=st.integers(0, 10_000))
def test_a_skip_is_never_taken_for_good_or_bad_whatever_the_skip_pattern(data, n, seed):
    """Any set of untestable refs between the endpoints, anywhere around the change: a skipped ref is
    never good, bad, the first bad or the last good; the answer is the changed ref or a range holding it."""
    k = data.draw(st.integers(1, n), label="first bad")
    skips = tuple(sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=n - 1), label="skipped")))
    sim = Simulation(n, step(k), seed=seed, run_sd=0.005, start_sd=0.001, skips=skips)
    outcome = sim.run()  # bounded: a planner that keeps asking for a skipped ref fails here
    skipped = {sim.refs[i] for i in skips}
    assert all(sim.planner.status(ref) == SKIP for ref in skipped & set(sim.planner.results))
    assert not skipped & sim.built, "a skipped ref costs no build"
    assert outcome.first_bad not in skipped and outcome.last_good not in skipped
    if outcome.found:
        assert (outcome.first_bad, outcome.last_good) == (sim.refs[k], sim.refs[k - 1]), outcome
    else:
        assert sim.refs[k] in outcome.candidates, outcome
        # the range is the untestable refs after the last good, up to the first ref measured bad
        measured = [c for c in outcome.candidates if c not in skipped]
        assert measured == [outcome.candidates[-1]] and sim.refs.index(measured[0]) >= k, outcome
        assert outcome.last_good == sim.refs[sim.refs.index(outcome.candidates[0]) - 1]
    if k not in skips and k - 1 not in skips:
        assert outcome.found, f"{sim.refs[k]} and {sim.refs[k - 1]} were testable: {outcome}"
