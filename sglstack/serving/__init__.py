"""The serving spec: what one SGLang server is, derived once from a stack's `serving:` and overrides.

argv, environment, mounts, /dev/shm, ulimits, GPUs, ports, healthcheck and node placement live here, so
that the smoke containers, the compose file and any later manifest (Kubernetes LeaderWorkerSet) serve
exactly what the smoke gate tested. `spec` holds the values and the argv written from them, `derive` makes
them from a stack and the command line. Everything is pure except `check_mount_sources`, which looks at this
machine's file system, `check_secret_references`, which looks at this process's environment, and the draft
check's reading of model files (`draftfiles`; its rules, pure, are `draft`). The names below are the part's
surface: import them from `sglstack.serving`.
"""

from .derive import (
    DEFAULT_FLAGS,
    HEALTHCHECK_DEFAULTS,
    SPECULATIVE_DEFAULTS,
    ServingOverrides,
    check_mount_sources,
    check_secret_references,
    serving_spec,
)
from .draft import DraftMismatch, draft_mismatches
from .draftfiles import draft_check, require_draft_fits
from .spec import (
    CPU_ULIMITS,
    GPU_ULIMITS,
    HEALTH_PATH,
    HF_CACHE_TARGET,
    LAUNCH,
    LISTEN_HOST,
    SECRET_ENV,
    STACK_BYTES,
    UNLIMITED,
    Bad,
    Healthcheck,
    Mount,
    NodeArgs,
    Nodes,
    RecordedOptions,
    ServingError,
    ServingSpec,
    Ulimit,
    gpu_count,
    node_argv,
    serving_argv,
    speculative_argv,
)

__all__ = [
    "CPU_ULIMITS", "DEFAULT_FLAGS", "GPU_ULIMITS", "HEALTHCHECK_DEFAULTS", "HEALTH_PATH", "HF_CACHE_TARGET", "LAUNCH",
    "LISTEN_HOST", "SECRET_ENV", "SPECULATIVE_DEFAULTS", "STACK_BYTES", "UNLIMITED", "Bad", "DraftMismatch",
    "Healthcheck", "Mount", "NodeArgs", "Nodes", "RecordedOptions", "ServingError", "ServingOverrides", "ServingSpec",
    "Ulimit", "check_mount_sources", "check_secret_references", "draft_check", "draft_mismatches", "gpu_count",
    "node_argv", "require_draft_fits", "serving_argv", "serving_spec", "speculative_argv",
]
