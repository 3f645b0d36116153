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
from hypothesis_budget import examples

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


@settings(max_examples=examples(60), deadline=None, derandomize=True)
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


# ---- the steps and the lines, word for word (hand-fed levels, a fixed seed, a bounded loop) ----------------


def trace(levels: list[float], *, seed: int = 0, sd: float = 0.003, skips: tuple[int, ...] = (),
          config: PlannerConfig | None = None) -> tuple[Planner, list[Measure | Outcome]]:
    rng = random.Random(seed)
    planner = Planner([f"r{i}" for i in range(len(levels))], config or PlannerConfig())
    actions: list[Measure | Outcome] = []
    for _ in range(100):
        action = planner.next()
        actions.append(action)
        if isinstance(action, Outcome):
            return planner, actions
        if action.index in skips:
            planner.record_skip(action.ref, "patch 'p': drift")
            continue
        planner.record_batch(action.ref, [round(levels[action.index] * (1 + rng.gauss(0, sd)), 3)
                                          for _ in range(planner.config.runs_per_batch)])
    raise AssertionError("the planner did not stop within 100 steps")


def test_the_steps_of_a_clean_bisect_and_the_answer_word_for_word():
    planner, actions = trace([100] * 5 + [90] * 4)
    assert actions == [
        Measure("r0", 0, "good endpoint"), Measure("r0", 0, "good endpoint"),
        Measure("r8", 8, "bad endpoint"), Measure("r8", 8, "bad endpoint"),
        Measure("r4", 4, "bisect between 0 and 8 of 8"), Measure("r6", 6, "bisect between 4 and 8 of 8"),
        Measure("r5", 5, "bisect between 4 and 6 of 8"),
        Measure("r5", 5, "confirm: one more server start of the answer"),
        Measure("r4", 4, "confirm: one more server start of the answer"),
        Outcome(FOUND, "r5 is the first bad ref (-10.0% against the good endpoint)", first_bad="r5",
                last_good="r4", candidates=("r5",)),
    ]
    assert [(v.ref, v.index, v.status, v.batches, len(v.samples), v.skip) for v in planner.views()] == [
        ("r0", 0, GOOD, 2, 10, None), ("r4", 4, GOOD, 2, 10, None), ("r5", 5, BAD, 2, 10, None),
        ("r6", 6, BAD, 1, 5, None), ("r8", 8, BAD, 2, 10, None)]
    views = {v.ref: v for v in planner.views()}
    assert views["r0"].classification is None and views["r5"].classification == planner.classification("r5")
    assert planner.samples("r5") == views["r5"].samples and planner.samples("r7") == ()
    assert planner.batches("r7") == 0 and planner.skipped("r7") is None and planner.status("r7") == "untested"
    assert planner.endpoint_check().differ and (planner.good, planner.bad) == ("r0", "r8")


def test_the_last_ref_is_the_first_bad_with_a_bisect_of_five():
    _planner, actions = trace([100] * 4 + [90])
    assert actions[4:] == [
        Measure("r2", 2, "bisect between 0 and 4 of 4"), Measure("r3", 3, "bisect between 2 and 4 of 4"),
        Measure("r3", 3, "confirm: one more server start of the answer"),
        Outcome(FOUND, "r4 is the first bad ref (-10.0% against the good endpoint)", first_bad="r4",
                last_good="r3", candidates=("r4",)),
    ]


def test_lower_is_better_names_the_slower_ref_and_its_change():
    _planner, actions = trace([10] * 3 + [11.2] * 3, config=PlannerConfig(higher_is_better=False))
    assert actions[-1] == Outcome(FOUND, "r3 is the first bad ref (+12.0% against the good endpoint)",
                                  first_bad="r3", last_good="r2", candidates=("r3",))
    planner, faster = trace([10] * 3 + [8.8] * 3, config=PlannerConfig(higher_is_better=False))
    assert faster[-1].first_bad == "r3" and "(-12.0% against the good endpoint)" in faster[-1].reason
    assert planner.status("r3") == BAD and planner.status("r2") == GOOD


