"""The double's HTTP server: SGLang 0.5.9's routes and JSON fields, with scripted speed and failures.

Behaviour comes from the environment (all optional):
  SGLANG_DOUBLE_TOKENS_PER_S      decode speed of one stream without speculation (default 1500)
  SGLANG_DOUBLE_TOKENS_PER_S_BY_VERSION  "0.5.10.post1=270,0.5.11=270": the speed when that release of
                                  the real sglang is installed beside the double (images built FROM it)
  SGLANG_DOUBLE_SPEC_SPEEDUP      speed factor under --speculative-algorithm (default 2.0)
  SGLANG_DOUBLE_ACCEPT_LENGTH     tokens per verify step under speculation (default 3.0)
  SGLANG_DOUBLE_DIVERGE           share of prompts whose greedy text differs under speculation (default 0)
  SGLANG_DOUBLE_TTFT_S            prefill time before the first token (default 0.005); a prompt seen
                                  before hits the radix cache and prefills 10x faster until /flush_cache
  SGLANG_DOUBLE_BATCH_SLOWDOWN    per-stream slowdown per extra running request (default 0.02)
  SGLANG_DOUBLE_SPEC_SPEEDUP_BY_RUNNING  "1=2.0,4=0.25": under speculation, the speed factor while at least N
                                  requests run (the largest N not above the running count; replaces
                                  SGLANG_DOUBLE_SPEC_SPEEDUP there): EAGLE-3 that pays alone and not in a batch.
                                  "7@1=3.0,7@2=1.8": the same for a server started with
                                  --speculative-num-steps 7 only (a sweep's settings differ); a server whose
                                  steps have such entries uses only those
  SGLANG_DOUBLE_STARTUP_DELAY_S   seconds of 503 from /health* before ready (default 0.3)
  SGLANG_DOUBLE_CRASH_AT_START    exit 1 with a traceback while loading
  SGLANG_DOUBLE_NEVER_HEALTHY     stay in the starting state (503) forever
  SGLANG_DOUBLE_WORKERS           start this many child processes at launch, as SGLang starts its scheduler
                                  and detokenizer (default 0); they outlive a server stopped by SIGTERM
                                  unless their whole process group is ended
  SGLANG_DOUBLE_WORKERS_IGNORE_TERM  "1": those workers ignore SIGTERM, as a worker stuck in a CUDA call does;
                                  only SIGKILL ends them
  SGLANG_DOUBLE_KERNELS           kernels its "CUDA graph capture" compiles (default 0); each is a file under
                                  TRITON_CACHE_DIR and FLASHINFER_WORKSPACE_BASE when those are set, and is
                                  compiled (SGLANG_DOUBLE_COMPILE_S each, default 0.05) only when its file is not
                                  there yet: a restored cache makes a start that compiles nothing. FlashInfer's
                                  file is judged as its JIT's ninja does: stale (rebuilt in place) when its
                                  modification time is not the one its `.ninja_deps` recorded at the build
  SGLANG_LOG_MS                   "1": milliseconds in each line's stamp, as SGLang does
The last two of the first list take "1" (always), "speculative" or "baseline" (only that kind of server).

It logs the lines sglstack reads a start's phases from, worded as SGLang 0.5.17 words them: `server_args=`,
`Load weight end.`, `Capture target decode CUDA graph end.`, `The server is fired up and ready to roll!`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang import __version__

VOCAB = (
    "the",
    "model",
    "token",
    "draft",
    "verify",
    "cache",
    "kernel",
    "graph",
    "batch",
    "tensor",
    "layer",
    "expert",
    "route",
    "decode",
    "prefill",
    "accept",
    "stream",
    "server",
    "weight",
    "shard",
)


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _applies(name: str, speculative: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value == "speculative":
        return speculative
    if value == "baseline":
        return not speculative
    return True


def _installed_sglang() -> str | None:
    """The version of a real sglang installed next to the double (its own package has no metadata)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def _log(message: str) -> None:
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true"):
        stamp += f".{int(now * 1000) % 1000:03d}"
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


