"""One name for one meaning: every option name of every task, its meaning and the value it takes, declared once.

`OPTIONS` is the table (docs/options.md is written from it: `python3 -m sglstack.cli.optionnames`); the
tasks' help shows each option's value as `OPTIONS` names it (`--smoke-opt KEY=VALUE`, `--port INT`), and
`RENAMED` turns an old spelling into a one-line refusal naming the new one. Test:
tests/cli/test_option_names.py walks the collection: an option missing here, a name taken as a flag by one
task and with a value by another, two names of one meaning, or a stale docs/options.md fails it.
Standard library only: invoke imports this for every call.
"""

from __future__ import annotations

from typing import NamedTuple


class Meaning(NamedTuple):
    value: str  # what the option takes, as help shows it: "" for a flag, INT / FLOAT for a number
    text: str  # what it means, the same in every task that has it


FLAG, INT, FLOAT = "", "INT", "FLOAT"
NUMBERS = (INT, FLOAT)

# option (as a parameter: `stacks_file` is --stacks-file) -> its meaning, one per name and one name per meaning
OPTIONS: dict[str, Meaning] = {
    # the matrix
    "stack": Meaning("NAME", "a stack of the matrix (repeatable where a task takes several)"),
    "stacks_file": Meaning("PATH", "the matrix file (default: stacks.yaml)"),
    "check": Meaning(FLAG, "validate the matrix and its pins"),
    "resolve": Meaning(FLAG, "also run the real resolver (uv)"),
    "upgrade_package": Meaning("PKG", "re-resolve only this package and what depends on it (repeatable)"),
    "sglang": Meaning("VERSION", "an SGLang release"),
    "as_": Meaning("NEW", "write the result as a new stack NEW"),
    "write": Meaning(FLAG, "edit the stacks file and write the lock (otherwise only report)"),
    # building
    "target": Meaning("STAGE", "a stage of the rendered Dockerfile to build alone"),
    "platform": Meaning("PLATFORM", "one platform of the stack: linux/amd64 or linux/arm64 (default: each, or its "
                                    "first where one is built at a time)"),
    "platform_digest": Meaning("PLATFORM=DIGEST", "one platform's pushed image, linux/arm64=sha256:... (repeatable)"),
    "tag": Meaning("TAG", "the tag to write under"),
    "no_cache": Meaning(FLAG, "build without BuildKit's cache"),
    "force": Meaning(FLAG, "do it even when it is already done (rebuild, re-point tags)"),
    "full_verify": Meaning(FLAG, "run every check of the image's verify again, reusing none"),
    "dry_run": Meaning(FLAG, "say what would be done, change nothing"),
    "push": Meaning(FLAG, "release: push a candidate, smoke it by digest, promote it"),
    "ca_bundle": Meaning("PATH", "an extra CA bundle for builds (also SGLSTACK_CA_BUNDLE)"),
    "docker_cli": Meaning("PATH", "the docker client binary with BuildKit (also SGLSTACK_DOCKER_CLI)"),
    "builder": Meaning("NAME", "the buildx builder instance"),
    "registry": Meaning("REPO", "a registry host or repository (default: the stack's publish.repository)"),
    "smoke_opt": Meaning("KEY=VALUE", "an option of the smoke a task runs, as smoke's own option KEY (repeatable)"),
    "out": Meaning("PATH", "where the output goes"),
    "print": Meaning(FLAG, "print the result instead of writing it"),
    "run": Meaning(FLAG, "run the printed command too"),
    # images and what they hold
    "image": Meaning("IMAGE", "an image reference: tag, id or REPO@sha256:..."),
    "ref": Meaning("IMAGE", "an image in its registry: REPO:TAG or REPO@sha256:..."),
    "before": Meaning("IMAGE|RECORD|LOCK", "the first of two things to compare"),
    "after": Meaning("IMAGE|RECORD|LOCK", "the second of two things to compare"),
    "generate": Meaning(FLAG, "list the image itself, whatever the registry has attached"),
    "digest": Meaning("DIGEST", "a manifest digest, sha256:... (or REPO@sha256:...)"),
    "config_hash": Meaning("HASH", "an image's config hash"),
    # signatures
    "signing_key": Meaning("PEM", "the ed25519 private key that signs (also SGLSTACK_SIGNING_KEY)"),
    "verify_key": Meaning("PUB", "the ed25519 public key (PEM) an image's signature must verify against"),
    "unsigned": Meaning(FLAG, "release without a signature, said out loud"),
    # where things run
    "docker_host": Meaning("URL", "the Docker engine (default: DOCKER_HOST / the local socket)"),
    "on": Meaning("compose|k8s", "where a deployment runs"),
    "context": Meaning("NAME", "the kubectl context (default: the current one)"),
    "namespace": Meaning("NAME", "the Kubernetes namespace"),
    # serving
    "model": Meaning("PATH|REPO", "the target model: a path or a Hugging Face repo"),
    "draft_model": Meaning("PATH|REPO", "the EAGLE-3 draft model: a path or a Hugging Face repo"),
    "tp": Meaning(INT, "tensor parallel size"),
    "gpus": Meaning(INT, "GPUs per server (per node); 0: none, for CPU hosts and test doubles"),
    "port": Meaning(INT, "a TCP port on the host"),
    "nnodes": Meaning(INT, "nodes that serve one model together"),
    "node_rank": Meaning(INT, "this node's rank, 0..nnodes-1"),
    "dist_init_addr": Meaning("HOST:PORT", "node 0's address for multi-node serving"),
    "replicas": Meaning(INT, "groups, each serving the whole model"),
    "host_network": Meaning(FLAG, "pods use the node's network"),
    "rdma": Meaning("RESOURCE[=COUNT]", "an RDMA device-plugin resource per pod"),
    "hf_cache": Meaning("PATH", "the host folder of the Hugging Face cache"),
    "hf_token_secret": Meaning("NAME", "the Kubernetes Secret holding HF_TOKEN"),
    "image_pull_secret": Meaning("NAME", "the Kubernetes Secret (a Docker config) the pods pull the image with"),
    "mount": Meaning("HOST:CONTAINER[:ro]", "a bind mount of a host folder into the server (repeatable)"),
    "env": Meaning("NAME=VALUE", "an environment variable of the server (repeatable)"),
    "label": Meaning("NAME=VALUE", "a label on the server containers (repeatable)"),
    "eagle3": Meaning(FLAG, "serve with the stack's speculative (EAGLE-3) settings (--no-eagle3: without)"),
    "restart": Meaning("POLICY", "the restart policy: no, always, on-failure, unless-stopped"),
    "env_file": Meaning("PATH", "an env file with HF_TOKEN"),
    "start_period": Meaning(INT, "seconds the server may take to start before health checks count"),
    "health_interval": Meaning(INT, "seconds between health checks"),
    "timeout": Meaning(FLOAT, "seconds each server may take to answer /health_generate"),
    "wait_timeout": Meaning(FLOAT, "seconds to wait for a deployment's /health"),
    "skip_preflight": Meaning(FLAG, "do not run `invoke preflight` on the GPU node first"),
    "tail": Meaning(INT, "only the last N lines"),
    # measuring
    "concurrency": Meaning(INT, "the higher concurrency measured after concurrency 1"),
    "concurrency_levels": Meaning("LEVELS", "the concurrency levels served (e.g. 1,4,16): each measured and gated"),
    "sweep": Meaning("SETTINGS", "EAGLE-3 settings to serve and judge in one run, STEPS:TOPK:DRAFT_TOKENS,..."),
    "num_prompts": Meaning(INT, "prompts per measured run"),
    "max_new_tokens": Meaning(INT, "tokens generated per request"),
    "runs": Meaning(INT, "measured runs per server start, the cache flushed before each"),
    "metric": Meaning("METRIC", "what is compared: baseline, eagle3, speedup, accept_length"),
    "threshold": Meaning(FLOAT, "the smallest change that counts, in percent"),
    "min_speedup": Meaning(FLOAT, "gate: EAGLE-3 tok/s over baseline tok/s at least"),
    "min_accept_length": Meaning(FLOAT, "gate: accept length at least"),
    "min_agreement": Meaning(FLOAT, "gate: share of identical greedy outputs at least"),
    "max_regression": Meaning(FLOAT, "gate: tok/s drop against the stack's last passing run at most (0.05 = 5%)"),
    "report": Meaning("PATH", "where the smoke report (JSON) is written"),
    "smoke_report": Meaning("PATH", "the smoke report that passed a digest"),
    "no_history": Meaning(FLAG, "neither compare with nor append to the stack's smoke history"),
    "bisect_exit": Meaning("BASELINE", "for `git bisect run`: exit 0 good, 1 bad, 125 skip against BASELINE"),
    "runner": Meaning("docker|process", "how the server runs"),
    "python_env": Meaning("PATH", "a venv or prefix whose bin/python3 runs the server"),
    "kernel_cache": Meaning(FLAG, "kernel caches: smoke packs what a passing start filled, deploy restores a match"),
    "warm_start": Meaning(FLAG, "measure a second start with the kernel cache restored"),
    "cache_store": Meaning("PATH", "an OCI image layout folder of kernel-cache artifacts"),
    "max_warm_start_s": Meaning(FLOAT, "gate: seconds the warm start may take to healthy at most"),
    "no_warm_compile": Meaning(FLAG, "gate: the warm start compiles nothing (adds or rewrites no kernel cache file)"),
    "max_start_regression": Meaning(FLOAT, "gate: cold-start slowdown against the last passing run at most"),
    "precompile_deep_gemm": Meaning(FLAG, "run sglang.compile_deep_gemm into the kernel cache before each cold start"),
    "sizes": Meaning("SIZES", "all-reduce message sizes, e.g. 1M,64M,1G"),
    "good": Meaning("REF", "the last known good SGLang ref"),
    "bad": Meaning("REF", "the first known bad SGLang ref"),
    "max_batches": Meaning(INT, "server starts per ref at most"),
    # patches
    "root": Meaning("PATH", "the folder holding the sglang/ package"),
    "patch": Meaning("ID", "one patch"),
    "manifest": Meaning("PATH", "the JSON record of what patches.apply applied"),
    # the registry
    "older_than_days": Meaning(FLOAT, "only what is older than this many days"),
    # reporting (issue 36: --json prints JSON alone on stdout, --json-out PATH writes it, -o wide every column)
    "json": Meaning(FLAG, "print the result as JSON alone on stdout"),
    "json_out": Meaning("PATH", "also write the result as JSON to PATH"),
    "output": Meaning("wide", "wide: every column, however wide the terminal"),
    # the tests
    "all": Meaning(FLAG, "every test tier, as CI runs it"),
    "pytest": Meaning("ARGS", "more pytest arguments, one string"),
}

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


