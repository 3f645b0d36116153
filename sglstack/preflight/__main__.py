"""`python3 -m sglstack.preflight` on this machine: the node side's own entry point
(`sglstack.inimage.preflight`, the one that runs in a stack's image as `sglstack.preflight`)."""

from __future__ import annotations

import sys

from ..inimage.preflight.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