def _capture_graphs(server_args: dict, speculative: bool) -> None:
    """SGLang's CUDA graph capture, where Triton and FlashInfer compile: each kernel is a file in the caches
    the environment names, compiled (a sleep) only when it is not there yet."""
    count = int(os.environ.get("SGLANG_DOUBLE_KERNELS", "0"))
    role = "verify" if speculative else "decode"
    started = time.perf_counter()
    _log(f"Capture target {role} CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1], avail mem=0.00 GB")
    compiled = 0
    seed = f"{server_args['model_path']}|{server_args.get('speculative_algorithm')}|{server_args.get('tp_size')}"
    for i in range(count):
        name = hashlib.sha256(f"{seed}|{i}".encode()).hexdigest()[:16]
        paths = []
        if os.environ.get("TRITON_CACHE_DIR"):
            paths.append(os.path.join(os.environ["TRITON_CACHE_DIR"], name, f"kernel_{i}.cubin"))
        if os.environ.get("FLASHINFER_WORKSPACE_BASE"):
            paths.append(os.path.join(os.environ["FLASHINFER_WORKSPACE_BASE"], ".cache", "flashinfer", "cached_ops",
                                      f"op_{name}", f"op_{name}.so"))
        stale = [p for p in paths if not (os.path.isfile(p) and _ninja_fresh(p))]
        if paths and not stale:
            continue
        time.sleep(_env_float("SGLANG_DOUBLE_COMPILE_S", 0.05))
        for path in stale:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(hashlib.sha256(name.encode()).digest() * 64)
            if path.endswith(".so"):  # ninja's deps log keeps the output's time as it was built
                with open(os.path.join(os.path.dirname(path), ".ninja_deps"), "w") as fh:
                    fh.write(str(os.stat(path).st_mtime_ns))
        compiled += 1
    _log(f"Capture target {role} CUDA graph end. elapsed={time.perf_counter() - started:.2f} s, mem usage=0.00 GB, "
         f"avail mem=0.00 GB. (double: {compiled} of {count} kernels compiled)")


def _ninja_fresh(path: str) -> bool:
    """A FlashInfer output is up to date for ninja only at the time its deps log recorded (ninja: "stored deps
    info out of date" when the output is newer than that); other caches are keyed by content."""
    if not path.endswith(".so"):
        return True
    try:
        with open(os.path.join(os.path.dirname(path), ".ninja_deps")) as fh:
            return int(fh.read().strip()) == os.stat(path).st_mtime_ns
    except (OSError, ValueError):
        return False


