"""Real uv against the package index (split from tests/unit/test_lock_resolver.py): the closure with hashes for
the target Python, preferred pins kept, a conflict typed with both sides."""

from __future__ import annotations

import pytest

from sglstack.adapters.uv import (
    ResolutionConflict,
    ResolveRequest,
    compile_many,
    compile_requirements,
    uv_version,
)


@pytest.mark.network
def test_real_uv_resolves_the_closure_for_the_target_python_with_hashes():
    resolution = compile_requirements(ResolveRequest(
        requirements=("requests==2.32.3",), python_version="3.11", python_platform="x86_64-manylinux_2_28"))
    names = {p.name for p in resolution.packages}
    assert names == {"requests", "certifi", "charset-normalizer", "idna", "urllib3"}
    assert all(p.hashes and all(h.startswith("sha256:") and len(h) == 71 for h in p.hashes)
               for p in resolution.packages)
    assert resolution.uv_version == uv_version() != "unknown"
    assert resolution.indexes_used  # what uv says it used, never a host sglstack names itself


@pytest.mark.network
def test_real_uv_keeps_preferred_pins_and_upgrades_only_the_named_package():
    old = ("certifi==2024.8.30", "charset-normalizer==3.3.2", "idna==3.7", "requests==2.32.3", "urllib3==2.2.2")
    request = ResolveRequest(requirements=("requests==2.32.3",), python_version="3.11",
                             python_platform="x86_64-manylinux_2_28", preferences=old)
    kept, upgraded = compile_many([request, ResolveRequest(**{**request.__dict__, "upgrade_packages": ("idna",)})])
    assert {f"{p.name}=={p.version}" for p in kept.packages} == set(old)
    moved = {p.name: p.version for p in upgraded.packages}
    assert moved["idna"] != "3.7" and moved["urllib3"] == "2.2.2" and moved["certifi"] == "2024.8.30"


@pytest.mark.network
def test_real_uv_conflict_is_typed_with_both_sides():
    with pytest.raises(ResolutionConflict) as err:
        compile_requirements(ResolveRequest(requirements=("typing-extensions==4.0.0", "typing-inspection==0.4.0"),
                                            python_version="3.11", python_platform="x86_64-manylinux_2_28"))
    assert [str(s) for s in err.value.sides] == ["typing-inspection==0.4.0 requires typing-extensions>=4.12.0",
                                                 "the stack requires typing-extensions==4.0.0"]
