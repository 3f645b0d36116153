"""What a verification reports: its JSON document and its one line, whole, for each shape (bound to a stack
or not, a signed identity or none), and sglstack's own identity inside and outside a git checkout."""

from __future__ import annotations

import contextlib
from subprocess import run as run_git  # git, not a Python child: mutation runs keep it

import pytest

from sglstack import __version__
from sglstack.attest import store
from sglstack.attest.provenance import BuildIdentity
from sglstack.attest.verify import Verification, verified_line
from sglstack.imagebuild import identity as identity_mod
from sglstack.registry.client import ManifestNotFound

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


def test_the_report_document_of_an_index_verification():
    platforms = [{"platform": "linux/amd64", "verified": True}, {"platform": "linux/arm64", "verified": False}]
    result = _result(checked=["index signature"], platforms=platforms, expected=EXPECTED, skipped=["s: t"])
    assert result.as_dict() == {
        "image": "r/x:1", "digest": DIGEST, "index": True, "verified": False, "key_id": "0123456789abcdef0123",
        "checked": ["index signature"], "platforms": platforms,
        "bound_to": {"stack": "cu130", "config_hash": None, "sglang": "pkg:pypi/sglang@0.5.9"}, "skipped": ["s: t"]}
    assert _result(platforms=platforms[:1]).as_dict()["bound_to"] is None
    assert _result(platforms=platforms[:1]).as_dict()["verified"] is True


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
    run_git(["git", "-C", str(cwd), *args], check=True, capture_output=True,
            env={"PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                 "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd)})


