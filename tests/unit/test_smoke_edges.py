"""Smoke and bisect decisions at their edges, each side of the branch: the drafts a request accepted (the prefill's
token is no draft's), a warm start that only rewrote kernel files, two images told apart by digest (never by tag), a
request that answered with no token, the caller's secrets kept from a local server, `--threshold 0`, and a
lower-is-better metric against a known-good value. Planted bugs P66-P69, P73, P74 and P77
(`benchmarks/planted_bugs.py`)."""

from __future__ import annotations

import pytest

from sglstack.bisect.driver import BisectInputError
from sglstack.bisect.gitexit import bisect_exit_threshold
from sglstack.bisect.stats import bisect_exit_code
from sglstack.config.settings import StartGates
from sglstack.smoke.acceptance import draft_acceptance, nothing_accepted
from sglstack.smoke.client import Generation
from sglstack.smoke.measure import ServerRun
from sglstack.smoke.processenv import passes_to_process
from sglstack.smoke.since import same_image, since_last_pass
from sglstack.smoke.startgates import start_failures

# ---- acceptance: the first token comes from prefill ------------------------------------------------


def test_drafts_accepted_leave_out_the_token_prefill_gave():
    # 10 tokens: 1 from prefill, then 3 verify steps gave 9 = 3 bonus tokens + 6 accepted drafts
    runs = [Generation("p", text="x", completion_tokens=10, spec_verify_ct=3),
            Generation("q", text="y", completion_tokens=5, spec_verify_ct=4)]
    out = draft_acceptance(runs)
    assert out is not None
    assert out["accepted_by_tokens"] == 6 + 0
    assert out["verify_steps"] == 7 and out["requests"] == 2


def test_a_draft_of_which_nothing_was_accepted_is_named_by_its_token_count():
    # every verify step gave exactly one token: 1 (prefill) + 4 steps = 5 tokens, nothing accepted
    acceptance = draft_acceptance([Generation("p", text="x", completion_tokens=5, spec_verify_ct=4)])
    assert acceptance is not None and acceptance["accepted_by_tokens"] == 0
    assert nothing_accepted(None, None, acceptance) == "every one of 4 verify steps gave a single token (accept " \
                                                       "length 1.00)"


# ---- the warm start's compile gate --------------------------------------------------------------


@pytest.mark.parametrize(("cache", "compiled"), [
    ({"new_files": 0, "rewritten_files": 2, "rewritten_files_first": ["triton/a.so"]}, True),
    ({"new_files": 1, "rewritten_files": 0, "new_files_first": ["flashinfer/b.so"]}, True),
    ({"new_files": 0, "rewritten_files": 0}, False),
])
def test_a_warm_start_that_rewrote_or_added_a_kernel_file_compiled(cache, compiled):
    warm = {"eagle3": ServerRun("eagle3", True, startup_s=60.0, kernel_cache=cache)}
    failures = start_failures(StartGates(no_warm_compile=True), {}, warm, None)
    if compiled:
        assert len(failures) == 1 and failures[0].startswith("no_warm_compile: the EAGLE-3 warm start compiled: ")
        assert f"{cache['new_files']} new and {cache['rewritten_files']} rewritten" in failures[0]
    else:
        assert failures == []


# ---- since the last pass: the same image is the same digest, not the same tag -------------------------

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def test_a_tag_that_moved_to_another_digest_is_another_image():
    # a report from a host that knew no image id (one side read back from its registry digest alone)
    old = {"ref": "registry.example/sglstack/cu130:latest", "digest": A,
           "repo_digests": [f"registry.example/sglstack/cu130@{A}"]}
    new = {"ref": "registry.example/sglstack/cu130:latest", "digest": B,
           "repo_digests": [f"registry.example/sglstack/cu130@{B}"]}
    assert not same_image(old, new)
    since = since_last_pass({"image": old, "time": "2026-12-01T00:00:00Z"}, new, lambda name: None)
    assert since is not None and since["summary"] is None and since["last_pass_time"] == "2026-12-01T00:00:00Z"
    assert "sha256:aaaa" in since["command"] and "sha256:bbbb" in since["command"]


