"""A small HTTP client for SGLang's native API: /health_generate, /generate (streamed), /get_server_info."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import requests

from ..core.inputs import loads


@dataclass(frozen=True)
class Generation:
    """One /generate request as the client saw it."""

    prompt: str
    text: str = ""
    completion_tokens: int = 0
    ttft_s: float | None = None
    latency_s: float = 0.0
    spec_verify_ct: int | None = None
    meta_info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.completion_tokens > 0


class SGLangClient:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"

    def close(self) -> None:
        self.session.close()

    def health_generate(self, *, timeout: float = 30.0) -> int | None:
        """The status of GET /health_generate, or None when nothing answers yet."""
        try:
            return self.session.get(f"{self.base_url}/health_generate", timeout=timeout).status_code
        except requests.RequestException:
            return None

    def flush_cache(self) -> bool:
        """POST /flush_cache (GET on servers that only route GET): True once the radix cache is empty."""
        try:
            resp = self.session.post(f"{self.base_url}/flush_cache", timeout=30)
            if resp.status_code in (404, 405):
                resp = self.session.get(f"{self.base_url}/flush_cache", timeout=30)
        except requests.RequestException:
            return False
        return resp.status_code == 200

    def server_info(self) -> dict[str, Any]:
        resp = self.session.get(f"{self.base_url}/get_server_info", timeout=30)
        resp.raise_for_status()
        return resp.json()

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        """A greedy, streamed /generate: TTFT is the arrival of the first chunk that carries text."""
        body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}, "stream": True}
        start = time.perf_counter()
        ttft = None
        last: dict[str, Any] | None = None
        try:
            with self.session.post(f"{self.base_url}/generate", json=body, stream=True, timeout=self.timeout) as resp:
                if resp.status_code != 200:
                    return Generation(
                        prompt,
                        error=f"HTTP {resp.status_code}: {resp.text[:200]}",
                        latency_s=time.perf_counter() - start,
                    )
                for line in resp.iter_lines(decode_unicode=True):
                    if not line or not line.startswith("data:"):
                        continue
                    data = line[len("data:") :].strip()
                    if data == "[DONE]":
                        break
                    chunk = loads(data)
                    if "error" in chunk:
                        return Generation(
                            prompt, error=str(chunk["error"])[:200], latency_s=time.perf_counter() - start
                        )
                    if ttft is None and chunk.get("text"):
                        ttft = time.perf_counter() - start
                    last = chunk
        except (requests.RequestException, ValueError) as exc:
            return Generation(
                prompt, error=f"{type(exc).__name__}: {str(exc)[:200]}", latency_s=time.perf_counter() - start
            )
        latency = time.perf_counter() - start
        if last is None:
            return Generation(prompt, error="the stream ended without output", latency_s=latency)
        meta = last.get("meta_info") or {}
        return Generation(
            prompt,
            text=last.get("text", ""),
            completion_tokens=int(meta.get("completion_tokens", 0)),
            ttft_s=ttft,
            latency_s=latency,
            spec_verify_ct=meta.get("spec_verify_ct"),
            meta_info=meta,
        )
