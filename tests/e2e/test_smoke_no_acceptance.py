"""A served draft none of whose tokens are accepted (the double at accept length 1.0: every verify step gives
one token, the server's average is 1.00) fails the smoke with that name and its likely causes, not "below the
gate", and whatever the gate (issue 41)."""

from __future__ import annotations

import json
import secrets

import pytest
from smoke_fixtures import LABEL, fast_options

from sglstack.smoke import run_smoke
from sglstack.smoke.acceptance import LIKELY_CAUSES

pytestmark = pytest.mark.usefixtures("sglang_double_image")


@pytest.fixture
def smoke_label(docker_client):
    value = f"smoke-{secrets.token_hex(4)}"
    yield value
    left = docker_client.containers.list(all=True, filters={"label": f"{LABEL}={value}"})
    for container in left:
        container.remove(force=True)
    assert not left, f"smoke leaked containers: {[c.name for c in left]}"


def test_a_draft_with_no_token_accepted_is_named_even_with_the_gate_off(sglang_double_image, smoke_label, tmp_path):
    opts = fast_options(tmp_path, smoke_label, env={"SGLANG_DOUBLE_ACCEPT_LENGTH": "1.0"}, min_accept_length=0.0,
                        min_speedup=0.01)
    report = run_smoke(None, sglang_double_image, opts)
    accept = report.data["accept_length"]
    assert list(report.failures) == [
        "min_accept_length: no draft token was accepted: the server's accept length is 1.00 (accept rate 0.00); "
        f"accept length {accept:.2f} over the requests: the draft ran, and none of its tokens were accepted, so "
        f"EAGLE-3 only costs time; {LIKELY_CAUSES}"]
    recorded = json.loads((tmp_path / "report.json").read_text())["eagle3"]["acceptance"]
    assert recorded["accepted_by_tokens"] == 0 and recorded["verify_steps"] > 0