def test_one_digest_under_two_tags_is_one_image():
    assert same_image({"ref": "r/x:v1", "digest": A}, {"ref": "r/x:latest", "digest": A})
    assert since_last_pass({"image": {"ref": "r/x:v1", "digest": A}}, {"ref": "r/x:latest", "digest": A},
                           lambda name: None) is None


def test_image_ids_decide_before_digests():
    assert not same_image({"id": "sha256:" + "1" * 64, "digest": A}, {"id": "sha256:" + "2" * 64, "digest": A})
    assert same_image({"id": "sha256:" + "1" * 64, "ref": "x:1"}, {"id": "sha256:" + "1" * 64, "ref": "x:2"})


# ---- the client: an answer of no token is no good request -----------------------------------------


@pytest.mark.parametrize(("tokens", "ok"), [(0, False), (1, True)])
def test_a_request_answered_with_no_token_is_not_ok(tokens, ok):
    # what `generate` builds from a stream whose last chunk says completion_tokens (SGLang's server is the
    # sglang-double's to serve: tests/unit/test_one_home.py)
    got = Generation("hello", text="", completion_tokens=tokens, latency_s=0.1,
                     meta_info={"completion_tokens": tokens, "prompt_tokens": 3})
    assert got.ok is ok
    assert Generation("hello", completion_tokens=5, error="HTTP 500: boom").ok is False
    acceptance = draft_acceptance([got])  # no verify step reported: nothing to say of the draft
    assert acceptance is None


# ---- the process runner's environment: the caller's secrets stay with the caller -----------------------


@pytest.mark.parametrize("name", ["HF_TOKEN", "HF_API_KEY", "HUGGING_FACE_HUB_TOKEN", "CUDA_SECRET", "NCCL_PASSWORD"])
def test_a_secret_of_a_passing_family_does_not_reach_the_server(name):
    assert not passes_to_process(name, "hf_abcdefghijklmnopqrstuvwxyz")


@pytest.mark.parametrize("name", ["CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "HF_HOME", "LC_ALL", "PATH"])
def test_runtime_settings_of_the_caller_reach_the_server(name):
    assert passes_to_process(name, "0,1")


def test_a_url_login_in_a_passing_variable_does_not_reach_the_server():
    assert not passes_to_process("HF_ENDPOINT", "https://user:secret@mirror.example/")
    assert passes_to_process("HF_ENDPOINT", "https://mirror.example/")


# ---- bisect-exit: the threshold's bounds, and which way is worse ---------------------------------------


@pytest.mark.parametrize("text", ["0", "0.0", "-1", "100", "nan", "inf"])
def test_a_threshold_of_no_drop_or_a_whole_one_is_refused(text):
    with pytest.raises(BisectInputError, match=rf"--threshold '{text}': "):
        bisect_exit_threshold(text)


@pytest.mark.parametrize(("text", "fraction"), [("5", 0.05), ("0.5", 0.005), ("99", 0.99)])
def test_a_threshold_in_bounds_is_a_fraction(text, fraction):
    assert bisect_exit_threshold(text) == pytest.approx(fraction)


@pytest.mark.parametrize(("samples", "code"), [
    ([130.0, 131.0, 132.0], 1),  # a latency 30% over a known-good 100: bad
    ([80.0, 81.0, 82.0], 0),  # 20% under it: better, good
    ([101.0, 102.0, 103.0], 0),  # within the 5%: good
])
def test_a_lower_is_better_metric_is_bad_when_it_rises_past_the_limit(samples, code):
    assert bisect_exit_code(samples, baseline=100.0, threshold=0.05, higher_is_better=False) == code


@pytest.mark.parametrize(("samples", "code"), [([70.0, 71.0, 72.0], 1), ([120.0, 121.0, 122.0], 0)])
def test_a_higher_is_better_metric_is_bad_when_it_falls_past_the_limit(samples, code):
    assert bisect_exit_code(samples, baseline=100.0, threshold=0.05, higher_is_better=True) == code
