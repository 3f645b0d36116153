"""Names and values of stacks.yaml that reach another language: Compose, Kubernetes, a Dockerfile, a shell.

One class each: stack names that a consumer makes the same are refused together (and the deploy paths do
not touch what another stack owns); every value is quoted for its language or refused by the schema with
one line naming file, stack, key and value; option values written into manifests are range-checked.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import textwrap
from pathlib import Path

import docker
import docker.errors
import pytest
import yaml
from clirun import run_invoke
from deploy_fixtures import free_port

from sglstack.adapters.compose import detect_compose
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError, SglstackError
from sglstack.deploy.checks import project_owner_problem
from sglstack.deploy.deployment import Deployment
from sglstack.deploy.flow import deploy
from sglstack.deploy.k8s_flow import owner_problem
from sglstack.deploy.lifecycle import undeploy
from sglstack.render import k8s
from sglstack.render.compose import ComposeOptions
from sglstack.render.dockerfile import image_labels, render_dockerfile
from sglstack.serving import ServingOverrides, serving_spec

BASE = """\
    base_image: debian:bookworm-slim
    sglang: {version: 0.5.9}
    serving: {model: org/model, gpus: 0}
"""
DIGEST = "sha256:" + "a" * 64


def matrix(tmp_path: Path, stacks: dict[str, str], name: str = "stacks.yaml") -> Path:
    """A matrix of `stacks` (name -> YAML lines of that stack, over BASE's keys)."""
    def lines(extra: str) -> str:
        given = {line.split(":", 1)[0] for line in extra.splitlines()}
        base = "".join(line for line in BASE.splitlines(keepends=True) if line.split(":", 1)[0].strip() not in given)
        return base + textwrap.indent(extra, "    ")

    text = "stacks:\n" + "".join(f"  {n}:\n{lines(extra)}" for n, extra in stacks.items())
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    message = str(info.value)
    assert "\n" not in message and f"{path.name}:" in message
    return message


# ---- names that Compose or Kubernetes make the same ------------------------------------------------

@pytest.mark.parametrize("other", ["cpu.test", "cpu_test", "cpu__test", "cpu--test"])
def test_stack_names_a_consumer_makes_the_same_are_refused_together(tmp_path, other):
    message = refusal(matrix(tmp_path, {"cpu-test": "", other: ""}))
    assert f"stack '{other}'" in message and "stack 'cpu-test'" in message
    assert "'sglstack-cpu-test'" in message and "rename one of them" in message


def test_long_names_sharing_the_prefix_the_lws_name_keeps_are_refused(tmp_path):
    prefix = "h200-kimi-k25-eagle3-" + "x" * 10  # 31 characters: all that the LWS name keeps after 'sglstack-'
    names = [f"{prefix}-a", f"{prefix}-b"]
    assert k8s.object_name(names[0]) == k8s.object_name(names[1])
    message = refusal(matrix(tmp_path, dict.fromkeys(names, "")))
    assert f"stack '{names[1]}'" in message and f"as stack '{names[0]}' does" in message
    assert "Kubernetes LeaderWorkerSet name" in message
    # Names that stay apart everywhere load.
    assert load_matrix(matrix(tmp_path, {"cpu-test": "", "cpu-test2": "", "cpu.test.v2": ""})).names()


def test_stacks_check_names_both_colliding_stacks_in_one_line(tmp_path):
    path = matrix(tmp_path, {"audit-x": "", "audit.x": ""})
    proc = run_invoke("stacks", "--check", "--stacks-file", str(path), cwd=tmp_path, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: stacks.yaml:6: stack 'audit.x': stack name 'audit.x' becomes the compose project 'sglstack-audit-x', "
        "as stack 'audit-x' does: one would deploy over or remove the other; rename one of them"]


def _k8s_deploy(cluster: dict[str, str], cwd: Path, stacks_file: Path, stack: str, digest: str, *extra: str,
                **env: str) -> subprocess.CompletedProcess:
    return run_invoke("deploy", "--stack", stack, "--stacks-file", str(stacks_file), "--on", "k8s",
                      "--digest", digest, "--gpus", "0", *extra, cwd=cwd, env={**cluster, **env}, timeout=120)


def test_a_k8s_deploy_never_applies_over_or_deletes_another_stacks_lws(cluster, tmp_path):
    # Two matrix files (each valid alone): audit-x is deployed and healthy; a failed deploy of audit.x,
    # whose LWS name is the same, deleted audit-x's LeaderWorkerSet before.
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    first = _k8s_deploy(cluster, tmp_path, matrix(tmp_path, {"audit-x": ""}, "a.yaml"), "audit-x", a)
    assert first.returncode == 0, first.stderr
    objects = Path(cluster["KUBECTL_DOUBLE_STATE"]) / "objects"
    stored = objects / f"LeaderWorkerSet.default.{k8s.object_name('audit-x')}.json"
    before = stored.read_text()
    proc = _k8s_deploy(cluster, tmp_path, matrix(tmp_path, {"audit.x": ""}, "b.yaml"), "audit.x", b,
                       "--wait-timeout", "1", KUBECTL_DOUBLE_UNREADY=b)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: stack 'audit.x': leaderworkerset/sglstack-audit-x exists and is stack 'audit-x''s, not stack "
        "'audit.x''s: it is not this stack's to replace or delete (nothing was changed)")
    assert stored.read_text() == before  # neither applied over nor deleted
    log = [json.loads(line) for line in (Path(cluster["KUBECTL_DOUBLE_STATE"]) / "argv.jsonl").read_text().splitlines()]
    assert sum("apply" in c for c in log) == 1 and not any("delete" in c for c in log)
    assert not (Path(cluster["SGLSTACK_BUILD_DIR"]) / "audit.x" / "k8s").exists()


