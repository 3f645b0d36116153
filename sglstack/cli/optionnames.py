"""One name for one meaning: every option name of every task, its meaning and the value it takes, declared once.

`OPTIONS` is the table (docs/options.md is written from it: `python3 -m sglstack.cli.optionnames`); the
tasks' help shows each option's value as `OPTIONS` names it (`--smoke-opt KEY=VALUE`, `--port INT`), and
`RENAMED` turns an old spelling into a one-line refusal naming the new one. Test:
tests/cli/test_option_names.py walks the collection: an option missing here, a name taken as a flag by one
task and with a value by another, two names of one meaning, or a stale docs/options.md fails it.
Standard library only: invoke imports this for every call.
"""

from __future__ import annotations

# task -> {old option: the option (and value) that replaced it}. Scripts written for the old spelling get
# `error: TASK: option --OLD is now --NEW` (exit 2) rather than a guess.
RENAMED: dict[str, dict[str, str]] = {
    "deploy": {"--target": "--on compose|k8s", "--no-gpus": "--gpus 0"},
    "rollback": {"--target": "--on compose|k8s"},
    # one meaning, one name: smoke --bisect-exit judges as bisect does
    "smoke": {"--bisect-metric": "--metric", "--bisect-threshold": "--threshold"},
    "bisect": {"--repeats": "--runs"},
    "patches.apply": {"--sglang-version": "--sglang"},
    # a private key signs, a public key verifies: two meanings, two names
    "build": {"--key": "--signing-key PEM"},
    "publish": {"--key": "--signing-key PEM"},
    "sbom": {"--key": "--verify-key PUB"},
    "verify-image": {"--key": "--verify-key PUB"},
}


def renamed(task: str, flag: str) -> str | None:
    """The refusal of `flag` (an old spelling of one of `task`'s options), or None."""
    new = RENAMED.get(task, {}).get(flag)
    return f"option {flag} is now {new}" if new else None
