"""The files sglstack ships with its code: Jinja2 templates, the default patches, the in-image tools.

In a checkout they are the top-level `images/`, `compose/` and `patches/` folders, where people edit
them. The wheel ships them as package data through `sglstack/data/`, whose entries are symbolic links to
those folders (setuptools copies what the links point to), so that `pip install .` (not only an editable
install or a checkout) finds them. The checkout's folders win when present, so paths in messages read
`patches/ID/...` rather than a path through the package. What a user brings (stacks.yaml, their own
patches) is passed in as paths; only the defaults are here.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # sglstack/, above core/
DATA_DIR = PACKAGE_DIR / "data"
CHECKOUT_DIR = PACKAGE_DIR.parent


def _shipped(name: str) -> Path:
    """The checkout's top-level folder when this is a checkout, else the installed package's copy."""
    top = CHECKOUT_DIR / name
    return top if (CHECKOUT_DIR / "pyproject.toml").is_file() and top.is_dir() else DATA_DIR / name


IMAGES_DIR = _shipped("images")  # the Dockerfile template
COMPOSE_DIR = _shipped("compose")  # the Compose file and env-file templates
DEFAULT_PATCHES_DIR = _shipped("patches")  # patches/<id>/patch.toml + methods.py
TOOLS_DIR = PACKAGE_DIR / "inimage" / "incontainer"  # stdlib-only tools copied into build stages and images
PATCHKIT_DIR = PACKAGE_DIR / "inimage" / "patchkit"  # the patch engine, copied in too