@pytest.mark.docker
def test_undeploy_never_removes_another_stacks_compose_project(tmp_path):
    tag = secrets.token_hex(4)
    owner, other = f"audit-{tag}", f"audit.{tag}"
    project = f"sglstack-audit-{tag}"
    client = docker.from_env()
    # What `deploy --stack audit-TAG` leaves running: a container of its compose project and stack labels.
    container = client.containers.run("debian:bookworm-slim", ["sleep", "300"], detach=True,
                                      name=f"{project}_sglang_1",
                                      labels={"com.docker.compose.project": project,
                                              "com.docker.compose.service": "sglang", "io.sglstack.stack": owner})
    try:
        stack = load_matrix(matrix(tmp_path, {other: ""})).get(other)
        with pytest.raises(SglstackError) as info:
            undeploy(Deployment(stack=stack, build_root=tmp_path / "build"), compose=detect_compose(),
                     say=lambda _: None)
        assert str(info.value) == (
            f"stack '{other}': compose project {project} holds container {project}_sglang_1 of stack '{owner}', "
            f"not of stack '{other}': it is not this stack's to replace or remove (nothing was changed)")
        # A deploy of audit.TAG would `up` its service in that project: refused before anything changes.
        with pytest.raises(SglstackError) as info:
            deploy(Deployment(stack=stack, build_root=tmp_path / "build"), "debian:bookworm-slim",
                   ComposeOptions(gpus=0, port=free_port()), compose=detect_compose(), say=lambda _: None)
        assert f"compose project {project} holds container {project}_sglang_1 of stack '{owner}'" in str(info.value)
        assert not (tmp_path / "build" / other).exists()
        container.reload()
        assert container.status == "running"
    finally:
        container.remove(force=True)


