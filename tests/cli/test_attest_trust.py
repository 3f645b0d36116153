"""A signature means this stack, this config, this release; only a signed SBOM is shown as signed; every
promote path signs or says --unsigned; malformed attestation artifacts verify nothing and crash nothing.
In process, against the OCI 1.1 registry double (referrers API, or none: the tag scheme)."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from registry_double import RegistryDouble

from sglstack.attest import verify as verify_mod
from sglstack.attest.errors import BadInput, NotVerified
from sglstack.attest.provenance import BuildIdentity, identity_differences, provenance_statement
from sglstack.attest.release import AttestPlan
from sglstack.attest.signing import Attached, key_id, public_pem, sign_envelope, signed_payload
from sglstack.attest.store import KINDS, attach, fallback_tag
from sglstack.attest.verify import verify_image
from sglstack.cli.attest import sbom_command, verify_image_command
from sglstack.cli.deploy import DeployOptions, deploy_command
from sglstack.config.imageref import parse_image_reference
from sglstack.config.matrix import load_matrix
from sglstack.core.jsonreport import JsonReport
from sglstack.inventory.model import Inventory
from sglstack.inventory.sbom import SBOM_FILE, sbom_document
from sglstack.lock.trust import lock_for_build
from sglstack.publish import cleanup_candidates, read_records, records_path, release
from sglstack.publish.digest import publish_digest
from sglstack.publish.history import PublishError
from sglstack.publish.tags import release_tags
from sglstack.registry.client import OCI_MANIFEST, RegistryClient, compute_digest
from sglstack.render.dockerfile import released_config_hash

STACKS = Path(__file__).resolve().parents[1] / "fixtures" / "stacks-cpu.yaml"
CPU = load_matrix(STACKS).get("cpu-test")
CONFIG = released_config_hash(CPU, lock_for_build(STACKS, CPU))
OLD_CONFIG = "0" * 64
WHEN = dt.datetime(2026, 12, 3, 19, 0, tzinfo=dt.UTC)
DAY = dt.date(2026, 12, 3)
KEY = Ed25519PrivateKey.generate()
KID = key_id(KEY.public_key())[:16]
REPO = "team/img"
LISTING = {"python": "3.11.2", "python_distributions": [{"name": "six", "version": "1.16.0"}],
           "debian_packages": [{"name": "bash", "version": "5.2.15-2+b7", "arch": "amd64"}]}
BOMB = b"[" * 50_000 + b"]" * 50_000  # JSON nesting far past what the parser recurses through
CAP = 150_000  # the document size cap these tests set: the bomb is under it, HUGE over it
HUGE = b" " * 200_000


@pytest.fixture
def reg():
    registry = RegistryDouble()
    yield registry
    registry.close()


@pytest.fixture
def pub(tmp_path) -> str:
    path = tmp_path / "release.pub"
    path.write_bytes(public_pem(KEY))
    return str(path)


def _record(stack: str = "cpu-test", config_hash: str = CONFIG) -> dict:
    return {"stack": stack, "target": "runtime", "image_id": "sha256:" + "ab" * 32, "config_hash": config_hash,
            "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic"}, "pins": {},
            "base_image": {"name": "debian:bookworm-slim", "digest": None}, "sglang": {"version": "0.5.9", "git": None},
            "lock": None, "provenance": {"patches": {}, "sglstack": {"version": "0.1.0", "commit": None}}}


def _image(client: RegistryClient, marker: str, tag: str, created: str = "2026-12-03T00:00:00Z") -> tuple[str, str]:
    """An image manifest of its own (config differs by `marker`) under `tag`: (digest, config digest)."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "created": created, "config": {"Labels": {}},
                         "rootfs": {"type": "layers", "diff_ids": []}, "marker": marker}).encode()
    config_digest = client.put_blob(REPO, config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config)},
        "layers": []}).encode()
    return client.put_manifest(REPO, tag, manifest, OCI_MANIFEST), config_digest


