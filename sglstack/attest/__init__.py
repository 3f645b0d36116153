"""Attest: every published image's SBOM, provenance and signature, stored by digest beside it.

- `sbom` (pure): the image's inventory -> CycloneDX 1.6 JSON; its check against the lock;
- `provenance` (pure): a build record -> an in-toto statement with an SLSA v1 provenance predicate;
- `signing` (pure): what the signature covers (the image digest and each document's digest), DSSE
  ed25519 envelopes, keys from `--signing-key` / SGLSTACK_SIGNING_KEY (read, never written);
- `image`: the lister run inside an image (the engine adapter); `store`: OCI artifacts with a `subject`,
  referrers API or the `sha256-<hex>.<kind>` tag scheme (the registry adapter);
- `release`: what `build --push` attaches before any release tag moves; `verify`: the check of
  `invoke verify-image`, `deploy --verify-key` and `render --verify-key` (the tasks: `sglstack.cli.attest`).

This package imports no submodule here: Build uses `sbom` and `image` without loading the registry side.
"""
