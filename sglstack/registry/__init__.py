"""The OCI registry: the HTTP client, its auth and transport, and a local registry for tests and users."""