def _documents(reg, digest: str, config: str, *, signed: bool = True, **record) -> list[tuple[str, bytes]]:
    sbom = sbom_document(Inventory.from_listing(LISTING), image_name="img", image_id=config, created=WHEN)
    provenance = provenance_statement(_record(**record), repository=f"{reg.host}/{REPO}", digest=digest)
    docs = [("sbom", sbom), ("provenance", provenance)]
    if signed:
        attached = [Attached(kind, KINDS[kind], compute_digest(body), len(body)) for kind, body in docs]
        docs.append(("signature", sign_envelope(KEY, signed_payload(digest, attached))))
    return docs


def _released(reg, client, marker: str, tag: str, *, signed: bool = True, **record) -> str:
    digest, config = _image(client, marker, tag)
    attach(client, REPO, digest, _documents(reg, digest, config, signed=signed, **record))
    return digest


def _ref(reg, what: str) -> str:
    return f"{reg.host}/{REPO}{'@' if what.startswith('sha256:') else ':'}{what}"


# ---- a signature binds the stack, its config hash and its SGLang release ---------------------------------

def test_the_one_rule_names_each_field_that_differs_expected_then_found():
    expected = BuildIdentity("cpu-test", "a" * 64, "pkg:pypi/sglang@0.5.9")
    assert identity_differences(expected, BuildIdentity("cpu-test", "a" * 64, "pkg:pypi/sglang@0.5.9")) == []
    assert identity_differences(expected, BuildIdentity("cu130", "b" * 64, None)) == [
        "stack: expected 'cpu-test', found 'cu130'",
        f"config hash: expected '{'a' * 64}', found '{'b' * 64}'",
        "SGLang release: expected 'pkg:pypi/sglang@0.5.9', found nothing"]
    assert identity_differences(BuildIdentity("cpu-test"), BuildIdentity("cpu-test", "b" * 64, "x")) == []


def test_a_moved_tag_to_another_stacks_or_an_old_release_is_refused_naming_the_field(reg):
    client = RegistryClient(reg.host)
    current = _released(reg, client, "current", "cpu-test")
    other = _released(reg, client, "other", "other", stack="cpu-test-other", config_hash="1" * 64)
    old = _released(reg, client, "old", "old", config_hash=OLD_CONFIG)
    expect = BuildIdentity.of_stack(CPU, CONFIG)
    assert expect == BuildIdentity("cpu-test", CONFIG, "pkg:pypi/sglang@0.5.9")
    ref = parse_image_reference(_ref(reg, "cpu-test"))
    result = verify_image(client, ref, KEY.public_key(), expect)
    assert result.signed == expect and result.checked[-1] == f"the signed provenance names {expect.describe()}"
    for moved_to, line in (
            (other, f"stack: expected 'cpu-test', found 'cpu-test-other'; config hash: expected '{CONFIG}', "
                    f"found '{'1' * 64}'"),
            (old, f"config hash: expected '{CONFIG}', found '{OLD_CONFIG}'")):
        manifest = client.get_manifest(REPO, moved_to)
        client.put_manifest(REPO, "cpu-test", manifest.body, manifest.media_type)
        with pytest.raises(NotVerified) as err:
            verify_image(client, ref, KEY.public_key(), expect)
        assert str(err.value) == f"{_ref(reg, moved_to)}: signed for another build: {line}"
        assert verify_image(client, ref, KEY.public_key()).digest == moved_to  # the digest alone still verifies
    assert current != other != old


