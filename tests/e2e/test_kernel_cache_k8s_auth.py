# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""`invoke deploy --on k8s --kernel-cache --image-pull-secret NAME` with a private registry (real distribution
2.8: htpasswd, i.e. Basic, and `auth: token`, i.e. Bearer from a token service): the deploy finds the image's
kernel caches with this machine's credentials, renders the manifests with no credential in them, and the init
container it rendered, run as a process with its volumes mapped to folders (the pull Secret's Docker config
as the kubelet mounts it), fetches the artifact with the Secret's credentials; without them, or with wrong
ones, it says so in one line, leaves the cache empty and exits 0 (the server starts cold)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from registry_fixtures import htpasswd_registry, tiny_image, token_registry  # noqa: F401 - fixtures

from sglstack.attest.kernelcache import attach_kernel_cache
from sglstack.config.imageref import Repository
from sglstack.config.matrix import load_matrix
from sglstack.deploy.kernelcache import deployment_key, k8s_caches, restore_for_compose
from sglstack.kernelcache import LayoutStore, NodeGpu
from sglstack.publish import push_candidate
from sglstack.registry.client import RegistryClient
from sglstack.render import k8s
from sglstack.render.compose import ComposeOptions, deploy_spec
from sglstack.render.k8s_cache import DOCKER_CONFIG_DIR

pytestmark = pytest.mark.docker
SECRET = "regcred"


def docker_config(host: str, user: str, password: str) -> dict:
    """What `kubectl create secret docker-registry` puts under key .dockerconfigjson (and `docker login` writes)."""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"auths": {host: {"username": user, "password": password, "auth": auth}}}


@pytest.fixture(params=["htpasswd", "token"])
def private(request):
    """(registry, what its anonymous 401 makes the init container say) of each kind of private registry."""
    if request.param == "htpasswd":
        return request.getfixturevalue("htpasswd_registry"), "it asks for credentials (HTTP 401)"
    return request.getfixturevalue("token_registry")[0], "its token service answered HTTP 401"