def test_endpoints_the_same_or_below_the_threshold_end_after_four_batches_with_the_reason():
    planner, actions = trace([100] * 8)
    assert len(actions) == 5 and actions[-1] == Outcome(
        NOT_FOUND, "the good and bad endpoints measure the same (median change -0.0%, p=0.521): "
        "no change of 5% or more to bisect")
    assert planner.status("r0") == GOOD and planner.status("r7") == BAD  # the endpoints are what they were called
    _planner, actions = trace([100] * 4 + [98] * 4)
    assert len(actions) == 5 and actions[-1] == Outcome(
        NOT_FOUND, "the endpoints differ by only -2.0%, below the threshold of 5%: nothing worth a bisect")
    _planner, actions = trace([100] * 4 + [98] * 4, config=PlannerConfig(threshold=0.01))
    assert actions[4] == Measure("r3", 3, "bisect between 0 and 7 of 7")


def test_endpoints_not_told_apart_get_more_batches_up_to_the_bound():
    _planner, actions = trace([100] * 4 + [95] * 4, sd=0.04)
    assert actions[4:] == [
        Measure("r0", 0, "more repeats: the endpoints are not told apart yet (p=0.0524)"),
        Measure("r7", 7, "more repeats: the endpoints are not told apart yet (p=0.0181)"),
        Measure("r0", 0, "more repeats: the endpoints are not told apart yet (p=0.0251)"),
        Measure("r7", 7, "more repeats: the endpoints are not told apart yet (p=0.0172)"),
        Outcome(NOT_FOUND, "the endpoints could not be told apart after 4 batches each "
                           "(median change -5.5%, p=0.0028)"),
    ]


def test_a_ref_between_the_endpoints_is_confirmed_once_and_named_in_the_range():
    planner, actions = trace([100] * 3 + [95] + [90] * 3)
    assert actions[4:] == [
        Measure("r3", 3, "bisect between 0 and 6 of 6"), Measure("r3", 3, "more repeats: not decided yet"),
        Measure("r2", 2, "bisect between 0 and 6 of 6"), Measure("r4", 4, "bisect between 2 and 6 of 6"),
        Outcome(NOT_FOUND, "the first bad ref is one of r3, r4: the refs between r2 (good) and r4 (bad) could not "
                           "be decided: r3 (undecided: differs from both endpoints, 49% of the way from good to "
                           "bad: more than one change?)", last_good="r2", candidates=("r3", "r4")),
    ]
    assert planner.status("r3") == UNDECIDED and planner.batches("r3") == 2


def test_a_ref_not_told_apart_gets_repeats_up_to_max_batches_then_is_left_out():
    planner, actions = trace([100] * 3 + [96, 94] + [90] * 3, sd=0.02, seed=6)
    assert [a.why for a in actions[7:13]] == ["more repeats: not decided yet"] * 6
    assert planner.batches("r3") == planner.batches("r4") == 4
    assert actions[-1] == Outcome(
        NOT_FOUND, "the first bad ref is one of r3, r4, r5: the refs between r2 (good) and r5 (bad) could not be "
        "decided: r3 (undecided: still not told apart after 4 batches); r4 (undecided: still not told apart after "
        "4 batches)", last_good="r2", candidates=("r3", "r4", "r5"))


def test_a_skipped_ref_is_named_with_its_reason_and_the_endpoint_skip_ends_it():
    planner, actions = trace([100] * 4 + [90] * 4, skips=(3,))
    assert actions[4:7] == [Measure("r3", 3, "bisect between 0 and 7 of 7"),
                            Measure("r4", 4, "bisect between 0 and 7 of 7"),
                            Measure("r2", 2, "bisect between 0 and 4 of 7")]
    assert actions[-1] == Outcome(
        NOT_FOUND, "the first bad ref is one of r3, r4: the refs between r2 (good) and r4 (bad) could not be "
        "decided: r3 (skip: patch 'p': drift)", last_good="r2", candidates=("r3", "r4"))
    assert planner.status("r3") == SKIP and [v.skip for v in planner.views() if v.ref == "r3"] == ["patch 'p': drift"]
    _planner, actions = trace([100] * 4 + [90] * 4, skips=(7,))
    assert actions[-1] == Outcome(NOT_FOUND, "the bad endpoint r7 cannot be tested: patch 'p': drift")