def test_verify_image_binds_with_stack_and_says_what_the_signature_names(reg, pub, tmp_path, capsys):
    client = RegistryClient(reg.host)
    digest = _released(reg, client, "current", "cpu-test")
    ref = _ref(reg, "cpu-test")
    assert verify_image_command(ref, key=pub, stack="cpu-test", stacks_file=str(STACKS)) == 0
    named = f"stack 'cpu-test', config {CONFIG[:12]}, SGLang pkg:pypi/sglang@0.5.9"
    assert capsys.readouterr().out.splitlines()[-1] == f"verified: {ref} is {digest}, signed by key {KID} for {named}"
    report = tmp_path / "report.json"
    assert verify_image_command(ref, key=pub, as_json=JsonReport(path=report)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"verified: {ref} is {digest}, signed by key {KID} for {named} (not bound to a stack: give --stack to "
        f"check it names yours)")
    data = json.loads(report.read_text())
    assert data["signed_for"] == {"stack": "cpu-test", "config_hash": CONFIG, "sglang": "pkg:pypi/sglang@0.5.9"}
    assert data["bound_to"] is None
    with pytest.raises(NotVerified) as err:
        verify_image_command(ref, key=pub, stack="cpu-test-pin-drift", stacks_file=str(STACKS),
                             as_json=JsonReport(path=report))
    assert err.value.exit_code == 1
    assert str(err.value).startswith(f"{ref}: NOT verified: {_ref(reg, digest)}: signed for another build: "
                                     f"stack: expected 'cpu-test-pin-drift', found 'cpu-test'; config hash: ")
    assert json.loads(report.read_text())["verified"] is False


@pytest.mark.parametrize("target", ["compose", "k8s"])
def test_deploy_verify_key_refuses_another_stacks_signed_image_before_anything(reg, pub, tmp_path, target,
                                                                              monkeypatch):
    # kubectl and its context are found first (no network), then the image is verified: the kubectl double
    # gives a context, and its log shows nothing was applied.
    doubles = Path(__file__).parents[1] / "doubles" / "kubectl"
    monkeypatch.setenv("PATH", f"{doubles}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KUBECTL_DOUBLE_STATE", str(tmp_path / "kube"))
    monkeypatch.setenv("KUBECTL_DOUBLE_CONTEXT", "kind-sglstack")
    client = RegistryClient(reg.host)
    other = _released(reg, client, "other", "cpu-test", stack="cpu-test-other", config_hash="1" * 64)
    options = DeployOptions(stack="cpu-test", stacks_file=str(STACKS), image=_ref(reg, "cpu-test"), gpus=0,
                            verify_key=pub, on=target)
    with pytest.raises(NotVerified) as err:
        deploy_command(options, build_root=tmp_path / "build", say=lambda line: None)
    assert str(err.value) == (f"{_ref(reg, other)}: signed for another build: stack: expected 'cpu-test', found "
                              f"'cpu-test-other'; config hash: expected '{CONFIG}', found '{'1' * 64}'")
    assert not (tmp_path / "build").exists()
    kubectl_calls = tmp_path / "kube" / "argv.jsonl"
    assert not any("apply" in line for line in (kubectl_calls.read_text().splitlines()
                                                 if kubectl_calls.is_file() else []))


def test_render_verify_key_refuses_an_old_release_under_the_tag(reg, pub, tmp_path):
    from clirun import run_invoke  # starts a process: only this test needs it

    client = RegistryClient(reg.host)
    old = _released(reg, client, "old", "cpu-test", config_hash=OLD_CONFIG)
    out = tmp_path / "out"
    proc = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(STACKS), "--out", str(out), "--image",
                      _ref(reg, "cpu-test"), "--verify-key", pub, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == (f"error: {_ref(reg, old)}: signed for another build: config hash: expected "
                                   f"'{CONFIG}', found '{OLD_CONFIG}'")
    assert not out.exists()


# ---- the SBOM shown is the signed one, or it says it is not --------------------------------------------

