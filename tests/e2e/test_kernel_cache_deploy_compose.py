# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""`invoke deploy --kernel-cache` (compose) through the real registry, end to end: the SGLang double pushed to a
real distribution 2.8, a kernel cache keyed for this deployment attached to its digest and signed; `deploy` with
`--verify-key` fetches it (nothing in this machine's store), the compose file's init service copies it into the
cache volume, and the running server sees the files where its cache variables point. A redeploy served another
way (another key) empties the volume, and the record says which field differed; undeploy removes it all."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
from pathlib import Path

import docker
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from deploy_fixtures import free_port, make_test_stack
from registry_fixtures import plain_registry  # noqa: F401 - fixture

from sglstack.adapters.compose import detect_compose
from sglstack.attest.kernelcache import attach_kernel_cache, cache_tag
from sglstack.config.imageref import Repository
from sglstack.core.safefiles import OutputNotWritable
from sglstack.deploy.deployment import Deployment
from sglstack.deploy.flow import deploy
from sglstack.deploy.health import COMPOSE_PROJECT_LABEL
from sglstack.deploy.kernelcache import deployment_key
from sglstack.deploy.lifecycle import undeploy
from sglstack.deploy.status import deployment_status
from sglstack.kernelcache import CONTAINER_CACHE_ROOT, LayoutStore, NodeGpu
from sglstack.publish import push_candidate
from sglstack.registry.client import RegistryClient
from sglstack.render import compose as cmp

pytestmark = pytest.mark.docker


@pytest.fixture
def deployment(tmp_path: Path):
    dep = Deployment(stack=make_test_stack(tmp_path), build_root=tmp_path / "build",
                     project=f"sglstack-test-kcache-{secrets.token_hex(4)}")
    yield dep
    client = docker.from_env()
    label = {"label": f"{COMPOSE_PROJECT_LABEL}={dep.project_name}"}
    compose_file = dep.out_dir / cmp.COMPOSE_FILE
    if compose_file.exists():
        subprocess.run([*detect_compose().argv, "-p", dep.project_name, "-f", str(compose_file), "down", "-v", "-t",
                        "1"], capture_output=True, check=False)
    for c in client.containers.list(all=True, filters=label):
        c.remove(force=True, v=True)
    for n in client.networks.list(filters=label):
        n.remove()
    for v in client.volumes.list(filters=label):
        with contextlib.suppress(docker.errors.APIError):
            v.remove(force=True)


def options(tmp_path: Path, **changes) -> cmp.ComposeOptions:
    (tmp_path / "hf-cache").mkdir(exist_ok=True)
    return cmp.ComposeOptions(**{"gpus": 0, "port": free_port(), "hf_cache": str(tmp_path / "hf-cache"),
                                 "start_period_s": 60, "healthcheck_interval_s": 1, "healthcheck_timeout_s": 2,
                                 "stop_grace_period_s": 1, "kernel_cache": True, **changes})


def server_cache_files(project: str) -> list[str]:
    (server,) = docker.from_env().containers.list(filters={"label": [f"{COMPOSE_PROJECT_LABEL}={project}",
                                                                     f"com.docker.compose.service={cmp.SERVICE}"]})
    code, out = server.exec_run(["find", CONTAINER_CACHE_ROOT, "-type", "f"])
    assert code == 0, out
    return sorted(out.decode().split())


def test_deploy_fetches_the_signed_cache_from_the_registry_into_the_servers_volume(
        deployment, plain_registry, sglang_double_image, docker_client, tmp_path):
    repo = Repository(plain_registry.host, f"sglstack-test/kcache-deploy-{secrets.token_hex(3)}")
    client = RegistryClient.from_environment(repo.registry)
    digest = push_candidate(docker_client, sglang_double_image, repo, "cand", client)
    served = options(tmp_path)
    key = deployment_key(cmp.deploy_spec(deployment.stack, served), digest, NodeGpu())
    made = tmp_path / "made" / "triton" / "k"
    made.mkdir(parents=True)
    (made / "a.cubin").write_bytes(b"kernel")
    store = LayoutStore(tmp_path / "smoke-machine-store")
    release = Ed25519PrivateKey.generate()
    public = tmp_path / "release.pub"
    public.write_bytes(release.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
    attach_kernel_cache(client, repo.path, digest, store, store.put(key, tmp_path / "made").manifest_digest, release)
    artifact = client.manifest_digest(repo.path, cache_tag(digest, key))

    said: list[str] = []
    record = deploy(deployment, repo.ref(digest), served, verify_key=str(public), say=said.append)
    assert record.result == "healthy"
    assert record.kernel_cache == (f"kernel cache: restored 1 files from {artifact[:19]} (key {key.digest()[:19]} "
                                   f"matched) (kernel cache {artifact[:19]} fetched from {repo.path})")
    assert record.kernel_cache in said
    assert server_cache_files(deployment.project_name) == [f"{CONTAINER_CACHE_ROOT}/triton/k/a.cubin"]
    # `invoke status` shows the server, not the init service's exited container, and the line restored.
    (row,) = deployment_status(build_root=deployment.build_root, project=deployment.project_name)
    assert (row.container.split("_")[-2], row.state, row.kernel_cache) == ("sglang", "running", record.kernel_cache)

    # A file in the way of the restored folder: one line, and the running deployment's files are put back.
    compose_file = deployment.out_dir / cmp.COMPOSE_FILE
    before = {p.name: p.read_bytes() for p in deployment.out_dir.iterdir() if p.is_file()}
    restored = deployment.out_dir / cmp.KERNEL_CACHE_FOLDER
    shutil.rmtree(restored)
    restored.write_text("not a folder")
    with pytest.raises(OutputNotWritable) as info:
        deploy(deployment, repo.ref(digest), options(tmp_path, eagle3=False), verify_key=str(public), say=said.append)
    assert str(info.value) == f"{restored}: cannot be written (a file is in the way of this folder)"
    assert {p.name: p.read_bytes() for p in deployment.out_dir.iterdir() if p.is_file() and p != restored} == before
    assert compose_file.name in before and server_cache_files(deployment.project_name) != []
    restored.unlink()

    # Served without EAGLE-3: another key. The volume (it outlives deployments) is emptied, said in one line.
    record = deploy(deployment, repo.ref(digest), options(tmp_path, eagle3=False), verify_key=str(public),
                    say=said.append)
    assert record.result == "healthy"
    assert record.kernel_cache == ("kernel cache: key differs in draft_model: this start has 'none', the artifact "
                                   "'test-org/tiny-eagle3' (and 1 more: serving_hash); starting cold")
    assert server_cache_files(deployment.project_name) == []

    # Before the init service carried the stack's label, its container made the redeploy above and this
    # undeploy refuse the project as another's. `down -v` takes the cache volume with it.
    assert undeploy(deployment, say=said.append) == 0
    label = {"label": f"{COMPOSE_PROJECT_LABEL}={deployment.project_name}"}
    assert docker.from_env().containers.list(all=True, filters=label) == []
    assert docker.from_env().volumes.list(filters=label) == []
