"""Kernel caches as artifacts of the tested image: what fills them and where (`key`), the key a cache is valid
for (`key`), the folder as files and one layer (`files`), the artifact and its on-disk OCI layout store
(`layout`). Smoke packs the caches a passing start filled and restores them for the warm start; attest
attaches the same artifact to the image digest in a registry; deploy restores it where the key matches.
"""

from ..serving.caches import CACHE_DIRS, CONTAINER_CACHE_ROOT, cache_environment
from .files import KernelCacheError, cache_files, cache_state, new_files, rewritten_files, shown_name
from .key import CacheKey, NodeGpu, cache_key, mismatch_line
from .layout import ARTIFACT_TYPE, LayoutStore, Packed, Restore, artifact_manifest

__all__ = ["ARTIFACT_TYPE", "CACHE_DIRS", "CONTAINER_CACHE_ROOT", "CacheKey", "KernelCacheError", "LayoutStore",
           "NodeGpu", "Packed", "Restore", "artifact_manifest", "cache_environment", "cache_files", "cache_key",
           "cache_state", "mismatch_line", "new_files", "rewritten_files", "shown_name"]