def test_sbom_with_a_key_shows_only_the_signed_sbom_and_without_says_unsigned(reg, pub, tmp_path, capsys):
    client = RegistryClient(reg.host)
    digest, config = _image(client, "current", "cpu-test")
    docs = _documents(reg, digest, config)
    attach(client, REPO, digest, docs)
    evil = sbom_document(Inventory.from_listing({**LISTING, "debian_packages": []}), image_name="img",
                         image_id=config, created=WHEN)
    attach(client, REPO, digest, [("sbom", evil)])  # anyone who can push can attach one
    ref = _ref(reg, "cpu-test")
    out = tmp_path / "sbom.json"
    assert sbom_command(ref, key=pub, as_json=JsonReport(path=out)) == 0
    signed = f"signed: covered by the signature of key {KID} on {_ref(reg, digest)}"
    assert capsys.readouterr().err.strip() == (f"sbom: {ref}: 2 components (1 Python, 1 Debian), attached; {signed}; "
                                               f"written to {out}")
    doc = json.loads(out.read_text())
    assert doc["serialNumber"] == json.loads(docs[0][1])["serialNumber"] and len(doc["components"]) == 2
    assert doc["metadata"]["properties"][-1] == {"name": "sglstack:signature", "value": signed}
    assert sbom_command(ref, as_json=JsonReport(path=out)) == 0
    line = capsys.readouterr().err.strip()
    unsigned = ("unsigned: not checked against any signature (anyone who can push may attach an SBOM; give "
                "--verify-key PUB to show only a signed one)")
    assert line.endswith(f", attached to {_ref(reg, digest)}; {unsigned}; written to {out}"), line
    assert json.loads(out.read_text())["metadata"]["properties"][-1]["value"] == unsigned


def test_sbom_with_a_key_of_an_unsigned_image_shows_nothing(reg, pub, tmp_path, capsys):
    client = RegistryClient(reg.host)
    digest = _released(reg, client, "current", "cpu-test", signed=False)
    ref = _ref(reg, "cpu-test")
    with pytest.raises(NotVerified) as err:
        sbom_command(ref, key=pub)
    assert err.value.exit_code == 1
    assert str(err.value) == (f"{ref}: no SBOM shown: {_ref(reg, digest)}: no signature attached (unsigned, or its "
                              f"signature was deleted)")
    assert capsys.readouterr().out == ""
    with pytest.raises(BadInput) as bad:
        sbom_command(ref, key=pub, generate=True)
    assert str(bad.value) == "sbom: give --verify-key (the signed SBOM) or --generate (listed from the image), not both"


# ---- a release is signed or explicitly --unsigned, on every promote path --------------------------------

def test_publish_digest_needs_a_key_or_unsigned_before_any_registry_call(reg, tmp_path):
    digest = "sha256:" + "a" * 64
    with pytest.raises(BadInput) as err:
        publish_digest(CPU, digest, registry=f"{reg.host}/{REPO}", config_hash=CONFIG, build_dir=tmp_path)
    assert err.value.exit_code == 2
    assert str(err.value) == ("stack 'cpu-test': publish needs --signing-key (or SGLSTACK_SIGNING_KEY) to sign the "
                              "release, or --unsigned to promote it without a signature")
    with pytest.raises(BadInput, match=r"^stack 'cpu-test': give --signing-key or --unsigned, not both$"):
        publish_digest(CPU, digest, key=KEY, unsigned=True, registry=f"{reg.host}/{REPO}", build_dir=tmp_path)
    assert reg.requests == []


def test_publish_digest_with_a_key_signs_an_unsigned_release_before_the_tags_move(reg, tmp_path):
    client = RegistryClient(reg.host)
    digest = _released(reg, client, "current", "cand", signed=False)
    with pytest.raises(NotVerified, match="no signature attached"):
        verify_image(client, parse_image_reference(_ref(reg, digest)), KEY.public_key())
    assert publish_digest(CPU, digest, key=KEY, registry=f"{reg.host}/{REPO}", config_hash=CONFIG,
                          build_dir=tmp_path, today=DAY) == 0
    tags = release_tags(CPU, CONFIG, DAY)
    for tag in tags.release:
        ref = parse_image_reference(_ref(reg, tag))
        assert verify_image(client, ref, KEY.public_key(), BuildIdentity.of_stack(CPU, CONFIG)).digest == digest
    events = [r["event"] for r in read_records(records_path(tmp_path))]
    assert events == ["attested", "published", "published", "published"]


