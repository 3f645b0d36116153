"""Where a server's kernel caches go (serving/caches.py, pure; issue 35, planted bug P43: no test file named the
module). With a kernel cache, every cache variable points under the one root, whatever the stack's own
serving.env says of it (a cache written elsewhere is neither packed nor restored); the stack's other variables
are kept, sorted. The DeepGEMM pre-compile takes the server's own arguments."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.serving import serving_spec
from sglstack.serving.caches import (
    CACHE_DIRS,
    CONTAINER_CACHE_ROOT,
    cache_environment,
    compile_deep_gemm_argv,
    with_kernel_caches,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spec():
    return serving_spec(load_matrix(ROOT / "stacks.yaml").get("cu130"))


def test_every_cache_variable_points_under_the_root_over_the_stacks_own_value(spec):
    own = replace(spec, env=(("HF_HOME", "/models"), ("TRITON_CACHE_DIR", "/somewhere/else"),
                             ("XDG_CACHE_HOME", "/home/me/.cache")))
    env = dict(with_kernel_caches(own, "/c").env)
    assert env["TRITON_CACHE_DIR"] == "/c/triton" and env["XDG_CACHE_HOME"] == "/c/xdg"
    assert {k: v for k, v in env.items() if k in CACHE_DIRS} == cache_environment("/c")
    assert env["HF_HOME"] == "/models"
    assert list(with_kernel_caches(own, "/c").env) == sorted(with_kernel_caches(own, "/c").env)
    assert dict(with_kernel_caches(own).env)["TRITON_CACHE_DIR"] == f"{CONTAINER_CACHE_ROOT}/triton"


def test_the_deep_gemm_compile_takes_the_servers_arguments():
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "8"]
    assert compile_deep_gemm_argv(argv, 599.9) == ["python3", "-m", "sglang.compile_deep_gemm", "--model-path", "m",
                                                   "--tp-size", "8", "--timeout", "599"]
    assert compile_deep_gemm_argv(tuple(argv), 0.2)[-2:] == ["--timeout", "1"]
