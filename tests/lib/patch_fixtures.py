"""Helpers for the patch tests: real SGLang wheels from PyPI (cached), trees holding only what the
Kimi K2.5 patch touches, and drift fixtures derived from the real file."""

from __future__ import annotations

import ast
import functools
import shutil
import zipfile
from pathlib import Path

from sglstack.adapters.wheels import fetch_wheel
from sglstack.config.matrix import DEFAULT_PATCHES_DIR

KIMI = "kimi-k25-eagle3"
KIMI_FILE = "sglang/srt/models/kimi_k25.py"
KIMI_CLASS = "KimiK25ForConditionalGeneration"
KIMI_METHODS = ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")
PATCHES_DIR = DEFAULT_PATCHES_DIR


@functools.cache
def wheel(version: str) -> Path:
    return fetch_wheel("sglang", version)


@functools.cache
def pristine(version: str) -> bytes:
    """The file exactly as SGLang `version` ships it."""
    with zipfile.ZipFile(wheel(version)) as zf:
        return zf.read(KIMI_FILE)


def make_tree(root: Path, content: bytes | None, *, version: str | None = None) -> Path:
    """A root holding sglang/ with the Kimi file set to `content` (None: no file); with `version`, also
    that wheel's dist-info METADATA and RECORD (the version and pip's pre-image hashes)."""
    (root / "sglang" / "srt" / "models").mkdir(parents=True, exist_ok=True)
    if content is not None:
        (root / KIMI_FILE).write_bytes(content)
    if version is not None:
        with zipfile.ZipFile(wheel(version)) as zf:
            for leaf in ("METADATA", "RECORD"):
                zf.extract(f"sglang-{version}.dist-info/{leaf}", root)
    return root


def target(root: Path) -> bytes:
    return (root / KIMI_FILE).read_bytes()


def class_members(source: bytes | str, class_name: str = KIMI_CLASS) -> list[str]:
    """Independent of the engine: the names of the functions defined directly in the class body."""
    tree = ast.parse(source)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    return [n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def module_functions(source: bytes | str) -> list[str]:
    return [n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def without_methods(source: str, names=KIMI_METHODS, class_name: str = KIMI_CLASS) -> str:
    """Drop the named methods from the class, each with the blank line(s) before it."""
    tree = ast.parse(source)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    drop: set[int] = set()
    prev_end = cls.body[0].lineno - 1
    for node in cls.body:
        if getattr(node, "name", None) in names:
            drop.update(range(prev_end + 1, node.end_lineno + 1))
        prev_end = node.end_lineno
    lines = source.splitlines(keepends=True)
    return "".join(line for i, line in enumerate(lines, 1) if i not in drop)


def methods_text(indent: str = "    ") -> str:
    """The three methods' text as the patch carries them (from methods.py), at the given indentation."""
    src = (PATCHES_DIR / KIMI / "methods.py").read_text()
    lines = src.splitlines(keepends=True)
    (cls,) = [n for n in ast.parse(src).body if isinstance(n, ast.ClassDef)]
    out = []
    for node in cls.body:
        if getattr(node, "name", None) in KIMI_METHODS:
            out += [
                ln.replace("    ", indent, 1) if ln.strip() else ln for ln in lines[node.lineno - 1 : node.end_lineno]
            ]
    return "".join(out)


def cat_appended(source: str, indent: str) -> str:
    """What `cat >> kimi_k25.py` did: the methods after `EntryClass`, at module level."""
    body = "".join(indent + ln[4:] if ln.strip() else ln for ln in methods_text().splitlines(keepends=True))
    return source + "\n" + body


def copy_patch(tmp: Path, patch_id: str = KIMI, **overrides: str) -> Path:
    """A copy of the real patch folder with top-level patch.toml string keys replaced (or, with value
    None, removed): for declaring another range or dropping the declared hashes."""
    dest = tmp / "patches"
    shutil.copytree(PATCHES_DIR / patch_id, dest / patch_id)
    toml = dest / patch_id / "patch.toml"
    text = toml.read_text()
    for key, value in overrides.items():
        lines = text.splitlines(keepends=True)
        idx = next(i for i, ln in enumerate(lines) if ln.startswith(f"{key} ="))
        lines[idx] = "" if value is None else f"{key} = {value!r}\n".replace("'", '"')
        text = "".join(lines)
    toml.write_text(text)
    return dest


def drop_hash_tables(patches: Path, patch_id: str = KIMI) -> None:
    toml = patches / patch_id / "patch.toml"
    text = toml.read_text()
    toml.write_text(text[: text.index("[sha256_before]")])


def make_patch(
    patches: Path,
    patch_id: str,
    *,
    file: str,
    class_name: str,
    methods: tuple[str, ...],
    source: bytes | str,
    applies_to: str = ">=0",
    entry_class: str = "",
) -> Path:
    """A patch folder of our own under `patches`: patch.toml plus `source` as its methods.py."""
    folder = patches / patch_id
    folder.mkdir(parents=True, exist_ok=True)
    names = ", ".join(f'"{m}"' for m in methods)
    (folder / "patch.toml").write_text(
        f'id = "{patch_id}"\nwhy = "test patch"\napplies_to = "{applies_to}"\nfile = "{file}"\n'
        f'class = "{class_name}"\nmethods = [{names}]\nentry_class = "{entry_class}"\n'
    )
    (folder / "methods.py").write_bytes(source.encode() if isinstance(source, str) else source)
    return patches