def test_publish_digest_with_a_key_refuses_what_it_cannot_sign_and_moves_no_tag(reg, tmp_path):
    client = RegistryClient(reg.host)
    bare, _ = _image(client, "bare", "bare")
    other = _released(reg, client, "other", "other", signed=False, stack="cpu-test-other")
    for digest in (bare, other):
        with pytest.raises(PublishError) as err:
            publish_digest(CPU, digest, key=KEY, registry=f"{reg.host}/{REPO}", config_hash=CONFIG,
                           build_dir=tmp_path, today=DAY)
        assert str(err.value) == (
            f"stack 'cpu-test': {_ref(reg, digest)}: not signed by key {KID} ({_ref(reg, digest)}: no signature "
            f"attached (unsigned, or its signature was deleted)), and no SBOM and provenance of stack 'cpu-test', "
            f"config {CONFIG[:12]}, SGLang unknown are attached to sign: release it with `invoke build --push "
            f"--signing-key`, or promote it with --unsigned; no tag moved")
    assert not set(release_tags(CPU, CONFIG, DAY).release) & set(client.list_tags(REPO))
    assert read_records(records_path(tmp_path)) == []


def test_build_push_key_of_a_config_published_unsigned_signs_it(reg, tmp_path):
    client = RegistryClient(reg.host)
    immutable = release_tags(CPU, CONFIG, DAY).immutable
    digest = _released(reg, client, "current", immutable, signed=False)
    record_path = tmp_path / "record.json"
    record_path.write_text(json.dumps(_record()))
    (tmp_path / SBOM_FILE).write_bytes(b"{}")  # not the record's SBOM: what is attached is what gets signed
    plan = AttestPlan(record_path, KEY)
    result = release(CPU, image_ref="unused:local", config_hash=CONFIG, registry=f"{reg.host}/{REPO}",
                     build_dir=tmp_path, today=DAY, smoke=lambda *a: (True, {}), attest=plan,
                     sign_published=plan.sign_published)
    assert result.exit_code == 0 and result.digest is None  # nothing pushed: it was published
    verified = verify_image(client, parse_image_reference(_ref(reg, immutable)), KEY.public_key(),
                            BuildIdentity.of_stack(CPU, CONFIG))
    assert verified.digest == digest
    last = read_records(records_path(tmp_path))[-1]
    assert (last["event"], last["digest"], last["summary"]) == (
        "attested", digest, f"signed the SBOM and provenance attached to it: {_ref(reg, digest)}, signed by key {KID}")


# ---- malformed attestation artifacts verify nothing and crash nothing ------------------------------------

def _artifact(kind: str, subject, layers) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": KINDS[kind],
                       "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": compute_digest(b"{}"),
                                  "size": 2}, "layers": layers, "subject": subject}).encode()


def _plant_malformed(reg, client, digest: str) -> dict[str, str]:
    """Every malformed shape, found by the tag scheme and by the referrers API: manifest digest -> reason."""
    subject = {"mediaType": OCI_MANIFEST, "digest": digest, "size": 1}
    bomb_blob = client.put_blob(REPO, BOMB)
    huge_blob = client.put_blob(REPO, HUGE)
    good_layer = {"mediaType": KINDS["signature"], "digest": bomb_blob, "size": len(BOMB)}
    planted = {
        # by tag: a string subject, a manifest that is not JSON, a manifest nested past the parser
        reg.store(REPO, _artifact("signature", digest, [good_layer]), OCI_MANIFEST,
                  fallback_tag(digest, "signature")): "its subject is not a descriptor with a digest",
        reg.store(REPO, b"not json", OCI_MANIFEST, fallback_tag(digest, "sbom")):
            f"answered HTTP 200 with a body that is not JSON ({OCI_MANIFEST}, 8 bytes)",
        reg.store(REPO, BOMB, OCI_MANIFEST, fallback_tag(digest, "provenance")):
            f"answered HTTP 200 with a body that is not JSON ({OCI_MANIFEST}, {len(BOMB)} bytes)",
        # by the referrers API: no layer, an odd layer, a wrong media type, an absurd size
        reg.store(REPO, _artifact("signature", subject, []), OCI_MANIFEST): "its layers are not one descriptor: []",
        reg.store(REPO, _artifact("sbom", subject, ["x"]), OCI_MANIFEST): 'its layers are not one descriptor: ["x"]',
        reg.store(REPO, _artifact("sbom", subject, [{**good_layer, "mediaType": "text/plain"}]), OCI_MANIFEST):
            f"its layer's media type 'text/plain' is not {KINDS['sbom']}",
        reg.store(REPO, _artifact("provenance", subject, [{"mediaType": KINDS["provenance"], "digest": bomb_blob,
                                                           "size": 10**12}]), OCI_MANIFEST):
            "its layer's size 1000000000000 is not a number of bytes up to 33554432",
    }
    # signatures in the right shape whose blobs are a JSON bomb and a blob over the (test's) size cap
    reg.store(REPO, _artifact("signature", subject, [good_layer]), OCI_MANIFEST)
    reg.store(REPO, _artifact("signature", subject, [{**good_layer, "digest": huge_blob, "size": 10}]), OCI_MANIFEST)
    return planted


