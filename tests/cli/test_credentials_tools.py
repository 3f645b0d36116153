"""Credentials in stacks.yaml URLs reach the real tools that need them, and nothing they write.

A private index and git repository behind HTTP basic auth (tests/lib/auth_index.py) answer 401 without the
right header, so every pass here means the tool got the credentials: uv (`invoke lock`) and pip
(coverage's wheel download) from a netrc in memory named in their environment, git from an auth header
in its environment, pip inside a real BuildKit build from the `index_netrc` secret. Then the lock, the
coverage report, the git cache, the build log, the record, the context and the image (history, config,
layers, /opt/sglstack/stack.json) are searched for the password.
"""

from __future__ import annotations

import io
import ipaddress
import json
import secrets
import shutil
import ssl
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from auth_index import AuthIndex, bare_repo_with_commit, make_wheel
from clirun import REPO, run_invoke
from engine_refs import free_port

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError

CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
USER = "alice"


@pytest.fixture
def password() -> str:
    return f"pw-{secrets.token_hex(8)}"


def write_matrix(path: Path, **changes) -> Path:
    data = yaml.safe_load(CPU_MATRIX.read_text())
    stack = {**data["stacks"]["cpu-test"], "patches": [], **changes}
    data["stacks"] = {"cpu-test": stack}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def files_holding(root: Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.fixture
def index(password):
    served = AuthIndex("127.0.0.1", 0, USER, password)
    file, data = make_wheel("sglstack-probe", "1.0")
    served.wheels[file] = data
    served.start()
    yield served
    served.stop()


@pytest.fixture
def public_index():
    """What uv's default index (PyPI) is to a stack: SGLang, without credentials."""
    served = AuthIndex("127.0.0.1", 0, "nobody", "-", require_auth=False)
    file, data = make_wheel("sglang", "0.5.9")
    served.wheels[file] = data
    served.start()
    yield served
    served.stop()


# ---- uv (invoke lock) ------------------------------------------------------------------------------

def lock(tmp_path: Path, default: AuthIndex, private_index: str) -> tuple[subprocess.CompletedProcess, Path]:
    matrix = write_matrix(tmp_path / "stacks.yaml", extra_layers=[
        {"name": "private", "requirements": ["sglstack-probe==1.0"], "index_url": private_index}])
    proc = run_invoke("lock", "--stack", "cpu-test", "--stacks-file", str(matrix), cwd=tmp_path,
                      env={"UV_DEFAULT_INDEX": default.url("/simple", credentials=False),
                           "UV_CACHE_DIR": str(tmp_path / "uv-cache")}, timeout=300)
    return proc, tmp_path / "locks" / "cpu-test.txt"


def test_uv_gets_the_index_credentials_and_the_lock_holds_none(tmp_path, index, public_index, password):
    proc, path = lock(tmp_path, public_index, index.url("/simple"))
    assert proc.returncode == 0, proc.stderr
    text = path.read_text()
    assert "sglstack-probe==1.0" in text and "--hash=sha256:" in text
    assert index.url("/simple", credentials=False) in text  # the index, as the lock header names it
    assert "/simple/sglstack-probe/" in index.authorised()
    assert password not in text + proc.stdout + proc.stderr
    assert files_holding(tmp_path, password) == [str(tmp_path / "stacks.yaml")]


def test_an_unreachable_index_with_credentials_is_an_unresolved_layer_like_a_public_one(tmp_path, public_index,
                                                                                        password):
    closed = f"http://{USER}:{password}@127.0.0.1:{free_port()}/simple"
    proc, path = lock(tmp_path, public_index, closed)
    # The lock is written (before: "cannot reach ...", the whole lock failed), and said to be partial (exit 1).
    text = path.read_text()
    public = closed.replace(f"{USER}:{password}@", "")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: stack 'cpu-test': the lock is partial: 1 layer(s) not resolved: private "
                                  f"(index {public} unreachable: "), proc.stderr
    assert f"index {public} unreachable" in text and "unhashed" in text
    assert "not resolved: layer private" in proc.stdout
    assert password not in text + proc.stdout + proc.stderr


# ---- pip (coverage's wheel download) ---------------------------------------------------------------

def test_coverage_downloads_through_the_credentials_and_reports_without_them(tmp_path, index, password,
                                                                           monkeypatch):
    from sglstack.coverage.rules import device_code_wheels
    from sglstack.coverage.wheels import fetch_source

    file, data = make_wheel("sgl-kernel", "0.3.21")
    index.wheels[file] = data
    matrix = write_matrix(tmp_path / "stacks.yaml", cuda_arch_list=["9.0"],
                          sgl_kernel={"version": "0.3.21", "url": index.url(f"/files/{file}")})
    stack = load_matrix(matrix).get("cpu-test")
    [source] = device_code_wheels(stack, "linux/amd64")
    assert password not in source.requirement
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    wheel = fetch_source(source, stack, "linux/amd64")
    assert wheel.name == file and f"/files/{file}" in index.authorised()

    # Out of reach: `invoke coverage` says so (incomplete) naming the URL without its credentials.
    closed = write_matrix(tmp_path / "closed.yaml", cuda_arch_list=["9.0"], sgl_kernel={
        "version": "0.3.21", "url": f"http://{USER}:{password}@127.0.0.1:{free_port()}/{file}"})
    report = tmp_path / "coverage.json"
    proc = run_invoke("coverage", "--stack", "cpu-test", "--stacks-file", str(closed), "--json-out", str(report),
                      cwd=tmp_path, env={"SGLSTACK_CACHE": str(tmp_path / "empty-cache")})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "127.0.0.1" in proc.stdout and password not in proc.stdout + proc.stderr + report.read_text()


