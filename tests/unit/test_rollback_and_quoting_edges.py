"""Decisions a hurried edit breaks quietly, a fixture on each side: which deployment `rollback` brings back (the
latest other image, told apart by digest when the tag stayed), how a value is written into a Dockerfile and a
Compose file, how an outside value is printed, which spellings of a flag
extra_args may not hold, and a safe writer that fixes a file's mode though its bytes are right. Planted bugs
P78-P85 (`benchmarks/planted_bugs.py`)."""

from __future__ import annotations

import stat

import pytest

from sglstack.config.serverflags import CONFIG_FILE_WHY, extra_args_problem
from sglstack.core.console import plain
from sglstack.core.quoting import compose_string, dockerfile_string
from sglstack.core.safefiles import write_bytes
from sglstack.deploy.store import DeploymentRecord, rollback_target

# ---- rollback: the latest healthy deployment of another image ---------------------------------------------


def _record(image: str, digest: str, *, result: str = "healthy", action: str = "deploy") -> DeploymentRecord:
    return DeploymentRecord(stack="tiny", action=action, result=result, image=image, digest=digest, image_id=digest,
                            time="2026-12-01T00:00:00Z", host="h", docker_host="", project="sglstack-tiny",
                            compose_tool="docker compose", compose_file="compose.yaml")


def _digest(c: str) -> str:
    return "sha256:" + c * 64


def test_rollback_goes_to_the_latest_other_image_not_the_oldest():
    a, b, c = (_record(f"r@{_digest(x)}", _digest(x)) for x in "abc")
    assert rollback_target([a, b, c]) == b
    assert rollback_target([a, b, c, c]) == b
    assert rollback_target([a, b, a, c]) == a  # the one served just before c, though it was first too


def test_rollback_tells_deployments_of_one_moving_tag_apart_by_digest():
    first = _record("registry.example/sglstack/cu130:latest", _digest("a"))
    second = _record("registry.example/sglstack/cu130:latest", _digest("b"))
    assert rollback_target([first, second]) == first  # the tag moved: another image under the same name
    assert rollback_target([first, _record("registry.example/sglstack/cu130:latest", _digest("a"))]) is None


# ---- a Dockerfile word and a Compose value read back as written ------------------------------------------


@pytest.mark.parametrize(("value", "word"), [
    ("C:\\models\\kimi", '"C:\\\\models\\\\kimi"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("$HOME/x", '"\\$HOME/x"'),
    ("a\\$b", '"a\\\\\\$b"'),
    ("plain", '"plain"'),
])
def test_a_dockerfile_value_escapes_backslash_quote_and_dollar(value, word):
    assert dockerfile_string(value) == word


@pytest.mark.parametrize(("value", "text"), [("$HOME", '"$$HOME"'), ("a$$b", '"a$$$$b"'), ("no dollar", '"no dollar"')])
def test_a_compose_value_doubles_every_dollar(value, text):
    assert compose_string(value) == text


# ---- an outside value on one line, no escape code reaching the terminal ----------------------------------


@pytest.mark.parametrize(("value", "shown"), [
    ("tag\nFAKE: all good", "tag\\nFAKE: all good"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("[bold]x[/bold]", "\\[bold]x\\[/bold]"),
])
def test_an_outside_value_is_printed_on_one_line_without_escape_codes(value, shown):
    text = plain(value)
    assert "\n" not in text and "\x1b" not in text
    assert text == shown


# ---- extra_args: every spelling SGLang's parser reads as a flag sglstack owns --------------------------------


@pytest.mark.parametrize("word", ["--config", "--conf", "--confi", "--config=server.yaml", "--conf=server.yaml"])
def test_config_and_its_abbreviations_are_refused(word):
    assert extra_args_problem([word, "server.yaml"]) == (0, CONFIG_FILE_WHY)


@pytest.mark.parametrize("args", [["--context-length", "4096"], ["--mem-fraction-static", "0.8"]])
def test_flags_that_only_start_like_config_pass(args):
    assert extra_args_problem(args) is None


@pytest.mark.parametrize(("word", "owned"), [("--model_path", "--model-path"), ("--model-path", "--model-path"),
                                              ("--speculative_algorithm", "--speculative-algorithm")])
def test_an_underscore_spelling_of_an_owned_flag_is_refused(word, owned):
    found = extra_args_problem(["--trust-remote-code", word, "x"])
    assert found is not None and found[0] == 1
    assert found[1].startswith(f"'{word}'") and "is sglstack's to set" in found[1]
    if word != owned:
        assert f"(SGLang reads it as {owned})" in found[1]


# ---- a safe writer: the right bytes with another mode are written again -------------------------------------


def test_a_file_of_the_right_bytes_and_another_mode_gets_the_mode(tmp_path):
    path = tmp_path / "compose.env"
    path.write_bytes(b"HF_TOKEN=\n")
    path.chmod(0o644)
    write_bytes(tmp_path, path, b"HF_TOKEN=\n", mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.stat().st_mtime_ns
    write_bytes(tmp_path, path, b"HF_TOKEN=\n", mode=0o600)  # nothing to change: left alone, its mtime too
    assert path.stat().st_mtime_ns == before
