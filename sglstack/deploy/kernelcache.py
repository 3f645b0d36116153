"""A deployment's kernel caches (compose; k8s restores in an init container; its start by phase is `phases`').

Before `up`: the key of this deployment on this node (the image digest, this node's GPU, TP/EP, models, the
serving argv and env) picks the artifact to restore. It is looked for in this machine's store (a smoke run
here packed it) and else among the image's attachments in its registry (signed by `--verify-key`'s key when
given); the one with exactly this key is unpacked into the folder beside the compose file, which the init
service copies into the cache volume. No match: the folder is emptied (so the volume is too), one line says
which key field differed, and the server starts cold. After health: the start by phase, read from the
service container's log (the engine's stamps), kept in the deployment record.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..adapters.gpu import gpu_facts
from ..attest.kernelcache import fetch_from_registry, node_candidates
from ..config.imageref import parse_image_reference, pinned_digest
from ..core.errors import RegistryError, SglstackError, one_line
from ..core.records import stack_dir
from ..core.safefiles import replace_folder
from ..kernelcache import CONTAINER_CACHE_ROOT, CacheKey, KernelCacheError, LayoutStore, NodeGpu, cache_key
from ..render import compose as cmp
from ..render.k8s_cache import CacheCandidates
from ..serving import ServingSpec, serving_argv

Say = Callable[[str], None]


def deployment_key(spec: ServingSpec, image: str, gpu: NodeGpu) -> CacheKey:
    """The key a kernel cache must have to serve `spec` (its cache variables set) from `image` on `gpu`."""
    return cache_key(image=image, gpu=gpu, argv=serving_argv(spec), env=spec.environment, model=spec.model,
                     draft_model=spec.speculative.draft_model if spec.speculative_on and spec.speculative else None,
                     tp_size=spec.tp, cache_root=CONTAINER_CACHE_ROOT)


def smoke_store(build_root: Path, stack: str) -> LayoutStore:
    """The store a smoke of `stack` on this machine packs into (smoke's default `--cache-store`)."""
    path = stack_dir(stack, build_root) / "kernel-cache" / "store"
    return LayoutStore(path, build_root)


def restore_for_compose(build_root: Path, stack: str, out_dir: Path, spec: ServingSpec, image_ref: str, image: str,
                        *, local: bool, verify_key: str | None, say: Say) -> str:
    """Fill (or empty) the folder the compose file's init service copies into the cache volume; the line said."""
    folder = out_dir / cmp.KERNEL_CACHE_FOLDER
    line = _restore(build_root, stack, folder, spec, image_ref, image, local=local, verify_key=verify_key)
    if not line.startswith("kernel cache: restored"):
        replace_folder(build_root, folder, lambda _tmp: None)  # an empty volume: nothing stale is used
    say(line)
    return line


def _restore(build_root: Path, stack: str, folder: Path, spec: ServingSpec, image_ref: str, image: str, *,
             local: bool, verify_key: str | None) -> str:
    if not local:
        return ("kernel cache: the Docker host is remote and the restored folder would be on this machine; "
                "starting cold")
    gpu = NodeGpu(*gpu_facts()) if spec.gpus else NodeGpu()
    want = deployment_key(spec, image, gpu)
    store = smoke_store(build_root, stack)
    try:
        found = store.restore(want, folder, build_root)
        if found.matched or not pinned_digest(image_ref):
            return found.line
        ref = parse_image_reference(image_ref)
        fetched = fetch_from_registry(ref.repository.registry, ref.repository.path, str(pinned_digest(image_ref)),
                                      want, store, verify_key)
        return store.restore(want, folder, build_root).line + f" ({fetched.split(' (')[0]})"
    except KernelCacheError as exc:
        return one_line(str(exc))
    except RegistryError as exc:  # unreachable, refused, or a blob that does not hash to its digest
        return f"kernel cache: not fetched ({one_line(str(exc))}); starting cold"
    except SglstackError as exc:  # a store or folder that cannot be read or written: cold, said
        return f"kernel cache: not restored ({one_line(str(exc))}); starting cold"


def k8s_caches(spec: ServingSpec, image_ref: str, verify_key: str | None, say: Say) -> CacheCandidates:
    """The kernel caches each pod's init container may choose from on its node (none: every pod starts cold)."""
    digest = pinned_digest(image_ref)
    if not digest:
        say("kernel cache: the image is not a registry digest; starting cold")
        return CacheCandidates()
    want = deployment_key(spec, digest, NodeGpu())  # the GPU is each node's: the init container checks it
    ref = parse_image_reference(image_ref)
    try:
        blobs, found = node_candidates(ref.repository.registry, ref.repository.path, digest, want, verify_key)
    except (KernelCacheError, RegistryError) as exc:
        say(f"kernel cache: not looked up ({one_line(str(exc))}); starting cold")
        return CacheCandidates()
    gpus = ", ".join(sorted({f"{c['gpu_name']} (CC {c['compute_capability']}, driver {c['driver_major']})"
                             for c in found})) or "none"
    say(f"kernel cache: {len(found)} artifact(s) of {digest[:19]} match this deployment (GPUs: {gpus}); each pod's "
        "init container restores the one of its node's GPU, else starts cold")
    return CacheCandidates(blobs, tuple(found))
