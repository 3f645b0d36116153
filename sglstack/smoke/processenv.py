"""What a server that `smoke --runner process` starts may take from the caller's environment.

A container gets its environment from its image and the NVIDIA runtime, plus what the smoke declares
(`launch.server_environment`). A local process on a Slurm or plain node has those runtime settings only in
the caller's environment (CUDA, NCCL, locale, where models and kernels are cached), so these pass; nothing
else does: the server runs the model's own code (`--trust-remote-code`), and the caller's environment
holds SGLSTACK_SIGNING_KEY, registry passwords and cloud keys. PYTHON* and SGLANG_* do not pass either
(they change what the server runs): serving.env or `--env` declares them, as for a container.
"""

from __future__ import annotations

from ..core.credentials import may_name_secret, redact_text

PROCESS_PASS_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
    "XDG_CACHE_HOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "OMP_NUM_THREADS",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN",  # a switch, not a token: it keeps the HF token from public repositories
})
PROCESS_PASS_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "NVSHMEM_", "GLOO_", "UCX_", "HF_", "TRITON_",
                         "TORCHINDUCTOR_")


def passes_to_process(name: str, value: str = "") -> bool:
    """True when the caller's variable `name` (holding `value`) reaches a local server process: never one
    naming a secret (the HF token comes through `server_environment`, as it does to a container), nor one
    whose value carries a URL login (`HF_ENDPOINT=https://user:token@mirror/`)."""
    if redact_text(value) != value:
        return False
    if name in PROCESS_PASS_NAMES:
        return True
    # Inside a passing family, the strict reading: a secret may hide in a run-together word (HF_AUTHTOKEN).
    return name.startswith(PROCESS_PASS_PREFIXES) and not may_name_secret(name)
