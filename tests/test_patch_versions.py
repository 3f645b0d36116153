"""patchkit's stdlib PEP 440 subset agrees with `packaging` (the reference, installed on the host)."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet as RefSet
from packaging.version import Version as RefVersion

from sglstack.patchkit.versions import InvalidVersion, SpecifierSet, Version

VERSIONS = [
    "0.5.8",
    "0.5.9",
    "0.5.9.post1",
    "0.5.9rc1",
    "0.5.9.dev3",
    "0.5.10",
    "0.5.10rc0",
    "0.5.10.dev0",
    "0.5.10.post2",
    "0.5.11",
    "0.6",
    "0.6.0",
    "1!0.1",
    "0.5.9+cu130",
    "0.5.10a1",
    "0.5.10b2.dev1",
]
SPECS = [
    ">=0.5.9,<0.5.10",
    ">=0.5.9",
    "<0.5.10",
    "<=0.5.10",
    ">0.5.9",
    "==0.5.9",
    "!=0.5.9",
    "~=0.5.9",
    "~=0.5",
    "==0.5.*",
    "!=0.5.*",
    "==0.5.9+cu130",
    ">=0.5.10rc0",
    "<0.5.10rc1",
    ">0.5.9.post1",
]


@pytest.mark.parametrize("spec", SPECS)
def test_specifiers_match_packaging(spec):
    ours = SpecifierSet.parse(spec)
    for text in VERSIONS:
        want = RefSet(spec).contains(RefVersion(text), prereleases=True)
        assert ours.contains(text) == want, f"{text} in {spec}"


def test_ordering_matches_packaging():
    assert sorted(VERSIONS, key=Version.parse) == sorted(VERSIONS, key=RefVersion)


@pytest.mark.parametrize("bad", ["latest", "0.5.9-", "x1"])
def test_invalid_versions(bad):
    with pytest.raises(InvalidVersion):
        Version.parse(bad)


@pytest.mark.parametrize("bad", ["=>0.5", "0.5.9", ">=abc", "~=1"])
def test_invalid_specifiers(bad):
    with pytest.raises(InvalidVersion):
        SpecifierSet.parse(bad).contains("1.0")
