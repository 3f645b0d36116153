"""The attestation errors: one line each, like every other failure."""

from __future__ import annotations

from ..core.errors import SglstackError


class AttestationError(SglstackError):
    """An SBOM, provenance or signature could not be made, stored or read."""


class BadInput(AttestationError):
    """A key, reference or option is unusable: exit 2, decided before any registry call."""

    exit_code = 2


class NotVerified(AttestationError):
    """The image does not verify: a one-line refusal (exit 1)."""
