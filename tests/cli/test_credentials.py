"""Secrets in stacks.yaml: credentials in URLs reach no file sglstack writes, and a secret env value
must be a reference. Pure and CLI tiers (the real BuildKit, uv, pip and git runs are in
test_credentials_tools.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from clirun import REPO, run_invoke

from sglstack.config.matrix import load_matrix
from sglstack.core import credentials
from sglstack.core.errors import ConfigError
from sglstack.render.compose import render_compose, render_env_example
from sglstack.render.dockerfile import render_dockerfile, stack_manifest
from sglstack.render.k8s import K8sOptions, render_k8s
from sglstack.serving import ServingError, check_secret_references
from sglstack.smoke.launch import container_plan
from sglstack.smoke.overrides import smoke_options

CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
PASSWORD = "pw-9f3c1e7d"  # what every test looks for in what was written
TOKEN = "ghp-tok-52be81aa"  # a token given as the user part of a URL
DIGEST = "127.0.0.1:5000/sglstack-test/sglang@sha256:" + "ab" * 32


def write_matrix(path: Path, **changes) -> Path:
    """The CPU test matrix with `changes` merged into its stack `cpu-test`."""
    data = yaml.safe_load(CPU_MATRIX.read_text())
    stack = data["stacks"]["cpu-test"]
    for key, value in changes.items():
        stack[key] = value
    data["stacks"] = {"cpu-test": stack}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def credentialed(tmp_path: Path) -> Path:
    """Credentials in every kind of URL stacks.yaml has: indexes, a wheel URL, a requirement URL, git."""
    return write_matrix(
        tmp_path / "stacks.yaml",
        torch={"version": "2.9.1", "index_url": f"https://alice:{PASSWORD}@pt.internal.example/whl/cpu"},
        sgl_kernel={"version": "0.3.21",
                    "url": f"https://{TOKEN}@files.internal.example/sgl_kernel-0.3.21-cp310-abi3-{{arch}}.whl"},
        flashinfer={"version": "0.6.4", "index_url": f"https://alice:{PASSWORD}@pt.internal.example/fi"},
        extra_layers=[{"name": "private", "requirements": [
            f"six @ https://alice:{PASSWORD}@pt.internal.example/six-1.16.0-py2.py3-none-any.whl"],
            "index_url": f"https://alice:{PASSWORD}@pt.internal.example/simple"}],
        sglang={"git": {"repo": f"https://{TOKEN}@files.internal.example/org/sglang.git", "ref": "a" * 40},
                "install_deps": False},
    )


def leaked(root: Path) -> list[str]:
    """Every file under `root` holding the password or the token."""
    return [str(p) for p in root.rglob("*") if p.is_file()
            and (PASSWORD.encode() in p.read_bytes() or TOKEN.encode() in p.read_bytes())]


# ---- the one home ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "public", "shown"), [
    ("https://u:p@h.example:8443/simple?x=1", "https://h.example:8443/simple?x=1", "https://***@h.example:8443/simple?x=1"),
    ("https://tok@h.example/a.whl", "https://h.example/a.whl", "https://***@h.example/a.whl"),
    ("https://h.example/simple", "https://h.example/simple", "https://h.example/simple"),
    ("ssh://git@h.example/r.git", "ssh://git@h.example/r.git", "ssh://***@h.example/r.git"),  # a login, not a secret
    ("/home/me/src/sglang", "/home/me/src/sglang", "/home/me/src/sglang"),
])
def test_one_rule_for_what_a_url_shows_and_what_a_tool_is_given(url, public, shown):
    assert credentials.public_url(url) == public
    assert credentials.redact_url(url) == shown
    assert credentials.redact_text(f"error: cannot fetch {url}: 401") == f"error: cannot fetch {shown}: 401"


@pytest.mark.parametrize(("key", "secret"), [
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("OPENAI_API_KEY", True), ("db-password", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("GITHUB_PAT_TOKEN", True), ("MY_PASSWD", True), ("APIKEY", True),
    ("SGLANG_DOUBLE_TOKENS_PER_S", False), ("TOKENIZERS_PARALLELISM", False), ("NCCL_DEBUG", False),
    ("KEYBOARD", False), ("MONKEY_PATCH", False), ("PYTORCH_CUDA_ALLOC_CONF", False),
])
def test_which_env_keys_name_a_secret(key, secret):
    assert credentials.names_secret(key) is secret


def test_the_netrc_holds_one_login_per_host_and_never_shows_it():
    a = credentials.host_login(f"https://alice:{PASSWORD}@h.example/simple")
    b = credentials.host_login(f"https://{TOKEN}@other.example/x.whl")
    assert a is not None and b is not None
    assert PASSWORD not in repr(a) and TOKEN not in repr(b)
    text = credentials.netrc_text(credentials.merge_logins([b, a, a]))
    assert text == (f"machine h.example\nlogin alice\npassword {PASSWORD}\n"
                    f"machine other.example\nlogin {TOKEN}\npassword \n")
    assert credentials.netrc_secrets(text) == (PASSWORD, TOKEN)  # what build.log redacts
    with pytest.raises(credentials.CredentialError, match="different credentials") as info:
        credentials.merge_logins([a, credentials.host_login("https://bob:other@h.example/x")])
    assert PASSWORD not in str(info.value)
    with pytest.raises(credentials.CredentialError, match="netrc") as info:
        credentials.host_login("https://alice:pa%20ss@h.example/simple")  # a space: no netrc can hold it
    assert "pa ss" not in str(info.value) and "pa%20ss" not in str(info.value)


# ---- the stack keeps URLs without credentials ------------------------------------------------------

def test_the_stack_holds_every_url_without_its_credentials(tmp_path):
    stack = load_matrix(credentialed(tmp_path)).get("cpu-test")
    assert stack.torch.index_url == "https://pt.internal.example/whl/cpu"
    assert stack.sgl_kernel.url == "https://files.internal.example/sgl_kernel-0.3.21-cp310-abi3-{arch}.whl"
    assert stack.sglang.git.repo == "https://files.internal.example/org/sglang.git"
    assert stack.extra_layers[0].requirements == ("six @ https://pt.internal.example/six-1.16.0-py2.py3-none-any.whl",)
    assert [x.host for x in stack.credentials] == ["files.internal.example", "pt.internal.example"]
    shown = json.dumps(stack.model_dump(mode="json")) + repr(stack) + json.dumps(stack_manifest(stack))
    assert PASSWORD not in shown and TOKEN not in shown


def test_rendered_dockerfile_names_public_urls_and_mounts_the_netrc_secret(tmp_path):
    stack = load_matrix(credentialed(tmp_path)).get("cpu-test")
    text = render_dockerfile(stack)
    assert PASSWORD not in text and TOKEN not in text
    assert "--index-url https://pt.internal.example/simple" in text
    assert text.count("--mount=type=secret,id=index_netrc,required=false") >= 3
    plain = load_matrix(CPU_MATRIX).get("cpu-test")  # no credentials: the Dockerfile is as before
    assert "index_netrc" not in render_dockerfile(plain)


def test_render_build_plan_and_bake_write_no_credential_anywhere(tmp_path):
    """Dockerfile, context (stack.json), compose, k8s manifests, the dry run and the bake file."""
    matrix = credentialed(tmp_path)
    out = tmp_path / "build"
    env = {"SGLSTACK_BUILD_DIR": str(out)}
    rendered = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(matrix), "--image", DIGEST,
                          cwd=tmp_path, env=env)
    assert rendered.returncode == 0, rendered.stderr
    assert (out / "cpu-test" / "k8s" / "leaderworkerset.yaml").is_file()
    stack_json = json.loads((out / "cpu-test" / "context" / "stack.json").read_text())
    assert stack_json["sglang"]["git"]["repo"] == "https://files.internal.example/org/sglang.git"
    bake = run_invoke("bake", "--stacks-file", str(matrix), "--out", str(out / "docker-bake.json"), cwd=tmp_path,
                      env={**env, "SGLSTACK_CACHE": str(tmp_path / "cache")})
    # The bake renders the git source too, which cannot be fetched here: it stops with one line, unshown.
    plan = run_invoke("build", "--stack", "cpu-test", "--stacks-file", str(matrix), "--dry-run", cwd=tmp_path,
                      env={**env, "SGLSTACK_CACHE": str(tmp_path / "cache")})
    for proc in (rendered, bake, plan):
        assert PASSWORD not in proc.stdout + proc.stderr and TOKEN not in proc.stdout + proc.stderr
    assert bake.returncode != 0 and len(bake.stderr.strip().splitlines()) == 1
    assert leaked(out) == []


def test_bake_file_and_build_request_carry_the_netrc_as_an_env_secret(tmp_path):
    from sglstack.imagebuild.bake import bake_target
    from sglstack.imagebuild.plan import INDEX_NETRC_ENV, build_request

    stack = load_matrix(credentialed(tmp_path)).get("cpu-test")
    req = build_request(stack, dockerfile=tmp_path / "Dockerfile", context=tmp_path, config_hash="0" * 64,
                        target="runtime", builder_kind="buildx", secrets=({}, {}))
    target = json.dumps(bake_target(req))
    assert f"id=index_netrc,env={INDEX_NETRC_ENV}" in target
    assert PASSWORD not in target and TOKEN not in target and PASSWORD not in repr(req)
    assert req.secret_env_values[INDEX_NETRC_ENV] == credentials.netrc_text(stack.credentials)


@pytest.mark.parametrize(("key", "value"), [
    ("description", f"mirror at https://alice:{PASSWORD}@pt.internal.example/simple"),
    ("labels", {"org.example.src": f"https://{TOKEN}@files.internal.example/x"}),
])
def test_a_credentialed_url_where_no_tool_takes_it_is_refused_in_one_line(tmp_path, key, value):
    matrix = write_matrix(tmp_path / "stacks.yaml", **{key: value})
    with pytest.raises(ConfigError) as info:
        load_matrix(matrix)
    message = str(info.value)
    assert "stacks.yaml" in message and "cpu-test" in message and key in message and "***@" in message
    assert PASSWORD not in message and TOKEN not in message and "\n" not in message


def test_two_credentials_for_one_host_are_refused(tmp_path):
    matrix = write_matrix(tmp_path / "stacks.yaml",
                          torch={"version": "2.9.1", "index_url": f"https://alice:{PASSWORD}@pt.internal.example/a"},
                          flashinfer={"version": "0.6.4", "index_url": "https://bob:other@pt.internal.example/b"})
    proc = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(matrix), cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})
    assert proc.returncode == ConfigError.exit_code
    assert "flashinfer.index_url" in proc.stderr and "pt.internal.example" in proc.stderr
    assert PASSWORD not in proc.stderr and "other" not in proc.stderr.replace("another", "")
    assert len(proc.stderr.strip().splitlines()) == 1


# A stack of its own, so that the lines below stay where they are.
OWN_STACK = "stacks:\n  s:\n    base_image: debian:bookworm-slim\n    serving: {model: m}\n"
NETRC_UNSAFE = ("its user or password is empty or holds a space, quote, backslash or '#', which a netrc (how builds "
                "and pip/uv receive it) cannot carry")


@pytest.mark.parametrize(("extra", "line"), [
    ("    sglang: {version: 0.5.9}\n    torch: {version: 2.9.1, index_url: 'https://alice:pa%20ss@pt.example/a'}\n",
     f"stacks.yaml:6: stack 's': key 'torch.index_url': 'https://***@pt.example/a': {NETRC_UNSAFE}"),
    ("    sglang: {version: 0.5.9}\n    torch: {version: 2.9.1, index_url: 'https://alice:pw@/a'}\n",
     "stacks.yaml:6: stack 's': key 'torch.index_url': 'https://***@/a' carries credentials but names no host"),
    (f"    sglang: {{version: 0.5.9}}\n    torch: {{version: 2.9.1, index_url: 'https://alice:{PASSWORD}@pt.example/a'}}\n"
     "    flashinfer: {version: 0.6.4, index_url: 'https://bob:other@pt.example/b'}\n",
     "stacks.yaml:7: stack 's': key 'flashinfer.index_url': 'https://pt.example/b': two URLs on host pt.example carry "
     "different credentials: a netrc (how the build and pip/uv receive them) holds one per host"),
    # sglang.git.repo may carry credentials; an item of a list at sglang.git (a wrong shape) may not.
    (f"    sglang: {{git: ['https://alice:{PASSWORD}@h.example/x.git']}}\n",
     "stacks.yaml:5: stack 's': key 'sglang.git.0': 'https://***@h.example/x.git' carries credentials, which only "
     "index_url, url, sglang.git.repo and requirement URLs may (sglstack hands those to pip, uv and git as a netrc, "
     "never in a file)"),
])
def test_credentials_no_netrc_can_carry_are_one_whole_line(tmp_path, monkeypatch, extra, line):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stacks.yaml").write_text(OWN_STACK + extra)
    with pytest.raises(ConfigError) as info:
        load_matrix(tmp_path / "stacks.yaml")
    assert str(info.value) == line


# ---- secret env values are references --------------------------------------------------------------

@pytest.mark.parametrize("key", ["HF_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD"])
def test_a_plain_secret_in_serving_env_is_refused_before_anything_is_written(tmp_path, key):
    data = yaml.safe_load(CPU_MATRIX.read_text())
    serving = {**data["defaults"]["serving"], "env": {key: PASSWORD, "NCCL_DEBUG": "INFO"}}
    matrix = write_matrix(tmp_path / "stacks.yaml", serving=serving)
    out = tmp_path / "build"
    proc = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(matrix), "--image", DIGEST,
                      cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(out)})
    assert proc.returncode == ConfigError.exit_code, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "stacks.yaml" in line and "cpu-test" in line and f"serving.env.{key}" in line and "${" in line
    assert PASSWORD not in proc.stdout + proc.stderr
    assert not out.exists() or leaked(out) == []


def test_a_secret_reference_reaches_compose_k8s_and_smoke_as_a_reference(tmp_path):
    data = yaml.safe_load(CPU_MATRIX.read_text())
    serving = {**data["defaults"]["serving"],
               "env": {"OPENAI_API_KEY": "${OPENAI_KEY}", "NCCL_DEBUG": "INFO"}}
    stack = load_matrix(write_matrix(tmp_path / "stacks.yaml", serving=serving)).get("cpu-test")

    compose = render_compose(stack, DIGEST)
    assert '"OPENAI_API_KEY": "${OPENAI_KEY:?set OPENAI_KEY in the environment of invoke deploy}"' in compose
    assert '"NCCL_DEBUG": "INFO"' in compose
    assert "OPENAI_KEY" in render_env_example(stack)
    # compose itself interpolates it from the deploy's environment, and refuses without it.
    (tmp_path / "compose.yaml").write_text(compose)
    (tmp_path / "compose.env").write_text("")

    def config(env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run(["docker-compose", "-f", str(tmp_path / "compose.yaml"), "config"], cwd=tmp_path,
                              capture_output=True, text=True, check=False, env=env, timeout=120)

    base = {k: v for k, v in os.environ.items() if k != "OPENAI_KEY"}
    given = config({**base, "OPENAI_KEY": PASSWORD})
    assert given.returncode == 0 and f"OPENAI_API_KEY: {PASSWORD}" in given.stdout, given.stderr
    missing = config(base)
    assert missing.returncode != 0 and "OPENAI_KEY" in missing.stderr

    lws = render_k8s(stack, DIGEST, K8sOptions(hf_token_secret="team-secrets"))["leaderworkerset.yaml"]
    manifest = yaml.safe_load(lws)
    env = manifest["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["env"]
    ref = {"secretKeyRef": {"name": "team-secrets", "key": "OPENAI_KEY"}}
    assert {"name": "OPENAI_API_KEY", "valueFrom": ref} in env
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in env
    assert "${" not in lws

    plan = container_plan(smoke_options(stack), "img", "baseline", host_env={"OPENAI_KEY": PASSWORD})
    assert plan.environment["OPENAI_API_KEY"] == PASSWORD
    assert plan.redacted_environment()["OPENAI_API_KEY"] == "***"
    shown = container_plan(smoke_options(stack), "img", "baseline", host_env={})  # the report's command
    assert "OPENAI_API_KEY" not in shown.environment
    check_secret_references(smoke_options(stack).serving, {"OPENAI_KEY": PASSWORD})
    with pytest.raises(ServingError, match=r"serving.env.OPENAI_API_KEY refers to \$\{OPENAI_KEY\}, which is not set"):
        check_secret_references(smoke_options(stack).serving, {})


# ---- secret flags in serving.extra_args are references -----------------------------------------------

@pytest.mark.parametrize("args, flag, shown", [
    (["--api-key", PASSWORD], "--api-key", "--api-key"),
    ([f"--api-key={PASSWORD}"], "--api-key", "--api-key"),
    (["--admin-api-key", PASSWORD], "--admin-api-key", "--admin-api-key"),
    (["--api-k", PASSWORD], "--api-key", "--api-k"),  # argparse takes any unique prefix of a flag
])
def test_a_literal_secret_flag_in_extra_args_is_refused_before_anything_is_written(tmp_path, args, flag, shown):
    """It was written into compose.yaml and the manifests as it was."""
    data = yaml.safe_load(CPU_MATRIX.read_text())
    serving = {**data["defaults"]["serving"], "extra_args": ["--trust-remote-code", *args]}
    matrix = write_matrix(tmp_path / "stacks.yaml", serving=serving)
    line = next(n for n, text in enumerate(matrix.read_text().splitlines(), 1) if text.strip() == f"- {args[0]}")
    out = tmp_path / "build"
    proc = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(matrix), "--image", DIGEST,
                      cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(out)})
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"error: stacks.yaml:{line}: stack 'cpu-test': key 'serving.extra_args.1': '{shown}' takes a secret, so its "
        f"value must be a reference like '{flag} ${{NAME}}' (from the deploy environment, the Kubernetes Secret, or "
        "smoke's own environment), not a value written into compose.yaml and the manifests"))
    assert PASSWORD not in proc.stdout + proc.stderr
    assert not out.exists() or leaked(out) == []


@pytest.mark.parametrize("args", [["--api-key", "${OPENAI_KEY}"], ["--api-key=${OPENAI_KEY}"]])
def test_a_secret_flag_reference_reaches_compose_k8s_and_smoke_as_a_reference(tmp_path, args):
    data = yaml.safe_load(CPU_MATRIX.read_text())
    serving = {**data["defaults"]["serving"], "extra_args": ["--trust-remote-code", *args]}
    stack = load_matrix(write_matrix(tmp_path / "stacks.yaml", serving=serving)).get("cpu-test")
    text = "" if len(args) == 2 else "--api-key="

    compose = render_compose(stack, DIGEST)
    assert f'      - "{text}${{OPENAI_KEY:?set OPENAI_KEY in the environment of invoke deploy}}"\n' in compose
    assert "OPENAI_KEY" in render_env_example(stack)
    (tmp_path / "compose.yaml").write_text(compose)
    (tmp_path / "compose.env").write_text("")
    base = {k: v for k, v in os.environ.items() if k != "OPENAI_KEY"}
    given = subprocess.run(["docker-compose", "-f", str(tmp_path / "compose.yaml"), "config"], cwd=tmp_path,
                           capture_output=True, text=True, check=False, env={**base, "OPENAI_KEY": PASSWORD},
                           timeout=120)
    assert given.returncode == 0, given.stderr
    command = yaml.safe_load(given.stdout)["services"]["sglang"]["command"]
    assert command[-len(args):] == [a.replace("${OPENAI_KEY}", PASSWORD) for a in args]

    lws = render_k8s(stack, DIGEST, K8sOptions(hf_token_secret="team-secrets"))["leaderworkerset.yaml"]
    container = yaml.safe_load(lws)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert container["command"][-len(args):] == [a.replace("${OPENAI_KEY}", "$(OPENAI_KEY)") for a in args]
    assert {"name": "OPENAI_KEY", "valueFrom": {"secretKeyRef": {"name": "team-secrets", "key": "OPENAI_KEY"}}} in (
        container["env"])
    assert "${" not in lws

    plan = container_plan(smoke_options(stack), "img", "baseline", host_env={"OPENAI_KEY": PASSWORD})
    assert list(plan.command[-len(args):]) == [a.replace("${OPENAI_KEY}", PASSWORD) for a in args]
    assert plan.secret_values() == (PASSWORD,)  # what the container's log tail is cleared of
    with pytest.raises(ServingError) as err:
        check_secret_references(smoke_options(stack).serving, {})
    assert str(err.value) == ("stack 'cpu-test': serving.extra_args refers to ${OPENAI_KEY}, which is not set in "
                              "this environment")


@pytest.mark.parametrize("serving_extra", [{"env": {"OPENAI_API_KEY": "${OPENAI_KEY}"}},
                                           {"extra_args": ["--trust-remote-code", "--api-key", "${OPENAI_KEY}"]}])
def test_deploy_refuses_a_secret_reference_its_environment_lacks_before_anything_runs(tmp_path, serving_extra):
    """Compose refused the `${OPENAI_KEY:?...}` only at `up`, after the preflight and the pull: one line now, from
    the one check the smoke makes too, and nothing written."""
    data = yaml.safe_load(CPU_MATRIX.read_text())
    matrix = write_matrix(tmp_path / "stacks.yaml", serving={**data["defaults"]["serving"], **serving_extra})
    out = tmp_path / "build"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_KEY"}
    proc = run_invoke("deploy", "--stack", "cpu-test", "--stacks-file", str(matrix), "--image", DIGEST, "--gpus",
                      "0", "--docker-host", "tcp://127.0.0.1:9", cwd=tmp_path,
                      env={**env, "SGLSTACK_BUILD_DIR": str(out)})
    where = "serving.env.OPENAI_API_KEY" if "env" in serving_extra else "serving.extra_args"
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"error: stack 'cpu-test': {where} refers to ${{OPENAI_KEY}}, which is not set in this environment"))
    assert not out.exists() or not any(out.rglob("*.jsonl"))


def test_a_secret_flag_reference_may_not_clash_with_a_serving_env_key(tmp_path):
    data = yaml.safe_load(CPU_MATRIX.read_text())
    serving = {**data["defaults"]["serving"], "extra_args": ["--api-key", "${K}"], "env": {"K": "plain"}}
    with pytest.raises(ConfigError) as err:
        load_matrix(write_matrix(tmp_path / "stacks.yaml", serving=serving))
    assert str(err.value).split(": ", 1)[1] == ("stack 'cpu-test': key 'serving.extra_args.1': refers to ${K}, and "
                                                "serving.env sets K to something else: use another name for one of "
                                                "them")


@pytest.mark.parametrize("word, shown", [("--model-path", "'--model-path'"),
                                         ("--model", "'--model' (SGLang reads it as --model-path)")])
def test_extra_args_that_set_the_model_are_refused_before_anything_is_written(tmp_path, word, shown):
    """The report, labels and compose file named the stack's model while extra_args served another."""
    data = yaml.safe_load(CPU_MATRIX.read_text())
    serving = {**data["defaults"]["serving"], "extra_args": ["--trust-remote-code", word, "other/model"]}
    matrix = write_matrix(tmp_path / "stacks.yaml", serving=serving)
    line = next(n for n, text in enumerate(matrix.read_text().splitlines(), 1) if text.strip() == f"- {word}")
    out = tmp_path / "build"
    proc = run_invoke("render", "--stack", "cpu-test", "--stacks-file", str(matrix), "--image", DIGEST,
                      cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(out)})
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"error: stacks.yaml:{line}: stack 'cpu-test': key 'serving.extra_args.1': {shown} is sglstack's to set: set "
        "from serving.model; extra_args may not set it again (the server would run with another value than the one "
        "reported)"))
    assert not out.exists() or not any(out.rglob("compose.yaml"))