class Engine:
    """Deterministic greedy "generation" paced by sleeps; counts speculative steps like the scheduler."""

    def __init__(self, server_args: dict) -> None:
        self.server_args = server_args
        self.speculative = bool(server_args.get("speculative_algorithm"))
        self.tokens_per_s = _env_float("SGLANG_DOUBLE_TOKENS_PER_S", 1500.0)
        pairs = os.environ.get("SGLANG_DOUBLE_TOKENS_PER_S_BY_VERSION", "").split(",")
        by_version = dict(pair.strip().split("=", 1) for pair in pairs if "=" in pair)
        installed = _installed_sglang()
        if installed in by_version:
            self.tokens_per_s = float(by_version[installed])
        if self.speculative:
            self.tokens_per_s *= _env_float("SGLANG_DOUBLE_SPEC_SPEEDUP", 2.0)
        self.accept_length = max(1.0, _env_float("SGLANG_DOUBLE_ACCEPT_LENGTH", 3.0)) if self.speculative else 1.0
        by_running = os.environ.get("SGLANG_DOUBLE_SPEC_SPEEDUP_BY_RUNNING", "") if self.speculative else ""
        pairs = [pair.split("=", 1) for pair in by_running.split(",") if "=" in pair]
        steps = str(server_args.get("speculative_num_steps"))
        mine = [(n.split("@", 1)[1], f) for n, f in pairs if "@" in n and n.split("@", 1)[0] == steps]
        pairs = mine or [(n, f) for n, f in pairs if "@" not in n]
        self.speedup_by_running = sorted((int(n), float(f)) for n, f in pairs)
        self.base_tokens_per_s = self.tokens_per_s / (_env_float("SGLANG_DOUBLE_SPEC_SPEEDUP", 2.0)
                                                      if self.speculative else 1.0)
        self.diverge = _env_float("SGLANG_DOUBLE_DIVERGE", 0.0) if self.speculative else 0.0
        self.ttft_s = _env_float("SGLANG_DOUBLE_TTFT_S", 0.005)
        self.batch_slowdown = _env_float("SGLANG_DOUBLE_BATCH_SLOWDOWN", 0.02)
        self.lock = threading.Lock()
        self.running = 0
        self.spec_total_tokens = 0
        self.spec_total_steps = 0
        self.last_gen_throughput = 0.0
        self.ready = False
        self.cached_prompts: set[str] = set()
        self.flushes = 0

    def flush_cache(self) -> bool:
        """Like the scheduler: refused (False) while requests are running."""
        with self.lock:
            if self.running:
                return False
            self.cached_prompts.clear()
            self.flushes += 1
        _log(f"Cache flushed successfully! (flush #{self.flushes})")
        return True

    def token(self, prompt: str, index: int) -> tuple[int, str]:
        salt = "draft-drift" if self.diverge and index >= 4 and self._diverges(prompt) else "greedy"
        digest = hashlib.sha256(f"{salt}|{prompt}|{index}".encode()).digest()
        token_id = int.from_bytes(digest[:4], "big") % 150000
        return token_id, " " + VOCAB[token_id % len(VOCAB)]

    def _diverges(self, prompt: str) -> bool:
        bucket = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:2], "big") / 65536
        return bucket < self.diverge

    def steps(self, max_new_tokens: int) -> list[int]:
        """Tokens emitted per forward step: 1 each without speculation, ~accept_length each with it."""
        sizes, emitted, credit = [], 0, 0.0
        while emitted < max_new_tokens:
            credit += self.accept_length
            size = max(1, min(int(credit), max_new_tokens - emitted))
            credit -= size
            sizes.append(size)
            emitted += size
        return sizes

    def generate(self, prompt: str, max_new_tokens: int):
        """Yield (cumulative output ids, cumulative text, verify steps so far, finished)."""
        with self.lock:
            self.running += 1
        try:
            start = time.perf_counter()
            with self.lock:
                cached = prompt in self.cached_prompts
                self.cached_prompts.add(prompt)
            time.sleep(self.ttft_s / 10 if cached else self.ttft_s)
            ids: list[int] = []
            text = ""
            due = time.perf_counter()
            sizes = self.steps(max_new_tokens)
            for step, size in enumerate(sizes, start=1):
                with self.lock:
                    rate = self._speed(self.running) / (1.0 + self.batch_slowdown * (self.running - 1))
                due += size / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                for _ in range(size):
                    token_id, piece = self.token(prompt, len(ids))
                    ids.append(token_id)
                    text += piece
                yield ids, text, step, step == len(sizes)
            elapsed = time.perf_counter() - start
            with self.lock:
                self.last_gen_throughput = len(ids) / elapsed if elapsed > 0 else 0.0
                if self.speculative:
                    self.spec_total_tokens += len(ids)
                    self.spec_total_steps += len(sizes)
        finally:
            with self.lock:
                self.running -= 1

    def _speed(self, running: int) -> float:
        """One stream's decode speed with `running` requests in the batch, before the batch slowdown."""
        factors = [factor for at_least, factor in self.speedup_by_running if at_least <= running]
        return self.base_tokens_per_s * factors[-1] if factors else self.tokens_per_s

    def internal_state(self) -> dict:
        state = {
            **self.server_args,
            "last_gen_throughput": self.last_gen_throughput,
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": 65536, "graph": 0.0},
            "effective_max_running_requests_per_dp": self.server_args.get("max_running_requests") or 256,
        }
        with self.lock:
            if self.speculative and self.spec_total_steps > 0:
                state["avg_spec_accept_length"] = self.spec_total_tokens / self.spec_total_steps
        return state


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    engine: Engine

    def log_message(self, format: str, *args) -> None:
        _log("INFO:     " + (format % args))

    # ---- plumbing ---------------------------------------------------------------------------------

    def _send(self, status: int, body: object = None, *, content_type: str = "application/json") -> None:
        payload = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _json_body(self) -> dict | None:
        length = int(self.headers.get("content-length") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            self._send(400, {"detail": [{"type": "json_invalid", "msg": f"JSON decode error: {exc}"}]})
            return None

    def _authorized(self) -> bool:
        key = self.engine.server_args.get("api_key")
        if key and self.headers.get("authorization") != f"Bearer {key}":
            self._send(401, {"error": "Unauthorized"})
            return False
        return True

    # ---- routes -----------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate"):
            self._send(200 if self.engine.ready else 503)
        elif not self._authorized():
            return
        elif path == "/flush_cache":
            self._flush_cache()
        elif path in ("/get_server_info", "/server_info"):
            self._send(
                200,
                {**self.engine.server_args, "internal_states": [self.engine.internal_state()], "version": __version__},
            )
        elif path in ("/get_model_info", "/model_info"):
            args = self.engine.server_args
            self._send(
                200,
                {
                    "model_path": args["model_path"],
                    "tokenizer_path": args["tokenizer_path"],
                    "is_generation": True,
                    "preferred_sampling_params": None,
                    "weight_version": "default",
                    "has_image_understanding": False,
                    "has_audio_understanding": False,
                    "model_type": "kimi_k25",
                    "architectures": ["KimiK25ForConditionalGeneration"],
                },
            )
        elif path == "/v1/models":
            name = self.engine.server_args.get("served_model_name") or self.engine.server_args["model_path"]
            self._send(
                200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "sglang", "root": name}]}
            )
        else:
            self._send(404, {"detail": "Not Found"})

    def _flush_cache(self) -> None:
        ok = self.engine.flush_cache()
        payload = (
            b"Cache flushed.\nPlease check backend logs for more details. "
            b"(When there are running or waiting requests, the operation will not be performed.)\n"
        )
        self.send_response(200 if ok else 400)
        self.send_header("content-type", "text/plain; charset=utf-8")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/flush_cache":
            if self._authorized():
                self._flush_cache()
            return
        if path not in ("/generate", "/v1/chat/completions"):
            self._send(404, {"detail": "Not Found"})
            return
        if not self._authorized():
            return
        if not self.engine.ready:
            self._send(503, {"error": {"message": "The server is not ready"}})
            return
        body = self._json_body()
        if body is None:
            return
        if path == "/generate":
            self._generate(body)
        else:
            self._chat(body)

    do_PUT = do_POST

    def _meta_info(
        self, rid: str, prompt: str, ids: list[int], steps: int, finished: bool, created: float, max_new_tokens: int
    ) -> dict:
        meta = {
            "id": rid,
            "finish_reason": {"type": "length", "length": max_new_tokens} if finished else None,
            "prompt_tokens": len(prompt.split()),
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": len(ids),
            "cached_tokens": 0,
        }
        if finished:
            meta["e2e_latency"] = time.time() - created
            if self.engine.speculative and steps > 0:
                num_guess = (self.engine.server_args.get("speculative_num_draft_tokens") or 4) - 1
                accepted = len(ids) - steps
                meta.update(
                    {
                        "spec_accept_rate": accepted / (steps * num_guess) if num_guess else 0.0,
                        "spec_accept_length": len(ids) / steps,
                        "spec_accept_token_num": accepted,
                        "spec_draft_token_num": steps * num_guess,
                        "spec_verify_ct": steps,
                    }
                )
        return meta

    def _generate(self, body: dict) -> None:
        text = body.get("text")
        if text is None and body.get("input_ids") is not None:
            text = " ".join(str(i) for i in body["input_ids"])
        if not isinstance(text, str):
            self._send(400, {"error": {"message": "Either text or input_ids should be provided as a string"}})
            return
        params = body.get("sampling_params") or {}
        max_new_tokens = int(params.get("max_new_tokens", 128))
        rid = body.get("rid") or uuid.uuid4().hex
        created = time.time()
        if not body.get("stream"):
            *_, last = self.engine.generate(text, max_new_tokens)
            ids, out, steps, _ = last
            self._send(
                200,
                {
                    "text": out,
                    "output_ids": ids,
                    "meta_info": self._meta_info(rid, text, ids, steps, True, created, max_new_tokens),
                },
            )
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for ids, out, steps, finished in self.engine.generate(text, max_new_tokens):
            chunk = {
                "text": out,
                "output_ids": list(ids),
                "meta_info": self._meta_info(rid, text, ids, steps, finished, created, max_new_tokens),
            }
            self._write_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _chat(self, body: dict) -> None:
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 128)
        *_, last = self.engine.generate(prompt, max_tokens)
        ids, out, _, _ = last
        prompt_tokens = len(prompt.split())
        self._send(
            200,
            {
                "id": uuid.uuid4().hex,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "default"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": out, "reasoning_content": None, "tool_calls": None},
                        "logprobs": None,
                        "finish_reason": "length",
                        "matched_stop": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "total_tokens": prompt_tokens + len(ids),
                    "completion_tokens": len(ids),
                    "prompt_tokens_details": None,
                },
                "metadata": {"weight_version": "default"},
            },
        )


