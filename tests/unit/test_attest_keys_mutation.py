"""Keys and co-signatures where the other attest tests never look (issue 35, mutation of `attest`): a base64 body
split over short lines or after a byte-order mark, key text that is not ASCII or not even UTF-8 (an environment
holding undecodable bytes), a public key file of only a base64 body, and envelopes merged with others that are
malformed, over another payload or not JSON. In process, with keys made here."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sglstack.attest.errors import BadInput
from sglstack.attest.signing import KEY_ENV, cosigned, key_id, load_public_key, load_signing_key, sign_envelope

KEY = Ed25519PrivateKey.generate()
BODY_LINE = ("only the base64 body of a key, without its '-----BEGIN {kind}-----' and '-----END' lines: give the "
             "whole PEM")


def _refused(value: str) -> str:
    with pytest.raises(BadInput) as err:
        load_signing_key(env={KEY_ENV: value})
    return str(err.value)


def _body() -> str:
    pem = KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return "".join(pem.splitlines()[1:-1])


def test_a_base64_body_after_a_byte_order_mark_is_named_as_a_body():
    assert _refused("\ufeff" + _body() + "\n") == f"{KEY_ENV}: " + BODY_LINE.format(kind="PRIVATE KEY")


def test_base64_lines_shorter_than_a_key_together_are_no_body():
    # 36 letters over two lines: under the 40 of the shortest body (joined with nothing between them)
    assert _refused("A" * 18 + "\n" + "A" * 18) == f"{KEY_ENV}: not a PEM private key"
    assert _refused("A" * 20 + "\n" + "A" * 20) == f"{KEY_ENV}: " + BODY_LINE.format(kind="PRIVATE KEY")


@pytest.mark.parametrize("value", [
    "cl\u00e9\nnot a key",  # not ASCII: the body check reads it with replacement characters
    "-----BEGIN PRIVATE KEY-----\n\udcff\udcfe",  # undecodable bytes the environment kept as surrogates
])
def test_key_text_that_is_not_ascii_or_not_utf8_is_refused_in_one_line(value):
    assert _refused(value) == f"{KEY_ENV}: not a PEM private key"


def test_a_public_key_file_of_only_a_base64_body_is_named_with_its_path(tmp_path):
    pem = KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    path = tmp_path / "release.pub"
    path.write_text("".join(pem.splitlines()[1:-1]) + "\n")
    with pytest.raises(BadInput) as err:
        load_public_key(str(path))
    assert str(err.value) == f"--verify-key {path}: " + BODY_LINE.format(kind="PUBLIC KEY")
    path.write_text(pem)
    assert key_id(load_public_key(str(path))) == key_id(KEY.public_key())


def _envelope(key: Ed25519PrivateKey, payload: bytes = b'{"_type":"x"}') -> bytes:
    return sign_envelope(key, payload)


def _keyids(envelope: bytes) -> list[str]:
    return [s["keyid"] for s in json.loads(envelope)["signatures"]]


def test_each_other_envelope_is_weighed_on_its_own_and_the_merge_is_compact_and_sorted():
    mine, two, three = KEY, Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    others = [_envelope(three, b'{"_type":"y"}'),  # another payload: passed over, the next still read
              b"not json",  # unreadable: passed over, the next still read
              _envelope(two)]
    merged = cosigned(_envelope(mine), others)
    assert _keyids(merged) == sorted([key_id(mine.public_key()), key_id(two.public_key())])
    assert merged == json.dumps(json.loads(merged), sort_keys=True, separators=(",", ":")).encode()
    assert b" " not in merged and b'"payloadType"' in merged


def test_a_signature_that_is_not_strict_base64_is_left_out_with_the_rest_of_its_envelope():
    other = json.loads(_envelope(Ed25519PrivateKey.generate()))
    other["signatures"] = [{"keyid": "junk", "sig": "abcd!"}, *other["signatures"]]  # "abcd" once "!" is dropped
    merged = cosigned(_envelope(KEY), [json.dumps(other).encode()])
    assert _keyids(merged) == [key_id(KEY.public_key())]
    assert base64.b64decode(json.loads(merged)["signatures"][0]["sig"], validate=True)


def test_a_key_file_with_two_private_keys_is_refused_naming_their_types(tmp_path):
    """An OpenSSH key before a PKCS#8 one: which signs is not guessed (the parser alone would take the second)."""
    pkcs8 = KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()).decode()
    openssh = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()).decode()
    path = tmp_path / "two.pem"
    path.write_text(openssh + pkcs8)
    with pytest.raises(BadInput) as err:
        load_signing_key(str(path))
    assert str(err.value) == (f"--signing-key {path}: holds 2 private key blocks ('OPENSSH PRIVATE KEY', "
                              "'PRIVATE KEY'): give a file with one")
    assert "BEGIN" not in str(err.value) and pkcs8.splitlines()[1] not in str(err.value)
    path.write_text("Bag Attributes\n" + pkcs8)  # one key, lines around it: still that key
    assert key_id(load_signing_key(str(path)).public_key()) == key_id(KEY.public_key())


def test_a_public_key_file_with_two_keys_is_refused(tmp_path):
    pems = [k.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            for k in (KEY, Ed25519PrivateKey.generate())]
    path = tmp_path / "two.pub"
    path.write_bytes(b"".join(pems))
    with pytest.raises(BadInput, match=r"holds 2 public key blocks \('PUBLIC KEY', 'PUBLIC KEY'\): give a file"):
        load_public_key(str(path))
