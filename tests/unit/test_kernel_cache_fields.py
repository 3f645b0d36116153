"""The kernel cache along the axes its other tests do not vary (issue 35, planted bugs P18, P19): each field of
the key on its own (an artifact differing in any one is never restored, and the line names it), and file times
whose nanoseconds have leading zeros (a restore keeps every time to the nanosecond, as ninja needs)."""

from __future__ import annotations

import io
import os
from dataclasses import fields, replace
from pathlib import Path

import pytest

from sglstack.kernelcache import CacheKey, LayoutStore, NodeGpu, cache_files, cache_key
from sglstack.kernelcache.files import cache_state, pack, unpack
from sglstack.kernelcache.key import KEY_FIELDS

ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "org/target", "--tp-size", "2",
        "--speculative-draft-model-path", "org/draft", "--speculative-draft-model-revision", "d1",
        "--revision", "t1"]


def key() -> CacheKey:
    return cache_key(image="sha256:" + "1" * 64, gpu=NodeGpu("NVIDIA H200", "9.0", "580"), argv=ARGV, env={},
                     model="org/target", draft_model="org/draft", tp_size=2, cache_root="/cache")


def _other(value: object) -> object:
    return value + 1 if isinstance(value, int) else f"{value}-other"


def test_every_field_of_the_key_is_compared():
    assert set(KEY_FIELDS) == {f.name for f in fields(CacheKey)}
    assert (key().draft_revision, key().model_revision) == ("d1", "t1")


@pytest.mark.parametrize("name", [f.name for f in fields(CacheKey)])
def test_an_artifact_differing_in_any_one_field_is_not_restored(tmp_path, name):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "k.cubin").write_bytes(b"x")
    store = LayoutStore(tmp_path / "store")
    theirs = replace(key(), **{name: _other(getattr(key(), name))})
    store.put(theirs, cache)
    target = tmp_path / "target"
    target.mkdir()
    (target / "mine").write_bytes(b"1")
    done = store.restore(key(), target, tmp_path)
    assert not done.matched and done.key_differences == (name,)
    assert done.line.startswith(f"kernel cache: key differs in {name}: ") and done.line.endswith("; starting cold")
    assert cache_files(target) == {"mine": 1}  # nothing restored, nothing removed
    assert store.restore(theirs, target, tmp_path).matched  # the artifact itself is sound


def test_a_restore_keeps_times_whose_nanoseconds_have_leading_zeros(tmp_path: Path):
    cache = tmp_path / "cache"
    cache.mkdir()
    times = {"a.so": 1_700_000_000_000_000_007, "b.so": 1_700_000_001_012_345_678, "c.so": 1_700_000_002_000_000_000,
             "d.so": 1_700_000_003_999_999_999}
    for name, ns in times.items():
        (cache / name).write_bytes(name.encode())
        os.utime(cache / name, ns=(ns, ns))
    before = cache_state(cache)
    assert {rel: state[1] for rel, state in before.items()} == times
    layer = io.BytesIO()
    pack(cache, layer)
    restored = tmp_path / "restored"
    assert unpack(tmp_path, restored, lambda: io.BytesIO(layer.getvalue()), max_bytes=1 << 20) == 4
    assert cache_state(restored) == before
