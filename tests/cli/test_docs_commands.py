"""Every command README.md and docs/*.md show runs as shown: a newcomer's walk-through, kept in step with the docs.

Each `invoke ...` / `sglstack ...` command in a fenced code block is looked up in `HOW`, the reviewed table of how
this test runs it:
- "run": as shown, from a scratch project folder (a copy of the checkout's locks/; build/ there), exit code given;
- "dry-run": as shown plus `--dry-run` (a real build), exit 0;
- "parse": parsed by the real command line and its task's own checks of required and exclusive options, not
  run (it needs a GPU, a registry, a remote engine, the internet or a long build).
A command shown in the docs that is not in `HOW` fails the test (add it, choosing how), and so does an entry of
`HOW` that no document shows any more. Where a worked example shows a command's output (`$ invoke ...` then its
lines) and the command is in `TRANSCRIPTS`, the output must be what the command prints now.

Usage forms in prose and tables (`invoke diff BEFORE AFTER [--json]`) are checked too: the task exists, every
option is one of its options, and the positional words are as many as the task takes.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from clirun import REPO, run_invoke, task_collection

from sglstack.cli import options as cli_options
from sglstack.cli.program import SglstackProgram

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NS = task_collection()

RUN, DRY_RUN, PARSE = "run", "dry-run", "parse"
# command as shown (one line, comments and the leading `$ ` left out) -> (how, expected exit code when run)
HOW: dict[str, tuple[str, int]] = {
    "invoke --list": (RUN, 0),
    "invoke stacks": (RUN, 0),
    "invoke render --stack cu130": (RUN, 0),
    "invoke build --stack cu130 --dry-run": (RUN, 0),
    "invoke diff locks/cu129.txt locks/cu130.txt": (RUN, 0),
    "invoke patches.list": (RUN, 0),
    "invoke bake": (RUN, 0),
    "invoke status": (RUN, 0),
    "sglstack --version": (RUN, 0),
    "sglstack stacks": (RUN, 0),
    "invoke test": (PARSE, 0),  # the fast tier itself: minutes
    "invoke build --stack cu130": (DRY_RUN, 0),
    "invoke build --stack cu130 --target sglang-src --ca-bundle /etc/ssl/certs/ca-certificates.crt": (DRY_RUN, 0),
    "invoke registry.up": (PARSE, 0),  # starts a registry container
    "invoke build --stack cu130 --push --signing-key release.pem --smoke-opt docker_host=ssh://user@gpu-node "
    "--smoke-opt mount=/models/hf:/root/.cache/huggingface": (PARSE, 0),
    "invoke deploy --stack cu130 --docker-host ssh://user@gpu-node": (PARSE, 0),
    "invoke releases": (PARSE, 0),  # the package index
    "invoke releases --stack cu130": (PARSE, 0),
    "invoke upgrade --stack cu130 --sglang 0.5.23 --as cu130-next": (PARSE, 0),
    "invoke upgrade --stack cu130 --sglang 0.5.23 --as cu130-next --write": (PARSE, 0),
    "invoke build --stack cu130-next --push": (PARSE, 0),
    "invoke bisect --stack cu130-git --good 1a2b3c4 --bad origin/main --metric baseline "
    "--docker-host ssh://user@gpu-node --mount /models/hf:/root/.cache/huggingface": (PARSE, 0),
    "invoke lock --stack cu130": (PARSE, 0),
    "invoke lock --stack cu130 --upgrade-package idna": (PARSE, 0),
    "invoke diff build/cu130/record.json REPO@sha256:D": (PARSE, 0),
    "invoke lock --stack pypi-cu130": (PARSE, 0),
    "invoke size --stack pypi-cu130 --image sglstack/pypi-cu130:cc63dd65b850": (PARSE, 0),  # a built image
    "invoke bake --builder sgl": (PARSE, 0),  # a remote BuildKit builder
    "invoke build --stack cu130 --builder sgl --push": (PARSE, 0),
    "invoke bake --builder ci": (PARSE, 0),
    'invoke build --stack "$s" --builder ci --push': (PARSE, 0),
    "invoke coverage --stack pypi-cu130": (PARSE, 0),  # the stack's CUDA wheels
    "invoke render --stack cu130 --image 127.0.0.1:5000/sglstack/sglang@sha256:abab...ab --nnodes 2": (PARSE, 0),
    "invoke build --stack cu130 --push --signing-key release.pem --dry-run": (PARSE, 0),  # a registry and a signing key
    "SGLSTACK_SIGNING_KEY=release.pem invoke build --stack cu130 --push": (PARSE, 0),
    "invoke verify-image registry.example/sglstack:cu130 --verify-key release.pub --stack cu130": (PARSE, 0),
    "invoke sbom registry.example/sglstack:cu130 --verify-key release.pub": (PARSE, 0),
    "invoke deploy --stack cu130 --verify-key release.pub": (PARSE, 0),
    "invoke publish --stack cu130 --digest sha256:... --signing-key release.pem": (PARSE, 0),
    "invoke publish-index --stack pypi-cu130-gb --tag candidate-2 --signing-key release.pem --platform-digest "
    "linux/amd64=sha256:... --platform-digest linux/arm64=sha256:...": (PARSE, 0),
    "invoke verify-image registry.example/sglstack:candidate-2 --verify-key release.pub --json": (PARSE, 0),
    # the CPU stand-in's image and Docker
    "invoke smoke --image sglstack-test/sglang-double:latest-test --model moonshotai/Kimi-K2.5 "
    "--draft-model AQ-MedAI/Kimi-K25-eagle3 --tp 1 --gpus 0 --timeout 60 --num-prompts 8 --max-new-tokens 32 "
    "--concurrency 4 --no-history --report build/smoke-demo/report.json "
    "--env SGLANG_DOUBLE_TOKENS_PER_S=410 --env SGLANG_DOUBLE_SPEC_SPEEDUP=1.16": (PARSE, 0),
    "invoke smoke --image sglstack-test/sglang-double:latest-test --model moonshotai/Kimi-K2.5 "
    "--draft-model AQ-MedAI/Kimi-K25-eagle3 --tp 1 --gpus 0 --timeout 60 --num-prompts 8 --max-new-tokens 32 "
    "--concurrency 4 --no-history --report build/smoke-demo/seed.json "
    "--env SGLANG_DOUBLE_TOKENS_PER_S=410 --env SGLANG_DOUBLE_SPEC_SPEEDUP=0.72 --min-speedup 1.0": (PARSE, 0),
    "invoke smoke --image REPO@sha256:... --stack cu130 --docker-host ssh://user@gpu-node "
    "--mount /models/hf:/root/.cache/huggingface": (PARSE, 0),
    "invoke smoke --runner process --python-env /opt/sglang-venv --stack cu130 --env PYTHONPATH=/extra/site":
        (PARSE, 0),
}
# Worked examples whose output is checked line by line (each needs only the checkout and, for a build's plan,
# the docker CLI at /usr/bin/docker).
TRANSCRIPTS = {"invoke render --stack cu130", "invoke build --stack cu130 --dry-run",
               "invoke diff locks/cu129.txt locks/cu130.txt", "invoke patches.list"}

_COMMAND = re.compile(r"(?:^|&&|;|\bdo\b)\s*((?:[A-Z][A-Z0-9_]*=\S+\s+)*(?:invoke|sglstack)\s[^;&]*|"
                      r"(?:invoke|sglstack)$)")
_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def _logical_lines(block: str) -> list[str]:
    out: list[str] = []
    for line in block.split("\n"):
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
    return out


def _without_comment(text: str) -> str:
    return re.split(r"\s+#\s", text, maxsplit=1)[0].strip()


def shown_commands() -> dict[str, list[str]]:
    """Each command of a fenced block -> the documents showing it."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for block in _BLOCK.findall(doc.read_text(encoding="utf-8")):
            for line in _logical_lines(block):
                text = line.strip().removeprefix("$ ")
                if text.startswith("#"):
                    continue
                for match in _COMMAND.finditer(text):
                    command = " ".join(_without_comment(match.group(1)).split())
                    found.setdefault(command, []).append(doc.name)
    return found


