"""`invoke deploy --on k8s` as the k8s deploy tests run it (tests/cli/test_deploy_k8s*.py,
test_deploy_store_trust.py): through `invoke`, with the recording kubectl stand-in (tests/doubles/kubectl) on
PATH, and what it recorded read back: the argv of every call, the image applied, the deployment records."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_invoke

from sglstack.render import k8s

STACK = "cu130"
NAME = k8s.object_name(STACK)
A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
REPOSITORY = "127.0.0.1:5000/sglstack/sglang"


def deploy(env: dict[str, str], cwd: Path, digest: str, *extra: str, **more_env: str):
    return run_invoke("deploy", "--stack", STACK, "--on", "k8s", "--digest", digest, "--nnodes", "2",
                      *extra, cwd=cwd, env={**env, **more_env}, timeout=120)


def calls(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["KUBECTL_DOUBLE_STATE"]) / "argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def applied_image(env: dict[str, str], namespace: str = "default") -> str:
    path = Path(env["KUBECTL_DOUBLE_STATE"]) / "objects" / f"LeaderWorkerSet.{namespace}.{NAME}.json"
    obj = json.loads(path.read_text())
    return obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["image"]


def records(env: dict[str, str]) -> list[dict]:
    path = Path(env["SGLSTACK_BUILD_DIR"]) / STACK / "deployments.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]
