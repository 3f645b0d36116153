"""Greedy agreement counts only requests that completed (issue 35, planted bug P51): a failed request's empty
text is no output. Counted, two failures of one prompt agreed (an EAGLE-3 server whose outputs all differ passed
min_agreement at 50% when half its requests failed on both servers), and a failure on one side was a
disagreement the model never made."""

from __future__ import annotations

from sglstack.smoke.client import Generation
from sglstack.smoke.measure import agreement, greedy_outputs


def done(prompt: str, text: str) -> Generation:
    return Generation(prompt, text=text, completion_tokens=8, latency_s=0.1)


def failed(prompt: str, error: str | None = "HTTP 500: boom") -> Generation:
    return Generation(prompt, error=error)


def test_a_failed_request_is_no_output():
    assert greedy_outputs([done("p1", "a"), failed("p2"), failed("p3", error=None)]) == {"p1": "a"}


def test_failures_on_both_servers_do_not_agree():
    baseline = greedy_outputs([done("p1", "a"), failed("p2")])
    eagle3 = greedy_outputs([done("p1", "b"), failed("p2")])
    assert agreement(baseline, eagle3) == 0.0


def test_a_failure_on_one_server_is_no_disagreement():
    baseline = greedy_outputs([done("p1", "a"), done("p2", "x")])
    eagle3 = greedy_outputs([done("p1", "a"), failed("p2")])
    assert agreement(baseline, eagle3) == 1.0
    assert agreement(baseline, greedy_outputs([failed("p1"), failed("p2")])) is None  # nothing to compare