def transcripts() -> dict[str, list[str]]:
    """`$ COMMAND` of a worked example -> the lines shown after it."""
    out: dict[str, list[str]] = {}
    for doc in DOCS:
        for block in _BLOCK.findall(doc.read_text(encoding="utf-8")):
            command = None
            for line in _logical_lines(block):
                if line.startswith("$ "):
                    command = " ".join(_without_comment(line[2:]).split())
                    out[command] = []
                elif command is not None:
                    out[command].append(line)
    return {c: [line.rstrip() for line in lines if line.strip()] for c, lines in out.items()}


SHOWN = shown_commands()


def test_every_command_shown_is_in_the_table():
    missing = {c: docs for c, docs in SHOWN.items() if c not in HOW}
    assert not missing, f"commands shown in the docs with no entry in HOW (choose run, dry-run or parse): {missing}"


def test_every_entry_of_the_table_is_still_shown():
    assert not set(HOW) - set(SHOWN), f"no document shows these any more: {sorted(set(HOW) - set(SHOWN))}"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A scratch folder the commands run in: the relative paths the docs use (locks/...) resolve there, and
    whatever they write (build/) stays there."""
    root = tmp_path_factory.mktemp("newcomer")
    shutil.copytree(REPO / "locks", root / "locks")
    return root


def _argv(command: str) -> tuple[list[str], dict[str, str]]:
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return words, env


def _run(command: str, cwd: Path, extra: tuple[str, ...] = ()):
    words, env = _argv(command)
    env = {"SGLSTACK_DOCKER_CLI": "/usr/bin/docker", "COLUMNS": "200", **env}
    if words[0] == "sglstack":
        import os
        import subprocess
        import sys

        return subprocess.run([sys.executable, "-m", "sglstack.cli", *words[1:], *extra], cwd=cwd,
                              capture_output=True, text=True, check=False, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(REPO), "SGLSTACK_STACKS_FILE":
                                   str(REPO / "stacks.yaml"), **env})
    return run_invoke(*words[1:], *extra, cwd=cwd, env=env)


@pytest.mark.parametrize("command", sorted(c for c, (how, _) in HOW.items() if how in (RUN, DRY_RUN)))
def test_the_command_runs_as_shown(command, project):
    how, code = HOW[command]
    if _argv(command)[0][1:2] in (["build"], ["bake"]) and not Path("/usr/bin/docker").is_file():
        pytest.skip("a build's plan names the docker CLI, /usr/bin/docker here")
    done = _run(command, project, ("--dry-run",) if how == DRY_RUN else ())
    assert done.returncode == code, f"{command}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"


class _ParseOnly(SglstackProgram):
    """The real command line and each task's own option checks, with the task's work left out."""


@pytest.mark.parametrize("command", sorted(c for c, (how, _) in HOW.items() if how == PARSE))
def test_the_command_parses_as_shown(command, monkeypatch, capsys):
    words, _ = _argv(command)
    ran: list[str] = []
    monkeypatch.setattr(cli_options, "_run", lambda what, call: ran.append(what))
    try:
        _ParseOnly(namespace=task_collection(), binary=words[0]).run([words[0], *words[1:]], exit=False)
    except BaseException as exc:  # invoke's Exit / ParseError: what a user would see, made the failure
        err = capsys.readouterr().err
        pytest.fail(f"{command}: {type(exc).__name__}: {exc} {err}")
    assert ran, f"{command}: no task ran"


def _normalized(lines: list[str]) -> list[str]:
    # a release tag carries today's date
    return [re.sub(r"-20\d{6}-", "-YYYYMMDD-", line.rstrip()) for line in lines]


@pytest.mark.parametrize("command", sorted(TRANSCRIPTS))
def test_the_worked_example_shows_what_the_command_prints(command, project):
    shown = transcripts()[command]
    if "--dry-run" in command and not Path("/usr/bin/docker").is_file():
        pytest.skip("the plan names the docker CLI at /usr/bin/docker")
    done = _run(command, project)
    assert done.returncode == 0, done.stderr
    printed = [line for line in done.stdout.splitlines() if line.strip()]
    assert _normalized(printed) == _normalized(shown), "\n".join(["now:", *printed])


# ---- usage forms in prose and tables -------------------------------------------------------------------

_INLINE = re.compile(r"`((?:invoke|sglstack) [a-z][a-z.-]*(?: [^`]*)?)`")


def usage_forms() -> dict[str, str]:
    found = {}
    for doc in DOCS:
        text = _BLOCK.sub("", doc.read_text(encoding="utf-8"))
        for form in _INLINE.findall(text):
            found[form] = doc.name
    return found


# Commands that read a task's output through a shell pipe in the docs' examples.
SHELL_READERS = frozenset({"jq", "less", "head", "tail", "grep", "tee"})


def _usage_problem(form: str) -> str | None:
    if " / " in form or "(" in form:
        return None  # `patches.list / check`, a message quoted (`invoke build (pid N, since T)`): no usage
    words = form.replace("[", " ").replace("]", " ").replace("...", " ").split()[1:]
    for pipe, word in enumerate(words[:-1]):
        if word == "|" and words[pipe + 1] in SHELL_READERS:
            words = words[:pipe]  # `invoke stacks --json | jq`: what follows the pipe is another command
            break
    task = words.pop(0)
    if not words:
        return None  # the task named, not a usage
    if task not in NS.task_names:
        return None if task.startswith("-") else f"no task '{task}'"
    args = {name: arg for arg in NS[task].get_arguments() for name in arg.names}
    positional = [arg for arg in NS[task].get_arguments() if arg.positional]
    bare, i = 0, 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name = word[2:].partition("=")[0].removeprefix("no-")
            if name not in args and word[2:].partition("=")[0] not in args:
                return f"{task} has no option {word}"
            arg = args.get(name) or args[word[2:].partition("=")[0]]
            if arg.takes_value and "=" not in word:
                i += 1
        elif word not in ("|", "/") and not word.startswith("-"):
            bare += 1
        i += 1
    if bare != len(positional):
        return f"{task} takes {len(positional)} positional argument(s), the form shows {bare}"
    return None


def test_every_usage_form_names_real_options_and_arguments():
    problems = {form: why for form in usage_forms() if (why := _usage_problem(form))}
    assert not problems, problems


def update_transcripts() -> None:
    """Rewrite the worked examples of `TRANSCRIPTS` with what the commands print now (review the diff):
    `PYTHONPATH=.:tests python tests/cli/test_docs_commands.py --update`."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(REPO / "locks", Path(tmp) / "locks")
        for command in sorted(TRANSCRIPTS):
            printed = _run(command, Path(tmp)).stdout.rstrip("\n")
            for doc in DOCS:
                text = doc.read_text(encoding="utf-8")
                head = f"$ {command}\n"
                at = text.find(head)
                if at < 0:
                    continue
                start = at + len(head)
                end = text.index("```", start)
                nxt = text.find("\n$ ", start, end)
                end = nxt + 1 if nxt >= 0 else end
                doc.write_text(text[:start] + printed + "\n" + text[end:], encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--update"]:
        update_transcripts()
