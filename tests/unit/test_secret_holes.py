"""Secrets never shown, never handed on: the hidden instances found by attacking round 4's fixes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

import sglstack
from sglstack.config import serverflags as sf
from sglstack.config.settings import ServingSettings
from sglstack.core import credentials as cred
from sglstack.smoke.processenv import passes_to_process

SECRET = "pw-9f3c1e7d"

# Children that are not a tool sglstack hands this process's environment to: the node-side preflight
# modules run inside an image (standard library only); `invoke test` runs the project's own test suite.
_OWN_ENVIRONMENT = {"inimage/preflight/probe.py", "cli/testing.py"}


def test_every_child_process_gets_an_environment_made_for_it():
    """A `subprocess.run`/`Popen` without `env=` hands the child this process's whole environment, the
    signing key included: kubectl (and its exec credential plugins), hadolint, the local registry server,
    cuobjdump and the pip it installs with, git and uv version probes did."""
    root = Path(sglstack.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("inimage/incontainer/") or rel in _OWN_ENVIRONMENT:
            continue  # incontainer: runs inside an image, whose environment is the container's
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"
                    and node.func.attr in {"run", "Popen", "call", "check_call", "check_output"}
                    and not any(k.arg == "env" for k in node.keywords)):
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_a_tool_never_gets_the_registry_password(monkeypatch):
    monkeypatch.setenv("SGLSTACK_REGISTRY_PASSWORD", SECRET)
    monkeypatch.setenv("SGLSTACK_REGISTRY_USER", "ci")
    env = cred.tool_environment()
    assert "SGLSTACK_REGISTRY_PASSWORD" not in env and env["SGLSTACK_REGISTRY_USER"] == "ci"


@pytest.mark.parametrize("name", ["HF_AUTHTOKEN", "HF_ACCESSTOKEN", "NVIDIA_APIKEY2", "CUDA_PRIVATEKEY",
                                  "NCCL_PASSWD2", "TRITON_CREDENTIALSFILE", "HF_HUB_TOKEN", "UCX_SECRETS"])
def test_a_secret_run_together_in_a_passing_family_does_not_reach_a_process_server(name):
    assert passes_to_process(name) is False


@pytest.mark.parametrize("name", ["HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "NCCL_IB_PKEY",
                                  "CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_CACHE_DIR", "PATH", "LC_ALL"])
def test_runtime_settings_still_reach_a_process_server(name):
    assert passes_to_process(name) is True


@pytest.mark.parametrize(("name", "value"), [("HF_ENDPOINT", f"https://alice:{SECRET}@hf-mirror.internal/"),
                                             ("HF_ENDPOINT", f"https://{SECRET}@hf-mirror.internal/"),
                                             ("PATH", f"/usr/bin:https://a:{SECRET}@x/")])
def test_a_value_carrying_a_url_login_does_not_reach_a_process_server(name, value):
    assert passes_to_process(name, value) is False
    assert passes_to_process(name, "https://hf-mirror.internal/") is True


@pytest.mark.parametrize("args, index, why", [
    # SGLang merges a YAML file's keys into its argv: any owned flag, or speculation for the baseline run.
    (["--config", "/models/serve.yaml"], 1, sf.CONFIG_FILE_WHY),
    (["--config=/models/serve.yaml"], 1, sf.CONFIG_FILE_WHY),
    (["--conf", "/models/serve.yaml"], 1, sf.CONFIG_FILE_WHY),
    # Two flags in one YAML string: compose.yaml and the manifests got the literal key.
    ([f"--api-key {SECRET}"], 1, sf.SPACED_WHY),
    (["--mem-fraction-static 0.8 --port 1"], 1, sf.SPACED_WHY),
])
def test_extra_args_that_set_a_flag_out_of_sight_or_carry_a_secret_are_refused(args, index, why):
    assert sf.extra_args_problem(["--trust-remote-code", *args]) == (index, why)
    with pytest.raises(ValidationError) as err:
        ServingSettings(model="m", extra_args=("--trust-remote-code", *args))
    assert err.value.errors()[0]["msg"] == f"Value error, {why}"
    assert SECRET not in why


def test_what_looks_close_still_passes():
    args = ["--context-length", "4096", "--chat-template", "https://hub.example/t.jinja", "--served-model-name",
            "a b", "--constrained-json-whitespace-pattern", "x"]
    assert sf.extra_args_problem(args) is None


@pytest.mark.parametrize("field", ["env", "extra_args"])
def test_a_nul_in_a_value_is_refused_without_showing_the_value(field):
    """serving.env.HF_TOKEN holding a NUL printed the token in the refusal."""
    value = {"HF_TOKEN": f"{SECRET}\0"} if field == "env" else ("--api-key", f"{SECRET}\0")
    with pytest.raises(ValidationError) as err:
        ServingSettings(model="m", **{field: value})
    assert [e["msg"] for e in err.value.errors()] == [
        "Value error, the value holds a NUL character, which no argument or environment value can"]


_JWK_SEED = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"  # RFC 8037's example ed25519 private key (base64url)


@pytest.mark.parametrize("text", [_JWK_SEED, f'{{"kty":"OKP","crv":"Ed25519","d":"{_JWK_SEED}"}}',
                                  "MC4CAQAwBQYDK2VwBCIEI"])
def test_key_text_in_another_form_is_never_quoted_as_a_path(text):
    """A JWK or a base64url seed was taken for a path, and "cannot read key file '<the key>'" printed it."""
    from sglstack.attest.errors import BadInput
    from sglstack.attest.signing import load_public_key, load_signing_key

    for call, what in ((lambda: load_signing_key(None, {"SGLSTACK_SIGNING_KEY": text}), "SGLSTACK_SIGNING_KEY"),
                       (lambda: load_signing_key(text, {}), "--signing-key"),
                       (lambda: load_public_key(text, what="--verify-key"), "--verify-key")):
        with pytest.raises(BadInput) as err:
            call()
        assert str(err.value) == (f"{what}: names no file (No such file or directory), and is not PEM key text "
                                  "either (not shown: it may be a key in another form; give a path, or the PEM)")


def test_a_path_that_is_missing_is_still_named(tmp_path):
    from sglstack.attest.errors import BadInput
    from sglstack.attest.signing import load_signing_key

    for given in (str(tmp_path / "gone.pem"), "keys/release.pem", "release.key"):
        with pytest.raises(BadInput) as err:
            load_signing_key(given, {})
        assert str(err.value) == f"--signing-key: cannot read key file '{given}' (No such file or directory)"


def test_an_argv_shown_in_a_report_hides_url_logins_as_well_as_secret_flags():
    from sglstack.smoke.plan import redact_argv

    argv = ["--chat-template", f"https://alice:{SECRET}@hub.example/t.jinja", f"--api-key={SECRET}",
            f"--tokenizer-path=https://{SECRET}@hub.example/tok", "--log-level", "info"]
    assert redact_argv(argv) == ["--chat-template", "https://***@hub.example/t.jinja", "--api-key=***",
                                 "--tokenizer-path=https://***@hub.example/tok", "--log-level", "info"]


@pytest.mark.parametrize(("args", "flag"), [(["--api_key", SECRET], "--api-key"), ([f"--admin_api_key={SECRET}"],
                                                                                   "--admin-api-key")])
def test_a_secret_flag_spelled_with_underscores_is_a_secret_flag(args, flag):
    """`--api_key VALUE` was neither refused nor hidden: written into compose.yaml and the manifests."""
    from sglstack.smoke.plan import redact_argv

    found = sf.extra_args_problem(args)
    assert found is not None and found[0] == 0 and found[1].startswith(f"'{args[0].partition('=')[0]}' takes a "
                                                                       f"secret, so its value must be a reference "
                                                                       f"like '{flag} ${{NAME}}'")
    assert SECRET not in " ".join(redact_argv(args))


def test_an_owned_flag_spelled_with_underscores_is_refused():
    assert sf.extra_args_problem(["--model_path", "other"]) == (0, (
        "'--model_path' (SGLang reads it as --model-path) is sglstack's to set: set from serving.model; extra_args "
        "may not set it again (the server would run with another value than the one reported)"))
    assert sf.extra_args_problem(["--speculative_num_steps=3"])[0] == 0


def test_the_secrets_a_server_was_given_include_the_logins_of_its_urls():
    """The process runner rewrites its kept server logs for these (SGLang logs server_args whole)."""
    got = cred.secret_values_of({"HF_ENDPOINT": f"https://bob:{SECRET}2@mirror/", "PLAIN": "x"}, (),
                                ["--chat-template", f"https://alice:{SECRET}@hub.example/t.jinja"])
    assert sorted(got) == [f"alice:{SECRET}", f"bob:{SECRET}2"]


def test_a_referenced_variable_is_a_secret_whatever_its_name():
    """serving.env `MIRROR: ${HUB_LOGIN}` takes a Secret's value under a name that says nothing secret: it is one of
    the server's secrets because it was referenced, and a log line echoing it is shown with `***`."""
    env = {"MIRROR": f"{SECRET}-ref", "HF_TOKEN": f"{SECRET}-hf", "PLAIN": "plain-value"}
    got = cred.secret_values_of(env, {"MIRROR"}, ["--api-key", f"{SECRET}-flag"])
    assert sorted(got) == [f"{SECRET}-flag", f"{SECRET}-hf", f"{SECRET}-ref"]
    line = f"server_args: mirror={SECRET}-ref plain=plain-value"
    assert cred.redact_text(line, got) == f"server_args: mirror={cred.REDACTED} plain=plain-value"
    # not referenced, not secret-named: an ordinary value, shown
    assert cred.secret_values_of(env, (), []) == (f"{SECRET}-hf",)