def test_malformed_artifacts_are_skipped_each_with_a_reason_and_a_valid_signature_still_verifies(
        reg, monkeypatch):
    monkeypatch.setattr(verify_mod, "MAX_DOCUMENT_BYTES", CAP)
    client = RegistryClient(reg.host)
    digest = _released(reg, client, "current", "cpu-test")
    planted = _plant_malformed(reg, client, digest)
    ref = parse_image_reference(_ref(reg, "cpu-test"))
    result = verify_image(client, ref, KEY.public_key(), BuildIdentity.of_stack(CPU, CONFIG))
    shapes = [line for line in result.skipped if not line.startswith("signature ")]
    assert len(shapes) == len(planted)
    for line in shapes:
        manifest = line.removeprefix("artifact ")[:19]
        want = next(reason for d, reason in planted.items() if d.startswith(manifest))
        assert line.endswith(want) and line.count("\n") == 0, line


def test_with_only_malformed_signatures_the_refusal_is_one_line(reg, monkeypatch):
    monkeypatch.setattr(verify_mod, "MAX_DOCUMENT_BYTES", CAP)
    client = RegistryClient(reg.host)
    digest, config = _image(client, "current", "cpu-test")
    attach(client, REPO, digest, _documents(reg, digest, config, signed=False))
    _plant_malformed(reg, client, digest)
    with pytest.raises(NotVerified) as err:
        verify_image(client, parse_image_reference(_ref(reg, "cpu-test")), KEY.public_key())
    huge = compute_digest(HUGE)
    assert str(err.value) in {  # the last one tried says why: which is last goes by the artifacts' digests
        "the signature is not a DSSE envelope this tool wrote (nested more than 64 levels deep)",
        f"the signature {huge[:19]} cannot be read: registry {reg.host}: GET blob {REPO}@{huge}: 200000 bytes, "
        f"over the {CAP}-byte limit"}


def test_cleanup_removes_a_dropped_candidate_beside_malformed_artifacts(reg, capsys):
    client = RegistryClient(reg.host)
    candidate = f"candidate-cpu-test-{CONFIG[:12]}"
    digest, config = _image(client, "dropped", candidate, created="2020-01-01T00:00:00Z")
    attach(client, REPO, digest, _documents(reg, digest, config))
    planted = _plant_malformed(reg, client, digest)
    removed = cleanup_candidates([CPU], registry=f"{reg.host}/{REPO}", older_than_days=1,
                                 now=dt.datetime(2026, 12, 4, tzinfo=dt.UTC))
    assert removed == [_ref(reg, candidate)]
    assert client.manifest_digest(REPO, digest) is None
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == len(planted) and all(
        w.startswith(f"warning: {_ref(reg, candidate)}: left an attestation artifact that is not one of ours: ")
        for w in warnings)


