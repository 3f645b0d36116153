"""What a provenance statement names, read back where the other attest tests' statements never sit (issue 35,
mutation of `attest`): a statement some other tool shaped (no predicate, a definition or its parts of another
type, no SGLang dependency, the SGLang dependency after others), an over-long subject digest or field, and an
identity that names no config; an inventory listing whose requires is no list of names. Pure: values in, values out."""

from __future__ import annotations

import json

import pytest

from sglstack.attest.provenance import (
    SLSA_PROVENANCE_V1,
    STATEMENT_TYPE,
    BuildIdentity,
    identity_differences,
    provenance_statement,
    statement_identity,
    statement_subjects,
)
from sglstack.inventory.model import Inventory, InventoryError

DIGEST = "sha256:" + "ab" * 32
RECORD = {"stack": "cu130", "target": "runtime", "image_id": "sha256:" + "cd" * 32, "config_hash": "c" * 64,
          "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic"}, "pins": {},
          "base_image": {"name": "debian:bookworm-slim", "digest": "sha256:" + "ef" * 32},
          "lock": {"content_sha256": "1" * 64}, "sglang": {"version": "0.5.9", "git": None},
          "provenance": {"patches": {"kimi": "2" * 64}, "sglstack": {}}}


def _statement(predicate: object = None, subject: object = None) -> bytes:
    doc: dict[str, object] = {"_type": STATEMENT_TYPE, "predicateType": SLSA_PROVENANCE_V1,
                              "subject": subject if subject is not None else [{"digest": {"sha256": "ab" * 32}}]}
    if predicate is not None:
        doc["predicate"] = predicate
    return json.dumps(doc).encode()


@pytest.mark.parametrize("predicate", [
    None,  # no predicate at all
    "x",
    {"buildDefinition": "x"},
    {"buildDefinition": {}},
    {"buildDefinition": {"externalParameters": "x", "resolvedDependencies": {"name": "sglang"}}},
    {"buildDefinition": {"externalParameters": {}, "resolvedDependencies": []}},
    {"buildDefinition": {"resolvedDependencies": ["x", {"name": "lock", "uri": "pkg:x"}]}},
])
def test_a_statement_in_another_shape_names_nothing_rather_than_failing(predicate):
    assert statement_identity(_statement(predicate)) == BuildIdentity(None, None, None)


def test_the_sglang_dependency_is_found_among_the_others_whatever_comes_first():
    body = provenance_statement(RECORD, repository="r", digest=DIGEST)
    deps = json.loads(body)["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert [d["name"] for d in deps] == ["base-image", "lock", "patch:kimi", "sglang"]
    assert statement_identity(body) == BuildIdentity("cu130", "c" * 64, "pkg:pypi/sglang@0.5.9")


def test_a_subject_digest_is_read_at_most_as_long_as_a_sha256_and_a_field_shown_at_most_80():
    assert statement_subjects(_statement(subject=[{"digest": {"sha256": "a" * 70}}])) == ["sha256:" + "a" * 64]
    long = "s" * 100
    assert identity_differences(BuildIdentity("cu130"), BuildIdentity(long)) == [
        f"stack: expected 'cu130', found {'s' * 80!r}"]


def test_an_identity_naming_no_config_or_release_says_unknown():
    assert BuildIdentity("cu130").describe() == "stack 'cu130', config unknown, SGLang unknown"
    assert BuildIdentity("cu130", "c" * 64, "pkg:pypi/sglang@0.5.9").describe() == (
        "stack 'cu130', config cccccccccccc, SGLang pkg:pypi/sglang@0.5.9")


@pytest.mark.parametrize("requires", [["idna", 5], "idna", {"idna": 1}])
def test_a_requires_that_is_not_a_list_of_names_is_refused_in_one_line(requires):
    listing = {"python_distributions": [{"name": "six", "version": "1.16.0", "requires": requires}],
               "debian_packages": []}
    with pytest.raises(InventoryError) as err:
        Inventory.from_listing(listing)
    assert str(err.value) == ("the image's inventory is malformed (a distribution's 'requires' is not a list of "
                              "names)")
    listing["python_distributions"][0]["requires"] = ["Idna", "idna", "Six_X"]
    assert Inventory.from_listing(listing).requires == {"six": ("idna", "six-x")}
