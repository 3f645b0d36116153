"""patchkit's stdlib PEP 440 subset agrees with `packaging` (the reference, installed on the host)."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet as RefSet
from packaging.version import Version as RefVersion

from sglstack.inimage.patchkit.versions import InvalidVersion, SpecifierSet, Version

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
    "0.5.9.post1.dev2",
    "0.5.9rc1.post1",
    "0.5.9rc1.dev1",
    "0.5.9.post2",
    "0.5.9+abc",
    "0.5.9+abc.1",
    "0.5.9+1",
    "0.5.9+1.abc",
    "0.5.9a1",
    "0.5.9b1",
    "1.0",
    "1.0.0.0",
    "1!0.0.1",
    "0.5",
    "1",
    "0.5.9+0",
]
# Spellings PEP 440 normalizes; ours must read them as `packaging` does.
SPELLINGS = ["V0.5.9", " 0.5.9 ", "0.5.9-1", "0.5.9.r2", "0.5.9rev3", "0.5.9preview3", "0.5.9c1", "0.5.9pre2",
             "0.5.9alpha1", "0.5.9beta", "0.5.9-rc.1", "0.5.9_post_4", "0.5.9.dev", "0.5.9-dev5", "0.5.9post",
             "0.5.9+Ubuntu-1_2", "01.02.03", "0.5.9RC1", "2!1.0a", "0.5.9.post", "0.5.9dev"]
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
    "===0.5.9",
    "===0.5.9+cu130",
    "==0.6.0.*",
    "==0.5.9.*",
    "!=0.5.10.*",
    "==1!0.*",
    "==0.5.10rc0",
    "<=0.5.10rc0",
    ">=1!0",
    "~=0.5.9.0",
    "~=1!0.0",
    "<0.5.10.dev0",
    "<0.5.9.post1",
    ">=0.5.9.dev3",
    "==0.5.9.post1",
    "!=0.5.9+cu130",
    "==0.5.9+abc.1",
    ">0.5.9",
    ">0.5.9.dev3",
    "<0.5.9rc1",
    ">0.5.9rc1",
    "<1.0.0",
    "==1.0.0.0",
    " >= 0.5.9 , < 0.5.10 ",
    ">=0.5.9,",
]


@pytest.mark.parametrize("spec", SPECS)
def test_specifiers_match_packaging(spec):
    ours = SpecifierSet.parse(spec)
    for text in VERSIONS:
        want = RefSet(spec).contains(RefVersion(text), prereleases=True)
        assert ours.contains(text) == want, f"{text} in {spec}"


def test_ordering_matches_packaging():
    assert sorted(VERSIONS, key=Version.parse) == sorted(VERSIONS, key=RefVersion)
    for a in VERSIONS:
        for b in VERSIONS:
            assert (Version.parse(a) < Version.parse(b)) == (RefVersion(a) < RefVersion(b)), (a, b)
            assert (Version.parse(a) == Version.parse(b)) == (RefVersion(a) == RefVersion(b)), (a, b)
            if RefVersion(a) == RefVersion(b):
                assert hash(Version.parse(a)) == hash(Version.parse(b)), (a, b)


@pytest.mark.parametrize("text", VERSIONS + SPELLINGS)
def test_parts_match_packaging(text):
    ours, ref = Version.parse(text), RefVersion(text)
    assert (ours.epoch, ours.release, ours.pre, ours.post, ours.dev) == (
        ref.epoch, ref.release, ref.pre, ref.post, ref.dev)
    assert ".".join(map(str, ours.local)) == (ref.local or "")
    assert ours.is_prerelease == ref.is_prerelease
    assert ours.text == text.strip()
    assert ours.public == Version.parse(ref.public) and ours.public.local == ()


def test_a_version_is_only_equal_to_a_version():
    assert Version.parse("1.0") != "1.0"
    assert Version.parse("1.0") == Version.parse("1.0.0")


def test_arbitrary_equality_compares_the_text():
    assert SpecifierSet.parse("===0.5.9").contains("0.5.9")
    assert SpecifierSet.parse("===0.5.9+CU130").contains("0.5.9+cu130")  # case-insensitive, as packaging
    assert not SpecifierSet.parse("===0.5.9").contains("0.5.9.0")
    assert SpecifierSet.parse("===foo").contains(Version(0, (1,), None, None, None, (), "FOO"))


def test_a_prefix_match_with_a_pre_release():
    spec = SpecifierSet.parse("==0.5.9rc1.*")
    assert spec.contains("0.5.9rc1") and spec.contains("0.5.9rc1.post1")
    assert not spec.contains("0.5.9rc2") and not spec.contains("0.5.9")


def test_a_specifier_set_keeps_its_text():
    spec = SpecifierSet.parse(">=0.5.9, <0.5.10")
    assert str(spec) == ">=0.5.9, <0.5.10"
    assert [(s.operator, s.version) for s in spec.specifiers] == [(">=", "0.5.9"), ("<", "0.5.10")]
    assert SpecifierSet.parse("").contains("0.1") and SpecifierSet.parse("").specifiers == ()


@pytest.mark.parametrize("bad", ["latest", "0.5.9-", "x1"])
def test_invalid_versions(bad):
    with pytest.raises(InvalidVersion):
        Version.parse(bad)


@pytest.mark.parametrize(("bad", "message"), [
    ("=>0.5", "'=>0.5' is not a PEP 440 specifier"),
    ("0.5.9", "'0.5.9' is not a PEP 440 specifier"),
    (">=0.5, 0.6 ", "'0.6' is not a PEP 440 specifier"),
    (">=0.5 0.6", "'>=0.5 0.6' is not a PEP 440 specifier"),
    (">=abc", "'abc' is not a PEP 440 version"),
    ("==abc.*", "'abc' is not a PEP 440 version"),
    ("~=1", "'~=1' needs at least two release segments"),
    ("~=1.*", "'1.*' is not a PEP 440 version"),
])
def test_invalid_specifiers(bad, message):
    with pytest.raises(InvalidVersion) as info:
        SpecifierSet.parse(bad)
    assert str(info.value) == message


def test_invalid_version_message():
    with pytest.raises(InvalidVersion) as info:
        Version.parse("latest")
    assert str(info.value) == "'latest' is not a PEP 440 version"