@pytest.mark.parametrize("status", [400, 404, 405, 501])
def test_a_registry_refusing_the_referrers_api_falls_back_to_the_tag_scheme(reg, status):
    reg.referrers_status, reg.subject_header = status, False
    client = RegistryClient(reg.host)
    digest, config = _image(client, "current", "cpu-test")
    pushed = attach(client, REPO, digest, _documents(reg, digest, config))
    assert not pushed.referrers_api and pushed.tags == [fallback_tag(digest, k) for k in KINDS]
    result = verify_image(client, parse_image_reference(_ref(reg, "cpu-test")), KEY.public_key(),
                          BuildIdentity.of_stack(CPU, CONFIG))
    assert result.digest == digest and result.skipped == []


def test_a_blob_over_the_cap_is_refused_without_reading_it_whole(reg):
    client = RegistryClient(reg.host)
    digest = client.put_blob(REPO, b"x" * 5000)
    assert client.get_blob(REPO, digest, max_bytes=5000) == b"x" * 5000
    with pytest.raises(Exception) as err:
        client.get_blob(REPO, digest, max_bytes=4999)
    assert str(err.value) == f"registry {reg.host}: GET blob {REPO}@{digest}: 5000 bytes, over the 4999-byte limit"


def test_a_registry_error_body_is_read_as_one_short_line_whatever_its_shape():
    import requests

    from sglstack.registry.transport import error_detail

    def answer(body: bytes) -> requests.Response:
        resp = requests.Response()
        resp.status_code, resp.reason, resp._content = 400, "Bad Request", body
        return resp

    assert error_detail(answer(BOMB)) == "Bad Request"
    assert error_detail(answer(b'{"errors": {"0": 1}}')) == "Bad Request"
    assert error_detail(answer(b'{"errors": ["x"]}')) == "Bad Request"
    multi = json.dumps({"errors": [{"code": "DENIED", "message": "first\nsecond"}]}).encode()
    assert error_detail(answer(multi)) == "DENIED: first"


def test_what_a_provenance_names_is_read_back_escaped_and_short():
    from sglstack.attest.provenance import statement_identity

    record = {**_record(stack="evil\x1b[2J\nstack"), "config_hash": "c" * 300}
    found = statement_identity(provenance_statement(record, repository="r", digest="sha256:" + "a" * 64))
    assert found == BuildIdentity("evil\\x1b[2J\\nstack", "c" * 200, "pkg:pypi/sglang@0.5.9")


def test_invoke_publish_without_a_key_or_unsigned_is_one_line_exit_2(tmp_path):
    from clirun import run_invoke  # starts a process

    env = {"SGLSTACK_SIGNING_KEY": "", "SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    args = ("publish", "--stack", "cpu-test", "--stacks-file", str(STACKS), "--digest", "sha256:" + "a" * 64)
    proc = run_invoke(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: stack 'cpu-test': publish needs --signing-key (or SGLSTACK_SIGNING_KEY) to "
                                   "sign the release, or --unsigned to promote it without a signature")
    both = run_invoke(*args, "--signing-key", "k.pem", "--unsigned", cwd=tmp_path, env=env)
    assert both.returncode == 2
    assert both.stderr.strip() == "error: stack 'cpu-test': give --signing-key or --unsigned, not both"
    assert not (tmp_path / "build").exists()


def test_invoke_publish_index_without_a_key_or_unsigned_is_one_line_exit_2(tmp_path):
    from clirun import REPO, run_invoke  # starts a process

    env = {"SGLSTACK_SIGNING_KEY": ""}
    args = ("publish-index", "--stack", "pypi-cu130-gb", "--stacks-file", str(REPO / "stacks.yaml"), "--tag", "t",
            "--registry", "127.0.0.1:1/never/asked", "--platform-digest", "linux/amd64=sha256:" + "a" * 64,
            "--platform-digest", "linux/arm64=sha256:" + "b" * 64)
    proc = run_invoke(*args, cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        "error: stack 'pypi-cu130-gb': publish-index needs --signing-key (or SGLSTACK_SIGNING_KEY) to sign the index "
        "and each platform's image, or --unsigned to write it without a signature"))
    both = run_invoke(*args, "--signing-key", "k.pem", "--unsigned", cwd=tmp_path, env=env)
    assert (both.returncode, both.stderr.strip()) == (
        2, "error: stack 'pypi-cu130-gb': give --signing-key or --unsigned, not both")


