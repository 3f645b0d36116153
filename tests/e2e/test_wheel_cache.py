"""The wheel cache (SGLSTACK_CACHE) trusts a file only when it matches the sha256 recorded when pip
fetched it; a stray, corrupt or truncated wheel is fetched again, never read as it is."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.adapters.wheels import BadWheel, fetch_wheel, sidecar, wheel_metadata
from sglstack.patches.host import unpack_for_patches

pytestmark = pytest.mark.network

VERSION = "0.5.9"
WHEEL = f"sglang-{VERSION}-py3-none-any.whl"


@pytest.fixture(scope="module")
def good_wheel() -> Path:
    return fetch_wheel("sglang", VERSION)


@pytest.fixture
def cache(tmp_path, monkeypatch, good_wheel) -> Path:
    """A private cache holding a verified copy of the 0.5.9 wheel."""
    root = tmp_path / "cache"
    wheels = root / "wheels"
    wheels.mkdir(parents=True)
    shutil.copy(good_wheel, wheels / WHEEL)
    shutil.copy(sidecar(good_wheel), sidecar(wheels / WHEEL))
    monkeypatch.setenv("SGLSTACK_CACHE", str(root))
    return wheels


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _is_good(path: Path, good: Path) -> bool:
    with zipfile.ZipFile(path) as zf:
        zf.testzip()
    return hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(good.read_bytes()).hexdigest()


def test_the_sidecar_records_the_downloaded_sha256(good_wheel):
    recorded = sidecar(good_wheel).read_text().split()
    assert recorded == [hashlib.sha256(good_wheel.read_bytes()).hexdigest(), good_wheel.name]


def test_a_verified_wheel_is_used_as_it_is(cache, good_wheel):
    before = (cache / WHEEL).stat().st_mtime_ns
    assert fetch_wheel("sglang", VERSION) == cache / WHEEL
    assert (cache / WHEEL).stat().st_mtime_ns == before


@pytest.mark.parametrize("damage", ["stray", "truncated", "wrong sidecar"])
def test_a_damaged_or_stray_wheel_is_fetched_again(cache, good_wheel, damage):
    if damage == "stray":  # dropped there by hand, without a sidecar: not ours to trust
        sidecar(cache / WHEEL).unlink()
        (cache / WHEEL).write_bytes(b"PK\x03\x04 not really a wheel")
    elif damage == "truncated":
        _truncate(cache / WHEEL)
    else:
        sidecar(cache / WHEEL).write_text("0" * 64 + f"  {WHEEL}\n")
    got = fetch_wheel("sglang", VERSION)
    assert got == cache / WHEEL and _is_good(got, good_wheel)
    assert sidecar(got).read_text().split()[0] == hashlib.sha256(got.read_bytes()).hexdigest()
    assert sorted(p.name for p in cache.iterdir()) == [WHEEL, WHEEL + ".sha256"]  # no staging folder left


def test_stray_files_that_are_not_wheel_names_are_ignored(cache, good_wheel):
    (cache / "notes.whl").write_text("not a wheel name")
    assert fetch_wheel("sglang", VERSION) == cache / WHEEL
    assert (cache / "notes.whl").exists()


def test_reading_a_truncated_wheel_is_one_line(tmp_path, good_wheel):
    broken = tmp_path / WHEEL
    shutil.copy(good_wheel, broken)
    _truncate(broken)
    with pytest.raises(BadWheel) as info:
        wheel_metadata(broken)
    assert str(info.value).startswith(f"{broken}: not a readable wheel (") and "\n" not in str(info.value)
    with pytest.raises(BadWheel):
        unpack_for_patches(broken, [], tmp_path / "out")


@pytest.mark.parametrize("args", [("stacks", "--check"), ("patches.check", "--stack", "cu130")])
def test_checks_recover_from_a_truncated_cached_wheel(cache, tmp_path, good_wheel, args):
    _truncate(cache / WHEEL)
    proc = run_invoke(*args, cwd=tmp_path, env={"SGLSTACK_CACHE": str(cache.parent)}, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert _is_good(cache / WHEEL, good_wheel)