def test_sglstack_identity_of_a_folder_git_refuses_names_no_commit(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()  # there, but not a repository: git fails, and no commit is made up
    monkeypatch.setattr(identity_mod, "CHECKOUT_DIR", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": None}


def test_sglstack_identity_names_no_commit_when_either_git_question_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(identity_mod, "CHECKOUT_DIR", tmp_path)
    _git(tmp_path, "init", "-q")  # no commit yet: `rev-parse HEAD` fails, `status` answers
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": None}
    (tmp_path / "f").write_text("1")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-qm", "c")
    (tmp_path / ".git" / "index").write_bytes(b"not an index")  # `rev-parse HEAD` answers, `status` fails
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": None}


def test_sglstack_identity_in_a_git_checkout_clean_and_with_local_edits(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("1")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-qm", "c")
    head = run_git(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True,
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


# ---- the reference, the build record and the publish-time signing, each failure whole ---------------------

def test_a_bad_reference_is_bad_input_naming_where_it_came_from():
    from sglstack.attest.errors import BadInput
    from sglstack.attest.verify import parse_ref

    for kwargs, key in (({}, "REF"), ({"what": "image"}, "image")):
        with pytest.raises(BadInput) as caught:
            parse_ref("Bad Ref!!", **kwargs)
        assert str(caught.value) == (f"key '{key}': 'Bad Ref!!' is not a valid repository (lowercase path components "
                                     "like 'host:port/team/name')")
        assert caught.value.__suppress_context__
    assert str(parse_ref("r.io/a/b:1")) == "r.io/a/b:1"


def test_verified_reference_reads_the_key_first_and_answers_repo_at_digest(tmp_path, monkeypatch):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from sglstack.attest import verify as verify_mod
    from sglstack.attest.errors import BadInput

    asked: list[tuple] = []
    monkeypatch.setattr(verify_mod.RegistryClient, "from_environment", classmethod(lambda cls, reg: ("client", reg)))

    def verify_image(client, parsed, public, expect):
        asked.append((client, str(parsed), public.public_bytes_raw(), expect))
        return _result(expected=expect)

    monkeypatch.setattr(verify_mod, "verify_image", verify_image)
    missing = tmp_path / "none.pem"
    for kwargs, option in (({}, "--verify-key"), ({"what": "--key"}, "--key")):
        # no key file: refused before the reference is even parsed or the registry asked, naming the option
        with pytest.raises(BadInput) as caught:
            verify_mod.verified_reference("Bad Ref!!", str(missing), **kwargs)
        assert str(caught.value).startswith(f"{option}: cannot read key file '{missing}' (")
    assert asked == []
    key = Ed25519PrivateKey.generate().public_key()
    pem = tmp_path / "pub.pem"
    pem.write_bytes(key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(BadInput, match=r"^key 'image': 'Bad Ref!!' is not a valid repository"):
        verify_mod.verified_reference("Bad Ref!!", str(pem))
    ref, result = verify_mod.verified_reference("r.io/a/b:1", str(pem), expect=EXPECTED)
    assert (ref, result.expected) == (f"r.io/a/b@{DIGEST}", EXPECTED)
    assert asked == [(("client", "r.io"), "r.io/a/b:1", key.public_bytes_raw(), EXPECTED)]


@pytest.mark.parametrize(("text", "line"), [
    (None, "build record {p}: cannot be read (file not found)"),
    (b"{not json", "build record {p}: cannot be read ("),
    (b"[1]", "build record {p}: not a build record"),
    (b'{"stack": "s"}', "build record {p}: not a build record"),
    ("folder", "build record {p}: cannot be read (is a directory, not a build record)"),
])
def test_a_build_record_that_cannot_be_used_is_one_line(tmp_path, text, line):
    from sglstack.attest.errors import AttestationError
    from sglstack.attest.release import read_record

    path = tmp_path / "build.json"
    if text == "folder":
        path.mkdir()
    elif text is not None:
        path.write_bytes(text)
    with pytest.raises(AttestationError) as caught:
        read_record(path)
    assert str(caught.value).startswith(line.format(p=path))
    assert (caught.value.__cause__ is None and caught.value.__context__ is None) or caught.value.__suppress_context__


def test_a_build_record_is_read_whole(tmp_path):
    from sglstack.attest.release import read_record

    path = tmp_path / "build.json"
    path.write_text('{"image_id": "sha256:1", "stack": "s"}')
    assert read_record(path) == {"image_id": "sha256:1", "stack": "s"}


def test_signing_a_published_digest_binds_it_to_the_records_stack_and_config(tmp_path, monkeypatch):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from sglstack.attest import release as release_mod
    from sglstack.config.imageref import parse_image_reference

    record = tmp_path / "build.json"
    record.write_text('{"image_id": "sha256:1", "stack": "cu130", "config_hash": "c0ffee"}')
    key = Ed25519PrivateKey.generate()
    plan = release_mod.AttestPlan(record, key)
    seen: list[tuple] = []
    made_for: list[tuple[str, str]] = []
    monkeypatch.setattr(plan.__class__, "documents",
                        lambda self, repository, digest: made_for.append((repository, digest))
                        or [("sbom", b"s"), ("provenance", b"p"), ("signature", b"x")])

    def ensure_signed(client, repo, digest, signing_key, expect, *, documents):
        seen.append((client, str(repo), digest, signing_key, expect, documents()))
        return "signed"

    monkeypatch.setattr(release_mod, "ensure_signed", ensure_signed)
    repo = parse_image_reference("r.io/a/b:1").repository
    assert plan.sign_published("client", repo, DIGEST) == "signed"
    assert seen == [("client", "r.io/a/b", DIGEST, key, BuildIdentity("cu130", "c0ffee"),
                     [("sbom", b"s"), ("provenance", b"p")])]
    assert made_for == [("r.io/a/b", DIGEST)]  # the documents are made for the published repository and digest


class _Registry:
    """`RegistryClient`'s deletion side: one budget per operation, a manifest deleted once, then not found."""

    timeout_s = 30.0

    def __init__(self, present):
        self.present, self.deleted, self.budgets = set(present), [], []

    @contextlib.contextmanager
    def budget(self, seconds):
        self.budgets.append(seconds)
        yield

    def delete_manifest(self, repo, digest):
        if digest not in self.present:
            raise ManifestNotFound(f"{repo}@{digest}: no such manifest")
        self.present.discard(digest)
        self.deleted.append((repo, digest))


def test_remove_manifests_deletes_each_once_within_one_budget_and_says_what_went():
    registry = _Registry({"sha256:a", "sha256:b"})
    removed = store.remove_manifests(registry, "r/x", ["sha256:a", "sha256:gone", "sha256:a", "sha256:b"])
    assert removed == ["sha256:a", "sha256:b"]  # one already gone is not an error, and not said to be removed
    assert registry.deleted == [("r/x", "sha256:a"), ("r/x", "sha256:b")]
    assert registry.budgets == [30.0]


def test_a_value_someone_attached_is_shown_at_most_80_characters_of_json():
    assert store._shown("x" * 100) == '"' + "x" * 79
    assert store._shown({"a": 1}) == '{"a": 1}'
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    assert store._shown(nested) == "(nested too deeply)"
