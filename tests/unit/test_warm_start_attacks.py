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


FAKE_SMI = """#!/bin/sh
# nvidia-smi of a node with two GPUs: NVML lists both whatever CUDA_VISIBLE_DEVICES says; --id picks one
case "$*" in
  *--id=1*|*--id=GPU-2222*) echo "NVIDIA H100 80GB HBM3, 9.0, 580.65.06" ;;
  *--id=0*) echo "NVIDIA RTX 6000 Ada Generation, 8.9, 580.65.06" ;;
  *--id=*) echo "No devices were found" >&2; exit 6 ;;
  *) echo "NVIDIA RTX 6000 Ada Generation, 8.9, 580.65.06"; echo "NVIDIA H100 80GB HBM3, 9.0, 580.65.06" ;;
esac
"""


def test_the_key_names_the_gpu_cuda_visible_devices_serves_on(tmp_path, monkeypatch):
    """A process-runner smoke with CUDA_VISIBLE_DEVICES=1 served on the H100 but keyed its cache by GPU 0 (the
    Ada card): nvidia-smi lists every GPU whatever CUDA_VISIBLE_DEVICES says."""
    from sglstack.adapters.gpu import gpu_facts

    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert gpu_facts(visible="1") == ("NVIDIA H100 80GB HBM3", "9.0", "580")
    assert gpu_facts(visible="GPU-2222,0") == ("NVIDIA H100 80GB HBM3", "9.0", "580")
    assert gpu_facts(visible=None) == ("NVIDIA RTX 6000 Ada Generation", "8.9", "580")
    assert gpu_facts(visible="") == gpu_facts(visible="-1") == ("none", "none", "none")
    assert gpu_facts(visible="7") == ("unknown", "unknown", "unknown")  # no such GPU: matches nothing


def test_a_process_smoke_keys_its_cache_by_the_visible_gpu(tmp_path, env_dir, monkeypatch):
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    caches = KernelCaches.plan(options(tmp_path, env_dir, warm_start=True), None, tmp_path / "out" / "report.json")
    assert caches is not None and caches.bound({"id": "env-sha256:x"}).gpu.name == "NVIDIA H100 80GB HBM3"
    declared = options(tmp_path, env_dir, warm_start=True, env={"CUDA_VISIBLE_DEVICES": "0"})
    caches = KernelCaches.plan(declared, None, tmp_path / "out" / "report.json")
    assert caches is not None and caches.bound({"id": "env-sha256:x"}).gpu.name == "NVIDIA RTX 6000 Ada Generation"


def test_a_warm_start_from_an_empty_cache_does_not_pass_for_the_caches_saving(tmp_path, env_dir):
    """A server whose compilers write to a folder of their own (no cache variable points there) packs an empty
    cache; its warm start is fast from that folder, on this machine only, and said '0 new and 0 rewritten kernel
    cache files' as if the artifact had made it warm."""
    from sglstack.smoke import run_smoke
    from sglstack.smoke.startreport import EMPTY_CACHE_NOTE, empty_cache_note, start_lines

    lines: list[str] = []
    opts = options(tmp_path, env_dir, warm_start=True, env={"SGLANG_DOUBLE_KERNELS": "0"}, concurrency=1,
                   num_prompts=1, max_new_tokens=4)
    data = run_smoke(None, None, opts, log=lines.append).data
    folder = tmp_path / "build" / "_no-stack" / "kernel-cache" / "baseline"
    assert (f"smoke: baseline: kernel cache: the cold start put no file in {folder}: a compiler writing where no "
            "cache variable points is not cached (a deployment restores nothing)") in lines
    assert empty_cache_note(data["warm"]["baseline"]) == EMPTY_CACHE_NOTE
    assert any(line.endswith(f"; {EMPTY_CACHE_NOTE}.") for line in start_lines(data))
    filled = {"kernel_cache": {"new_files": 0, "restore": {"matched": True, "files": 12}}}
    assert empty_cache_note(filled) is None


def test_stamps_of_a_server_in_another_time_zone_are_unknown_not_hours_long_phases():
    """A process-runner server given TZ=Asia/Tokyo stamps its local time: its imports took '32400.3s'; one given
    America/New_York stamps five hours back, and every phase was clamped to 0.0s."""
    from sglstack.serving.phases import LogLine, phases_line, start_phases

    started = 1_800_000_000.0
    log = ["server_args=ServerArgs(...)", "Load weight end. elapsed=0.1 s", "Capture target decode CUDA graph end.",
           "The server is fired up and ready to roll!"]
    for offset in (9 * 3600, -5 * 3600):
        lines = [LogLine(started + offset + i, text) for i, text in enumerate(log)]
        phases = start_phases(lines, started, 5.0, 1.0, read_at=started + 6)
        assert phases["off_clock"] == ["imports_done", "weights_loaded", "cuda_graphs_captured", "healthy"]
        assert phases["phases_s"] == dict.fromkeys(["imports", "weights", "cuda_graphs", "to_healthy", "first_token"])
        assert phases_line("baseline", phases).endswith(
            "first_token unknown (4 log stamp(s) fall outside the start, on another clock: a time zone (TZ) of the "
            "server's own?)")
    # Stamped to the whole second, a line just after the start may read up to a second before it: still on time.
    on_time = start_phases([LogLine(started - 0.9, log[0]), LogLine(started + 3, log[3])], started, 4.0, 1.0,
                           read_at=started + 4)
    assert "off_clock" not in on_time and on_time["milestones_s"]["healthy"] == 3.0


