"""How much of the draft the EAGLE-3 server accepted (pure): totals and per-position acceptance from each
request's meta_info, and the one case a gate must name rather than measure: a draft none of whose tokens
were accepted.

SGLang 0.5.23's /generate meta_info (tokenizer_manager `_calculate_spec_decoding_metrics`) gives per request
`spec_verify_ct` (verify steps), `spec_num_correct_drafts` and `spec_num_proposed_drafts` (accepted and
proposed draft tokens, no bonus token), `spec_accept_rate` (their ratio) and `spec_correct_drafts_histogram`
(entry k: the verify steps that accepted exactly k draft tokens). Older releases give only `spec_verify_ct`:
the first token comes from prefill and every verify step gives its accepted drafts plus one, so the drafts
accepted are `completion_tokens - 1 - spec_verify_ct`. The server's own `avg_spec_accept_length`
(/get_server_info) is accepted drafts plus one per step: exactly 1.0 when none was accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .client import Generation

LIKELY_CAUSES = ("likely causes: --speculative-algorithm does not match the draft (an EAGLE-3 draft served as "
                 "EAGLE or NEXTN runs without its auxiliary hidden states), or the draft does not match the target "
                 "(a draft trained for another model, hidden size or vocabulary, or one never trained)")


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _histogram(value: Any) -> list[int] | None:
    if isinstance(value, list) and value and all(_count(v) is not None for v in value):
        return list(value)
    return None


def draft_acceptance(results: Sequence[Generation]) -> dict[str, Any] | None:
    """The draft's acceptance over `results` (None: no request reported a verify step)."""
    spec = [r for r in results if r.ok and _count(r.spec_verify_ct)]
    if not spec:
        return None
    steps = sum(int(r.spec_verify_ct or 0) for r in spec)
    out: dict[str, Any] = {"requests": len(spec), "verify_steps": steps,
                           # drafts accepted, by the token count (every release): prefill gives the first token
                           "accepted_by_tokens": sum(max(r.completion_tokens - 1 - int(r.spec_verify_ct or 0), 0)
                                                     for r in spec)}
    correct = [_count(r.meta_info.get("spec_num_correct_drafts")) for r in spec]
    proposed = [_count(r.meta_info.get("spec_num_proposed_drafts")) for r in spec]
    if all(c is not None for c in correct) and all(p is not None for p in proposed):
        out["accepted_drafts"] = sum(c or 0 for c in correct)
        out["proposed_drafts"] = sum(p or 0 for p in proposed)
        out["accept_rate"] = out["accepted_drafts"] / out["proposed_drafts"] if out["proposed_drafts"] else None
    histograms = [_histogram(r.meta_info.get("spec_correct_drafts_histogram")) for r in spec]
    if histograms and all(h is not None for h in histograms):
        total = [0] * max(len(h or []) for h in histograms)
        for h in histograms:
            for k, n in enumerate(h or []):
                total[k] += n
        out["correct_drafts_histogram"] = total
        out["per_position"] = per_position(total)
    return out


def per_position(histogram: Sequence[int]) -> list[float]:
    """Entry p-1: the share of verify steps that accepted the draft's token at position p (at least p tokens)."""
    steps = sum(histogram)
    if not steps:
        return []
    return [sum(histogram[p:]) / steps for p in range(1, len(histogram))]


def nothing_accepted(accept_length: float | None, accept_length_server: float | None,
                     acceptance: Mapping[str, Any] | None) -> str | None:
    """What shows that no draft token was accepted, or None when something was (or nothing says)."""
    if accept_length_server == 1.0:
        return "the server's accept length is 1.00 (accept rate 0.00)"
    if accept_length == 1.0:
        return "the accept length is exactly 1.00 (accept rate 0.00)"
    if acceptance:
        if acceptance.get("proposed_drafts") and acceptance.get("accepted_drafts") == 0:
            return f"the server's accept rate is 0.00 ({acceptance['proposed_drafts']} draft tokens proposed)"
        if acceptance.get("verify_steps") and acceptance.get("accepted_by_tokens") == 0 \
                and "accepted_drafts" not in acceptance:
            return (f"every one of {acceptance['verify_steps']} verify steps gave a single token (accept length "
                    "1.00)")
    return None


def nothing_accepted_failure(evidence: str, accept_length: float | None) -> str:
    """The gate's line for a draft that ran and had none of its tokens accepted."""
    measured = f"; accept length {accept_length:.2f} over the requests" if accept_length is not None else ""
    return (f"min_accept_length: no draft token was accepted: {evidence}{measured}: the draft ran, and none of its "
            f"tokens were accepted, so EAGLE-3 only costs time; {LIKELY_CAUSES}")
