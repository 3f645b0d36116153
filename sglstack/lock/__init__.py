"""Locks: resolve a stack's closure with uv, the lock file format, pin conflicts with SGLang's own requirements."""