def _hold(base: str, root: str, held, release) -> None:
    from sglstack.core.folderlock import folder_lock

    with folder_lock(Path(base), "smoke", root=Path(root)):
        held.set()
        release.wait(60)


def test_a_second_smoke_of_the_same_cache_folders_is_refused_in_one_line(tmp_path, env_dir):
    """Two smokes in one build folder shared each kind's cache folder: each emptied the other's, packed the
    other's kernels under its own key (27 files for 16), and failed no_warm_compile on the other's."""
    from sglstack.core.folderlock import StackBusy
    from sglstack.smoke import run_smoke

    opts = options(tmp_path, env_dir, warm_start=True)
    caches = KernelCaches.plan(opts, None, tmp_path / "out" / "report.json")
    assert caches is not None
    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_hold, args=(str(caches.base), str(caches.root), held, release))
    other.start()
    try:
        assert held.wait(30)
        with pytest.raises(StackBusy) as refused:
            run_smoke(None, None, opts, log=lambda _line: None)
    finally:
        release.set()
        other.join(30)
    assert str(refused.value) == (
        f"kernel caches {caches.base}: another smoke of this stack is using them; two at once would pack each "
        "other's kernels: run it again when that one ends, or in another build folder (SGLSTACK_BUILD_DIR)")
    assert not (caches.base / "baseline").exists()  # refused before any server started


def test_a_pack_killed_outright_leaves_no_partial_layer_for_good(tmp_path):
    """SIGKILL during a pack (no clean-up runs) left `..packing-PID.tmp.XXXX.tmp`, up to the cache's size, in the
    store for good; the next pack removes it. A live pack's (another smoke on the store) and another host's stay."""
    from sglstack.kernelcache import layout

    gone = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    gone.start()
    gone.join(10)
    store = LayoutStore(tmp_path / "store", tmp_path)
    store.blobs.mkdir(parents=True)
    dead = store.blobs / f"..packing-{layout._HOST}-{gone.pid}.tmp.ab12cd.tmp"
    live = store.blobs / f"..packing-{layout._HOST}-{os.getpid()}.tmp.ef34gh.tmp"
    elsewhere = store.blobs / f"..packing-other-node-{gone.pid}.tmp.ij56kl.tmp"
    for path in (dead, live, elsewhere):
        path.write_bytes(b"partial layer")
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "kernel.cubin").write_text("k")
    store.put(_key(0), folder)
    assert (dead.exists(), live.exists(), elsewhere.exists()) == (False, True, True)


def test_a_node_whose_gpu_nvidia_smi_did_not_say_packs_nothing_and_says_why(tmp_path, env_dir, monkeypatch):
    """With nvidia-smi failing ("could not communicate with the NVIDIA driver") each kind packed an artifact no
    start could ever restore, and its warm start said "key differs in gpu_name: this start has 'unknown', the
    artifact 'unknown'"."""
    from sglstack.smoke import run_smoke

    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
                   "driver.'\nexit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    lines: list[str] = []
    opts = options(tmp_path, env_dir, warm_start=True, concurrency=1, num_prompts=1, max_new_tokens=4)
    data = run_smoke(None, None, opts, log=lines.append).data
    assert ("smoke: baseline: kernel cache not packed: this node's gpu_name, compute_capability, driver_major "
            "unknown (nvidia-smi did not answer): no start could restore it") in lines
    assert data["kernel_cache"]["packed"] == {}
    assert ("smoke: baseline: warm start: kernel cache: this node's gpu_name is unknown (nvidia-smi did not "
            "answer): a cache is never restored on a guess; starting cold") in lines


def test_a_cache_whose_warm_start_failed_is_taken_out_of_the_store(tmp_path, env_dir, monkeypatch):
    """A server that crashed on its restored cache left the artifact listed in this machine's store, where
    `deploy --kernel-cache` looks first: the deployment got the cache that had crashed the smoke's warm start.
    The summary also said 'warm 0.0s' for a start that never became healthy."""
    import sglstack.smoke.warm as warm_mod
    from sglstack.cli.smoke import _start_level_and_sweep_lines
    from sglstack.smoke import run_smoke
    from sglstack.smoke.subject import environment_info
    from sglstack.smoke.warm import warm_starts

    opts = options(tmp_path, env_dir, kernel_cache=True, concurrency=1, num_prompts=1, max_new_tokens=4,
                   env={"SGLANG_DOUBLE_KERNELS": "2"})
    run_smoke(None, None, opts, log=lambda _line: None)
    report_path = tmp_path / "out" / "report.json"
    image_info = environment_info(opts, str(env_dir / "bin" / "python3"))
    caches = KernelCaches.plan(opts, None, report_path)
    assert caches is not None
    caches = caches.bound(image_info)
    assert len(list(caches.store.artifacts())) == 1
    crashed = ServerRun("baseline", False, failure="the server exited with code 1 before it was healthy")
    monkeypatch.setattr(warm_mod, "serve_process_and_measure", lambda *_a, **_k: crashed)
    lines: list[str] = []
    warm = warm_starts(caches, None, image_info, report_path, lines.append)
    assert any(line.startswith("smoke: baseline: warm start failed: its kernel cache artifact sha256:") and
               line.endswith(f"is taken out of {caches.store.path} (no deployment restores it)") for line in lines)
    assert list(caches.store.artifacts()) == []
    data = {"baseline": {"startup_s": 2.7}, "warm": {"baseline": {"startup_s": warm["baseline"].startup_s,
                                                                  "kernel_cache": warm["baseline"].kernel_cache}}}
    assert _start_level_and_sweep_lines(data)[0].startswith("baseline start: cold 2.7s, warm start failed, ")
