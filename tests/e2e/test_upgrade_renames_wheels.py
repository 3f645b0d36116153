"""What `upgrade` says a release renames, read from the real SGLang wheels (PyPI, cached): 0.5.18's deprecation
table forwards SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK to SGLANG_ENABLE_..., inverted, and 0.5.23 no longer
reads the old name; 0.5.9 had no table, and the opposite name is found; 0.5.23's parser deprecates
--disable-cuda-graph with its replacement."""

from __future__ import annotations

import pytest

from sglstack.adapters.wheels import fetch_wheel
from sglstack.upgrade.argv import release_flags
from sglstack.upgrade.renames import FlagFacts, env_renames, flag_renames, wheel_env

pytestmark = pytest.mark.network

DISABLE = "SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK"
RENAMED = (f"serving.env {DISABLE}: renamed in sglang 0.5.23: use SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK, with the "
           "opposite meaning (set it to the opposite value)")
PARSER_PACKAGES = {"packaging": "25.0", "msgspec": "0.19.0"}


@pytest.mark.timeout(600)
def test_the_tp_memory_check_variable_is_named_renamed_and_inverted_from_the_releases_own_sources():
    new = wheel_env(fetch_wheel("sglang", "0.5.23"))
    old = wheel_env(fetch_wheel("sglang", "0.5.18"))
    assert old.deprecated[DISABLE].new == "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK" and old.deprecated[DISABLE].inverted
    assert env_renames([DISABLE, "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"], old, new, "0.5.23") == [RENAMED]
    assert env_renames([DISABLE], wheel_env(fetch_wheel("sglang", "0.5.9")), new, "0.5.23") == [RENAMED]


@pytest.mark.timeout(600)
def test_a_flag_the_new_parser_deprecates_is_named_with_its_replacement():
    new = FlagFacts.from_probe(release_flags(fetch_wheel("sglang", "0.5.23"), PARSER_PACKAGES.__getitem__))
    old = FlagFacts.from_probe(release_flags(fetch_wheel("sglang", "0.5.18"), PARSER_PACKAGES.__getitem__))
    assert new is not None and old is not None
    assert flag_renames(["--model-path", "m", "--disable-cuda-graph"], old, new, "0.5.23") == [
        "serving flag --disable-cuda-graph: deprecated in sglang 0.5.23: use "
        "--cuda-graph-backend-{decode,prefill}=disabled"]