def launch_server(server_args: dict) -> None:
    # Like uvicorn under SGLang: SIGTERM (`docker stop`, `compose down`) shuts down at once. As PID 1 without a
    # handler, Python would ignore it and every stop would wait out the grace period.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    engine = Engine(server_args)
    speculative = engine.speculative
    _log(f"server_args={server_args}")
    for _ in range(int(os.environ.get("SGLANG_DOUBLE_WORKERS", "0"))):
        # Like SGLang's scheduler and detokenizer: children that do not exit when the server's own process does.
        body = "import time; time.sleep(3600)"
        if os.environ.get("SGLANG_DOUBLE_WORKERS_IGNORE_TERM") == "1":
            body = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
        worker = subprocess.Popen([sys.executable, "-c", body])
        _log(f"started worker process {worker.pid}")
    httpd = ThreadingHTTPServer((server_args["host"], server_args["port"]), type("H", (Handler,), {"engine": engine}))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _log(f"INFO:     Uvicorn running on http://{server_args['host']}:{server_args['port']} (Press CTRL+C to quit)")
    _log(f"Load weight begin. avail mem=0.00 GB (double, tp_size={server_args['tp_size']})")
    time.sleep(_env_float("SGLANG_DOUBLE_STARTUP_DELAY_S", 0.3))
    if _applies("SGLANG_DOUBLE_CRASH_AT_START", speculative):
        _log("Scheduler hit an exception: Traceback (most recent call last):")
        _log('  File "sglang/srt/managers/scheduler.py", line 2960, in run_scheduler_process')
        _log("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB (simulated by the double)")
        sys.exit(1)
    _log("Load weight end. elapsed=0.00 s, type=DoubleForCausalLM, avail mem=0.00 GB, mem usage=0.00 GB.")
    if _applies("SGLANG_DOUBLE_NEVER_HEALTHY", speculative):
        _log("Capture cuda graph begin. This can take up to several minutes.")
        while True:
            time.sleep(3600)
    _capture_graphs(server_args, speculative)
    engine.ready = True
    _log("The server is fired up and ready to roll!")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        httpd.shutdown()
