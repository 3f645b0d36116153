"""The files sglstack ships with its code: Jinja2 templates, the default patches, the in-image tools.

They live inside the package (`sglstack/data/`, `sglstack/incontainer/`, `sglstack/patchkit/`) and are
installed as package data, so that `pip install .` (not only an editable install or a checkout) finds
them. What a user brings (stacks.yaml, their own patches) is passed in as paths; only the defaults are
here.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
IMAGES_DIR = DATA_DIR / "images"  # the Dockerfile template
COMPOSE_DIR = DATA_DIR / "compose"  # the Compose file and env-file templates
DEFAULT_PATCHES_DIR = DATA_DIR / "patches"  # patches/<id>/patch.toml + methods.py
TOOLS_DIR = PACKAGE_DIR / "incontainer"  # stdlib-only tools copied into build stages and images
PATCHKIT_DIR = PACKAGE_DIR / "patchkit"  # the patch engine, copied in too
