"""What a smoke serves (`smoke.subject`) and how `--smoke-opt` pairs are read (`smoke.options`), in process:
the engine is a stand-in speaking docker-py's `images.get`/`images.pull`, the environment a folder here.
Every refusal is its exact line: it is what the user reads before any server starts."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import docker.errors
import pytest
from engine_double import Engine, Image

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import MESSAGE_CUT, SmokeError, SmokeInputError
from sglstack.smoke import options as smoke_opts
from sglstack.smoke import subject
from sglstack.smoke.overrides import smoke_options

BASE = {"model": "o/m", "draft_model": "o/d"}
DIGEST = "sha256:" + "ab" * 32
IMAGE_ID = "sha256:" + "11" * 32


# ---- --smoke-opt -------------------------------------------------------------------------------------


def test_pairs_become_typed_overrides_in_the_order_given():
    assert smoke_opts.parse_smoke_opts([
        "timeout=30", "env=A=1", "env=B=x=y", "label=team=ml", "mount=/a:/a", "mount=/b:/b:ro",
        "extra-args=--x 1  --y", "extra_args=--z", "kinds=eagle3", "kinds=baseline", " max-new-tokens =8",
        "model=", "env=EMPTY=", "mount=/my models:/models",
    ]) == {"timeout": "30", "env": {"A": "1", "B": "x=y", "EMPTY": ""}, "labels": {"team": "ml"},
           "mounts": ["/a:/a", "/b:/b:ro", "/my models:/models"], "extra_args": ["--x", "1", "--y", "--z"],
           "kinds": ["eagle3", "baseline"], "max_new_tokens": "8", "model": ""}
    assert smoke_opts.parse_smoke_opts([]) == {}


@pytest.mark.parametrize(("opt", "line"), [
    ("bogus", "--smoke-opt #1: expected KEY=VALUE (it has no '='; not shown, as it may be a secret)"),
    ("=1", "--smoke-opt '=…': expected KEY=VALUE"),
    ("a b=1", "--smoke-opt 'a b=…': expected KEY=VALUE"),
    ("1x=1", "--smoke-opt '1x=…': expected KEY=VALUE"),
    ("env=A", "--smoke-opt 'env=…': expected env=NAME=VALUE"),
    ("env==1", "--smoke-opt 'env=…': expected env=NAME=VALUE"),
    ("label=x", "--smoke-opt 'label=…': expected label=NAME=VALUE"),
    (" labels =x", "--smoke-opt 'labels=…': the key is label= (as smoke's --label)"),
    ("mounts=/a:/a", "--smoke-opt 'mounts=…': the key is mount= (as smoke's --mount)"),
])
def test_each_bad_pair_is_its_exact_line(opt, line):
    with pytest.raises(smoke_opts.SmokeOptionError) as err:
        smoke_opts.parse_smoke_opts([opt])
    assert str(err.value) == line
    assert isinstance(err.value, SmokeError)


def test_a_single_value_given_twice_is_refused_whatever_its_spelling():
    with pytest.raises(smoke_opts.SmokeOptionError) as err:
        smoke_opts.parse_smoke_opts(["max-new-tokens=8", "max_new_tokens=9"])
    assert str(err.value) == "--smoke-opt 'max_new_tokens=9': max_new_tokens is given twice (give it once)"


def test_a_named_flag_wins_for_one_value_and_adds_to_pairs_and_lists():
    merged = smoke_opts.smoke_overrides(
        ["timeout=30", "env=A=1", "env=B=2", "mount=/a:/a", "label=x=1"],
        timeout=60, env={"B": "named", "C": 3}, mounts=["/b:/b"], labels="x=2", gpus=None, model="o/n")
    assert merged == {"timeout": 60, "env": {"A": "1", "B": "named", "C": "3"}, "mounts": ["/a:/a", "/b:/b"],
                      "labels": {"x": "2"}, "model": "o/n"}
    assert smoke_opts.smoke_overrides(["mount=/a:/a"], mounts="/b:/b") == {"mounts": ["/a:/a", "/b:/b"]}
    assert smoke_opts.smoke_overrides(["env=A=1"], env=["B=2", "C=="]) == {"env": {"A": "1", "B": "2", "C": "="}}
    # without a --smoke-opt of the same key, a named flag is taken as given
    assert smoke_opts.smoke_overrides([], env={"A": "1"}, mounts="/b:/b") == {"env": {"A": "1"}, "mounts": "/b:/b"}
    assert smoke_opts.smoke_overrides([]) == {}


@pytest.mark.parametrize(("key", "value", "line"), [
    ("env", "NOPE", "--env #1: expected NAME=VALUE (it has no '='; not shown, as it may be a secret)"),
    ("env", ["A=1", "=2"], "--env '=…': expected NAME=VALUE"),
    ("labels", "x", "--label #1: expected NAME=VALUE (it has no '='; not shown, as it may be a secret)"),
])
def test_a_named_pair_flag_without_a_name_is_its_exact_line(key, value, line):
    with pytest.raises(smoke_opts.SmokeOptionError) as err:
        smoke_opts.smoke_overrides([f"{smoke_opts.SPELLING.get(key, key)}=A=0"], **{key: value})
    assert str(err.value) == line


# ---- the subject: an image or a Python environment ---------------------------------------------------


def test_a_local_image_is_found_without_a_pull():
    engine = Engine({"reg:5000/a/b:1": Image(IMAGE_ID, [f"reg:5000/a/b@{DIGEST}", f"other/x@{DIGEST}"])})
    assert subject.resolve_image(engine, "reg:5000/a/b:1") == {  # type: ignore[arg-type]
        "ref": "reg:5000/a/b:1", "digest": DIGEST, "id": IMAGE_ID,
        "repo_digests": [f"reg:5000/a/b@{DIGEST}", f"other/x@{DIGEST}"]}
    assert engine.pulled == []


def test_a_missing_image_is_pulled_once_or_refused_without_pull():
    engine = Engine(registry={"reg:5000/a/b:1": Image(IMAGE_ID, [f"reg:5000/a/b@{DIGEST}"])})
    with pytest.raises(SmokeError) as err:
        subject.resolve_image(engine, "reg:5000/a/b:1", pull=False)  # type: ignore[arg-type]
    assert str(err.value) == "image reg:5000/a/b:1: not found on the Docker host" and engine.pulled == []
    info = subject.resolve_image(engine, "reg:5000/a/b:1")  # type: ignore[arg-type]
    assert (info["digest"], info["id"], engine.pulled) == (DIGEST, IMAGE_ID, ["reg:5000/a/b:1"])


def test_an_image_the_registry_serves_for_another_platform_only_is_refused_before_the_pull():
    """An arm64 image (or an index of arm64 alone) on this x86 host: one line from the registry's answer, exit 2,
    nothing pulled (a real one is ~10 GB); one the engine cannot ask about is left to the pull."""
    engine = Engine(registry={"reg:5000/a/b:gb": Image(IMAGE_ID, [f"reg:5000/a/b@{DIGEST}"], "arm64")})
    with pytest.raises(SmokeInputError) as err:
        subject.resolve_image(engine, "reg:5000/a/b:gb")  # type: ignore[arg-type]
    assert (str(err.value), err.value.exit_code, engine.pulled) == (
        "image reg:5000/a/b:gb is for linux/arm64, the Docker host is linux/amd64: nothing was pulled; smoke it on "
        "a linux/arm64 node, or an index that lists linux/amd64", 2, [])
    with pytest.raises(SmokeError) as err:
        subject.resolve_image(engine, "reg:5000/a/b:absent")  # type: ignore[arg-type]
    assert engine.pulled == ["reg:5000/a/b:absent"]  # the pull says why, in the engine's words


def test_a_failed_pull_says_the_engines_first_line_cut_to_300_characters():
    long = "x" * 400
    engine = Engine(pull_error=docker.errors.APIError("500", explanation=f"manifest unknown: {long}\nmore"))
    with pytest.raises(SmokeError) as err:
        subject.resolve_image(engine, "reg/a:1")  # type: ignore[arg-type]
    assert str(err.value) == ("image reg/a:1: not on the Docker host and the pull failed: "
                              + f"manifest unknown: {long}"[:MESSAGE_CUT])
    plain = Engine(pull_error=docker.errors.APIError("pull access denied\nsecond line"))
    with pytest.raises(SmokeError) as err:
        subject.resolve_image(plain, "reg/a:1")  # type: ignore[arg-type]
    assert str(err.value) == "image reg/a:1: not on the Docker host and the pull failed: pull access denied"


def test_a_pull_the_network_stopped_names_the_host_and_what_to_do():
    offline = Engine(pull_error=docker.errors.APIError("500", explanation='Get "https://registry-1.docker.io/v2/": '
                                                        "dial tcp: lookup registry-1.docker.io on 10.0.0.53:53: no "
                                                        "such host"))
    with pytest.raises(SmokeError) as err:
        subject.resolve_image(offline, "reg/a:1")  # type: ignore[arg-type]
    assert str(err.value) == ("image reg/a:1: not on the Docker host and the pull failed: cannot reach "
                              "registry-1.docker.io: its name does not resolve (DNS); check this machine's network, "
                              "DNS and proxy settings (HTTPS_PROXY, NO_PROXY), or run where the host can be reached")


def test_a_pull_that_brings_nothing_and_an_engine_that_fails_are_one_line_each():
    with pytest.raises(SmokeError) as err:
        subject.resolve_image(Engine(), "reg/a:1")  # type: ignore[arg-type]
    assert str(err.value) == "image reg/a:1: not on the Docker host after the pull"
    failing = Engine(get_error=docker.errors.APIError("boom", explanation="engine said no\nand more" + "y" * 400))
    with pytest.raises(SmokeError) as err:
        subject.resolve_image(failing, "reg/a:1")  # type: ignore[arg-type]
    assert str(err.value) == "image reg/a:1: engine said no"
    bare = Engine(get_error=docker.errors.APIError("z" * 350))
    with pytest.raises(SmokeError) as err:
        subject.resolve_image(bare, "reg/a:1")  # type: ignore[arg-type]
    assert str(err.value) == "image reg/a:1: " + str(docker.errors.APIError("z" * 350))[:MESSAGE_CUT]


def test_the_image_label_is_the_digest_else_the_id():
    assert subject.image_label({"digest": DIGEST, "id": IMAGE_ID}) == DIGEST
    assert subject.image_label({"digest": None, "id": IMAGE_ID}) == IMAGE_ID
    assert subject.image_label({}) == "?"


def make_env(root: Path, dists: list[str], layout: str = "lib/python3.11/site-packages") -> Path:
    python = root / "bin" / "python3"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    for d in dists:
        (root / layout / f"{d}.dist-info").mkdir(parents=True)
    return root


def test_the_process_runner_needs_a_folder_with_an_executable_python(tmp_path):
    missing = smoke_options(None, **BASE, runner="process", python_env=str(tmp_path / "nope"))
    with pytest.raises(SmokeError) as err:
        subject.check_what_to_serve(None, missing)
    assert str(err.value) == f"--python-env '{tmp_path / 'nope'}': no such folder"
    (tmp_path / "empty").mkdir()
    empty = smoke_options(None, **BASE, runner="process", python_env=str(tmp_path / "empty"))
    with pytest.raises(SmokeError) as err:
        subject.check_what_to_serve(None, empty)
    assert str(err.value) == f"--python-env '{tmp_path / 'empty'}': no executable bin/python3 in it (a venv or prefix)"
    make_env(tmp_path / "noexec", [])
    (tmp_path / "noexec" / "bin" / "python3").chmod(0o644)
    noexec = smoke_options(None, **BASE, runner="process", python_env=str(tmp_path / "noexec"))
    with pytest.raises(SmokeError, match="no executable bin/python3"):
        subject.check_what_to_serve(None, noexec)
    (tmp_path / "dir" / "bin" / "python3").mkdir(parents=True)  # a folder named python3 is not an interpreter
    with pytest.raises(SmokeError, match="no executable bin/python3"):
        subject.check_what_to_serve(None, smoke_options(None, **BASE, runner="process",
                                                        python_env=str(tmp_path / "dir")))
    env = make_env(tmp_path / "venv", [])
    good = smoke_options(None, **BASE, runner="process", python_env=str(env))
    assert subject.check_what_to_serve(None, good) == str(env / "bin" / "python3")
    with pytest.raises(SmokeError) as err:
        subject.check_what_to_serve("img:1", good)
    assert str(err.value) == "smoke runner 'process' serves --python-env, not an image (got image 'img:1')"


def test_the_docker_runner_needs_an_image():
    options = smoke_options(None, **BASE)
    assert subject.check_what_to_serve("img:1", options) is None
    for image in (None, ""):
        with pytest.raises(SmokeError) as err:
            subject.check_what_to_serve(image, options)
        assert str(err.value) == "smoke runner 'docker': pass --image (a tag, id or repo@sha256:...)"


def test_an_environment_s_id_is_the_hash_of_its_distributions_and_its_pythonpath_s(tmp_path):
    env = make_env(tmp_path / "venv", ["torch-2.9.1", "sglang-0.5.9"])
    make_env(tmp_path / "prefix", ["flashinfer-0.6.1"], layout="local/lib/python3.11/dist-packages")
    extra = tmp_path / "extra"
    (extra / "numpy-2.1.dist-info").mkdir(parents=True)
    (extra / "sglang-0.5.9.dist-info").mkdir()  # the same name twice counts once
    (tmp_path / "venv" / "lib64" / "python3.11" / "site-packages" / "triton-3.5.dist-info").mkdir(parents=True)
    options = smoke_options(None, **BASE, runner="process", python_env=str(env),
                            env={"PYTHONPATH": os.pathsep.join([str(extra), "", str(tmp_path / "prefix")])})
    info = subject.environment_info(options, "/x/python3")
    names = sorted(["torch-2.9.1.dist-info", "sglang-0.5.9.dist-info", "numpy-2.1.dist-info",
                    "triton-3.5.dist-info", "flashinfer-0.6.1.dist-info"])
    assert info == {"ref": f"python-env:{env}", "digest": None,
                    "id": "env-sha256:" + hashlib.sha256("\n".join(names).encode()).hexdigest(),
                    "repo_digests": [], "runner": "process", "python": "/x/python3", "distributions": 5}
    alone = subject.environment_info(smoke_options(None, **BASE, runner="process", python_env=str(env)), "p")
    assert alone["distributions"] == 3 and alone["id"] != info["id"]
    assert subject.image_label(info) == info["id"]


def test_opening_an_environment_logs_it_and_needs_no_engine(tmp_path):
    env = make_env(tmp_path / "venv", ["sglang-0.5.9"])
    options = smoke_options(None, **BASE, runner="process", python_env=str(env))
    lines: list[str] = []
    engine, info = subject.open_what_to_serve(None, None, options, str(env / "bin" / "python3"), lines.append)
    assert engine is None and info["runner"] == "process" and info["python"] == str(env / "bin" / "python3")
    assert lines == [f"smoke: process runner, Python environment {env} ({info['id']})"]


STACKS = """
stacks:
  gpu:
    description: a GPU stack for the preflight's turn
    base_image: debian:bookworm-slim
    python: "3.11"
    sglang: {version: "0.5.9"}
    publish: {repository: 127.0.0.1:1/sglstack-test/gpu}
    serving: {model: o/m, tp: 1, gpus: 1}
