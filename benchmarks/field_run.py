"""The field run: SGLang served as local processes by `smoke --runner process`, baseline and EAGLE-3, on a GPU node.

    python3 benchmarks/field_run.py --python-env ENV --site DIR --model TARGET --draft DRAFT --out OUT
                                    [--stack h200-field] [--timeout S] [--extra-args "..."] [--env K=V ...]
                                    [--concurrency-levels 1,4] [--sweep 3:1:4,7:1:8]

The server is the stack's (`h200-field` of stacks.yaml: its serving argv, env, gates and smoke sizes), with
only the node's folders given here: the model and draft paths (the stack names where a container mounts
them; the process runner mounts nothing), the Python environment, and the carried packages on PYTHONPATH.
The report, and so the recording, names the stack.

Before the smoke, each step a server needs is tried on its own in ENV's interpreter with DIR on PYTHONPATH
(the carried packages), so a failure says how far it got: `imports` (sglang's server, scheduler and model
runner modules), `kernel_load` (sgl_kernel's sm90 library and one of its ops on the GPU). `model_load` and
`first_token` are read off the smoke itself (the server answered /health_generate; a request streamed a
token). The smoke is sglstack's own (`run_smoke`, the process runner, the production measuring code), with
its report, server logs and history under OUT; OUT/steps.json holds the steps.

`--warm-start` (issue 40): the baseline server only, started cold with every kernel cache pointed at one
empty folder, measured and gated; its cache packed into an OCI image layout store (OUT/kernel-cache-store,
or `--cache-store`); then started again with the cache restored from that artifact (key checked), and each
start's phases read from its log. `--no-probes` skips the two probes (about 50 s on the H200).
`benchmarks/field_record.py OUT tests/data/field/h200-warm-start.json` keeps it;
tests/unit/test_field_warm_start.py re-derives the warm-start verdicts from that recording.
`--sweep` serves, after the baseline and the stack's own EAGLE-3 setting, EAGLE-3 at each further setting
(STEPS:TOPK:DRAFT_TOKENS), each judged by the same gates at the stack's concurrency levels (`smoke.concurrency_levels`,
or `--concurrency-levels`): one baseline start for all of them. Each server start is a step of its own in steps.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglstack.config.matrix import load_matrix  # noqa: E402  (the checkout's sglstack)
from sglstack.core.signals import exit_code_of, signals_raise  # noqa: E402
from sglstack.smoke import run_smoke, smoke_options  # noqa: E402

PROBES = {
    "imports": (
        "import sglang, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler, "
        "sglang.srt.model_executor.model_runner, sglang.srt.models.llama, sglang.srt.models.llama_eagle3; "
        "print('sglang', sglang.__version__)"
    ),
    "kernel_load": (
        "import torch, sgl_kernel; x = torch.randn(4, 128, device='cuda', dtype=torch.float16); "
        "w = torch.ones(128, device='cuda', dtype=torch.float16); y = sgl_kernel.rmsnorm(x, w, 1e-5); "
        "torch.cuda.synchronize(); print('sgl_kernel', sgl_kernel.__version__, torch.cuda.get_device_name(), "
        "'max abs err', float((y - x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)).abs().max()))"
    ),
}


def probe(python: str, env: dict[str, str], code: str, timeout: float) -> dict[str, object]:
    started = time.monotonic()
    try:
        proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "seconds": timeout, "output": f"timed out after {timeout:g}s"}
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return {"ok": proc.returncode == 0, "seconds": round(time.monotonic() - started, 1), "output": lines[-3:]}


def warm_options(args: argparse.Namespace) -> dict[str, object]:
    """The smoke options of `--warm-start`: the baseline alone, its caches packed into the store on disk, a warm
    start restoring them, gated on compiling nothing."""
    if not args.warm_start:
        return {}
    return {"kinds": "baseline", "warm_start": True, "no_warm_compile": True,
            "cache_store": args.cache_store or str(args.out / "kernel-cache-store")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-env", required=True)
    parser.add_argument("--site", default="", help="carried packages, put first on the server's PYTHONPATH")
    parser.add_argument("--model", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stack", default="h200-field", help="the stack whose serving settings are served")
    parser.add_argument("--stacks-file", default=str(REPO / "stacks.yaml"))
    parser.add_argument("--timeout", type=float, default=None, help="default: the stack's startup_timeout_s")
    # Each default None: the stack's own value (serving.gpus, serving.extra_args, smoke.*).
    parser.add_argument("--gpus", type=int, default=None)
    parser.add_argument("--extra-args", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--num-prompts", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--concurrency-levels", default=None, help="e.g. 1,4 (default: the stack's)")
    parser.add_argument("--sweep", default=None, help="more EAGLE-3 settings, STEPS:TOPK:DRAFT_TOKENS,...")
    # The servers inherit nothing of this environment beyond the runtime's own variables (docs/smoke-and-gates.md).
    parser.add_argument("--env", action="append", default=[], metavar="K=V", help="a variable for the servers")
    parser.add_argument("--warm-start", action="store_true", help="baseline cold, pack its kernel caches, warm start")
    parser.add_argument("--cache-store", default=None, help="the OCI layout store (default OUT/kernel-cache-store)")
    parser.add_argument("--no-probes", action="store_true", help="skip the imports and kernel_load probes")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    server_env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                  **dict(item.split("=", 1) for item in args.env)}
    if args.warm_start:  # SGLang's own switch: milliseconds in its log stamps, so each phase is read to the ms
        server_env.setdefault("SGLANG_LOG_MS", "1")
    if args.site:
        server_env["PYTHONPATH"] = os.pathsep.join(p for p in (args.site, os.environ.get("PYTHONPATH")) if p)
    python = os.path.join(args.python_env, "bin", "python3")
    steps: dict[str, object] = {}
    for name, code in ({} if args.no_probes else PROBES).items():
        steps[name] = result = probe(python, {**os.environ, **server_env}, code, 240)
        print(f"field: {name}: {'ok' if result['ok'] else 'FAILED'} {result['output']}", flush=True)
    (args.out / "steps.json").write_text(json.dumps(steps, indent=2) + "\n")

    stack = load_matrix(args.stacks_file).get(args.stack)
    options = smoke_options(
        stack, runner="process", python_env=args.python_env, model=args.model, draft_model=args.draft,
        gpus=args.gpus, timeout=args.timeout, env=server_env,
        extra_args=shlex.split(args.extra_args) if args.extra_args is not None else None,
        max_new_tokens=args.max_new_tokens, num_prompts=args.num_prompts, concurrency=args.concurrency,
        concurrency_levels=args.concurrency_levels, sweep=args.sweep,
        report=str(args.out / "report.json"), build_dir=str(args.out / "build"), **warm_options(args),
    )
    report = run_smoke(stack, None, options, log=lambda line: print(line, flush=True))
    data = report.data
    for kind in ("baseline",) if args.warm_start else ("baseline", "eagle3"):
        run = data[kind]
        steps[f"{kind}_model_load"] = {"ok": bool(run["started"]), "seconds": run["startup_s"],
                                       "output": [run["failure"]] if run["failure"] else []}
        steps[f"{kind}_first_token"] = {"ok": bool(run["ttft_s"]), "seconds": run["ttft_s"], "output": []}
    for entry in (data.get("sweep") or {}).get("settings", []):
        if entry["configured"]:
            continue  # the stack's own setting is the eagle3 server above
        run, name = entry["eagle3"], f"eagle3_{entry['setting'].replace(':', '-')}"
        steps[f"{name}_model_load"] = {"ok": bool(run["started"]), "seconds": run["startup_s"],
                                       "output": [run["failure"]] if run["failure"] else []}
        steps[f"{name}_first_token"] = {"ok": bool(run["ttft_s"]), "seconds": run["ttft_s"], "output": []}
    (args.out / "steps.json").write_text(json.dumps(steps, indent=2) + "\n")
    print(f"field: verdict {data['verdict']}; failures {data['failures']}", flush=True)
    if data.get("crossover_line"):
        print(f"field: {data['crossover_line']}", flush=True)
    for entry in (data.get("sweep") or {}).get("settings", []):
        print(f"field: sweep {entry['setting']}: {entry['verdict']}; accept length {entry['accept_length']}; "
              f"failures {entry['failures']}", flush=True)
    for line in (data.get("sweep") or {}).get("recommendation", []):
        print(f"field: best at {line}", flush=True)
    return 0


if __name__ == "__main__":
    # As `invoke smoke` does: SIGTERM and SIGHUP unwind like Ctrl-C, so the servers' process groups are ended.
    try:
        with signals_raise():
            code = main(sys.argv[1:])
    except KeyboardInterrupt as exc:
        code = exit_code_of(exc)
        print(f"field: interrupted (exit {code}): cleaned up", flush=True)
    sys.exit(code)
