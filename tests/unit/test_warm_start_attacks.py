"""Warm starts against a server that misbehaves with its kernel cache (issue 40's adversarial pass): names that
are not UTF-8, caches that stay empty, stores shared by two smokes at once."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest
from smoke_fixtures import make_double_env

from sglstack.kernelcache import CacheKey, LayoutStore
from sglstack.smoke import smoke_options
from sglstack.smoke.measure import ServerRun
from sglstack.smoke.warm import KernelCaches


def options(tmp_path: Path, env_dir: Path, **more):
    return smoke_options(None, runner="process", python_env=str(env_dir), model="m", draft_model="d", tp=1,
                         gpus=0, timeout=60, kinds="baseline", build_dir=str(tmp_path / "build"),
                         report=str(tmp_path / "out" / "report.json"), no_history=True, **more)


@pytest.fixture
def env_dir(tmp_path, repo_root):
    return make_double_env(tmp_path / "venv", repo_root)


def test_a_kernel_file_named_in_bytes_that_are_not_utf8_is_shown_escaped(tmp_path, env_dir):
    """A warm start that added `bad-\\xff.bin` made the report's Markdown fail to encode (a traceback, no report)."""
    caches = KernelCaches.plan(options(tmp_path, env_dir, warm_start=True), None, tmp_path / "out" / "report.json")
    assert caches is not None
    folder = caches.folder("baseline") / "triton"
    folder.mkdir(parents=True)
    os.close(os.open(os.path.join(os.fsencode(folder), b"bad-\xff.bin"), os.O_CREAT | os.O_WRONLY))
    run = caches.record("baseline", {}, ServerRun("baseline", True))
    cache = run.kernel_cache
    assert cache is not None and cache["new_files_first"] == ["triton/bad-\\xff.bin"]
    json.dumps(cache, ensure_ascii=False).encode("utf-8")  # prints and writes as UTF-8


def _put(store_path: str, i: int) -> None:
    folder = Path(store_path).parent / f"cache-{i}"
    folder.mkdir()
    (folder / "kernel.cubin").write_text(str(i))
    LayoutStore(Path(store_path), Path(store_path).parent).put(_key(i), folder)


def _key(i: int) -> CacheKey:
    return CacheKey(image="sha256:" + "a" * 64, gpu_name="none", compute_capability="none", driver_major="none",
                    tp_size=1, ep_size=1, model=f"model-{i}", model_revision=None, draft_model=None,
                    draft_revision=None, serving_hash="sha256:" + "b" * 64, cache_root="/c")


def test_smokes_packing_into_one_store_at_once_keep_every_artifact(tmp_path):
    """Each put read the index, added its entry and wrote it back: of 8 at once, 4 to 6 stayed listed, and a
    lost one's warm start or deploy started cold ('key differs')."""
    store = tmp_path / "store"
    procs = [multiprocessing.get_context("fork").Process(target=_put, args=(str(store), i)) for i in range(8)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * 8
    listed = sorted(key.model for _digest, key, _manifest in LayoutStore(store, tmp_path).artifacts())
    assert listed == [f"model-{i}" for i in range(8)]
