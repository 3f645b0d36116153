"""The draft's acceptance from SGLang's meta_info (0.5.23's fields, and the older ones' spec_verify_ct alone), and
the gate's named failure when no draft token was accepted (issue 41)."""

from __future__ import annotations

from sglstack.config.settings import Gates
from sglstack.smoke.acceptance import LIKELY_CAUSES, draft_acceptance, nothing_accepted, per_position
from sglstack.smoke.client import Generation
from sglstack.smoke.gates import evaluate
from sglstack.smoke.measure import PhaseStats, ServerRun


def gen(tokens: int, verify: int, **meta) -> Generation:
    return Generation(prompt="p", text="t", completion_tokens=tokens, latency_s=1.0, spec_verify_ct=verify,
                      meta_info={"completion_tokens": tokens, "spec_verify_ct": verify, **meta})


def test_0_5_23_meta_info_gives_totals_rate_and_per_position_acceptance():
    results = [gen(9, 4, spec_num_correct_drafts=4, spec_num_proposed_drafts=12,
                   spec_correct_drafts_histogram=[1, 2, 1, 0]),
               gen(7, 4, spec_num_correct_drafts=2, spec_num_proposed_drafts=12,
                   spec_correct_drafts_histogram=[2, 2, 0, 0]),
               Generation(prompt="failed", error="timeout")]
    assert draft_acceptance(results) == {
        "requests": 2, "verify_steps": 8, "accepted_by_tokens": 6, "accepted_drafts": 6, "proposed_drafts": 24,
        "accept_rate": 0.25, "correct_drafts_histogram": [3, 4, 1, 0], "per_position": [5 / 8, 1 / 8, 0.0]}


def test_an_older_server_gives_the_accepted_drafts_by_its_token_count_alone():
    assert draft_acceptance([gen(128, 127), gen(128, 127)]) == {
        "requests": 2, "verify_steps": 254, "accepted_by_tokens": 0}
    assert draft_acceptance([Generation(prompt="p", text="t", completion_tokens=5, latency_s=1.0)]) is None


def test_per_position_is_the_share_of_steps_accepting_at_least_that_many():
    assert per_position([0, 0, 4]) == [1.0, 1.0]
    assert per_position([]) == [] and per_position([0, 0]) == []


def test_each_kind_of_evidence_that_nothing_was_accepted():
    assert nothing_accepted(1.01, 1.0, None) == "the server's accept length is 1.00 (accept rate 0.00)"
    assert nothing_accepted(1.0, None, None) == "the accept length is exactly 1.00 (accept rate 0.00)"
    rate0 = draft_acceptance([gen(128, 127, spec_num_correct_drafts=0, spec_num_proposed_drafts=381)])
    assert nothing_accepted(1.008, None, rate0) == "the server's accept rate is 0.00 (381 draft tokens proposed)"
    old = draft_acceptance([gen(128, 127)])
    assert nothing_accepted(1.008, None, old) == (
        "every one of 127 verify steps gave a single token (accept length 1.00)")
    some = draft_acceptance([gen(128, 100, spec_num_correct_drafts=27, spec_num_proposed_drafts=300)])
    assert nothing_accepted(1.28, 1.27, some) is None
    assert nothing_accepted(1.28, 1.27, draft_acceptance([gen(128, 100)])) is None


def _run(kind: str, tokens_per_s: float, **extra) -> ServerRun:
    phase = PhaseStats(concurrency=1, requests=1, completed=1, tokens_per_s=tokens_per_s,
                       aggregate_tokens_per_s=tokens_per_s, ttft_s=0.1, wall_s=1.0)
    return ServerRun(kind=kind, started=True, single=phase, outputs={"p": "t"}, **extra)


def test_a_draft_with_no_token_accepted_fails_with_its_name_and_causes_not_below_the_gate():
    eagle3 = _run("eagle3", 90.0, accept_length_meta=1.0078740157480315,
                  acceptance=draft_acceptance([gen(128, 127, spec_num_correct_drafts=0, spec_num_proposed_drafts=381)]))
    verdict = evaluate(Gates(min_speedup=0.5, min_accept_length=1.0), _run("baseline", 100.0), eagle3, 1.0)
    assert verdict.failures == (
        "min_accept_length: no draft token was accepted: the server's accept rate is 0.00 (381 draft tokens "
        "proposed); accept length 1.01 over the requests: the draft ran, and none of its tokens were accepted, so "
        f"EAGLE-3 only costs time; {LIKELY_CAUSES}",)


def test_a_draft_that_is_accepted_a_little_is_measured_against_the_gate():
    eagle3 = _run("eagle3", 90.0, accept_length_meta=1.5,
                  acceptance=draft_acceptance([gen(128, 85, spec_num_correct_drafts=42, spec_num_proposed_drafts=255)]))
    verdict = evaluate(Gates(min_speedup=0.5), _run("baseline", 100.0), eagle3, 1.0)
    assert verdict.failures == ("min_accept_length: accept length 1.50 is below 2.00",)
    assert eagle3.to_dict()["acceptance"]["accept_rate"] == 42 / 255
    assert "acceptance" not in _run("baseline", 1.0).to_dict()
