"""`python -m sglstack.cli`: the `sglstack` command, where the console script is not on PATH."""

from .main import main

main()
