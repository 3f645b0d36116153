"""The SGLang double must speak SGLang 0.5.9: checked against the real wheel's source, not from memory."""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import re
import time
import zipfile

import pytest
import requests

from sglstack.adapters.docker import run_to_completion, running_container
from sglstack.adapters.wheels import fetch_wheel
from sglstack.config.matrix import load_matrix
from sglstack.smoke import launch_argvs, smoke_options
from sglstack.smoke.server import _published_port

pytestmark = pytest.mark.network
SOURCES = (
    "sglang/srt/server_args.py",
    "sglang/srt/entrypoints/http_server.py",
    "sglang/srt/managers/tokenizer_manager.py",
    "sglang/srt/managers/scheduler.py",
    "sglang/srt/managers/schedule_batch.py",
    "sglang/srt/entrypoints/openai/protocol.py",
)


@functools.cache
def real_source(path: str) -> str:
    with zipfile.ZipFile(fetch_wheel("sglang", "0.5.9")) as zf:
        return zf.read(path).decode("utf-8")


@functools.cache
def real_flag_groups() -> dict[str, frozenset[str]]:
    """Every `parser.add_argument("--a", "--b", ...)` of the real server_args.py: flag -> its aliases."""
    groups: dict[str, frozenset[str]] = {}
    for node in ast.walk(ast.parse(real_source("sglang/srt/server_args.py"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            names = frozenset(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
            for name in names:
                groups[name] = names
    return groups


def double_flags_module(repo_root):
    path = repo_root / "tests" / "doubles" / "sglang-double" / "sglang" / "srt" / "server_args.py"
    spec = importlib.util.spec_from_file_location("sglang_double_server_args", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_flag_the_smoke_passes_exists_in_sglang_059(repo_root):
    matrix = load_matrix(repo_root / "stacks.yaml")
    for name in matrix.names():
        for command in launch_argvs(smoke_options(matrix.get(name))).values():
            flags = [arg for arg in command if arg.startswith("--")]
            missing = [f for f in flags if f not in real_flag_groups()]
            assert not missing, f"stack {name}: launch_server 0.5.9 has no {missing}"


def test_every_flag_of_the_double_exists_with_the_same_aliases(repo_root):
    module = double_flags_module(repo_root)
    for flags, _, _ in module.FLAGS:
        assert flags[0] in real_flag_groups(), f"{flags[0]} is not a launch_server 0.5.9 flag"
        assert frozenset(flags) == real_flag_groups()[flags[0]], f"aliases of {flags[0]} differ"
        assert f'"{flags[0]}"' in real_source("sglang/srt/server_args.py")


def _in_real_sources(key: str) -> bool:
    return any(f'"{key}"' in real_source(p) or re.search(rf"^\s+{key}: ", real_source(p), re.M) for p in SOURCES)


def test_the_double_rejects_unknown_flags_like_argparse(docker_client, sglang_double_image):
    code, output = run_to_completion(
        docker_client,
        sglang_double_image,
        ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--bogus"],
        name_prefix="sglstack-test-smoke-flags",
        timeout=60,
    )
    assert code == 2 and "unrecognized arguments: --bogus" in output


def test_routes_and_json_fields_match_sglang_059(docker_client, sglang_double_image):
    for route in (
        "/health",
        "/health_generate",
        "/generate",
        "/get_server_info",
        "/get_model_info",
        "/v1/chat/completions",
    ):
        assert f'"{route}"' in real_source("sglang/srt/entrypoints/http_server.py"), route
    cmd = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--model-path",
        "m",
        "--tp-size",
        "2",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "d",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]
    with running_container(
        docker_client,
        sglang_double_image,
        command=cmd,
        name_prefix="sglstack-test-smoke-api",
        ports={"30000/tcp": ("127.0.0.1", None)},
    ) as container:
        for _ in range(100):
            container.reload()
            if _published_port(container, 30000):
                break
        base = f"http://127.0.0.1:{_published_port(container, 30000)}"
        statuses = []
        for _ in range(100):
            with contextlib.suppress(requests.ConnectionError):
                statuses.append(requests.get(f"{base}/health_generate", timeout=5).status_code)
            if statuses[-1:] == [200]:
                break
            time.sleep(0.1)
        assert 503 in statuses and statuses[-1] == 200  # 503 while starting, then 200
        body = {"text": "hi", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
        out = requests.post(f"{base}/generate", json=body, timeout=30).json()
        assert set(out) == {"text", "output_ids", "meta_info"}
        meta = out["meta_info"]
        assert meta["completion_tokens"] == 8 and meta["finish_reason"] == {"type": "length", "length": 8}
        assert meta["spec_accept_length"] == pytest.approx(8 / meta["spec_verify_ct"])
        for key in meta:
            assert _in_real_sources(key), f"meta_info field {key} is not in SGLang 0.5.9"
        for key in out["meta_info"]["finish_reason"]:
            assert f'"{key}"' in real_source("sglang/srt/managers/schedule_batch.py")
        stream = requests.post(f"{base}/generate", json={**body, "stream": True}, timeout=30).text
        events = [e for e in stream.split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
        info = requests.get(f"{base}/get_server_info", timeout=10).json()
        assert info["internal_states"][0]["avg_spec_accept_length"] > 1 and info["version"] == "0.5.9"
        for key in info["internal_states"][0]:
            assert _in_real_sources(key), f"internal state {key} is not in SGLang 0.5.9"
        for key in info:
            assert key in ("internal_states", "version") or _in_real_sources(key), key
        model_info = requests.get(f"{base}/get_model_info", timeout=10).json()
        for key in model_info:
            assert f'"{key}"' in real_source("sglang/srt/entrypoints/http_server.py"), key
        chat = requests.post(
            f"{base}/v1/chat/completions",
            timeout=30,
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
        assert chat.json()["choices"][0]["finish_reason"] == "length"
        assert chat.json()["usage"]["completion_tokens"] == 4


def test_the_double_stops_on_sigterm_like_uvicorn(docker_client, sglang_double_image):
    with running_container(
        docker_client,
        sglang_double_image,
        command=["python3", "-m", "sglang.launch_server", "--model-path", "m"],
        name_prefix="sglstack-test-smoke-sigterm",
    ) as container:
        time.sleep(1.0)
        start = time.monotonic()
        container.stop(timeout=20)
        assert time.monotonic() - start < 10, "SIGTERM was ignored: `docker stop` waited out its grace period"
        container.reload()
        assert container.attrs["State"]["ExitCode"] == 0