# ---- git (a git-sourced SGLang) --------------------------------------------------------------------

def test_git_fetches_with_the_credentials_and_keeps_none(tmp_path, index, password, monkeypatch):
    from sglstack.adapters.git import GitSource, GitSourceError

    bare, sha = bare_repo_with_commit(tmp_path / "served")
    index.git_root = bare.parent
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    matrix = write_matrix(tmp_path / "stacks.yaml",
                          sglang={"git": {"repo": index.url("/git/sglang.git"), "ref": sha}, "install_deps": False})
    stack = load_matrix(matrix).get("cpu-test")
    source = GitSource(stack.sglang.git.repo, logins=stack.credentials)
    assert source.resolve(sha) == sha
    assert source.export(sha, "python", tmp_path / "tree") == [tmp_path / "tree" / "pyproject.toml"]
    assert any(path.startswith("/git/sglang.git/") for path in index.authorised())
    assert files_holding(tmp_path / "cache", password) == []
    refused = GitSource(index.url("/git/sglang.git").replace(password, "wrong-" + password), cache=tmp_path / "c2")
    with pytest.raises(GitSourceError) as info:
        refused.resolve("main")
    assert password not in str(info.value) and "\n" not in str(info.value)


# ---- BuildKit ----------------------------------------------------------------------------------------

@pytest.fixture
def bridge_index(docker_client, password):
    """The private index over https on the engine's bridge gateway, which build steps reach."""
    config = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # dockerd leaves the default bridge's gateway out when it chose it: the subnet's first address.
    gateway = config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    served = AuthIndex(gateway, 0, USER, password, tls=True)
    file, data = make_wheel("sglstack-probe", "1.0")
    served.wheels[file] = data
    try:
        served.start()
    except OSError as exc:
        pytest.skip(f"cannot listen on the bridge gateway {gateway}: {exc}")
    yield served
    served.stop()


@pytest.mark.docker
def test_a_real_build_installs_from_the_private_index_and_keeps_the_password_out_of_everything(
        tmp_path, bridge_index, password, docker_cli, docker_client, ca_bundle):
    from sglstack.imagebuild.flow import build_stack
    from sglstack.imagebuild.plan import BuildSettings

    bundle = tmp_path / "ca.pem"  # the proxy's CA (PyPI, for the sglang-src stage) and the index's own
    bundle.write_text(ca_bundle.read_text() + "\n" + bridge_index.ca_pem)
    matrix = write_matrix(
        tmp_path / "stacks.yaml", description="private index test",
        extra_layers=[{"name": "private", "requirements": ["sglstack-probe==1.0"],
                       "index_url": bridge_index.url("/simple")}])
    stack = load_matrix(matrix).get("cpu-test").model_copy(update={"name": f"cred-{secrets.token_hex(3)}"})
    out = tmp_path / "build"
    result = None
    try:
        result = build_stack(stack, BuildSettings(force=True, ca_bundle=str(bundle), docker_cli=docker_cli,
                                                 out_dir=out, show_progress=False))
        assert "/files/sglstack_probe-1.0-py3-none-any.whl" in bridge_index.authorised()
        # ... which nobody gets without the credentials: only the netrc secret can have let pip in.
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(bridge_index.url("/simple/sglstack-probe/", credentials=False), timeout=10,
                                   context=ssl.create_default_context(cadata=bridge_index.ca_pem))
        image = docker_client.images.get(result.tag)
        dockerfile = (out / "Dockerfile").read_text()
        assert f"--index-url {bridge_index.url('/simple', credentials=False)}" in dockerfile
        assert "--mount=type=secret,id=index_netrc" in dockerfile
        assert files_holding(out, password) == []  # Dockerfile, context/stack.json, build.log, record.json
        in_image = docker_client.containers.run(result.tag, ["cat", "/opt/sglstack/stack.json"], remove=True)
        assert password.encode() not in in_image
        assert password not in json.dumps(image.history()) + json.dumps(image.attrs)
        with tarfile.open(fileobj=io.BytesIO(b"".join(image.save(named=False)))) as outer:
            for member in outer.getmembers():
                data = outer.extractfile(member).read() if member.isfile() else b""
                assert password.encode() not in data, member.name
    finally:
        if result is not None:
            docker_client.images.remove(result.tag, noprune=False)
        shutil.rmtree(out, ignore_errors=True)


def test_plain_secret_env_is_refused_by_every_task_that_renders(tmp_path, password):
    data = yaml.safe_load(CPU_MATRIX.read_text())
    matrix = write_matrix(tmp_path / "stacks.yaml",
                          serving={**data["defaults"]["serving"], "env": {"HF_TOKEN": password}})
    for task in (["render"], ["build", "--dry-run"], ["bake", "--out", str(tmp_path / "bake.json")],
                 ["deploy", "--on", "k8s", "--digest", "sha256:" + "a" * 64]):
        proc = run_invoke(*task[:1], "--stack", "cpu-test", "--stacks-file", str(matrix), *task[1:], cwd=tmp_path,
                          env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})
        assert proc.returncode == ConfigError.exit_code, (task, proc.stderr)
        assert "serving.env.HF_TOKEN" in proc.stderr and password not in proc.stdout + proc.stderr, task
    assert files_holding(tmp_path, password) == [str(matrix)]
