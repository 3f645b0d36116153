"""Property-based fuzzing of the matrix loader (hypothesis, derandomized: the same examples every run).

Generated stacks.yaml documents, valid ones and mutated ones (wrong types, unknown keys, ranges, bad
names, deep nesting, aliases, broken text, bytes that are not UTF-8), either load into `Stack`s or
raise `ConfigError` whose message is one line naming the file. Never another exception.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples

from sglstack.config.matrix import load_matrix
from sglstack.config.schema import Stack
from sglstack.core.errors import ConfigError

EXAMPLES = examples(150)
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NAMES = st.sampled_from(["cu130", "cu129", "a-b", "a__b", "a.b", "x" * 120, "a..b", "a-", "Cu130", "-a", "a b",
                         "", "1", "null", "true", "stacks", "é", "a\tb", "a/b"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.sampled_from(["0.5.9", "0.5.9+cu130", ">=0.5", "latest", "main", "==1.0", "1.0,<2", "*", "", " ",
                     "debian:bookworm-slim", "debian", "debian:latest", "img@sha256:" + "a" * 64, "3.12", "4.0",
                     "linux/amd64", "linux/riscv", "9.0", "10.0a", "sm90", "torch==2.9.1", "torch>=2",
                     "EAGLE3", "MEDUSA", "a\nb", "kimi-k25-eagle3", "no-such-patch", "0" * 40, "notice"]),
    st.text(max_size=12),
)
KEYS = st.sampled_from(["base_image", "sglang", "version", "git", "repo", "ref", "torch", "cuda", "python",
                        "platforms", "cuda_arch_list", "serving", "smoke", "model", "tp", "gpus", "port", "speculative",
                        "draft_model", "num_steps", "gates", "min_speedup", "publish", "repository",
                        "immutable_tag", "moving_tags", "overrides", "replaces", "pin", "reason", "patches",
                        "labels", "extra_layers", "name", "requirements", "inherits", "description", "bogus",
                        "patch_policy", "on_upstream", "sgl_kernel", "flashinfer", "packages", "env"])


def values(depth: int = 3) -> st.SearchStrategy[Any]:
    return st.recursive(SCALARS, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)), max_leaves=depth * 4)


def base_stack() -> dict[str, Any]:
    return {
        "base_image": "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04",
        "cuda": "13.0.1",
        "torch": {"version": "2.9.1+cu130", "index_url": "https://example.invalid/whl/cu130"},
        "sglang": {"version": "0.5.9"},
        "overrides": [{"replaces": "flashinfer_python==0.6.3", "pin": "flashinfer-python==0.6.4",
                       "reason": "fixes"}],
        "flashinfer": {"version": "0.6.4"},
        "patches": ["kimi-k25-eagle3"],
        "serving": {"model": "org/model", "tp": 8, "gpus": 8,
                    "speculative": {"draft_model": "org/draft", "num_steps": 3, "eagle_topk": 1,
                                    "num_draft_tokens": 4}},
    }


@st.composite
def mutated(draw, doc: Any, depth: int = 0) -> Any:
    """`doc` with a few changes: a value replaced, a key added or dropped, an object reused (an alias)."""
    if isinstance(doc, dict) and doc and depth < 6:
        out = dict(doc)
        for _ in range(draw(st.integers(0, 2))):
            action = draw(st.sampled_from(["replace", "add", "drop", "descend", "descend", "share"]))
            key = draw(st.sampled_from(sorted(out))) if out else None
            if key is None:
                break
            if action == "replace":
                out[key] = draw(values())
            elif action == "add":
                out[draw(KEYS)] = draw(values())
            elif action == "drop":
                del out[key]
            elif action == "descend":
                out[key] = draw(mutated(out[key], depth + 1))
            else:  # the same object under a second key: yaml.safe_dump writes it as an anchor and alias
                out[draw(KEYS)] = out[key]
        return out
    if isinstance(doc, list) and doc and depth < 6:
        out_list = list(doc)
        i = draw(st.integers(0, len(out_list) - 1))
        out_list[i] = draw(st.one_of(mutated(out_list[i], depth + 1), values()))
        return out_list
    return draw(st.one_of(st.just(doc), values()))


@st.composite
def documents(draw) -> bytes:
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    stacks: dict[str, Any] = {}
    for i, name in enumerate(names):
        stack = base_stack()
        if i and draw(st.booleans()):
            stack = {"inherits": draw(st.sampled_from([*names[:i], "missing", name])), "sglang": {"version": "0.5.10"}}
        stacks[name] = draw(mutated(stack)) if draw(st.booleans()) else stack
    doc: Any = {"stacks": stacks}
    if draw(st.booleans()):
        doc["defaults"] = draw(st.one_of(st.just({"python": "3.12"}), values()))
    kind = draw(st.sampled_from(["tree", "tree", "bomb", "deep", "text edit", "bytes", "top level"]))
    event(kind)
    if kind == "top level":
        doc = draw(st.one_of(values(), st.just([doc])))
    if kind == "bomb":  # nested sharing: every level is `width` aliases of the one below
        level: Any = draw(SCALARS)
        for _ in range(draw(st.integers(1, 9))):
            level = [level] * draw(st.integers(1, 9))
        doc.setdefault("defaults", {})
        if isinstance(doc["defaults"], dict):
            doc["defaults"][draw(KEYS)] = level
        else:
            doc["defaults"] = level
    if kind == "deep":
        nested: Any = draw(SCALARS)
        for _ in range(draw(st.integers(1, 120))):
            nested = (draw(st.sampled_from(["list", "dict"])) == "list" and [nested]) or {"k": nested}
        first = next(iter(stacks))
        stacks[first] = {**(stacks[first] if isinstance(stacks[first], dict) else {}), draw(KEYS): nested}
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    if kind == "text edit":
        at = draw(st.integers(0, len(text)))
        insert = draw(st.sampled_from(["\t", ":", "- ", "&a ", "*a", "? [a, b]\n: c\n", "<<: {}\n", "!!int x",
                                       "!custom ", "{", "]", "\x00", "\ufeff", "\u2028", "\n  ", "'", '"',
                                       "%YAML 1.1\n",
                                       "---\n", "...\n", "\r"]))
        text = text[:at] + insert + text[at:]
    data = text.encode("utf-8")
    if kind == "bytes":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at:]
    return data


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sglstack-fuzz-matrix-"))
    yield path
    shutil.rmtree(path)


@SETTINGS
@given(documents())
def test_a_matrix_loads_or_is_one_line_naming_the_file(workdir, data):
    path = workdir / "stacks.yaml"
    path.write_bytes(data)
    try:
        matrix = load_matrix(path)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and "\r" not in message
        assert message.startswith(str(path)) or message.startswith("stacks.yaml")
        event("refused")
        return
    event("loaded")
    assert matrix.stacks and all(isinstance(s, Stack) for s in matrix.stacks.values())