"""


@pytest.mark.parametrize(("gpus", "skip", "host", "preflight"), [
    (1, False, None, True), (1, False, "ssh://gpu-node", True), (0, False, None, False), (1, True, None, False),
])
def test_opening_an_image_resolves_it_and_runs_the_gpu_node_s_preflight_when_due(
        tmp_path, monkeypatch, gpus, skip, host, preflight):
    (tmp_path / "stacks.yaml").write_text(STACKS)
    stack = load_matrix(tmp_path / "stacks.yaml").get("gpu")
    engine = Engine({"reg/a:1": Image(IMAGE_ID, [f"reg/a@{DIGEST}"])})
    clients, checks = [], []
    monkeypatch.setattr(subject, "docker_client", lambda h: clients.append(h) or engine)
    monkeypatch.setattr(subject, "require_ready", lambda st, **kw: checks.append((st.name, kw)))
    options = smoke_options(stack, gpus=gpus, skip_preflight=skip, docker_host=host, pull=False, kinds=["baseline"])
    lines: list[str] = []
    got, info = subject.open_what_to_serve(stack, "reg/a:1", options, None, lines.append)
    assert got is engine and clients == [host] and info["digest"] == DIGEST
    expected = [f"smoke: image reg/a:1 ({DIGEST})"]
    if preflight:
        expected.append(f"smoke: preflight of the GPU node ({host or 'local engine'}) in reg/a:1")
    assert lines == expected
    assert checks == ([("gpu", {"docker_host": host, "image": IMAGE_ID})] if preflight else [])
    # without a stack (smoke of an image alone) there is nothing to check the node against
    lines.clear()
    subject.open_what_to_serve(None, "reg/a:1", options, None, lines.append)
    assert lines == [f"smoke: image reg/a:1 ({DIGEST})"] and len(checks) == (1 if preflight else 0)
    # an image the engine lacks is pulled only when the options allow it
    engine.local.clear()
    with pytest.raises(SmokeError, match=r"^image reg/a:1: not found on the Docker host$"):
        subject.open_what_to_serve(stack, "reg/a:1", options, None, lines.append)
    assert engine.pulled == []
    engine.registry["reg/a:1"] = Image(IMAGE_ID, [f"reg/a@{DIGEST}"])
    pulling = smoke_options(stack, gpus=0, docker_host=host, kinds=["baseline"])
    assert subject.open_what_to_serve(stack, "reg/a:1", pulling, None, lines.append)[1]["id"] == IMAGE_ID
    assert engine.pulled == ["reg/a:1"]


def test_an_image_of_another_platform_is_refused_before_any_server_starts():
    """binfmt would run an arm64 image on this x86 host under QEMU, silently: every figure the emulator's."""
    arm = Engine({"reg/a:arm": Image(IMAGE_ID, [], "arm64")})
    with pytest.raises(SmokeInputError) as err:
        subject.resolve_image(arm, "reg/a:arm")  # type: ignore[arg-type]
    assert str(err.value) == ("image reg/a:arm is for linux/arm64, the Docker host is linux/amd64: it would run "
                              "emulated, not on the host's GPUs; smoke it on a linux/arm64 node (an index by digest "
                              "picks each node's own)")
    # an index pulled by its digest: the engine holds the host's platform's image under the index's digest
    index = f"reg:5000/a/b@{DIGEST}"
    native = Engine(registry={index: Image(IMAGE_ID, [index], "amd64")})
    info = subject.resolve_image(native, index)  # type: ignore[arg-type]
    assert (info["digest"], info["platform"], native.pulled) == (DIGEST, "linux/amd64", [index])
