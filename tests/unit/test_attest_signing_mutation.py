"""The signing key's reading where the CLI tests (run through `invoke`, which mutation runs deselect) are the
only ones that look (issue 35, mutation of `attest`): what counts as key text, what may be quoted as a path,
the PEM block picked, the key from the environment. In process, with keys made here."""

from __future__ import annotations

import re

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sglstack.attest.errors import BadInput
from sglstack.attest.signing import KEY_ENV, load_public_key, load_signing_key, looks_like_key_text
from sglstack.attest.signing import _shows_as_a_path as shows_as_a_path


def _pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.mark.parametrize(("value", "text"), [
    ("keys/signing.pem", False),
    ("line one\nline two", True),
    ("carriage\rreturn", True),
    ("-----BEGIN PRIVATE KEY-----", True),
    ("-----END PRIVATE KEY-----", True),
    ("\ufeffkeys/signing.pem", True),
    ("k." * 512 + "k", True),  # longer than any path
    ("k." * 512, False),
    ("XX", False),
])
def test_what_is_key_text_and_never_a_path(value, text):
    assert looks_like_key_text(value) is text


@pytest.mark.parametrize(("value", "shown"), [
    ("keys/signing", True),
    ("signing.pem", True),
    ("signing", False),
    ('{"kty": "OKP"}/x', False),
    ("a key.pem", False),
    ("XX/XX.pem", True),
])
def test_what_may_be_quoted_as_a_path(tmp_path, monkeypatch, value, shown):
    monkeypatch.chdir(tmp_path)
    assert shows_as_a_path(value) is shown


def test_a_missing_file_named_unlike_a_path_is_not_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as err:
        load_signing_key(env={KEY_ENV: "not-a-path-but-a-secret"})
    said = str(err.value)
    assert "not-a-path-but-a-secret" not in said
    assert said.startswith(f"{KEY_ENV}: names no file (")
    assert said.endswith("), and is not PEM key text either (not shown: it may be a key in another form; give a "
                         "path, or the PEM)")


def test_the_key_in_the_environment_is_read_as_text_with_a_bom_and_other_blocks_before_it():
    key = Ed25519PrivateKey.generate()
    other = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    loaded = load_signing_key(env={KEY_ENV: "\ufeff" + other + _pem(key)})
    assert loaded.public_key().public_bytes_raw() == key.public_key().public_bytes_raw()


def test_no_key_at_all_is_refused_in_one_line():
    with pytest.raises(BadInput) as err:
        load_signing_key(env={})
    assert str(err.value).startswith("no signing key: pass --signing-key PATH or set ")


def test_a_key_of_another_kind_is_named(tmp_path):
    path = tmp_path / "ec.pem"
    path.write_text(_pem(generate_private_key(SECP256R1())))
    with pytest.raises(BadInput) as err:
        load_signing_key(str(path), env={})
    # the library's class name, without its leading underscore (its wording is the library's, not ours)
    assert re.fullmatch(rf"--signing-key {re.escape(str(path))}: a [A-Za-z]\w* key, not ed25519", str(err.value))


def test_a_public_key_file_holding_only_the_private_key_is_refused(tmp_path):
    path = tmp_path / "verify.pem"
    path.write_text(_pem(Ed25519PrivateKey.generate()))
    with pytest.raises(BadInput) as err:
        load_public_key(str(path))
    assert str(err.value).startswith(f"--verify-key {path}: ")
