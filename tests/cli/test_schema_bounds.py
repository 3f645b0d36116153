"""Sizes, counts and durations in stacks.yaml are refused by the schema when they are negative, zero, not a
number, infinite or beyond any machine: `stacks --check` names the file, line, stack and key (issue 34)."""

from __future__ import annotations

import pytest
from clirun import run_invoke
from schema_fixtures import matrix_with

from sglstack.config.fields import MAX_COUNT, MAX_DURATION_S, size_bytes
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError
from sglstack.render.k8s import shm_quantity
from sglstack.serving import ServingError, ServingOverrides, serving_spec

SIZE_WORDS = "is not a size such as 32g (a whole number, then b, k, m, g or t)"


@pytest.mark.parametrize("value", ['"-5g"', '"0"', '"0g"', '"-1"', '"1.5g"', '"32 g"', '"lots"', '""', '"17t"',
                                   '"99999999999999999999g"'])
def test_a_shm_size_that_is_no_size_is_refused_naming_file_stack_and_key(tmp_path, value):
    path = matrix_with(tmp_path, "serving", "shm_size", value)
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    shown = value.strip('"')
    why = "must be more than 0 and at most 16t" if shown in ("0", "0g", "17t") else SIZE_WORDS
    assert str(caught.value) == f"{path}:9: stack 's': key 'serving.shm_size': '{shown}' {why}"


@pytest.mark.parametrize("value", ["32g", "1G", "512m", "64mb", "1073741824", "16t"])
def test_a_size_every_reader_takes_loads(tmp_path, value):
    stack = load_matrix(matrix_with(tmp_path, "serving", "shm_size", f'"{value}"')).get("s")
    assert stack.serving.shm_size == value and size_bytes(value) > 0
    assert shm_quantity(value)  # Kubernetes reads every size the schema lets through


@pytest.mark.parametrize(("section", "key", "value"), [
    ("serving", "startup_timeout_s", ".inf"), ("serving", "startup_timeout_s", ".nan"),
    ("serving", "startup_timeout_s", "-5"), ("serving", "startup_timeout_s", str(MAX_DURATION_S + 1)),
    ("serving", "tp", "0"), ("serving", "tp", str(MAX_COUNT + 1)), ("serving", "tp", "9" * 40),
    ("serving", "gpus", "-1"), ("serving", "gpus", str(MAX_COUNT + 1)),
    ("smoke", "concurrency", "0"), ("smoke", "concurrency", str(MAX_COUNT + 1)),
    ("smoke", "num_prompts", "-3"), ("smoke", "max_new_tokens", "9" * 30),
    ("gates", "min_speedup", ".inf"), ("gates", "min_accept_length", ".inf"), ("gates", "min_agreement", ".nan"),
    ("speculative", "num_steps", "0"), ("speculative", "eagle_topk", str(MAX_COUNT + 1)),
    ("speculative", "num_draft_tokens", "-4"),
])
def test_a_count_or_duration_out_of_bounds_is_refused_naming_the_key(tmp_path, section, key, value):
    path = matrix_with(tmp_path, section, key, value)
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    dotted = {"serving": f"serving.{key}", "smoke": f"smoke.{key}", "gates": f"smoke.gates.{key}",
              "speculative": f"serving.speculative.{key}"}[section]
    assert (caught.value.exit_code, caught.value.stack, caught.value.key) == (2, "s", dotted)
    assert str(caught.value).startswith(f"{path}:")
    assert "\n" not in str(caught.value)


def test_stacks_check_refuses_a_negative_shm_size_in_one_line_exit_2(tmp_path):
    path = matrix_with(tmp_path, "serving", "shm_size", '"-5g"')
    proc = run_invoke("stacks", "--check", "--stacks-file", path.name, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (
        2, f"error: stacks.yaml:9: stack 's': key 'serving.shm_size': '-5g' {SIZE_WORDS}\n")  # named as given


def test_a_smoke_timeout_of_infinity_is_one_line_not_an_overflow(tmp_path):
    stack = load_matrix(matrix_with(tmp_path, "serving", "tp", "1")).get("s")
    with pytest.raises(ServingError) as caught:
        serving_spec(stack, ServingOverrides(startup_timeout_s=float("inf"), flags={"startup_timeout_s": "--timeout"}))
    assert (str(caught.value), caught.value.exit_code) == (
        f"stack 's': --timeout inf: must be at most {MAX_DURATION_S} seconds (a week)", 2)
