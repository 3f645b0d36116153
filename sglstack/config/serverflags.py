"""The SGLang flags of the serving argv that sglstack writes itself, and what serving.extra_args may not hold.

`serving.serving_argv` writes the flags named here from the serving spec (the model, TP, where the server
listens, the speculative settings, the node placement): the report, the labels, the compose file and the
gates are about those values. A second copy in extra_args would win (argparse keeps the last value), so
the report would name one model, port or draft while another is served: every spelling that reaches one
of them is refused, SGLang's own aliases and argparse's abbreviations (any unique prefix of a long flag)
included. All `--speculative-*` flags are the spec's: extra_args go to both smoke runs, and speculation is
the one thing that tells them apart.

The value of a secret flag (`core.credentials.SECRET_FLAGS`) would be written into compose.yaml and the
manifests: extra_args take it only as a `${NAME}` reference, like a secret-named key of serving.env.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.credentials import secret_reference, secret_slots

MODEL_PATH = "--model-path"
TP_SIZE = "--tp-size"
HOST = "--host"
PORT = "--port"
SPECULATIVE_ALGORITHM = "--speculative-algorithm"
SPECULATIVE_DRAFT_MODEL_PATH = "--speculative-draft-model-path"
SPECULATIVE_NUM_STEPS = "--speculative-num-steps"
SPECULATIVE_EAGLE_TOPK = "--speculative-eagle-topk"
SPECULATIVE_NUM_DRAFT_TOKENS = "--speculative-num-draft-tokens"
NNODES = "--nnodes"
NODE_RANK = "--node-rank"
DIST_INIT_ADDR = "--dist-init-addr"
SPECULATIVE_PREFIX = "--speculative-"

# Where each comes from (the refusal says so).
OWNED_FLAGS: dict[str, str] = {
    MODEL_PATH: "set from serving.model",
    TP_SIZE: "set from serving.tp",
    HOST: "the server listens on 0.0.0.0 (for the port mapping and the other nodes)",
    PORT: "set from serving.port",
    SPECULATIVE_ALGORITHM: "set from serving.speculative.algorithm",
    SPECULATIVE_DRAFT_MODEL_PATH: "set from serving.speculative.draft_model",
    SPECULATIVE_NUM_STEPS: "set from serving.speculative.num_steps",
    SPECULATIVE_EAGLE_TOPK: "set from serving.speculative.eagle_topk",
    SPECULATIVE_NUM_DRAFT_TOKENS: "set from serving.speculative.num_draft_tokens",
    NNODES: "set from the deploy option --nnodes",
    NODE_RANK: "set from the deploy option --node-rank",
    DIST_INIT_ADDR: "set from the deploy option --dist-init-addr",
}
SPECULATIVE_FAMILY = ("speculative decoding is set from serving.speculative (the baseline run is the same server "
                      "without it)")
# SGLang's other names for them (server_args.py, 0.5.x: `add_argument("--model-path", "--model", ...)`).
ALIASES: dict[str, str] = {
    "--model": MODEL_PATH,
    "--tensor-parallel-size": TP_SIZE,
    "--nccl-init-addr": DIST_INIT_ADDR,
    "--speculative-draft-model": SPECULATIVE_DRAFT_MODEL_PATH,
}
# SGLang's `--config FILE` merges a YAML file's keys into the argv it parses (server_args.py,
# `prepare_server_args`): any owned flag, a speculative one for the baseline run, a secret, all out of sight.
CONFIG_FILE = "--config"
CONFIG_FILE_WHY = (f"'{CONFIG_FILE}' makes SGLang read its flags from a file, where sglstack cannot see which of "
                   "its own (the model, the port, speculative decoding) or which secrets it sets: give each flag in "
                   "extra_args itself")
SPACED_WHY = ("holds a flag and a space in one word, which SGLang takes for no flag at all: give each flag and each "
              "value as its own list element")


def flag_of(word: str) -> str | None:
    """`--name` of a word that is a long option (`--name` or `--name=value`); None for a value or `--`."""
    if not word.startswith("--") or len(word) < 3 or word.startswith("---"):
        return None
    return word.partition("=")[0]


def owned_flag(flag: str) -> str | None:
    """The flag sglstack writes that `flag` would set in SGLang's parser (itself, an alias, or an argparse
    abbreviation of either); None when it sets none of them. `_` reads as `-` (`--model_path`): argparse
    would refuse it, a parser that maps one to the other would take it, and it never means another flag."""
    flag = "--" + flag[2:].replace("_", "-")
    if flag.startswith(SPECULATIVE_PREFIX):
        return ALIASES.get(flag, flag)
    for name in (*OWNED_FLAGS, *ALIASES):
        if name.startswith(flag):
            return ALIASES.get(name, name)
    return None


def extra_args_problem(args: Sequence[str], *, secrets: bool = True) -> tuple[int, str] | None:
    """(index, why) of the first word of `args` that extra_args may not hold; None when all may be passed.

    `secrets`: also refuse a secret flag's literal value (a stack's extra_args are written into files; a
    smoke's own `--extra-args` are not, and are hidden in its logs and reports).
    """
    # A secret flag's literal value, by the index of the flag itself (`--api-key V` or `--api-key=V`).
    literal = {slot.index - (0 if slot.text else 1): slot.flag for slot in secret_slots(args)
               if secrets and secret_reference(slot.value) is None}
    for i, word in enumerate(args):
        flag = flag_of(word)
        if flag is None:
            continue
        if any(c.isspace() for c in flag):
            return i, SPACED_WHY
        if len(flag) >= 4 and CONFIG_FILE.startswith(flag):
            return i, CONFIG_FILE_WHY
        owned = owned_flag(flag)
        if owned is not None:
            spelled = "" if flag == owned else f" (SGLang reads it as {owned})"
            return i, (f"'{flag}'{spelled} is sglstack's to set: {OWNED_FLAGS.get(owned, SPECULATIVE_FAMILY)}; "
                       "extra_args may not set it again (the server would run with another value than the one "
                       "reported)")
        if i in literal:
            return i, (f"'{flag}' takes a secret, so its value must be a reference like '{literal[i]} ${{NAME}}' "
                       "(from the deploy environment, the Kubernetes Secret, or smoke's own environment), "
                       "not a value written into compose.yaml and the manifests")
    return None
