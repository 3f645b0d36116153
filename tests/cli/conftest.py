"""tests/cli: `invoke` runs in a fork of the test process (tests/clirun.py says why it is the same)."""

from __future__ import annotations

import clirun
import pytest


@pytest.fixture(autouse=True)
def _invoke_in_a_fork(monkeypatch):
    monkeypatch.setattr(clirun, "FORK_BY_DEFAULT", True)
