"""The fixed prompt set and the request phases (concurrency 1, then the configured concurrency)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from .client import Generation, SGLangClient
from .measure import PhaseStats, phase_stats

# Fixed, varied prompts: the same set in every run, so outputs and speeds compare across runs and images.
PROMPTS = (
    "Explain how speculative decoding keeps greedy outputs identical to the target model.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Summarize the causes of the French Revolution in three sentences.",
    "What is tensor parallelism, and when does it beat pipeline parallelism?",
    "Translate to German: The weather is nice today, let us go for a walk.",
    "List five prime numbers greater than one hundred and explain how you checked them.",
    "Describe the water cycle to a ten-year-old.",
    "Give a step-by-step proof that the square root of two is irrational.",
    "Draft a short, polite email asking a colleague to review a pull request.",
    "Compare TCP and UDP for a real-time multiplayer game.",
    "What does a key-value cache store in a transformer decoder, and why?",
    "Write a haiku about GPUs running out of memory.",
)
WARMUP_PROMPT = "Hello! Please introduce yourself in one sentence."


def prompt_set(count: int) -> list[str]:
    """`count` prompts; past the fixed set they repeat with a numbered suffix, so each stays distinct."""
    return [
        PROMPTS[i % len(PROMPTS)] + (f" (variant {i // len(PROMPTS)})" if i >= len(PROMPTS) else "")
        for i in range(count)
    ]


def warm_up(client: SGLangClient, max_new_tokens: int, requests: int = 2) -> list[Generation]:
    """The warm-up requests (the first one's TTFT is the start's first token)."""
    return [client.generate(WARMUP_PROMPT, min(max_new_tokens, 16)) for _ in range(requests)]


def run_phase(
    client: SGLangClient, prompts: list[str], concurrency: int, max_new_tokens: int
) -> tuple[PhaseStats, list[Generation]]:
    start = time.perf_counter()
    if concurrency == 1:
        results = [client.generate(p, max_new_tokens) for p in prompts]
    else:
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="smoke-request")
        try:
            results = list(pool.map(lambda p: client.generate(p, max_new_tokens), prompts))
        finally:
            # On Ctrl-C, don't wait for in-flight requests: removing the container ends them.
            pool.shutdown(wait=False, cancel_futures=True)
    wall = time.perf_counter() - start
    return phase_stats(results, concurrency, wall), results