def test_what_a_derived_name_finds_is_a_stacks_only_when_it_names_that_stack():
    assert project_owner_problem("sglstack-s", "s", [("c1", "s"), ("c2", "s")]) is None
    assert "container c1 of stack 't', not of stack 's'" in project_owner_problem("sglstack-s", "s", [("c1", "t")])
    assert "of no sglstack stack" in project_owner_problem("sglstack-s", "s", [("c1", None)])
    managed = {"app.kubernetes.io/managed-by": "sglstack"}
    assert owner_problem("s", "leaderworkerset", None) is None
    assert owner_problem("s", "leaderworkerset", {"metadata": {"name": "n", "annotations": {"io.sglstack/stack": "s"}}}
                         ) is None
    assert "is stack 't''s" in owner_problem(
        "s", "leaderworkerset", {"metadata": {"name": "n", "annotations": {"io.sglstack/stack": "t"}}})
    assert "no sglstack stack" in owner_problem("s", "leaderworkerset", {"metadata": {"name": "n", "labels": managed}})
    # A Service an earlier sglstack applied carries no annotation: its LeaderWorkerSet decides.
    assert owner_problem("s", "service", {"metadata": {"name": "n-api", "labels": managed}}) is None
    assert owner_problem("s", "service", {"metadata": {"name": "n-api"}}) is not None
    assert owner_problem("s", "service", {"metadata": {"name": "n-api", "labels": managed,
                                                       "annotations": {"io.sglstack/stack": "t"}}}) is not None


# ---- values: quoted for their language, or refused by the schema ------------------------------------

@pytest.mark.parametrize(("extra", "key", "shown"), [
    ('labels: {"a\\nRUN touch /pwned": v}\n', "labels", "'a\\nRUN touch /pwned' is not a label key"),
    ('labels: {"a b": v}\n', "labels", "'a b' is not a label key"),
    ('labels: {a: "v\\nRUN touch /pwned"}\n', "labels.a", "'v\\nRUN touch /pwned' holds a control character (\\n)"),
    ('description: "line one\\nFROM scratch"\n', "description", "'line one\\nFROM scratch' holds a control"),
    ('system_packages: ["curl; touch /pwned"]\n', "system_packages.0", "'curl; touch /pwned' is not a Debian package"),
    ('python_packages: ["python3 $(id)"]\n', "python_packages.0", "'python3 $(id)' is not a Debian package"),
    ('base_image: "debian:12\\nRUN touch pwned"\n', "base_image", "image 'debian:12\\nRUN touch pwned' is not an"),
    ('src_image: "debian:12 AS x"\n', "src_image", "image 'debian:12 AS x' is not an image reference"),
    ('serving: {model: m, env: {"A B": x}}\n', "serving.env", "'A B' is not an environment variable name"),
    ('serving: {model: m, env: {"A$B": x}}\n', "serving.env", "'A$B' is not an environment variable name"),
    ('serving: {model: m, env: {A: "x\\0"}}\n', "serving.env.A", "the value holds a NUL character"),
    ('serving: {model: m, extra_args: ["x\\0"]}\n', "serving.extra_args.0", "the value holds a NUL character"),
    ('serving: {model: m, mounts: ["/data\\n:/models"]}\n', "serving.mounts.0", "mount '/data\\n:/models': it holds"),
    ('serving: {model: "org/m\\nx"}\n', "serving.model", "'org/m\\nx' holds a control character"),
    ('torch: {version: "2.9.1", index_url: "https://pypi.example/simple --pre"}\n', "torch.index_url",
     "URL 'https://pypi.example/simple --pre' holds whitespace"),
])
def test_values_no_language_can_carry_are_refused_in_one_line(tmp_path, extra, key, shown):
    message = refusal(matrix(tmp_path, {"s": extra}))
    assert f"stack 's': key '{key}': " in message and shown in message, message


def test_dockerfile_gets_each_value_on_its_own_line_quoted(tmp_path):
    stack = load_matrix(matrix(tmp_path, {"s": 'labels: {org.example.note: "it\'s <$HOME> \\"q\\" \\\\ & more"}\n'
                                                'description: "Kimi\'s <stack> & $PATH"\n'})).get("s")
    text = render_dockerfile(stack)
    assert '# Kimi\'s <stack> & $PATH\n' in text
    assert 'org.example.note="it\'s <\\$HOME> \\"q\\" \\\\ & more"' in text
    assert 'org.opencontainers.image.description="Kimi\'s <stack> & \\$PATH"' in text