def renamed_elsewhere(flag: str, options) -> str:
    """`; did you mean '--NEW'?` where another task renamed `flag` to an option this task has (`deploy --key`:
    build's --key is --signing-key, sbom's is --verify-key, and deploy has --verify-key), else ""."""
    for task in sorted(RENAMED):
        new = RENAMED[task].get(flag, "").split(" ")[0]
        if new in options:
            return f"; did you mean '{new}'?"
    return ""

# One example per task, shown at the end of its help (`invoke TASK -h`); the test checks each one parses.
EXAMPLES: dict[str, str] = {
    "bake": "invoke bake --stack cu130 --stack cu129 --print",
    "bisect": "invoke bisect --stack cu130 --good 0.5.5 --bad 0.5.6 --metric speedup --runs 5",
    "build": "invoke build --stack cu130 --dry-run",
    "coverage": "invoke coverage --stack cu130",
    "deploy": "invoke deploy --stack cu130 --digest sha256:... --on k8s --nnodes 2",
    "diff": "invoke diff build/cu129/build-record.json build/cu130/build-record.json",
    "lock": "invoke lock --stack cu130 --upgrade-package numpy",
    "logs": "invoke logs --stack cu130 --tail 100",
    "patches.apply": "invoke patches.apply --root /opt/venv/lib/python3.12/site-packages --stack cu130",
    "patches.check": "invoke patches.check --sglang 0.5.6",
    "patches.list": "invoke patches.list",
    "patches.verify": "invoke patches.verify --root /opt/venv/lib/python3.12/site-packages --stack cu130",
    "preflight": "invoke preflight --stack cu130 --image registry.example/sglstack:cu130",
    "publish": "invoke publish --stack cu130 --digest sha256:... --signing-key release.pem",
    "publish-index": "invoke publish-index --stack pypi-cu130-gb --tag candidate-gb --platform-digest "
                     "linux/amd64=sha256:... --platform-digest linux/arm64=sha256:...",
    "registry.cleanup": "invoke registry.cleanup --older-than-days 7 --dry-run",
    "registry.down": "invoke registry.down",
    "registry.up": "invoke registry.up --port 5000",
    "releases": "invoke releases --stack cu130",
    "render": "invoke render --stack cu130 --out /tmp/cu130",
    "rollback": "invoke rollback --stack cu130",
    "seed-base": "invoke seed-base --stack pypi-cu130-gb --platform linux/arm64",
    "sbom": "invoke sbom registry.example/sglstack:cu130 --verify-key release.pub",
    "size": "invoke size --stack cu130",
    "smoke": "invoke smoke --stack cu130 --image sglstack:cu130 --mount ~/.cache/huggingface:/root/.cache/huggingface",
    "stacks": "invoke stacks --check",
    "status": "invoke status",
    "test": 'invoke test --pytest "-k render -x"',
    "undeploy": "invoke undeploy --stack cu130",
    "upgrade": "invoke upgrade --stack cu130 --sglang 0.5.6 --as cu130-056",
    "verify-image": "invoke verify-image registry.example/sglstack:cu130 --verify-key release.pub --stack cu130",
}


