"""Kernel caches in a smoke: each server's caches pointed at one folder, packed after a passing smoke into the
on-disk store (an OCI image layout), and a warm start of each server with its cache restored from there.

The cold start begins with an empty folder (a cache left from an earlier run would make it warm); the warm
start restores the artifact whose key is exactly this start's (`kernelcache.key`), or says in one line which
key field differs and starts with an empty folder: nothing stale is used. Files the warm start adds to the
folder are kernels it compiled (`no_warm_compile`). The docker runner binds the folder into the container
at the path a deployment mounts its restored volume at, so the cache's own absolute paths are the same.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import docker

from ..adapters.gpu import gpu_facts
from ..adapters.process import free_tcp_port
from ..config.imageref import image_name
from ..core.errors import SglstackError, SmokeInputError, one_line
from ..core.folderlock import StackBusy, folder_lock
from ..core.records import require_writable
from ..core.safefiles import OutputNotWritable, containing_root, refuse_link, replace_folder
from ..kernelcache import (
    CONTAINER_CACHE_ROOT,
    CacheKey,
    KernelCacheError,
    LayoutStore,
    NodeGpu,
    Restore,
    cache_files,
    cache_key,
    cache_state,
    new_files,
    rewritten_files,
    shown_name,
)
from ..kernelcache.key import unknown_gpu_fields
from ..serving import Mount, serving_argv
from ..serving.caches import compile_deep_gemm_argv, with_kernel_caches
from .history import smoke_folder
from .launch import container_plan, process_plan, run_spec
from .measure import ServerRun
from .measured import Log, measure_start
from .plan import SmokeOptions, redact_argv
from .server import container_to_end, run_to_end, serve_and_measure, serve_process_and_measure

SHOWN_NEW_FILES = 20


@dataclass(frozen=True)
class KernelCaches:
    """Where one smoke's kernel caches live, and what they are keyed by."""

    options: SmokeOptions
    root: Path  # no link may lead out of it (the build folder)
    base: Path  # BUILD/<stack>/kernel-cache: one folder per server kind
    store: LayoutStore
    image: str
    gpu: NodeGpu

    @classmethod
    def plan(cls, options: SmokeOptions, stack_name: str | None, report_path: Path) -> KernelCaches | None:
        """None without `kernel_cache`/`warm_start`; checked before any server starts."""
        if not (options.kernel_cache or options.warm_start):
            return None
        build = Path(options.build_dir)
        base = smoke_folder(build, stack_name) / "kernel-cache"
        root = containing_root(base, build)
        store_path = Path(options.cache_store) if options.cache_store else base / "store"
        store = LayoutStore(store_path, containing_root(store_path, build))
        try:  # found now, not after an hour of serving: a store that cannot be written or read packs nothing
            require_writable(store_path / "index.json", what="kernel cache store", create=False)
            store.check()
        except (OutputNotWritable, KernelCacheError) as exc:
            if options.cache_store:  # the user named it: bad input
                raise SmokeInputError(f"--cache-store: {exc}") from None
            raise
        for kind in options.kinds:
            refuse_link(root, base / kind)
            refuse_link(containing_root(report_path.parent, build), warm_log_path(report_path, kind))
        return cls(options, root, base, store, image="", gpu=NodeGpu())

    def bound(self, image_info: Mapping[str, Any]) -> KernelCaches:
        """With what the key names about the image and this node (read once the image is known)."""
        # A local server runs on the first GPU its CUDA_VISIBLE_DEVICES names (declared, else passed on from here).
        visible = self.options.serving.environment.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES")) \
            if self.options.runner == "process" else None
        name, capability, driver = gpu_facts(visible=visible) if self.options.gpus > 0 or \
            self.options.runner == "process" else ("none", "none", "none")
        image = image_name(image_info.get("digest"), image_info.get("id")) or ""
        return replace(self, image=image, gpu=NodeGpu(name, capability, driver))

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """This smoke's hold on its kind folders (`BASE/.lock`) while it serves, packs and warm-starts: a second
        smoke of the same stack in the same build folder would empty, fill and pack the same folders (each
        packed the other's kernels under its own key). It is refused at once, in one line."""
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(folder_lock(self.base, "smoke", root=self.root))
            except StackBusy:
                raise StackBusy(f"kernel caches {self.base}: another smoke of this stack is using them; two at once "
                                "would pack each other's kernels: run it again when that one ends, or in another "
                                "build folder (SGLSTACK_BUILD_DIR)") from None
            yield

    def folder(self, kind: str) -> Path:
        return self.base / kind

    def cache_root(self, kind: str) -> str:
        return CONTAINER_CACHE_ROOT if self.options.runner == "docker" else os.path.abspath(self.folder(kind))

    def options_for(self, kind: str) -> SmokeOptions:
        """The smoke options whose serving env points every cache at this kind's folder (and, docker, binds it)."""
        spec = with_kernel_caches(self.options.serving, self.cache_root(kind))
        mounts = spec.mounts
        if self.options.runner == "docker":
            bind = Mount(source=os.path.abspath(self.folder(kind)), target=CONTAINER_CACHE_ROOT, origin="kernel cache")
            mounts = (*[m for m in mounts if m.target != CONTAINER_CACHE_ROOT], bind)
        served = replace(spec, mounts=mounts)
        return replace(self.options, serving=served)

    def key(self, kind: str) -> CacheKey:
        spec = run_spec(self.options_for(kind), kind)
        return cache_key(image=self.image, gpu=self.gpu, argv=serving_argv(spec), env=spec.environment,
                         model=spec.model, draft_model=spec.speculative.draft_model if spec.speculative_on and
                         spec.speculative else None, tp_size=spec.tp, cache_root=self.cache_root(kind))

    def empty(self, kind: str) -> None:
        replace_folder(self.root, self.folder(kind), lambda _tmp: None)

    def record(self, kind: str, before: Mapping[str, tuple[int, int]], run: ServerRun,
               restore: Restore | None = None) -> ServerRun:
        """The start's cache summary: files added, and files there before that it wrote again (a kernel
        rebuilt in place adds no file: ninja judging a restored output stale did exactly that)."""
        after = cache_state(self.folder(kind))
        added, rewritten = new_files(before, after), rewritten_files(before, after)
        summary: dict[str, Any] = {
            "folder": str(self.folder(kind)), "key": self.key(kind).to_dict(), "key_digest": self.key(kind).digest(),
            "files_before": len(before), "files_after": len(after), "bytes_after": sum(s for s, _ in after.values()),
            "new_files": len(added), "new_files_first": [shown_name(n) for n in added[:SHOWN_NEW_FILES]],
            "rewritten_files": len(rewritten),
            "rewritten_files_first": [shown_name(n) for n in rewritten[:SHOWN_NEW_FILES]],
        }
        if restore is not None:
            summary["restore"] = restore.to_dict()
        return replace(run, kernel_cache=summary)

    def pack(self, kinds: tuple[str, ...], log: Log) -> dict[str, Any]:
        """Each kind's folder into the store under its key: kind -> artifact digest, files, bytes."""
        packed: dict[str, Any] = {}
        for kind in kinds:
            if unknown := unknown_gpu_fields(self.key(kind)):
                log(f"smoke: {kind}: kernel cache not packed: this node's {', '.join(unknown)} unknown (nvidia-smi "
                    "did not answer): no start could restore it")
                continue
            try:
                done = self.store.put(self.key(kind), self.folder(kind))
            except SglstackError as exc:  # a full disk, a link in the way: the smoke stands, the cache is not kept
                log(f"smoke: {kind}: kernel cache not packed: {one_line(str(exc))}")
                continue
            log(f"smoke: {kind}: kernel cache packed: {done.files} files, {done.layer_size} bytes, artifact "
                f"{done.manifest_digest} in {self.store.path}")
            if not done.files:
                log(f"smoke: {kind}: kernel cache: the cold start put no file in {self.folder(kind)}: a compiler "
                    "writing where no cache variable points is not cached (a deployment restores nothing)")
            packed[kind] = {"artifact": done.manifest_digest, "files": done.files, "layer_bytes": done.layer_size,
                            "key_digest": self.key(kind).digest()}
        return packed

    def summary(self, packed: Mapping[str, Any]) -> dict[str, Any]:
        return {"store": str(self.store.path), "image": self.image,
                "gpu": {"name": self.gpu.name, "compute_capability": self.gpu.compute_capability,
                        "driver_major": self.gpu.driver_major},
                "packed": dict(packed)}


