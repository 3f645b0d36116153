"""The launch_server command line of the double: a subset of SGLang 0.5.9's flags, same names and aliases.

Unknown flags are rejected the way the real argparse parser rejects them (exit 2, "unrecognized
arguments"). tests/e2e/test_smoke_double_fidelity.py checks that every flag here exists in the real
0.5.9 `server_args.py`.
"""

from __future__ import annotations

import argparse

SPECULATIVE_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]

# (flags, argparse keyword arguments, the ServerArgs field it fills)
FLAGS: list[tuple[tuple[str, ...], dict, str]] = [
    (("--model-path", "--model"), {"type": str, "required": True}, "model_path"),
    (("--tokenizer-path",), {"type": str}, "tokenizer_path"),
    (("--tokenizer-mode",), {"type": str, "default": "auto", "choices": ["auto", "slow"]}, "tokenizer_mode"),
    (("--load-format",), {"type": str, "default": "auto"}, "load_format"),
    (("--trust-remote-code",), {"action": "store_true"}, "trust_remote_code"),
    (("--context-length",), {"type": int}, "context_length"),
    (("--revision",), {"type": str}, "revision"),
    (("--host",), {"type": str, "default": "127.0.0.1"}, "host"),
    (("--port",), {"type": int, "default": 30000}, "port"),
    (("--skip-server-warmup",), {"action": "store_true"}, "skip_server_warmup"),
    (("--dtype",), {"type": str, "default": "auto"}, "dtype"),
    (("--quantization",), {"type": str}, "quantization"),
    (("--kv-cache-dtype",), {"type": str, "default": "auto"}, "kv_cache_dtype"),
    (("--mem-fraction-static",), {"type": float}, "mem_fraction_static"),
    (("--max-running-requests",), {"type": int}, "max_running_requests"),
    (("--chunked-prefill-size",), {"type": int}, "chunked_prefill_size"),
    (("--device",), {"type": str}, "device"),
    (("--tensor-parallel-size", "--tp-size"), {"type": int, "default": 1}, "tp_size"),
    (("--data-parallel-size", "--dp-size"), {"type": int, "default": 1}, "dp_size"),
    (("--expert-parallel-size", "--ep-size", "--ep"), {"type": int, "default": 1}, "ep_size"),
    (("--stream-output",), {"action": "store_true"}, "stream_output"),
    (("--random-seed",), {"type": int}, "random_seed"),
    (("--watchdog-timeout",), {"type": float, "default": 300.0}, "watchdog_timeout"),
    (("--download-dir",), {"type": str}, "download_dir"),
    (("--log-level",), {"type": str, "default": "info"}, "log_level"),
    (("--enable-metrics",), {"action": "store_true"}, "enable_metrics"),
    (("--api-key",), {"type": str}, "api_key"),
    (("--served-model-name",), {"type": str}, "served_model_name"),
    (("--reasoning-parser",), {"type": str}, "reasoning_parser"),
    (("--tool-call-parser",), {"type": str}, "tool_call_parser"),
    (("--dist-init-addr", "--nccl-init-addr"), {"type": str}, "dist_init_addr"),
    (("--nnodes",), {"type": int, "default": 1}, "nnodes"),
    (("--node-rank",), {"type": int, "default": 0}, "node_rank"),
    (("--enable-dp-attention",), {"action": "store_true"}, "enable_dp_attention"),
    (("--attention-backend",), {"type": str}, "attention_backend"),
    (("--cuda-graph-max-bs",), {"type": int}, "cuda_graph_max_bs"),
    (("--disable-cuda-graph",), {"action": "store_true"}, "disable_cuda_graph"),
    (("--speculative-algorithm",), {"type": str, "choices": SPECULATIVE_ALGORITHMS}, "speculative_algorithm"),
    (("--speculative-draft-model-path", "--speculative-draft-model"), {"type": str}, "speculative_draft_model_path"),
    (("--speculative-draft-model-revision",), {"type": str}, "speculative_draft_model_revision"),
    (("--speculative-num-steps",), {"type": int}, "speculative_num_steps"),
    (("--speculative-eagle-topk",), {"type": int}, "speculative_eagle_topk"),
    (("--speculative-num-draft-tokens",), {"type": int}, "speculative_num_draft_tokens"),
    (
        ("--speculative-attention-mode",),
        {"type": str, "default": "prefill", "choices": ["prefill", "decode"]},
        "speculative_attention_mode",
    ),
]


def all_flags() -> set[str]:
    return {flag for flags, _, _ in FLAGS for flag in flags}


class ServerArgs:
    """The real entry point's shape: `ServerArgs.add_cli_args(parser)` declares every flag on a parser
    (what `invoke build` parses a stack's serving argv with, inside the image)."""

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        for flags, kwargs, dest in FLAGS:
            parser.add_argument(*flags, dest=dest, **kwargs)


def parse_server_args(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="launch_server")
    ServerArgs.add_cli_args(parser)
    args = vars(parser.parse_args(argv))
    if args["speculative_algorithm"] in ("EAGLE", "EAGLE3") and not args["speculative_draft_model_path"]:
        parser.error("--speculative-draft-model-path is required for EAGLE speculative decoding")
    if args["tokenizer_path"] is None:
        args["tokenizer_path"] = args["model_path"]
    return args
