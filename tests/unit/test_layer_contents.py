"""A small layer's files keyed by their content (`adapters.layers.small_layer_contents`), read from real folders
as the engine's overlay2 keeps a layer: what a check can read of a file (kind, mode, owner, bytes, a link's
target) moves its key; nothing else does; a layer too large, or holding what cannot be read without blocking,
keeps its diff id."""

from __future__ import annotations

import os
from pathlib import Path

from sglstack.adapters import layers
from sglstack.adapters.layers import ELF, FILE, LINK, list_layer, small_layer_contents


def _layer(folder: Path, files: dict[str, bytes], links: dict[str, str] | None = None) -> tuple[str, Path, dict]:
    for rel, body in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    for rel, target in (links or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, folder / rel)
    return ("sha256:" + folder.name.ljust(64, "0"), folder, list_layer(folder))


def test_the_same_bytes_in_two_layers_are_the_same_key_and_one_byte_or_the_mode_moves_it(tmp_path):
    body = {"opt/sglstack/tools/imagecheck.py": b"print(1)\n", "opt/lib/x.so": b"\x7fELF" + b"\0" * 60}
    a = _layer(tmp_path / "a", body, {"opt/lib/y.so": "x.so"})
    os.utime(tmp_path / "a" / "opt/lib/x.so", (1, 1))  # an mtime is no part of the key
    b = _layer(tmp_path / "b", body, {"opt/lib/y.so": "x.so"})
    assert a[2] == {"/opt/sglstack/tools/imagecheck.py": FILE, "/opt/lib/x.so": ELF, "/opt/lib/y.so": LINK}
    keys = small_layer_contents([a, b])
    assert keys[a[0]] == keys[b[0]] and len(set(keys[a[0]].values())) == 3
    c = _layer(tmp_path / "c", {**body, "opt/lib/x.so": b"\x7fELF" + b"\0" * 59 + b"\1"}, {"opt/lib/y.so": "z.so"})
    (tmp_path / "c" / "opt/sglstack/tools/imagecheck.py").chmod(0o755)
    other = small_layer_contents([c])[c[0]]
    assert all(other[p] != keys[a[0]][p] for p in other)  # a byte, a link's target, the mode


def test_a_large_layer_or_one_with_a_fifo_is_keyed_by_its_diff_id(tmp_path, monkeypatch):
    many = _layer(tmp_path / "many", {f"f{i}.py": b"x" for i in range(4)})
    big = _layer(tmp_path / "big", {"lib.so": b"\0" * 64})
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "pipe")
    fifo = ("sha256:fifo", fifo_dir, list_layer(fifo_dir))
    assert fifo[2] == {"/pipe": FILE}  # listed present, as the layer ships it
    monkeypatch.setattr(layers, "SMALL_LAYER_FILES", 3)
    monkeypatch.setattr(layers, "SMALL_LAYER_BYTES", 63)
    assert small_layer_contents([many, big, fifo]) == {}
    monkeypatch.setattr(layers, "SMALL_LAYER_FILES", 4)
    monkeypatch.setattr(layers, "SMALL_LAYER_BYTES", 64)
    assert set(small_layer_contents([many, big, fifo])) == {many[0], big[0]}


def test_a_site_file_is_found_in_its_layers_folder_on_lookup_and_a_link_or_other_file_is_not(tmp_path):
    from sglstack.imagebuild.incremental import _LocalSiteFiles

    site = "/opt/venv/lib/python3.11/site-packages"
    files = {f"{site}/torch/lib/libtorch.so": (ELF, "sha256:t"), f"{site}/torch/__init__.py": (FILE, "sha256:u"),
             f"{site}/torch/lib/libc10.so": (LINK, "sha256:t"), "/usr/lib/libc.so.6": (ELF, "sha256:b")}
    local = _LocalSiteFiles(files, {"sha256:t": tmp_path / "t", "sha256:u": tmp_path / "u", "sha256:b": tmp_path}, site)
    assert local.get(f"{site}/torch/lib/libtorch.so") == tmp_path / "t" / site.lstrip("/") / "torch/lib/libtorch.so"
    assert local.get(f"{site}/torch/lib/libc10.so") is None and local.get("/usr/lib/libc.so.6") is None
    assert local.get(f"{site}/nothing.py") is None
    assert sorted(local) == [f"{site}/torch/__init__.py", f"{site}/torch/lib/libtorch.so"] and len(local) == 2