def precompile_deep_gemm(caches: KernelCaches, kind: str, engine: docker.DockerClient | None,
                         image_info: Mapping[str, Any], report_path: Path, log: Log) -> str:
    """`python3 -m sglang.compile_deep_gemm` with this kind's serving flags and cache folder, waited for (at most
    the startup budget again); the line logged. Its failure fails nothing: the cold start compiles the rest."""
    options = caches.options_for(kind)
    budget = options.timeout
    log_path = report_path.with_suffix(f".{kind}.deepgemm.log")
    if engine is None:
        plan = process_plan(options, kind, free_tcp_port())
        argv = compile_deep_gemm_argv(plan.argv, budget)
        log(f"smoke: {kind}: precompiling DeepGEMM: {' '.join(redact_argv(argv))}")
        code = run_to_end(argv, plan.environment, log_path, containing_root(log_path.parent,
                                                                            Path(options.build_dir)), budget + 60)
    else:
        cplan = container_plan(options, str(image_info["id"]), kind)
        argv = compile_deep_gemm_argv(cplan.command, budget)
        log(f"smoke: {kind}: precompiling DeepGEMM: {' '.join(redact_argv(argv))}")
        code = container_to_end(engine, replace(cplan, command=tuple(argv)), budget + 60)
    files = len(cache_files(caches.folder(kind) / "deep_gemm"))
    line = (f"smoke: {kind}: DeepGEMM precompile {'done' if code == 0 else f'ended with {code}'}: {files} files "
            "in the cache's deep_gemm folder")
    log(line)
    return line


