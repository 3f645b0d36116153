"""What a verification reports: its JSON document and its one line, whole, for each shape (bound to a stack
or not, a signed identity or none), and sglstack's own identity inside and outside a git checkout."""

from __future__ import annotations

import subprocess

import pytest

from sglstack import __version__
from sglstack.attest import identity as identity_mod
from sglstack.attest.provenance import BuildIdentity
from sglstack.attest.verify import Verification, verified_line

DIGEST = "sha256:" + "d" * 64
SIGNED = BuildIdentity("cu130", "1a2b3c4d5e6f7890", "pkg:pypi/sglang@0.5.9")
EXPECTED = BuildIdentity("cu130", None, "pkg:pypi/sglang@0.5.9")


def _result(**extra) -> Verification:
    return Verification(image="r/x:1", digest=DIGEST, key_id="0123456789abcdef0123", **extra)


def test_the_report_document_of_a_verification_bound_to_a_stack():
    result = _result(checked=["a", "b"], attestations={"sbom": {"components": 5}}, signed=SIGNED, expected=EXPECTED,
                      skipped=["artifact x: y"])
    assert result.as_dict() == {
        "image": "r/x:1", "digest": DIGEST, "verified": True, "key_id": "0123456789abcdef0123",
        "checked": ["a", "b"], "attestations": {"sbom": {"components": 5}},
        "signed_for": {"stack": "cu130", "config_hash": "1a2b3c4d5e6f7890", "sglang": "pkg:pypi/sglang@0.5.9"},
        "bound_to": {"stack": "cu130", "config_hash": None, "sglang": "pkg:pypi/sglang@0.5.9"},
        "skipped": ["artifact x: y"]}


def test_the_report_document_of_a_digest_only_verification():
    assert _result().as_dict() == {
        "image": "r/x:1", "digest": DIGEST, "verified": True, "key_id": "0123456789abcdef0123", "checked": [],
        "attestations": {}, "signed_for": None, "bound_to": None, "skipped": []}


@pytest.mark.parametrize(("signed", "expected", "line"), [
    (SIGNED, EXPECTED, f"verified: r/x:1 is {DIGEST}, signed by key 0123456789abcdef for stack 'cu130', config "
                       "1a2b3c4d5e6f, SGLang pkg:pypi/sglang@0.5.9"),
    (None, None, f"verified: r/x:1 is {DIGEST}, signed by key 0123456789abcdef for nothing (not bound to a stack: "
                 "give --stack to check it names yours)"),
])
def test_the_verified_line(signed, expected, line):
    assert verified_line("r/x:1", _result(signed=signed, expected=expected)) == line


def test_the_verified_line_keeps_a_reference_on_one_line():
    assert verified_line("r/x:1\nverified: evil", _result(expected=EXPECTED)).count("\n") == 0


def test_sglstack_identity_outside_a_git_checkout(tmp_path, monkeypatch):
    monkeypatch.setattr(identity_mod, "CHECKOUT_DIR", tmp_path)
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": None}


def _git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                   env={"PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd)})


def test_sglstack_identity_in_a_checkout_clean_and_with_local_edits(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("1")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-qm", "c")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    monkeypatch.setattr(identity_mod, "CHECKOUT_DIR", tmp_path)
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": head}
    (tmp_path / "f").write_text("2")
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": f"{head}-dirty"}
    (tmp_path / "untracked").write_text("x")  # untracked files are not local edits of sglstack
    (tmp_path / "f").write_text("1")
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": head}


def test_sglstack_identity_when_git_fails_has_no_commit(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()  # not a repository git can read
    monkeypatch.setattr(identity_mod, "CHECKOUT_DIR", tmp_path)
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": None}
