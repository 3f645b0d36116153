"""Locks: resolve a stack's closure with uv, pin conflicts with SGLang's own requirements (the file: `lockfile`)."""