def warm_log_path(report_path: Path, kind: str) -> Path:
    """report.json -> report.baseline.warm.log (the process runner's warm start's output)."""
    return report_path.with_suffix(f".{kind}.warm.log")


def warm_starts(caches: KernelCaches, engine: docker.DockerClient | None, image_info: Mapping[str, Any],
                report_path: Path, log: Log) -> dict[str, ServerRun]:
    """Each kind started again with its cache restored from the store (or cold, said in one line)."""
    runs: dict[str, ServerRun] = {}
    for kind in caches.options.kinds:
        key = caches.key(kind)
        try:
            restore = caches.store.restore(key, caches.folder(kind), caches.root)
        except SglstackError as exc:  # an unreadable store or layer: cold, said (nothing half-restored)
            restore = Restore(False, f"{one_line(str(exc))}; starting cold")
        log(f"smoke: {kind}: warm start: {restore.line}")
        if not restore.matched:
            caches.empty(kind)
        before = cache_state(caches.folder(kind))
        options = caches.options_for(kind)
        if engine is None:
            plan = process_plan(options, kind, free_tcp_port())
            run = serve_process_and_measure(plan, options, warm_log_path(report_path, kind), log,
                                            measure=measure_start)
        else:
            cplan = container_plan(options, str(image_info["id"]), kind)
            run = serve_and_measure(engine, cplan, options, log, measure=measure_start)
        runs[kind] = caches.record(kind, before, run, restore)
        if run.failure and restore.matched and caches.store.forget(key):
            log(f"smoke: {kind}: warm start failed: its kernel cache artifact {restore.manifest_digest} is taken out "
                f"of {caches.store.path} (no deployment restores it)")
        cache = runs[kind].kernel_cache or {}
        log(f"smoke: {kind}: warm start: {cache.get('new_files', 0)} new kernel cache files, "
            f"{cache.get('rewritten_files', 0)} rewritten")
    return runs
