"""Numbers of stacks.yaml that YAML or Unicode turn into something else are refused (attack pass of issue 34):
a yes/no where a number goes (YAML reads `yes`, `no`, `on`, `off` as booleans, which pydantic's lax mode took
for 1 and 0), and digits that are not ASCII in a size or a version pattern (`\\d` takes them)."""

from __future__ import annotations

import pytest
from clirun import run_invoke
from pydantic import ValidationError
from schema_fixtures import matrix_with

from sglstack.config import strict  # every model of a stack is loaded with load_matrix below
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError

YES_NO = "is a yes/no (YAML reads yes, no, on, off, true and false so), not a number"


@pytest.mark.parametrize(("section", "key", "value", "dotted"), [
    ("serving", "port", "yes", "serving.port"),  # was port 1
    ("serving", "tp", "on", "serving.tp"),
    ("serving", "startup_timeout_s", "true", "serving.startup_timeout_s"),
    ("gates", "min_agreement", "no", "smoke.gates.min_agreement"),  # was 0.0: the gate off
    ("gates", "min_speedup", "yes", "smoke.gates.min_speedup"),
    ("smoke", "max_new_tokens", "yes", "smoke.max_new_tokens"),
    ("speculative", "num_steps", "yes", "serving.speculative.num_steps"),
])
def test_a_yes_or_no_where_a_number_goes_is_refused(tmp_path, section, key, value, dotted):
    path = matrix_with(tmp_path, section, key, value)
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    word = "false" if value == "no" else "true"
    assert str(caught.value).startswith(f"{path}:")
    assert str(caught.value).endswith(f": stack 's': key '{dotted}': {word} {YES_NO}")


def _number_fields():
    todo, found = list(strict.StrictModel.__subclasses__()), []
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        found += [(cls, name) for name, f in cls.model_fields.items() if strict._is_number(f.annotation)]
    return sorted(found, key=lambda x: (x[0].__name__, x[1]))


@pytest.mark.parametrize(("model", "name"), _number_fields(), ids=lambda x: getattr(x, "__name__", x))
def test_every_number_field_of_the_schema_refuses_a_boolean(model, name):
    with pytest.raises(ValidationError) as caught:
        model.model_validate({name: True})
    assert any(e["loc"] == (name,) and YES_NO in e["msg"] for e in caught.value.errors())


def test_the_walk_sees_the_number_fields():
    assert {"ServingSettings.port", "ServingSettings.tp", "Gates.min_agreement", "SizePolicy.max_gb"} <= {
        f"{cls.__name__}.{name}" for cls, name in _number_fields()}


@pytest.mark.parametrize("value", ['"\uff11\uff16g"', '"\u0663g"'])  # fullwidth 16, Arabic-Indic 3
def test_a_size_in_digits_that_are_not_ascii_is_refused(tmp_path, value):
    path = matrix_with(tmp_path, "serving", "shm_size", value)
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    assert str(caught.value) == (f"{path}:9: stack 's': key 'serving.shm_size': '{value.strip(chr(34))}' is not a "
                                 f"size such as 32g (a whole number, then b, k, m, g or t)")


def test_a_python_version_in_digits_that_are_not_ascii_is_refused(tmp_path):
    path = tmp_path / "stacks.yaml"
    path.write_text('stacks:\n  s:\n    base_image: debian:bookworm-slim\n    python: "3.١٢"\n'
                    "    sglang:\n      version: 0.5.9\n")
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    assert str(caught.value).startswith(f"{path}:4: stack 's': key 'python': ")


def test_stacks_check_refuses_a_yes_port_in_one_line(tmp_path):
    path = matrix_with(tmp_path, "serving", "port", "yes")
    proc = run_invoke("stacks", "--check", "--stacks-file", str(path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    # the file as named relative to the folder it runs in
    assert proc.stderr == f"error: stacks.yaml:9: stack 's': key 'serving.port': true {YES_NO}\n"