def test_a_signed_manifest_without_a_config_is_refused_in_one_line(reg):
    client = RegistryClient(reg.host)
    odd = reg.store(REPO, json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode(),
                    OCI_MANIFEST, "odd")
    attach(client, REPO, odd, _documents(reg, odd, "sha256:" + "c" * 64))
    with pytest.raises(NotVerified) as err:
        verify_image(client, parse_image_reference(_ref(reg, "odd")), KEY.public_key())
    assert str(err.value) == f"{_ref(reg, odd)}: not an image manifest (no config descriptor)"


_WHAT = "GET referrers team/img@"


@pytest.mark.parametrize(("body", "content_type", "why"), [
    (b"<html><body>Not here</body></html>", "text/html", "answered HTTP 200 with a body that is not JSON (text/html, "
                                                        "34 bytes)"),
    (b'{"manifests": {}}', "application/vnd.oci.image.index.v1+json", "answered JSON without a list of manifests"),
    (b'{"manifests": ["sha256:x"]}', "application/vnd.oci.image.index.v1+json",
     "answered JSON without a list of manifests"),
    (b"[]", "application/json", "answered JSON without a list of manifests"),
    (BOMB, "application/json", "answered HTTP 200 with a body that is not JSON (application/json, 100000 bytes)"),
    (b" " * (4 * 1024 * 1024 + 1), "application/json", "over the 4194304-byte limit"),
], ids=["html", "manifests-object", "manifests-strings", "array", "bomb", "over-cap"])
def test_a_referrers_answer_that_is_no_index_falls_back_to_the_tag_scheme(reg, body, content_type, why):
    """A proxy answering 200 with its HTML page made every attested image unverifiable (and cleanup fail);
    an answer of any size was read whole."""
    reg.subject_header = False  # attached by the tag scheme, as on a registry without the API
    client = RegistryClient(reg.host)
    digest, config = _image(client, "current", "cpu-test")
    attach(client, REPO, digest, _documents(reg, digest, config))
    reg.referrers_answer = (body, content_type)
    result = verify_image(client, parse_image_reference(_ref(reg, "cpu-test")), KEY.public_key(),
                          BuildIdentity.of_stack(CPU, CONFIG))
    assert result.digest == digest
    [line] = result.skipped
    start = f"registry {reg.host}: {_WHAT}{digest}"
    assert line.startswith(start) and line.endswith(f"{why}; read the tag scheme only"), line
    assert len(line) < 300


def test_cleanup_removes_a_dropped_candidate_when_the_referrers_answer_is_html(reg, capsys):
    reg.subject_header = False
    client = RegistryClient(reg.host)
    candidate = f"candidate-cpu-test-{CONFIG[:12]}"
    digest, config = _image(client, "dropped", candidate, created="2020-01-01T00:00:00Z")
    attach(client, REPO, digest, _documents(reg, digest, config))
    reg.referrers_answer = (b"<html>login</html>", "text/html")
    removed = cleanup_candidates([CPU], registry=f"{reg.host}/{REPO}", older_than_days=1,
                                 now=dt.datetime(2026, 12, 4, tzinfo=dt.UTC))
    assert removed == [_ref(reg, candidate)]
    assert client.manifest_digest(REPO, digest) is None
    assert [client.manifest_digest(REPO, fallback_tag(digest, k)) for k in KINDS] == [None] * len(KINDS)
    [warning] = capsys.readouterr().err.strip().splitlines()
    assert warning.endswith(f"{_WHAT}{digest} answered HTTP 200 with a body that is not JSON (text/html, 18 "
                            "bytes); read the tag scheme only"), warning