def test_a_good_ref_after_the_first_bad_is_a_note_of_the_answer():
    planner = Planner([f"r{i}" for i in range(6)])
    levels = {"r0": 100.0, "r5": 90.0, "r1": 100.0, "r2": 90.0, "r3": 100.0}
    for ref, level in levels.items():
        for batch in range(2):
            planner.record_batch(ref, [level + 0.1 * i + 0.05 * batch for i in range(5)])
    outcome = planner.next()
    assert outcome == Outcome(FOUND, "r2 is the first bad ref (-10.0% against the good endpoint)", first_bad="r2",
                              last_good="r1", candidates=("r2",), notes=(
                                  "r3 measures like the good endpoint but comes after the first bad r2: the metric "
                                  "may have changed more than once",))


def test_the_configuration_bounds_are_checked_one_by_one():
    for bad in ({"runs_per_batch": 0}, {"endpoint_batches": 0}, {"step_batches": 0}, {"threshold": 0},
                {"threshold": 1}, {"endpoint_batches": 5}, {"step_batches": 5}, {"confirm_batches": 5}):
        with pytest.raises(ValueError):
            PlannerConfig(**bad)
    for good in ({"runs_per_batch": 1}, {"endpoint_batches": 1, "step_batches": 1}, {"threshold": 0.99},
                 {"threshold": 0.001}, {"endpoint_batches": 4, "step_batches": 4, "confirm_batches": 4}):
        PlannerConfig(**good)
    with pytest.raises(ValueError, match=r"^runs per batch and batches per ref must be at least 1$"):
        PlannerConfig(step_batches=0)
    with pytest.raises(ValueError, match=r"^max_batches must be at least the initial batches$"):
        PlannerConfig(max_batches=3, confirm_batches=4)
    with pytest.raises(ValueError, match=r"^threshold is a fraction between 0 and 1 \(0\.05 = 5%\)$"):
        PlannerConfig(threshold=1.0)
    with pytest.raises(KeyError, match="'z' is not in the bisect range"):
        Planner(["a", "b"]).record_skip("z", "why")
    with pytest.raises(ValueError, match=r"^a bisect needs a good and a bad ref$"):
        Planner(["a"])
    with pytest.raises(ValueError, match=r"^refs must be distinct$"):
        Planner(["a", "b", "a"])
    with pytest.raises(ValueError, match=r"^a batch needs samples \(record a skip instead\)$"):
        Planner(["a", "b"]).record_batch("a", ())


def test_before_both_endpoints_are_measured_the_views_show_what_there_is():
    # The driver writes the report after every batch, the first one included: nothing is compared yet.
    planner = Planner(["r0", "r1", "r2"])
    planner.record_batch("r0", [100.0, 100.1, 99.9])
    planner.record_batch("r1", [90.0, 90.1, 89.9])  # replayed from a log before the bad endpoint's batches
    assert planner.endpoint_check() is None and planner.classification("r1") is None
    assert [(v.ref, v.status, v.classification) for v in planner.views()] == [("r0", GOOD, None),
                                                                              ("r1", "untested", None)]
    assert planner.next() == Measure("r0", 0, "good endpoint")


def test_an_undecided_answer_keeps_the_note_of_a_good_ref_after_the_first_bad():
    planner = Planner([f"r{i}" for i in range(5)])
    for ref, level in {"r0": 100.0, "r4": 90.0, "r2": 90.0, "r3": 100.0}.items():
        for batch in range(2):
            planner.record_batch(ref, [level + 0.1 * i + 0.05 * batch for i in range(5)])
    planner.record_skip("r1", "patch 'p': drift")
    outcome = planner.next()
    assert outcome.status == NOT_FOUND and outcome.candidates == ("r1", "r2") and outcome.last_good == "r0"
    assert outcome.notes == ("r3 measures like the good endpoint but comes after the first bad r2: the metric may "
                             "have changed more than once",)
