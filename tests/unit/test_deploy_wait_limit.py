"""How long deploy waits for health, against the healthcheck it rendered: a server that becomes healthy in its
last allowed probe (slow to start, within the start period and every retry) is always waited for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglstack.deploy import deployment, k8s_flow
from sglstack.serving import Healthcheck

healthchecks = st.builds(Healthcheck, path=st.just("/health"), interval_s=st.integers(1, 600),
                         timeout_s=st.integers(1, 600), retries=st.integers(0, 100),
                         start_period_s=st.integers(0, 7200))


def _last_probe_ends(h: Healthcheck) -> int:
    """Docker counts no failure before the start period; the last of retries+1 probes then starts
    interval * retries later and may take its whole timeout."""
    return h.start_period_s + h.interval_s * h.retries + h.timeout_s


@given(healthchecks)
def test_compose_waits_past_the_last_probe_of_a_slow_server(h):
    limit = deployment.wait_limit(SimpleNamespace(healthcheck=h), None)
    assert limit >= _last_probe_ends(h) + h.interval_s


@given(healthchecks)
def test_kubernetes_waits_past_the_startup_probe_and_a_pull(h):
    limit = k8s_flow.wait_limit(SimpleNamespace(healthcheck=h), None)
    assert limit >= h.start_period_s + h.interval_s * (h.retries + 1) + 300


@pytest.mark.parametrize("wait_limit", [deployment.wait_limit, k8s_flow.wait_limit])
def test_the_wait_timeout_option_is_taken_as_given(wait_limit):
    slow = Healthcheck(path="/health", interval_s=30, timeout_s=20, retries=3, start_period_s=1800)
    assert wait_limit(SimpleNamespace(healthcheck=slow), 5.0) == 5.0
    assert wait_limit(SimpleNamespace(healthcheck=slow), None) > 1800
