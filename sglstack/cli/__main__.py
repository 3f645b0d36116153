"""`python -m sglstack.cli`: the `sglstack` command, where the console script is not on PATH."""

from .main import main

if __name__ == "__main__":  # a module walk that imports every module of sglstack.cli runs nothing
    main()
