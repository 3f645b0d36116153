"""`invoke smoke`'s options as it receives them (strings, from invoke's untyped flags), in process.

Each option named in smoke.overrides's tables is given once and read back from where it lands (the served
argv, the measure, the gates, the report view): a new option is covered by the tables it joins. Every
refusal is its exact one line. (These guard the logic the CLI tests check through a child `invoke`.)
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.config.settings import Gates, SmokeSettings
from sglstack.core.errors import SmokeError
from sglstack.serving import ServingError, check_secret_references
from sglstack.smoke import overrides
from sglstack.smoke.launch import container_plan, env_interpreter, launch_argvs, process_plan
from sglstack.smoke.overrides import smoke_options
from sglstack.smoke.plan import redact_argv

BASE = {"model": "o/m", "draft_model": "o/d"}
# A value of each served option (as a CLI string), and the flag of the launch argv that carries it.
SERVED = {
    "model": ("o/other", "--model-path"), "draft_model": ("o/draft2", "--speculative-draft-model-path"),
    "speculative_algorithm": ("EAGLE", "--speculative-algorithm"), "num_steps": ("7", "--speculative-num-steps"),
    "eagle_topk": ("5", "--speculative-eagle-topk"), "num_draft_tokens": ("9", "--speculative-num-draft-tokens"),
    "tp": ("2", "--tp-size"), "port": ("31234", "--port"),
}
# The served options the argv does not carry, and where the spec keeps each one.
SERVED_ELSEWHERE = {"gpus": ("4", "gpus", 4), "timeout": ("90.5", "startup_timeout_s", 90.5),
                    "shm_size": ("2g", "shm_size", "2g")}


def test_the_tables_name_every_served_option() -> None:
    assert set(SERVED) | set(SERVED_ELSEWHERE) == set(overrides._SERVING)


@pytest.mark.parametrize("key", sorted(SERVED))
def test_each_served_option_given_as_a_string_is_what_the_server_is_launched_with(key: str) -> None:
    value, flag = SERVED[key]
    # (draft tokens are a free choice only with topk above 1: with topk 1 SGLang serves steps + 1)
    given = {**BASE, key: value, **({"gpus": "2"} if key == "tp" else {}),
             **({"eagle_topk": "2"} if key == "num_draft_tokens" else {})}
    argv = launch_argvs(smoke_options(None, **given))["eagle3"]
    assert argv[argv.index(flag) + 1] == value
    assert argv.count(flag) == 1


@pytest.mark.parametrize("key", sorted(SERVED_ELSEWHERE))
def test_each_served_option_off_the_argv_lands_in_the_spec_typed(key: str) -> None:
    value, attribute, typed = SERVED_ELSEWHERE[key]
    options = smoke_options(None, **BASE, **{key: value})
    assert getattr(options.serving, attribute) == typed
    assert type(getattr(options.serving, attribute)) is type(typed)


MEASURES = {"concurrency": ("3", 3), "num_prompts": ("5", 5), "max_new_tokens": ("17", 17),
            "request_timeout": ("12.5", 12.5), "runs": ("4", 4)}


def test_the_measure_options_are_read_typed_from_strings() -> None:
    assert set(MEASURES) == set(overrides._MEASURE)
    options = smoke_options(None, **BASE, **{k: v for k, (v, _) in MEASURES.items()})
    for key, (_, typed) in MEASURES.items():
        assert getattr(options, key) == typed and type(getattr(options, key)) is type(typed), key


def test_without_a_stack_the_measure_and_gates_are_the_built_in_defaults() -> None:
    options = smoke_options(None, **BASE)
    assert (options.concurrency, options.num_prompts, options.max_new_tokens) == (8, 8, 128)
    assert options.gates == Gates() and options.labels == {} and options.kinds == ("baseline", "eagle3")
    assert (options.no_history, options.pull, options.skip_preflight, options.flush_cache) == (
        False, True, False, False)


@pytest.mark.parametrize(("text", "value"), [("1", True), ("true", True), (" Yes ", True), ("ON", True),
                                             ("0", False), ("false", False), ("No", False), ("off", False),
                                             ("", False), (True, True), (False, False), (0, False)])
@pytest.mark.parametrize("switch", ["no_history", "pull", "skip_preflight", "flush_cache"])
def test_each_switch_reads_the_words_of_a_boolean(switch: str, text, value: bool) -> None:
    assert getattr(smoke_options(None, **BASE, **{switch: text}), switch) is value


@pytest.mark.parametrize("gate", ["min_speedup", "min_accept_length", "min_agreement", "max_regression"])
def test_each_gate_given_as_a_string_overrides_only_itself(gate: str) -> None:
    options = smoke_options(None, **BASE, **{gate: "0.5"})
    assert options.gates == Gates(**{gate: 0.5})


def test_env_mounts_labels_and_extra_args_are_parsed(tmp_path) -> None:
    options = smoke_options(None, **BASE, env="A=b=c", mounts=f"{tmp_path}:/models:ro",
                            labels=["team=x", "run=1"], extra_args="--enable-metrics --context-length 9")
    assert options.env == {"A": "b=c"}
    assert options.mounts == (f"{tmp_path}:/models:ro",)
    assert options.labels == {"team": "x", "run": "1"}
    assert options.serving.extra_args == ("--enable-metrics", "--context-length", "9")
    options = smoke_options(None, **BASE, env={"K": 1}, extra_args=["--x", "y z"])
    assert options.env == {"K": "1"} and options.serving.extra_args == ("--x", "y z")


def test_a_baseline_only_smoke_needs_no_draft_model_and_the_kinds_run_in_order() -> None:
    assert smoke_options(None, model="o/m", kinds="baseline").kinds == ("baseline",)
    assert smoke_options(None, **BASE, kinds="eagle3, baseline").kinds == ("baseline", "eagle3")
    assert smoke_options(None, **BASE, kinds=["eagle3"]).kinds == ("eagle3",)


def test_none_means_not_given_and_the_stack_file_names_are_ignored() -> None:
    options = smoke_options(None, **BASE, tp=None, env=None, stacks_file="x.yaml", image="i")
    assert options.tp == 1 and options.env == {}


@pytest.mark.parametrize(("given", "line"), [
    ({"bogus": 1, "zzz": 2}, "unknown smoke option(s): bogus, zzz (known: "),
    ({"kinds": "baseline"}, "no model for the smoke in the options: pass --model or --stack"),
    ({"model": "o/m"}, "no draft model for the smoke in the options: pass --draft-model or --stack"),
    ({**BASE, "tp": "eight"}, "invalid smoke option: tp 'eight' is not a whole number"),
    ({**BASE, "timeout": "soon"}, "invalid smoke option: timeout 'soon' is not a number"),
    ({**BASE, "concurrency": "2.5"}, "invalid smoke option: concurrency '2.5' is not a whole number"),
    ({**BASE, "pull": "maybe"}, "invalid smoke option: pull 'maybe' is not a boolean (true or false)"),
    ({**BASE, "concurrency": 0}, "smoke option concurrency must be >= 1 (got 0)"),
    ({**BASE, "num_prompts": "0"}, "smoke option num_prompts must be >= 1 (got 0)"),
    ({**BASE, "max_new_tokens": -1}, "smoke option max_new_tokens must be >= 1 (got -1)"),
    ({**BASE, "runs": 0}, "smoke option runs must be >= 1 (got 0)"),
    ({**BASE, "request_timeout": 0}, "smoke option request_timeout must be > 0 and <= 604800 (got 0.0)"),
    ({**BASE, "request_timeout": "inf"}, "invalid smoke option: request_timeout 'inf' is not a finite number"),
    ({**BASE, "concurrency": 65537}, "smoke option concurrency must be <= 65536 (got 65537)"),
    ({**BASE, "runner": "podman"}, "smoke runner 'podman': choose from docker, process"),
    ({**BASE, "runner": "process"},
     "smoke runner 'process': pass --python-env PATH (a venv or prefix holding bin/python3)"),
    ({**BASE, "python_env": "/venv"},
     "--python-env '/venv' is for --runner process (the docker runner serves an image)"),
    ({**BASE, "kinds": "fast"}, "smoke kinds 'fast': choose from baseline, eagle3"),
    ({**BASE, "labels": ["novalue"]}, "--label #1: expected KEY=VALUE"
        " (it has no '='; not shown, as it may be a secret)"),
    ({**BASE, "env": ["=v"]}, "--env '=…': expected KEY=VALUE"),
])
def test_each_refusal_is_its_exact_line(given: dict, line: str) -> None:
    with pytest.raises(SmokeError) as err:
        smoke_options(None, **given)
    assert str(err.value).startswith(line), str(err.value)
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 2  # bad input


def test_the_process_runner_with_its_environment_is_accepted() -> None:
    options = smoke_options(None, **BASE, runner="process", python_env="/venv")
    assert (options.runner, options.python_env) == ("process", "/venv")


def test_a_bad_gate_is_one_line_naming_the_gate() -> None:
    with pytest.raises(SmokeError) as err:
        smoke_options(None, **BASE, min_agreement="2")
    assert str(err.value).startswith("invalid gate override: min_agreement"), str(err.value)
    assert "\n" not in str(err.value)


def test_the_report_view_holds_every_option_and_no_env_value(tmp_path) -> None:
    options = smoke_options(None, **BASE, env={"HF_TOKEN": "hf-secret", "A": "b"}, mounts=[f"{tmp_path}:/m"],
                            extra_args="--api-key sk-1", labels={"team": "x"}, gpus="2", tp="2",
                            shm_size="1g", timeout="60", port="30001", num_steps="2", eagle_topk="3",
                            num_draft_tokens="4", build_dir=str(tmp_path))
    view = options.describe()
    assert "hf-secret" not in repr(view) and "sk-1" not in repr(view)
    want = {"model": "o/m", "draft_model": "o/d", "speculative_algorithm": "EAGLE3", "num_steps": 2,
            "eagle_topk": 3, "num_draft_tokens": 4, "tp": 2, "gpus": 2, "port": 30001, "timeout": 60.0,
            "shm_size": "1g", "env_keys": ["A", "HF_TOKEN"], "gates": Gates().model_dump(),
            "extra_args": ["--api-key", "***"], "mounts": [f"{tmp_path}:/m"]}
    for key, value in want.items():
        assert view[key] == value, key
    for f in dataclasses.fields(options):  # every other field, as it is
        if f.name not in ("serving", "gates", "labels", "start_gates"):
            assert view[f.name] == getattr(options, f.name), f.name
    assert view["start_gates"] == options.start_gates.model_dump()  # JSON, as the gates
    assert "labels" not in view and "serving" not in view
    baseline = smoke_options(None, model="o/m", kinds="baseline").describe()
    assert {k: baseline[k] for k in ("draft_model", "speculative_algorithm", "num_steps", "eagle_topk",
                                     "num_draft_tokens")} == dict.fromkeys(
        ("draft_model", "speculative_algorithm", "num_steps", "eagle_topk", "num_draft_tokens"))


def test_the_container_redacts_every_secret_value_and_only_those() -> None:
    options = smoke_options(None, **BASE, env={"PLAIN": "p", "MY_API_KEY": "${VAULT_KEY}", "NCCL_DEBUG": "INFO"})
    container = container_plan(options, "img", "eagle3",
                               host_env={"HF_TOKEN": "hf-1", "VAULT_KEY": "v-1", "OTHER": "o"})
    assert dict(container.environment) == {"HF_TOKEN": "hf-1", "PLAIN": "p", "NCCL_DEBUG": "INFO",
                                           "MY_API_KEY": "v-1"}
    assert container.redacted_environment() == {"HF_TOKEN": "***", "PLAIN": "p", "NCCL_DEBUG": "INFO",
                                                "MY_API_KEY": "***"}
    assert container.referenced == frozenset({"MY_API_KEY"})
    assert container.labels == {"io.sglstack.smoke": "eagle3"}
    assert container.bind_address == "127.0.0.1" and container.kind == "eagle3" and container.image == "img"


def test_redact_argv_hides_only_the_values_of_secret_flags() -> None:
    assert redact_argv(["--api-key", "a", "--admin-api-key", "b", "--port", "1", "--api-key=c",
                        "--api-keys", "d"]) == ["--api-key", "***", "--admin-api-key", "***", "--port", "1",
                                                "--api-key=***", "--api-keys", "d"]
    assert redact_argv(["--admin-api-key=x=y", "--api-key"]) == ["--admin-api-key=***", "--api-key"]


# What makes two runs' tokens/s comparable (the history's and bisect's key), and what does not.
FINGERPRINTED = {"model": "o/other", "draft_model": "o/d2", "speculative_algorithm": "EAGLE", "num_steps": "2",
                 "eagle_topk": "2", "num_draft_tokens": "8", "tp": "2", "gpus": "2", "max_new_tokens": "64",
                 "concurrency": "4", "num_prompts": "16"}
FINGERPRINT_KEY = {"speculative_algorithm": "algorithm"}
NOT_FINGERPRINTED = {"port": "30002", "timeout": "99", "shm_size": "4g", "request_timeout": "5", "runs": "3",
                     "labels": {"a": "b"}, "no_history": "true", "report": "r.json", "min_speedup": "2"}


def test_the_fingerprint_moves_with_each_measured_setting_and_no_other() -> None:
    base = smoke_options(None, **BASE, gpus="4")
    want = {"model": "o/m", "draft_model": "o/d", "tp": 1, "gpus": 4, "algorithm": "EAGLE3", "num_steps": 3,
            "eagle_topk": 1, "num_draft_tokens": 4, "max_new_tokens": 128, "concurrency": 8, "num_prompts": 8}
    defaults = smoke_options(None, **BASE, gpus="4", num_steps="3", eagle_topk="1", num_draft_tokens="4")
    assert defaults.fingerprint() == want
    for key, value in FINGERPRINTED.items():
        topk = {"eagle_topk": "2"} if key == "num_draft_tokens" else {}  # a free choice only above topk 1
        before = smoke_options(None, **{**BASE, "gpus": "4", **topk}).fingerprint()
        changed = smoke_options(None, **{**BASE, "gpus": "4", **topk, key: value}).fingerprint()
        assert changed != before, key
        assert {k for k in changed if changed[k] != before[k]} >= {FINGERPRINT_KEY.get(key, key)}, key
    for key, value in NOT_FINGERPRINTED.items():
        assert smoke_options(None, **{**BASE, "gpus": "4", key: value}).fingerprint() == base.fingerprint(), key
    process = smoke_options(None, **BASE, runner="process", python_env="/venv").fingerprint()
    assert process["runner"] == "process" and "runner" not in base.fingerprint()
    baseline = smoke_options(None, model="o/m", kinds="baseline").fingerprint()
    assert {k: baseline[k] for k in ("draft_model", "algorithm", "num_steps", "eagle_topk",
                                     "num_draft_tokens")} == dict.fromkeys(
        ("draft_model", "algorithm", "num_steps", "eagle_topk", "num_draft_tokens"))


def test_the_read_only_views_are_the_specs() -> None:
    options = smoke_options(None, **BASE, tp="2", gpus="2", port="30003", timeout="42", env={"A": "1"})
    assert (options.model, options.draft_model, options.tp, options.gpus, options.port, options.timeout) == (
        "o/m", "o/d", 2, 2, 30003, 42.0)
    assert options.env == {"A": "1"} and options.mounts == ()
    assert smoke_options(None, model="o/m", kinds="baseline").draft_model is None


# ---- with a stack: its `smoke:` section and what it lacks ------------------------------------------

CPU_STACK = load_matrix(Path(__file__).resolve().parents[1] / "fixtures" / "stacks-cpu.yaml").get("cpu-test")


def test_the_stacks_smoke_section_is_the_default_and_a_given_option_wins() -> None:
    smoke = SmokeSettings(concurrency=3, num_prompts=5, max_new_tokens=17, gates=Gates(min_speedup=1.5))
    stack = CPU_STACK.model_copy(update={"smoke": smoke})
    options = smoke_options(stack)
    assert (options.concurrency, options.num_prompts, options.max_new_tokens) == (3, 5, 17)
    assert options.gates == Gates(min_speedup=1.5)
    options = smoke_options(stack, concurrency="2", min_agreement="0.5")
    assert (options.concurrency, options.num_prompts) == (2, 5)
    assert options.gates == Gates(min_speedup=1.5, min_agreement=0.5)


def test_a_stack_without_speculative_settings_smokes_its_baseline_only() -> None:
    stack = CPU_STACK.model_copy(update={"serving": CPU_STACK.serving.model_copy(update={"speculative": None})})
    with pytest.raises(SmokeError) as err:
        smoke_options(stack)
    assert str(err.value) == "no draft model for the smoke in stack 'cpu-test': pass --draft-model or --stack"
    assert smoke_options(stack, kinds="baseline").model == CPU_STACK.serving.model
    assert smoke_options(CPU_STACK).draft_model == "test-org/tiny-eagle3"  # the stack's, none given


@pytest.mark.parametrize(("given", "line"), [
    ({"serving": "x"}, "unknown smoke option(s): serving (known: "),
    ({"min_agreement": "2"}, "invalid gate override: min_agreement 2: must be <= 1.0"),
    ({"max_regression": "-1"}, "invalid gate override: max_regression -1: must be >= 0.0"),
    ({"min_speedup": "x"}, "invalid gate override: min_speedup 'x' is not a number"),
])
def test_more_refusals_exactly(given: dict, line: str) -> None:
    with pytest.raises(SmokeError) as err:
        smoke_options(None, **BASE, **given)
    text = str(err.value)
    assert text.startswith(line) if line.endswith("(known: ") else text == line, text
    if "(known: " in text:
        known = text.split("(known: ")[1].rstrip(")").split(", ")
        assert known == sorted(known) and {"concurrency", "env", "kinds", "num_steps", "timeout"} <= set(known)
        assert "serving" not in known


def test_a_request_timeout_under_a_second_is_accepted() -> None:
    assert smoke_options(None, **BASE, request_timeout="0.5").request_timeout == 0.5


def test_a_reference_on_a_plain_name_is_redacted_too_and_the_token_comes_from_this_process(monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf-from-env")
    monkeypatch.setenv("ENDPOINT", "https://x")
    options = smoke_options(None, **BASE, env={"SERVICE_URL": "${ENDPOINT}"})
    container = container_plan(options, "img", "baseline")  # host_env: this process's environment
    assert container.environment["HF_TOKEN"] == "hf-from-env"
    assert container.environment["SERVICE_URL"] == "https://x"
    assert container.redacted_environment() == {"HF_TOKEN": "***", "SERVICE_URL": "***"}


# ---- the process runner's plan and the secret references, in process -------------------------------


def test_the_process_plan_runs_the_served_argv_with_the_environments_python_first_on_path(monkeypatch) -> None:
    options = smoke_options(None, **BASE, runner="process", python_env="/venv", env={"A": "1"})
    plan = process_plan(options, "eagle3", 41000, host_env={"PATH": "/usr/bin", "HF_TOKEN": "t"})
    served = launch_argvs(dataclasses.replace(options, serving=dataclasses.replace(options.serving, port=41000)))
    assert plan.python == "/venv/bin/python3" == env_interpreter("/venv")
    assert list(plan.argv) == ["/venv/bin/python3", *served["eagle3"][1:]]
    assert plan.argv[plan.argv.index("--port") + 1] == "41000" and plan.port == 41000 and plan.kind == "eagle3"
    assert dict(plan.environment) == {"A": "1", "HF_TOKEN": "t", "PATH": "/venv/bin" + os.pathsep + "/usr/bin"}
    assert "--speculative-algorithm" not in process_plan(options, "baseline", 41001, host_env={}).argv
    assert process_plan(options, "baseline", 41001, host_env={}).environment["PATH"] == "/venv/bin"
    # the stack's own PATH wins over this process's, behind the environment's bin folder
    with_path = smoke_options(None, **BASE, runner="process", python_env="/venv", env={"PATH": "/opt/bin"})
    assert process_plan(with_path, "baseline", 1, host_env={"PATH": "/usr/bin"}).environment["PATH"] == (
        "/venv/bin" + os.pathsep + "/opt/bin")
    monkeypatch.setenv("PATH", "/from/here")
    assert process_plan(options, "baseline", 1).environment["PATH"] == "/venv/bin" + os.pathsep + "/from/here"


def test_the_process_plan_needs_an_environment() -> None:
    with pytest.raises(SmokeError) as err:
        process_plan(smoke_options(None, **BASE), "baseline", 1, host_env={})
    assert str(err.value) == "smoke runner 'process': no --python-env"


def test_a_secret_reference_missing_here_is_one_line_naming_it(monkeypatch) -> None:
    spec = smoke_options(CPU_STACK, env={"B_KEY": "${VAULT_B}", "A_KEY": "${VAULT_A}"}).serving
    check_secret_references(spec, {"VAULT_A": "a", "VAULT_B": "b"})
    with pytest.raises(ServingError) as err:
        check_secret_references(spec, {"VAULT_B": "b"})
    assert str(err.value) == ("stack 'cpu-test': serving.env.A_KEY refers to ${VAULT_A}, which is not set in "
                              "this environment")
    monkeypatch.setenv("VAULT_A", "a")
    monkeypatch.setenv("VAULT_B", "b")
    check_secret_references(spec)  # this process's environment


def test_empty_items_of_a_kinds_list_are_ignored_and_a_bad_list_is_quoted_as_given() -> None:
    assert smoke_options(None, model="o/m", kinds="baseline,").kinds == ("baseline",)
    assert smoke_options(None, **BASE, kinds=" , eagle3,,baseline ").kinds == ("baseline", "eagle3")
    with pytest.raises(SmokeError) as err:
        smoke_options(None, **BASE, kinds="eagle3,fast")
    assert str(err.value) == "smoke kinds 'eagle3,fast': choose from baseline, eagle3"
    with pytest.raises(SmokeError) as err:
        smoke_options(None, **BASE, kinds=" , ")
    assert str(err.value) == "smoke kinds ' , ': choose from baseline, eagle3"


def test_the_ssl_key_password_is_a_secret_flag_and_the_key_files_path_is_not():
    # argparse reads an exact name as that flag: `--ssl-keyfile PATH` is no abbreviation of the password's flag
    assert redact_argv(["--ssl-keyfile", "/certs/k.pem", "--ssl-keyfile-password", "pw-1234",
                        "--ssl-keyfile-pass=pw-5678", "--ssl_keyfile_password", "pw-9"]) == [
        "--ssl-keyfile", "/certs/k.pem", "--ssl-keyfile-password", "***", "--ssl-keyfile-pass=***",
        "--ssl_keyfile_password", "***"]