@pytest.fixture
def deployed(private, tiny_image, docker_client, repo_root, tmp_path, monkeypatch):
    """The rendered LWS of a deployment whose image and kernel cache are in the private registry."""
    reg, _ = private
    deployer = tmp_path / "deployer"
    deployer.mkdir()
    (deployer / "config.json").write_text(json.dumps(docker_config(reg.host, reg.user, reg.password)))
    monkeypatch.setenv("DOCKER_CONFIG", str(deployer))
    monkeypatch.delenv("SGLSTACK_REGISTRY_USER", raising=False)
    monkeypatch.delenv("SGLSTACK_REGISTRY_PASSWORD", raising=False)
    repo = Repository(reg.host, f"sglstack-test/kcache-auth-{secrets.token_hex(3)}")
    client = RegistryClient.from_environment(repo.registry)
    digest = push_candidate(docker_client, tiny_image, repo, "cand", client)
    stack = load_matrix(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml").get("cpu-test")
    options = k8s.K8sOptions(kernel_cache=True, image_pull_secret=SECRET)
    spec = k8s.k8s_spec(stack, options)
    made = tmp_path / "made" / "triton"
    made.mkdir(parents=True)
    (made / "a.cubin").write_bytes(b"kernel of " + digest.encode())
    store = LayoutStore(tmp_path / "smoke-store")
    artifact = store.put(deployment_key(spec, digest, NodeGpu()), tmp_path / "made").manifest_digest
    attach_kernel_cache(client, repo.path, digest, store, artifact, None)
    said: list[str] = []
    caches = k8s_caches(spec, repo.ref(digest), None, said.append)
    assert len(caches.candidates) == 1 and said[0].startswith(f"kernel cache: 1 artifact(s) of {digest[:19]} match")
    text = k8s.render_k8s(stack, repo.ref(digest), options, caches=caches)[k8s.LWS_FILE]
    for shown in (text, *said):  # no credential of the deploying machine reaches the manifest or the output
        assert reg.password not in shown
        assert base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode() not in shown
    pod = yaml.safe_load(text)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    return SimpleNamespace(pod=pod, digest=digest, repo=repo, client=client, stack=stack, spec=spec)


def run_init_container(pod: dict, tmp_path: Path, secret: dict | None) -> tuple[str, list[str]]:
    """The pod's init container as a process: each volume mount a folder (the pull Secret's, when it exists, holds
    its .dockerconfigjson as config.json, as the kubelet's `items` put it); (its output, the cache's files)."""
    init = pod["initContainers"][0]
    assert init["command"][:2] == ["python3", "-c"]
    folders = {m["mountPath"]: tmp_path / "pod" / m["name"] for m in init["volumeMounts"]}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    if secret is not None:
        (folders[DOCKER_CONFIG_DIR] / "config.json").write_text(json.dumps(secret))
    env = {e["name"]: str(folders.get(e["value"], e["value"])) for e in init["env"]}
    env["PATH"] = str(tmp_path / "no-nvidia-smi")  # a node without GPUs: its key's GPU fields are "none"
    done = subprocess.run([sys.executable, "-c", init["command"][2]], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stderr == ""
    cache = folders["/cache"]
    return done.stdout.strip(), sorted(str(Path(d, f).relative_to(cache)) for d, _, fs in os.walk(cache) for f in fs)


def test_the_init_container_fetches_with_the_pull_secret_and_says_so_without_it(private, deployed, tmp_path):
    reg, anonymous = private
    pod, digest = deployed.pod, deployed.digest
    assert pod["imagePullSecrets"] == [{"name": SECRET}]
    folder = tmp_path / "pod" / "kernel-cache-pull-secret"

    line, files = run_init_container(pod, tmp_path, docker_config(reg.host, reg.user, reg.password))
    assert line.startswith("kernel cache: restored 1 files from sha256:") and line.endswith("on this node)")
    assert files == ["triton/a.cubin"]
    assert (tmp_path / "pod" / "kernel-cache" / "triton" / "a.cubin").read_bytes() == b"kernel of " + digest.encode()

    # The Secret is missing (the volume is optional: the pod starts): no credentials, cold, one line.
    (folder / "config.json").unlink()
    line, files = run_init_container(pod, tmp_path, None)
    assert line == (f"kernel cache: not restored (registry {reg.host}: {anonymous}, and the Docker config in "
                    f"{folder} has no credentials for it); starting cold")
    assert files == []

    wrong = "wrong-" + secrets.token_hex(6)
    line, files = run_init_container(pod, tmp_path, docker_config(reg.host, reg.user, wrong))
    refused = "the blob was refused (HTTP 401)" if anonymous.startswith("it asks") else \
        "its token service answered HTTP 401"
    assert line == (f"kernel cache: not restored (registry {reg.host}: {refused} with the credentials of the "
                    f"Docker config in {folder}); starting cold")
    assert files == [] and wrong not in line


def test_the_deploying_machines_lookup_and_compose_restore_use_its_credentials_and_say_when_it_has_none(
        private, deployed, tmp_path, monkeypatch):
    reg, _ = private
    repo, digest = deployed.repo, deployed.digest
    compose_spec = deploy_spec(deployed.stack, ComposeOptions(kernel_cache=True))
    made = tmp_path / "compose-made" / "triton"
    made.mkdir(parents=True)
    (made / "b.cubin").write_bytes(b"compose kernel")
    store = LayoutStore(tmp_path / "compose-store")
    key = deployment_key(compose_spec, digest, NodeGpu())
    attach_kernel_cache(deployed.client, repo.path, digest, store, store.put(key, made.parent).manifest_digest, None)
    out = tmp_path / "deploy" / "cpu-test"
    said: list[str] = []
    line = restore_for_compose(tmp_path / "deploy", "cpu-test", out, compose_spec, repo.ref(digest), digest,
                               local=True, verify_key=None, say=said.append)
    assert line.startswith("kernel cache: restored 1 files from sha256:") and line.endswith(f"from {repo.path})")
    assert (out / "kernel-cache-restored" / "triton" / "b.cubin").read_bytes() == b"compose kernel"

    # This machine has no credentials for the registry: each lookup is one line that says so, and how to log in.
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nobody"))
    none = (f"registry {reg.host}: authentication required and no credentials found (set SGLSTACK_REGISTRY_USER/"
            f"SGLSTACK_REGISTRY_PASSWORD or run `docker login {reg.host}`)")
    assert k8s_caches(deployed.spec, repo.ref(digest), None, said.append).candidates == ()
    assert said[-1] == f"kernel cache: not looked up ({none}); starting cold"
    line = restore_for_compose(tmp_path / "deploy2", "cpu-test", out, compose_spec, repo.ref(digest), digest,
                               local=True, verify_key=None, say=said.append)
    assert line == f"kernel cache: not fetched ({none}); starting cold"
    assert not any((out / "kernel-cache-restored").iterdir())
