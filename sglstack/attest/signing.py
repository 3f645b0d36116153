"""The signature: what it covers, and ed25519 signing and checking in a DSSE envelope (pure, no I/O
beyond reading the key file the user names).

The signed payload names the image manifest digest and, for each attestation, its kind, media type,
digest and size: a signature over it vouches for exactly that image and exactly those documents, and
for nothing else (no tag, no repository: the image verifies by digest wherever it is copied). The
envelope is DSSE (the in-toto/Sigstore envelope): the signature covers PAE(payloadType, payload).

The private key comes from `--signing-key PATH` or SGLSTACK_SIGNING_KEY (a path, or the PEM itself) and is
only ever held in memory: a value that looks like key text is never opened as a path, and no message
quotes it (`looks_like_key_text`); a key file is read only if regular and small (`read_small_file`).
Keyless signing (Sigstore: an OIDC identity and the Rekor log) needs services these machines cannot
reach; it would be a second envelope signer, not a change of payload.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..core.credentials import SIGNING_KEY_ENV
from ..core.errors import one_line
from ..core.inputs import UnreadableFile, loads, read_small_file
from .errors import BadInput, NotVerified

KEY_ENV = SIGNING_KEY_ENV
PAYLOAD_TYPE = "application/vnd.sglstack.attestations.v1+json"
SIGNATURE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
PAYLOAD_KIND = "https://sglstack.dev/signed-attestations/v1"


@dataclass(frozen=True)
class Attached:
    """One attestation document as stored: the signature names it by these."""

    kind: str  # "sbom" or "provenance"
    media_type: str
    digest: str
    size: int

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "mediaType": self.media_type, "digest": self.digest, "size": self.size}


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the signature really covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def signed_payload(image_digest: str, attached: Sequence[Attached]) -> bytes:
    return json.dumps({"_type": PAYLOAD_KIND, "image": {"digest": image_digest},
                       "attestations": [a.as_dict() for a in sorted(attached, key=lambda a: a.kind)]},
                      sort_keys=True, separators=(",", ":")).encode()


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def sign_envelope(key: Ed25519PrivateKey, payload: bytes) -> bytes:
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    envelope = {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
                "signatures": [{"keyid": key_id(key.public_key()), "sig": base64.b64encode(sig).decode()}]}
    return json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode()


def cosigned(envelope: bytes, others: Iterable[bytes]) -> bytes:
    """`envelope` (one signature, `sign_envelope`'s) with every other key's signature of `others` over the very
    same payload added, by key id. A registry without the referrers API finds one signature artifact per image
    (its `.signature` tag): signing with a second key must carry the first key's signature along, or it would
    unsign the image for the first key. An entry that is not a well-formed signature is left out (it would make
    the whole envelope unreadable); one that does not verify is skipped by `open_envelope`, as before."""
    mine = loads(envelope)
    signatures = {s["keyid"]: s for s in mine["signatures"]}
    for body in others:
        try:
            other = loads(body)
            if other.get("payloadType") != mine["payloadType"] or other.get("payload") != mine["payload"]:
                continue
            for entry in other["signatures"]:
                keyid, sig = entry["keyid"], entry["sig"]
                if isinstance(keyid, str) and isinstance(sig, str) and base64.b64decode(sig, validate=True):
                    signatures.setdefault(keyid, {"keyid": keyid, "sig": sig})
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    merged = {**mine, "signatures": [signatures[k] for k in sorted(signatures)]}
    return json.dumps(merged, sort_keys=True, separators=(",", ":")).encode()


def open_envelope(body: bytes, public: Ed25519PublicKey) -> dict[str, Any]:
    """The payload of an envelope one of whose signatures `public` made; NotVerified otherwise."""
    try:
        envelope = loads(body)
        if envelope.get("payloadType") != PAYLOAD_TYPE:
            raise ValueError(f"payload type {envelope.get('payloadType')!r}")
        payload = base64.b64decode(envelope["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NotVerified(f"the signature is not a DSSE envelope this tool wrote ({exc})") from None
    for sig in signatures:
        try:
            public.verify(sig, pae(PAYLOAD_TYPE, payload))
        except InvalidSignature:
            continue
        try:
            data = loads(payload)
        except ValueError:
            raise NotVerified("the signed payload is not JSON") from None
        if not isinstance(data, dict) or data.get("_type") != PAYLOAD_KIND:
            raise NotVerified("the signed payload is not an sglstack attestation list")
        return data
    signers = ", ".join(one_line(str(s.get("keyid", "?"))[:16]) for s in envelope["signatures"])
    raise NotVerified(f"no signature by key {key_id(public)[:16]} (it was signed by {signers or 'nobody'})")


def signed_attestations(data: Mapping[str, Any]) -> tuple[str, list[Attached]]:
    """(image digest, attestations) a verified payload names."""
    try:
        return str(data["image"]["digest"]), [Attached(str(a["kind"]), str(a["mediaType"]), str(a["digest"]),
                                                       int(a["size"])) for a in data["attestations"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise NotVerified(f"the signed payload is incomplete ({exc})") from None


# ---- keys ----------------------------------------------------------------------------------------------

# A key file is a few hundred bytes (ed25519) to a few KB (a chain exported with it); more is not a key.
MAX_KEY_BYTES = 64 * 1024
_BOM = "\ufeff"
# A PEM body (a DER key in base64) without its BEGIN/END lines: 40+ characters of the base64 alphabet
# alone (an ed25519 PKCS#8 key is 64 of them).
_BASE64_BODY = re.compile(r"[A-Za-z0-9+/]{40,}={0,2}")
# The longest value still taken for a path (Linux's PATH_MAX is 4096; no key path is near it).
_MAX_PATH_CHARS = 1024
_KEY_FILE_SUFFIXES = (".pem", ".key", ".pub", ".der", ".txt")
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


def looks_like_key_text(value: str) -> bool:
    """True when `value` is key material rather than a path: it is then read as the key, never opened as a
    file and never shown (an error that quoted "the path" would print the private key). A line of the
    base64 alphabet alone is a path only if that file exists (`/home/ci/keys/signing` is one too)."""
    if (any(ch in value for ch in "\n\r") or "-----BEGIN" in value or "-----END" in value
            or value.startswith(_BOM) or len(value) > _MAX_PATH_CHARS):
        return True
    return _BASE64_BODY.fullmatch(value.strip()) is not None and not os.path.lexists(os.path.expanduser(value))


def _pem_block(data: bytes, kind: bytes, source: str) -> bytes:
    """The PEM block of `kind` ("PRIVATE KEY" or "PUBLIC KEY") in `data`.

    A byte-order mark and lines before or between the blocks (the `Bag Attributes` / `Key Attributes` an
    `openssl pkcs12 -nodes` export puts before each one, a certificate beside the key) are passed over; two
    blocks of `kind` are refused, naming their types (which key signs is not guessed);
    the base64 body without its BEGIN/END lines is refused with that reason, not guessed at. The parser's
    own messages are never shown: they could quote what it was given.
    """
    data = data.removeprefix(_BOM.encode())
    blocks = [m for m in _PEM_BLOCK.finditer(data) if m.group(1).endswith(kind)]
    if len(blocks) > 1:  # which one signs (or is trusted) is not guessed: an OpenSSH key before a PKCS#8 one, say
        raise BadInput(f"{source}: holds {len(blocks)} {kind.decode().lower()} blocks "
                       f"({', '.join(repr(m.group(1).decode('ascii', 'replace')) for m in blocks)}): give a file "
                       "with one")
    if blocks:
        return blocks[0].group(0)
    if _BASE64_BODY.fullmatch(b"".join(data.split()).decode("ascii", "replace")):
        raise BadInput(f"{source}: only the base64 body of a key, without its '-----BEGIN {kind.decode()}-----' "
                       "and '-----END' lines: give the whole PEM")
    return data  # no such block: the parser's refusal (and its hint) says what it is instead


def _pem_source(option: str | None, env: Mapping[str, str]) -> tuple[bytes, str]:
    """The PEM bytes and where they came from (the option or variable, a path when one was given; never
    the key's text)."""
    if option:
        if looks_like_key_text(option):
            raise BadInput("--signing-key: takes a path to the key file, and this is key text (never put a key on a "
                           f"command line: use a file, or {KEY_ENV})")
        return _read_key_file(option, "--signing-key"), f"--signing-key {option}"
    value = env.get(KEY_ENV, "")
    if not value:
        raise BadInput(f"no signing key: pass --signing-key PATH or set {KEY_ENV} (a path, or the PEM itself), or "
                       "--unsigned to release without a signature")
    if looks_like_key_text(value):
        return value.encode("utf-8", "replace"), KEY_ENV
    return _read_key_file(value, KEY_ENV), f"{KEY_ENV} ({value})"


def _shows_as_a_path(value: str) -> bool:
    """True when `value` may be quoted in a refusal: a file that exists, or text shaped like a path. What is
    neither may be key text in a form `looks_like_key_text` does not know (a JWK, a base64url seed):
    quoting it "as the path" would print the key."""
    return (os.path.lexists(os.path.expanduser(value))
            or (("/" in value or value.endswith(_KEY_FILE_SUFFIXES)) and not any(c in value for c in "{}\"\\ ")))


def _read_key_file(path: str, what: str) -> bytes:
    try:
        return read_small_file(Path(path).expanduser(), MAX_KEY_BYTES)
    except UnreadableFile as exc:
        if not _shows_as_a_path(path):
            raise BadInput(f"{what}: names no file ({exc}), and is not PEM key text either (not shown: it may "
                           "be a key in another form; give a path, or the PEM)") from None
        raise BadInput(one_line(f"{what}: cannot read key file '{path}' ({exc})")) from None


def load_signing_key(option: str | None = None, env: Mapping[str, str] | None = None) -> Ed25519PrivateKey:
    """The ed25519 private key (PEM, PKCS#8, unencrypted) from `--signing-key` or SGLSTACK_SIGNING_KEY."""
    pem, source = _pem_source(option, os.environ if env is None else env)
    pem = _pem_block(pem, b"PRIVATE KEY", source)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise BadInput(f"{source}: the key is encrypted; give an unencrypted ed25519 PEM key") from None
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(f"{source}: not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput(f"{source}: a {type(key).__name__.removeprefix('_')} key, not ed25519")
    return key


def load_public_key(path: str, *, what: str = "--verify-key") -> Ed25519PublicKey:
    """The ed25519 public key (PEM SubjectPublicKeyInfo) a verifier trusts."""
    if looks_like_key_text(path):
        raise BadInput(f"{what}: takes a path to the public key file, and this is key text")
    pem = _pem_block(_read_key_file(path, what), b"PUBLIC KEY", f"{what} {path}")
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, UnsupportedAlgorithm):
        hint = " (that is a private key: give its public half)" if b"PRIVATE KEY" in pem else ""
        raise BadInput(f"{what} {path}: not a PEM public key{hint}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadInput(f"{what} {path}: not an ed25519 public key")
    return key


def public_pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