@pytest.mark.docker
def test_labels_read_back_from_a_real_build_exactly_as_written(tmp_path, docker_cli):
    # The LABEL block as rendered, built by BuildKit: every label must read back as the stack says.
    note = "it's <$HOME> \"q\" \\ & $$(HF_TOKEN) é"
    stack = load_matrix(matrix(tmp_path, {"s": f"labels: {{org.example.note: {json.dumps(note)}}}\n"
                                                "description: \"Kimi's <stack> & $PATH\"\n"})).get("s")
    text = render_dockerfile(stack)
    label_block = text[text.index("\nLABEL ") + 1:]
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\n" + label_block, encoding="utf-8")
    tag = f"sglstack-test-labels:{secrets.token_hex(4)}"
    proc = subprocess.run([docker_cli, "build", "-q", "-t", tag, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"}, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    client = docker.from_env()
    try:
        labels = client.images.get(tag).labels
    finally:
        client.images.remove(tag)
    assert {k: labels.get(k) for k, _ in image_labels(stack)} == dict(image_labels(stack))
    assert labels["org.example.note"] == note


def test_a_wheel_url_reaches_pip_as_one_literal_word(tmp_path):
    url = 'https://wheels.example/$(id)/`id`/a";b/sgl_kernel-0.3.21-{arch}.whl'
    stack = load_matrix(matrix(tmp_path, {"s": f"sgl_kernel: {{version: 0.3.21, url: '{url}'}}\n"})).get("s")
    text = render_dockerfile(stack)
    line = next(ln for ln in text.splitlines() if "pip install --no-deps --force-reinstall" in ln)
    word = line.split("--force-reinstall ", 1)[1]
    # The word as bash reads it, with the RUN step's own arch variable set.
    out = subprocess.run(["bash", "-c", f'arch=x86_64; printf "%s\\n" {word}'], capture_output=True, text=True,
                         check=True, cwd=tmp_path).stdout
    assert out == url.replace("{arch}", "x86_64") + "\n"


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a container's command, args and env values (third_party/forked/golang/
    expansion/expand.go): `$(VAR)` of a defined VAR becomes its value, `$$` becomes `$`, the rest stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env.get(name, f"$({name})"))
                    i = end + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def test_k8s_passes_every_dollar_of_the_stack_as_written(tmp_path):
    extra = 'serving: {model: m, gpus: 0, ' \
            'extra_args: ["--chat-template", "pa$$word", "$$(HF_TOKEN)", "$(LWS_GROUP_SIZE)"],' \
            ' env: {MOTTO: "pa$$word", NOTE: "$(HF_TOKEN) $$(HF_TOKEN)"}}\n'
    stack = load_matrix(matrix(tmp_path, {"s": extra})).get("s")
    files = k8s.render_k8s(stack, f"127.0.0.1:5000/sglstack/sglang@{DIGEST}", k8s.K8sOptions(gpus=0, nnodes=2))
    container = yaml.safe_load(files[k8s.LWS_FILE])["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"][
        "containers"][0]
    pod_env = {"HF_TOKEN": "hf_secret", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1",
               "LWS_LEADER_ADDRESS": "leader.svc"}
    argv = [k8s_expand(a, pod_env) for a in container["command"]]
    assert argv[-4:] == ["--chat-template", "pa$$word", "$$(HF_TOKEN)", "$(LWS_GROUP_SIZE)"]
    assert "hf_secret" not in " ".join(argv)
    # LWS's own placement values are still expanded.
    assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--dist-init-addr") + 1] == f"leader.svc:{k8s.DIST_INIT_PORT}"
    env = {e["name"]: k8s_expand(e["value"], pod_env) for e in container["env"] if "value" in e}
    assert env["MOTTO"] == "pa$$word" and env["NOTE"] == "$(HF_TOKEN) $$(HF_TOKEN)"


