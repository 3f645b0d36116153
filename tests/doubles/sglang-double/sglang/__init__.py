"""A test double of the `sglang` package: only `python3 -m sglang.launch_server` exists."""

__version__ = "0.5.9"
