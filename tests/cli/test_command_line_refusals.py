"""What invoke's parser refuses is bad input like any other: exit 2 and one `error:` line, in the house's words,
with "did you mean" for a near-miss of a task, an option or a stack (sglstack.cli.program); so are options
that exclude each other (`TaskOptions.exactly_one` / `at_most_one`)."""

from __future__ import annotations

import pytest
from clirun import run_invoke

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError

MATRIX = """\
stacks:
  cu129:
    base_image: debian:bookworm-slim
    sglang: {version: 0.5.9}
    serving: {model: org/model}
  cu130:
    inherits: cu129
"""


@pytest.mark.parametrize(("args", "line"), [
    (["smok"], "error: unknown task 'smok'; did you mean 'smoke'?"),
    (["patches.aply"], "error: unknown task 'patches.aply'; did you mean 'patches.apply'?"),
    (["zzzz"], "error: unknown task 'zzzz' (`invoke --list` lists them)"),
    (["--help", "smok"], "error: unknown task 'smok'; did you mean 'smoke'?"),
    (["--lst"], "error: unknown option '--lst'; did you mean '--list'?"),
    (["render", "--stak", "cu130"], "error: render: unknown option '--stak'; did you mean '--stack'?"),
    (["render", "--stack=cu130", "--dyr-run"], "error: render: unknown option '--dyr-run'"),
    (["build", "--stack", "cu130", "--dyr-run"], "error: build: unknown option '--dyr-run'; did you mean '--dry-run'?"),
    (["render", "-x"], "error: render: unknown option '-x'"),
    (["render", "cu130"], "error: render: unexpected argument 'cu130' (not an option of render, nor a task)"),
    (["render", "--stack", "cu130", "buld"],
     "error: render: unexpected argument 'buld' (not an option of render, nor a task); did you mean 'build'?"),
    (["diff", "a"], "error: diff: missing argument AFTER (usage: invoke diff BEFORE AFTER [--options])"),
    (["render", "--stack"], "error: render: option --stack needs a value"),
    (["coverage", "--stack", "cu130", "--json-out"], "error: coverage: option --json-out needs a value"),
    (["build", "--stack", "--dry-run"], "error: build: option --stack needs a value"),
    # a repeatable option with nothing after it: invoke alone takes it for no option at all
    (["bake", "--stack"], "error: bake: option --stack needs a value"),
    (["smoke", "--mount", "--image", "x"], "error: smoke: option --mount needs a value"),
    (["bake", "-s"], "error: bake: option -s needs a value"),
    (["--list", "patche"], "error: --list: no collection 'patche' (known: patches, registry); did you mean 'patches'?"),
    # options that exclude each other, refused before the task starts
    (["patches.apply", "--root", "{root}"], "error: patches.apply: give exactly one of --stack or --patch"),
    (["patches.verify", "--root", "{root}", "--stack", "cu130", "--patch", "p"],
     "error: patches.verify: give exactly one of --stack or --patch"),
    (["patches.check"], "error: patches.check: give exactly one of --sglang or --stack"),
    (["deploy", "--stack", "cu130", "--digest", "sha256:" + "0" * 64, "--image", "x:1"],
     "error: deploy: give --digest or --image, not both"),
    (["render", "--stack", "cu13"],
     "error: stacks.yaml: stack 'cu13': unknown stack (known: cu129, cu130); did you mean 'cu130'?"),
    (["render", "-s", "cu13"],
     "error: stacks.yaml: stack 'cu13': unknown stack (known: cu129, cu130); did you mean 'cu130'?"),
])
def test_bad_input_on_the_command_line_is_one_line_and_exit_2(tmp_path, args, line):
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(MATRIX)
    tail = ["--stacks-file", str(matrix), "--out", str(tmp_path / "out")] if args[0] == "render" else []
    (tmp_path / "sglang").mkdir()
    proc = run_invoke(*[arg.format(root=tmp_path) for arg in args], *tail, cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")
    assert not (tmp_path / "out").exists()


def test_near_miss_names_in_the_matrix_are_named(tmp_path):
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(MATRIX.replace("inherits: cu129", "inherits: cu12"))
    with pytest.raises(ConfigError) as info:
        load_matrix(matrix)
    assert str(info.value) == (f"{matrix}:7: stack 'cu130': key 'inherits': unknown parent stack 'cu12'; "
                               "did you mean 'cu129'?")
    matrix.write_text(MATRIX + "    patches: [kimi-k25-eagl3]\n")
    with pytest.raises(ConfigError) as info:
        load_matrix(matrix)
    assert str(info.value).endswith(":8: stack 'cu130': key 'patches[0]': unknown patch id 'kimi-k25-eagl3' (no "
                                    "patches/kimi-k25-eagl3/patch.toml); did you mean 'kimi-k25-eagle3'?")
