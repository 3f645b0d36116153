"""Adapters: one thin module per outside system (Docker engine, BuildKit, git, uv, pip, cuobjdump, processes)."""
