"""Attest: every published image's SBOM, provenance and signature, stored by digest beside it.

- the SBOM is the build's (`sglstack.inventory`: the image's inventory, listed by the build's verify and
  written beside the build record); attest reads the record and signs and attaches what it holds;
- `provenance` (pure): a build record -> an in-toto statement with an SLSA v1 provenance predicate;
- `signing` (pure): what the signature covers (the image digest and each document's digest), DSSE
  ed25519 envelopes, keys from `--signing-key` / SGLSTACK_SIGNING_KEY (read, never written);
- `store`: OCI artifacts with a `subject`, referrers API or the `sha256-<hex>.<kind>` tag scheme (the
  registry adapter);
- `release`: what `build --push` attaches before any release tag moves; `verify`: the check of
  `invoke verify-image`, `deploy --verify-key` and `render --verify-key` (the tasks: `sglstack.cli.attest`).

This package imports no submodule here: a task that needs one module loads no other.
"""