def option_uses(collection) -> dict[str, dict[str, list[str]]]:
    """option -> {"tasks": the tasks that have it, "flags": its spellings}, from an invoke collection."""
    uses: dict[str, dict[str, list[str]]] = {}
    for task in sorted(collection.task_names):
        for arg in collection[task].get_arguments():
            entry = uses.setdefault(arg.name, {"tasks": [], "flags": []})
            entry["tasks"].append(task)
            for name in arg.names:
                flag = f"-{name}" if len(name) == 1 else f"--{name}"
                if flag not in entry["flags"]:
                    entry["flags"].append(flag)
    return uses


def options_table(uses: dict[str, dict[str, list[str]]]) -> str:
    """docs/options.md: every option of every task, what it takes and means, and the renamed ones."""
    lines = [
        "# Options: one name, one meaning",
        "",
        "Every option of every task, with what it takes and what it means: the same in every task that has it.",
        "Written from `sglstack/cli/optionnames.py` by `python3 scripts/options_table.py` (do not edit; a test",
        "fails when this page is out of date). `invoke TASK -h` shows a task's own options and an example.",
        "",
        "| option | takes | meaning | tasks |",
        "|---|---|---|---|",
    ]
    for name in sorted(uses, key=lambda n: uses[n]["flags"][0].lstrip("-")):
        meaning = OPTIONS.get(name, Meaning("?", "?"))
        flags = ", ".join(f"`{f}`" for f in sorted(uses[name]["flags"], key=len, reverse=True))
        takes = f"`{meaning.value}`".replace("|", "\\|") if meaning.value else "(a flag)"  # a | ends a cell
        lines.append(f"| {flags} | {takes} | {meaning.text.replace('|', '/')} | {', '.join(uses[name]['tasks'])} |")
    lines += ["", "## Renamed", "", "An old spelling is refused with one line naming the new one (exit 2).", "",
              "| task | was | now |", "|---|---|---|"]
    for task in sorted(RENAMED):
        for old, new in sorted(RENAMED[task].items()):
            lines.append(f"| {task} | `{old}` | `{new}` |")
    return "\n".join(lines) + "\n"
