"""serving.extra_args may not set what the serving spec sets, nor hold a secret flag's value: the flags the
argv builder writes are exactly the ones refused (derived, not listed twice), in every spelling SGLang's
parser reads as one of them: the flag, `--flag=value`, an alias, an argparse abbreviation."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from sglstack.config import serverflags as sf
from sglstack.config.settings import ServingSettings
from sglstack.core.credentials import SECRET_FLAGS
from sglstack.serving import LAUNCH, ServingError, ServingOverrides, serving_argv, serving_spec

SPEC = serving_spec(None, ServingOverrides(model="org/m", draft_model="org/d", tp=2, gpus=2, nnodes=2,
                                          dist_init_addr="10.0.0.1:5000"))
# Flags a stack passes every day: none may be caught by the rule.
HARMLESS = ["--trust-remote-code", "--mem-fraction-static", "0.8", "--context-length", "4096", "--served-model-name",
            "kimi", "--chat-template", "t.jinja", "--attention-backend", "triton", "--cuda-graph-max-bs", "8",
            "--enable-metrics", "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi", "--dtype", "auto",
            "--log-level", "info", "--api-key", "${OPENAI_KEY}", "--admin-api-key=${ADMIN_KEY}"]


def test_the_refused_flags_are_exactly_the_ones_the_argv_builder_writes():
    assert SPEC.speculative_on and SPEC.nodes.multi  # every optional part of the argv is on
    argv = serving_argv(dataclasses.replace(SPEC, extra_args=()))[len(LAUNCH):]
    written = {word for word in argv if sf.flag_of(word)}
    assert written == set(sf.OWNED_FLAGS)


def test_harmless_extra_args_pass():
    assert sf.extra_args_problem(HARMLESS) is None
    assert ServingSettings(model="m", extra_args=tuple(HARMLESS)).extra_args == tuple(HARMLESS)


_SPELLINGS = sorted({*sf.OWNED_FLAGS, *sf.ALIASES, "--speculative-attention-mode",
                     "--speculative-draft-model-revision"})
_PLAIN = [w for w in HARMLESS if "key" not in w and "${" not in w]


@given(before=st.lists(st.sampled_from(_PLAIN), max_size=6), name=st.sampled_from(_SPELLINGS),
       cut=st.integers(min_value=3, max_value=60), value=st.sampled_from(["", "=x", "=", "=--trust-remote-code"]))
def test_any_spelling_of_an_owned_flag_is_refused_where_it_stands(before, name, cut, value):
    """The name, an alias, any abbreviation argparse would take (any prefix), with or without `=value`."""
    word = name[:cut] + value
    found = sf.extra_args_problem([*before, word, "1"])
    assert found is not None and found[0] == len(before)
    if cut >= len(name):
        assert sf.owned_flag(name) == sf.ALIASES.get(name, name)
        assert found[1].startswith(f"'{name}'")


@pytest.mark.parametrize("args, line", [
    (["--model-path", "other/model"], "'--model-path' is sglstack's to set: set from serving.model; extra_args "
                                      "may not set it again (the server would run with another value than the one "
                                      "reported)"),
    (["--model=other"], "'--model' (SGLang reads it as --model-path) is sglstack's to set: set from serving.model; "
                        "extra_args may not set it again (the server would run with another value than the one "
                        "reported)"),
    (["--tensor-parallel-size", "4"], "'--tensor-parallel-size' (SGLang reads it as --tp-size) is sglstack's to set: "
                                      "set from serving.tp; extra_args may not set it again (the server would run "
                                      "with another value than the one reported)"),
    (["--tp", "4"], "'--tp' (SGLang reads it as --tp-size) is sglstack's to set: set from serving.tp; extra_args may "
                    "not set it again (the server would run with another value than the one reported)"),
    (["--host", "127.0.0.1"], "'--host' is sglstack's to set: the server listens on 0.0.0.0 (for the port mapping "
                              "and the other nodes); extra_args may not set it again (the server would run with "
                              "another value than the one reported)"),
    (["--port=1"], "'--port' is sglstack's to set: set from serving.port; extra_args may not set it again (the "
                   "server would run with another value than the one reported)"),
    (["--speculative-algorithm", "NGRAM"], "'--speculative-algorithm' is sglstack's to set: set from "
                                           "serving.speculative.algorithm; extra_args may not set it again (the "
                                           "server would run with another value than the one reported)"),
    (["--speculative-attention-mode", "decode"], "'--speculative-attention-mode' is sglstack's to set: speculative "
                                                 "decoding is set from serving.speculative (the baseline run is the "
                                                 "same server without it); extra_args may not set it again (the "
                                                 "server would run with another value than the one reported)"),
    (["--nccl-init-addr", "h:1"], "'--nccl-init-addr' (SGLang reads it as --dist-init-addr) is sglstack's to set: "
                                  "set from the deploy option --dist-init-addr; extra_args may not set it again "
                                  "(the server would run with another value than the one reported)"),
])
def test_each_owned_flag_is_refused_in_one_line_naming_the_key(args, line):
    with pytest.raises(ValidationError) as err:
        ServingSettings(model="m", extra_args=("--trust-remote-code", *args))
    assert err.value.errors()[0]["msg"] == f"Value error, {line}"
    assert sf.extra_args_problem(["--trust-remote-code", *args]) == (1, line)


@pytest.mark.parametrize("flag", SECRET_FLAGS)
@pytest.mark.parametrize("form", ["separate", "equals"])
def test_a_secret_flags_literal_value_is_refused_and_a_reference_is_not(flag, form):
    literal = [flag, "sk-1"] if form == "separate" else [f"{flag}=sk-1"]
    reference = [flag, "${K}"] if form == "separate" else [f"{flag}=${{K}}"]
    assert sf.extra_args_problem(literal) == (0, (
        f"'{flag}' takes a secret, so its value must be a reference like '{flag} ${{NAME}}' (from the deploy "
        "environment, the Kubernetes Secret, or smoke's own environment), not a value written into compose.yaml "
        "and the manifests"))
    assert sf.extra_args_problem(reference) is None
    assert sf.extra_args_problem(literal, secrets=False) is None  # a smoke's own --extra-args


def test_a_smokes_own_extra_args_may_not_set_an_owned_flag_either():
    with pytest.raises(ServingError) as err:
        serving_spec(None, ServingOverrides(model="m", extra_args=("--model-path", "other")))
    assert str(err.value) == ("--extra-args: '--model-path' is sglstack's to set: set from serving.model; extra_args "
                              "may not set it again (the server would run with another value than the one reported)")
    spec = serving_spec(None, ServingOverrides(model="m", extra_args=("--api-key", "sk-1")))
    assert spec.extra_args == ("--api-key", "sk-1")