# ---- option values written into manifests ----------------------------------------------------------

@pytest.mark.parametrize(("options", "expected"), [
    ({"namespace": "Team_A"}, "--namespace 'Team_A': not a namespace name"),
    ({"namespace": "a" * 64}, "not a namespace name (a DNS label: at most 63"),
    ({"namespace": "llm\nx"}, "--namespace 'llm\\nx': not a namespace name"),
    ({"replicas": 2**31}, f"--replicas {2**31}: must be a whole number from 1 to {2**31 - 1}"),
    ({"replicas": 0}, "--replicas 0: must be a whole number from 1 to"),
    ({"nnodes": 2**40}, f"--nnodes {2**40}: must be a whole number from 1 to"),
    ({"rdma": "rdma/ib=0"}, "--rdma 'rdma/ib=0': the count must be from 1 to"),
    ({"rdma": "rdma/ib=" + "9" * 12}, "the count must be from 1 to 2147483647"),
    ({"rdma": "rdma/ib=\u00b2"}, "--rdma 'rdma/ib=\u00b2': not RESOURCE[=COUNT]"),
    ({"rdma": "rdma/ib\n"}, "--rdma 'rdma/ib\\n': not RESOURCE[=COUNT]"),
    ({"hf_token_secret": "hf_token"}, "--hf-token-secret 'hf_token': not a Secret name"),
])
def test_k8s_option_values_are_range_checked(tmp_path, options, expected):
    stack = load_matrix(matrix(tmp_path, {"s": ""})).get("s")
    with pytest.raises(SglstackError) as info:
        k8s.render_k8s(stack, f"r/x@{DIGEST}", k8s.K8sOptions(**options))
    assert str(info.value).startswith("stack 's': ") and expected in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_a_bad_namespace_stops_the_deploy_before_kubectl_changes_anything(cluster, tmp_path):
    path = matrix(tmp_path, {"s": ""})
    proc = _k8s_deploy(cluster, tmp_path, path, "s", DIGEST, "--namespace", "Team_A")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr  # bad input
    assert proc.stderr.strip().splitlines() == [
        "error: stack 's': --namespace 'Team_A': not a namespace name (a DNS label: at most 63 lowercase letters, "
        "digits and '-', starting and ending with a letter or digit)"]
    assert not (Path(cluster["KUBECTL_DOUBLE_STATE"]) / "objects").exists()


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"env": {"A B": "x"}}, "--env 'A B': not an environment variable name"),
    ({"env": {"A": "x\0"}}, "--env A: the value holds a NUL character"),
    ({"hf_cache": "/models:/etc"}, "--hf-cache '/models:/etc': a host folder without ':' or control characters"),
    ({"hf_cache": "/models\n"}, "--hf-cache '/models\\n': a host folder without ':'"),
    ({"mounts": ("/data\nx:/models",)}, "--mount '/data\\nx:/models': it holds a control character (\\n)"),
])
def test_command_line_values_follow_the_schema_rules(tmp_path, overrides, expected):
    stack = load_matrix(matrix(tmp_path, {"s": ""})).get("s")
    with pytest.raises(SglstackError) as info:
        serving_spec(stack, ServingOverrides(**overrides))
    assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize(("extra", "key"), [
    ('sglang: {version: "0.5.9\\n"}\n', "sglang.version"),
    ('torch: {version: "2.9.1", packages: ["torchvision==0.24.1 ; python_version > \\"3\\"\\n"]}\n',
     "torch.packages.0"),
])
def test_a_trailing_line_break_packaging_would_strip_is_refused(tmp_path, extra, key):
    message = refusal(matrix(tmp_path, {"s": extra}))
    assert f"key '{key}'" in message and "control character" in message, message
