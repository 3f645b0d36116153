"""A one-stack stacks.yaml with one key set in one section (serving, smoke, gates, speculative): the schema
tests' matrix, each bad value written where a user would write it."""

from __future__ import annotations

from pathlib import Path


def matrix_with(tmp_path: Path, section: str, key: str, value: str) -> Path:
    extra = {"serving": "", "smoke": "    smoke:\n", "gates": "    smoke:\n      gates:\n",
             "speculative": ""}[section]
    indent = {"serving": 6, "smoke": 6, "gates": 8, "speculative": 8}[section]
    speculative = ("      speculative: {draft_model: org/draft, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}\n"
                   if section != "speculative" else
                   "      speculative:\n        draft_model: org/draft\n        num_steps: 3\n        eagle_topk: 1\n"
                   "        num_draft_tokens: 4\n")
    text = ("stacks:\n  s:\n    base_image: debian:bookworm-slim\n    sglang:\n      version: 0.5.9\n"
            "    serving:\n      model: org/model\n" + speculative + extra
            + " " * indent + f"{key}: {value}\n")
    if section == "speculative":  # the key replaces the one above
        text = text.replace(f"        {key}: " + {"num_steps": "3", "eagle_topk": "1",
                                                 "num_draft_tokens": "4"}[key] + "\n", "", 1)
    path = tmp_path / "stacks.yaml"
    path.write_text(text)
    return path
