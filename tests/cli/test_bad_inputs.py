"""Bad input files get one line naming the file (and key), and a non-zero exit, before any work starts.

The matrix cases run every invoke task that reads the matrix, as a user would; the adversarial YAML
(alias bomb, deep nesting, a cycle) runs in a child process under a memory limit, so code that expands
aliases again fails here with MemoryError instead of taking the test host down.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from clirun import REPO, run_invoke, task_collection

from sglstack.config import yamlsrc
from sglstack.config.matrix import MAX_STACKS, load_matrix
from sglstack.config.yamlsrc import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES, load_yaml_with_lines
from sglstack.core.errors import ConfigError

VALID = """
stacks:
  {name}:
    base_image: debian:bookworm-slim
    sglang:
      version: 0.5.9
    serving:
      model: org/model
"""


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The billion-laughs document: each level is `width` aliases of the one below (about 1 KB)."""
    lines = ["stacks:", "  s:", "    base_image: debian:bookworm-slim", "    sglang: {version: 0.5.9}",
             "    serving: {model: org/model}", "x0: &x0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, text: str | bytes, name: str = "stacks.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text))
    return path


def error_for(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    message = str(info.value)
    assert "\n" not in message
    assert path.name in message
    return message


# ---- every task that reads the matrix --------------------------------------------------------------

# A value for each required option of a task, and for --stack where it is optional (it selects the
# matrix). A new task with another required option fails `test_every_matrix_task_is_covered` until a
# value is added here.
OPTION_VALUES = {
    "stack": "s",
    "image": "example/image:1",
    "digest": "sha256:" + "0" * 64,
    "good": "0.5.9",
    "bad": "0.5.10",
    "sglang": "0.5.10",
    "ref": "example/image:1",
    "tag": "candidate-1",
}


def matrix_tasks(root: Path) -> list[tuple[str, list[str]]]:
    """(task name, arguments) for every task with a --stacks-file option, from tasks.py itself."""
    ns = task_collection()
    out = []
    for name in sorted(ns.task_names):
        params = inspect.signature(ns[name].body).parameters
        if "stacks_file" not in params:
            continue
        args = [name]
        for pname, param in list(params.items())[1:]:
            if pname == "root":
                args += ["--root", str(root)]
            elif param.default is inspect.Parameter.empty or pname == "stack":
                assert pname in OPTION_VALUES, f"task {name}: no test value for required option --{pname}"
                args += ["--" + pname.replace("_", "-"), OPTION_VALUES[pname]]
        out.append((name, args))
    return out


def test_every_matrix_task_is_covered(tmp_path):
    names = {name for name, _ in matrix_tasks(tmp_path)}
    assert {"stacks", "render", "build", "smoke", "publish", "deploy", "patches.check", "patches.apply"} <= names


@pytest.fixture(scope="module")
def bad_matrix_files(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("bad-matrix")
    (base / "a-directory.yaml").mkdir()
    write(base, b"stacks:\n  s:\n    description: caf\xe9 latin-1\n", "latin1.yaml")
    write(base, "stacks:\n  ? [a, b]\n  : c\n", "complex-key.yaml")
    return {"directory": base / "a-directory.yaml", "non-UTF-8": base / "latin1.yaml",
            "complex key": base / "complex-key.yaml"}


def _run_all(jobs: list[tuple[str, list[str], Path]], cwd: Path) -> list[tuple[str, list[str], Path, object]]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda job: run_invoke(*job[1], "--stacks-file", str(job[2]), cwd=cwd,
                                                      timeout=120), jobs))
    return [(*job, proc) for job, proc in zip(jobs, procs, strict=True)]


# An `invoke` process per matrix task and bad file: 106 s measured under xdist on the
# loaded 2-core machine, near the 120 s default; a hang is still ended, at five minutes.
@pytest.mark.timeout(300)
def test_every_task_gives_one_line_for_an_unreadable_matrix(tmp_path, bad_matrix_files):
    root = tmp_path / "tree"
    (root / "sglang").mkdir(parents=True)
    expected = {"directory": "is a directory", "non-UTF-8": "is not UTF-8 text",
                "complex key": "a mapping key must be a plain value, not a sequence"}
    jobs = [(kind, args, path) for _, args in matrix_tasks(root) for kind, path in bad_matrix_files.items()]
    for kind, args, path, proc in _run_all(jobs, tmp_path):
        what = f"invoke {' '.join(args)} with a {kind}"
        assert proc.returncode != 0, what
        assert "Traceback" not in proc.stderr, f"{what}:\n{proc.stderr}"
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, f"{what}:\n{proc.stderr}"
        assert lines[0].startswith("error: ") and path.name in lines[0] and expected[kind] in lines[0], what


def test_bad_file_messages_name_the_line(tmp_path, bad_matrix_files):
    assert error_for(bad_matrix_files["non-UTF-8"]).endswith(
        "latin1.yaml:3: is not UTF-8 text (byte 0xe9 cannot be decoded)")
    assert "complex-key.yaml:2: key 'stacks'" in error_for(bad_matrix_files["complex key"])


@pytest.mark.parametrize(("text", "expected"), [
    ("stacks:\n  s: !!int abc\n", "key 'stacks.s': invalid value for tag tag:yaml.org,2002:int"),
    ("stacks:\n  s: !custom x\n", "could not determine a constructor for the tag '!custom'"),
    ("stacks: {}\n---\nstacks: {}\n", "expected a single document in the stream but found another document"),
    ("stacks:\n  s: \x00\n", "character #x0000 is not allowed"),
    ("stacks:\n  s: *nowhere\n", "found undefined alias"),
    ("stacks:\n  s:\n    inherits: [a]\n", "key 'inherits': must be the name of another stack"),
    ("stacks:\n  s:\n    ? {a: 1}\n    : x\n", "a mapping key must be a plain value, not a mapping"),
])
def test_other_malformed_documents_are_one_line(tmp_path, text, expected):
    assert expected in error_for(write(tmp_path, text))


def test_a_special_file_or_an_oversized_one_is_refused_unread(tmp_path):
    assert "is not a regular file" in error_for(Path("/dev/zero"))
    big = write(tmp_path, "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    assert f"is larger than the {MAX_FILE_BYTES // 1024} KiB limit" in error_for(big)


def test_newlines_in_quoted_values_stay_escaped(tmp_path):
    message = error_for(write(tmp_path, VALID.format(name="s").replace("0.5.9", '"0.5\\n9"')))
    assert "'0.5\\n9'" in message


# ---- adversarial YAML, bounded -----------------------------------------------------------------------

_CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
from sglstack.core.errors import ConfigError
from sglstack.config.matrix import load_matrix
try:
    load_matrix(sys.argv[1])
    outcome = "loaded"
except ConfigError as exc:
    outcome = str(exc)
# VmHWM: the peak RSS of this process image (ru_maxrss would also count the forking parent's pages).
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"outcome": outcome, "max_rss_kib": peak}))
"""


def _load_in_child(path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=path.parent, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_alias_bomb_is_refused_without_expanding_it(tmp_path):
    bomb = write(tmp_path, alias_bomb())
    assert bomb.stat().st_size < 1200
    result = _load_in_child(bomb)
    assert result["outcome"] == (f"stacks.yaml:12: expands to more than {MAX_VALUES:,} values through YAML "
                                 "aliases (an alias bomb?)")
    assert result["max_rss_kib"] < 200 * 1024  # the interpreter and pydantic alone take about 70 MiB


def test_a_small_alias_tree_is_shared_not_copied(tmp_path):
    # 6 levels of 9 expand to 597,871 values: under the budget, so it loads, built once per node.
    data, lines = load_yaml_with_lines(write(tmp_path, alias_bomb(levels=6)))
    top = data["x5"]
    assert top[0] is top[8] and top[0][0] is top[8][8]
    assert len(lines) < 100  # one entry per key path where a node is first reached, not per expansion


@pytest.mark.parametrize(("text", "expected"), [
    ("stacks:\n  s: " + "[" * 200 + "]" * 200 + "\n", f"nested more than {MAX_DEPTH} levels deep"),
    ("stacks:\n  s: " + "{a: " * 200 + "b" + "}" * 200 + "\n", f"nested more than {MAX_DEPTH} levels deep"),
    ("a: &a " + "[" * 60 + "]" * 60 + "\nb: &b " + "[" * 10 + "*a" + "]" * 10 + "\n",
     f"nests more than {MAX_DEPTH} levels deep through YAML aliases"),
    ("stacks: &s\n  s: [*s]\n", "a YAML alias refers to its own anchor (a cycle)"),
])
def test_deep_nesting_and_cycles_are_refused(tmp_path, text, expected):
    result = _load_in_child(write(tmp_path, text))
    assert expected in result["outcome"] and "stacks.yaml" in result["outcome"]


def test_defaults_times_many_stacks_stay_within_the_value_budget(tmp_path):
    # No alias at all: one long list in `defaults:` that every one of many short stacks would copy.
    packages = ", ".join(f"p{i}" for i in range(50_000))
    stacks = "".join(f"  s{i}: {{}}\n" for i in range(25))
    defaults = ("defaults:\n  base_image: debian:bookworm-slim\n  sglang: {version: 0.5.9}\n"
                f"  serving: {{model: org/model}}\n  system_packages: [{packages}]\n")
    path = write(tmp_path, f"{defaults}stacks:\n{stacks}")
    assert path.stat().st_size < MAX_FILE_BYTES
    outcome = _load_in_child(path)["outcome"]
    # 50,000 values a stack: the 20th stack is the one past the budget.
    assert outcome == (f"stacks.yaml: stack 's19': the stacks hold more than {MAX_VALUES:,} values once "
                       "defaults and parents are merged in")


# ---- stack names Docker can use --------------------------------------------------------------------

@pytest.mark.parametrize(("name", "reason"), [
    ("a..b", "has a separator Docker refuses"),
    ("a._b", "has a separator Docker refuses"),
    ("a___b", "has a separator Docker refuses"),
    ("a-", "must start and end with a lowercase letter or digit"),
    ("a.", "must start and end with a lowercase letter or digit"),
    ("-a", "must start and end with a lowercase letter or digit"),
    ("Cu130", "has uppercase letters"),
    ("a b", "may hold only lowercase letters"),
    ("x" * 250, "over Docker's limit of 255"),
])
def test_stack_names_docker_cannot_use_are_refused(tmp_path, name, reason):
    message = error_for(write(tmp_path, VALID.format(name=name)))
    assert f"stack '{name}'" in message and reason in message and f"sglstack/{name}" in message


@pytest.mark.parametrize("name", ["a", "a-b", "a--b", "a__b", "a.b", "a_b", "cu130-h200.v2", "x" * 100])
def test_stack_names_docker_accepts_load(tmp_path, name):
    stack = load_matrix(write(tmp_path, VALID.format(name=name))).get(name)
    assert stack.local_image == f"sglstack/{name}"


def test_a_name_that_makes_a_publish_tag_too_long_is_refused(tmp_path):
    # `{sglang}-{stack}-{date}-{confighash8}` is 24 characters plus the name: 0.5.9 leaves 104 for it.
    assert load_matrix(write(tmp_path, VALID.format(name="x" * 104)))
    message = error_for(write(tmp_path, VALID.format(name="x" * 105)))
    assert "key 'publish.immutable_tag'" in message and "over Docker's limit of 128" in message


def test_bad_names_stop_check_and_build_before_any_work(tmp_path):
    path = write(tmp_path, VALID.format(name="a..b"))
    for args in (["stacks", "--check"], ["build", "--stack", "a..b", "--dry-run"]):
        proc = run_invoke(*args, "--stacks-file", str(path), cwd=tmp_path, timeout=120)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [
            "error: stacks.yaml:3: stack 'a..b': stack name has a separator Docker refuses ('..', '._', '___' "
            "and the like): it names the image sglstack/a..b (Docker's reference grammar: lowercase letters "
            "and digits, separated by one '.', '_', '__' or dashes)"]


def test_a_matrix_of_more_stacks_than_the_limit_is_refused_before_validation(tmp_path):
    stacks = "".join(f"  s{i}: {{inherits: s0}}\n" for i in range(1, MAX_STACKS + 1))
    message = error_for(write(tmp_path, VALID.format(name="s0") + stacks))
    assert message.endswith(f"/stacks.yaml:2: key 'stacks': has {MAX_STACKS + 1:,} stacks, over the limit of "
                            f"{MAX_STACKS:,} for one matrix")


@pytest.fixture(params=["libyaml", "pure Python"])
def parser(request, monkeypatch):
    """Both parsers: libyaml where PyYAML has it, and the pure-Python one it falls back to."""
    if request.param == "pure Python":
        monkeypatch.setattr(yamlsrc, "_FAST_LOADER", None)
    elif yamlsrc._FAST_LOADER is None:
        pytest.skip("PyYAML without libyaml here")
    return request.param


@pytest.mark.parametrize(("text", "expected"), [
    (alias_bomb(), "stacks.yaml:12: expands to more than"),
    ("stacks:\n  s: " + "[" * 5000 + "]" * 5000 + "\n", f"stacks.yaml:2: invalid YAML: nested more than {MAX_DEPTH}"),
    ("stacks:\n  s:\n" + "".join("    " * i + f"k{i}:\n" for i in range(1, 100)) + "\n",
     f"invalid YAML: nested more than {MAX_DEPTH} levels deep"),
    ("stacks:\n  s: \x07\n", "stacks.yaml:2: invalid YAML: character #x0007 is not allowed in YAML"),
    ("a: &x 1\nb: &x 2\n", "invalid YAML: found a duplicate anchor"),
])
def test_both_parsers_bound_the_same_inputs(tmp_path, parser, text, expected):
    assert expected in error_for(write(tmp_path, text))


@pytest.mark.parametrize("libyaml_wording", ["exceeded maximum nesting depth", "some later wording"])
def test_the_depth_message_is_ours_whatever_libyaml_calls_deep_input(tmp_path, monkeypatch, libyaml_wording):
    """PyYAML 6.0.4's libyaml refuses deep input itself, in words of its own: the user still reads ours."""
    if yamlsrc._FAST_LOADER is None:
        pytest.skip("PyYAML without libyaml here")
    real_parse = yaml.parse

    def libyaml_refusing_deep_input(text, Loader):
        if Loader is yamlsrc._FAST_LOADER and "[" * 100 in text:
            raise yaml.YAMLError(libyaml_wording)
        return real_parse(text, Loader=Loader)

    monkeypatch.setattr(yaml, "parse", libyaml_refusing_deep_input)
    deep = "stacks:\n  s: " + "[" * 5000 + "]" * 5000 + "\n"
    assert yaml_error(write(tmp_path, deep)) == f"stacks.yaml:2: invalid YAML: nested more than {MAX_DEPTH} levels deep"
    # A libyaml refusal of something else keeps libyaml's own words.
    shallow = "stacks:\n  s: [" + "[" * 100 + "]" * 100 + "]\n"
    monkeypatch.setattr(yamlsrc, "MAX_DEPTH", 1000)
    assert yaml_error(write(tmp_path, shallow)) == f"stacks.yaml: invalid YAML: {libyaml_wording}"


def test_both_parsers_give_the_same_data_and_lines(tmp_path, monkeypatch):
    path = REPO / "stacks.yaml"
    fast = load_yaml_with_lines(path)
    monkeypatch.setattr(yamlsrc, "_FAST_LOADER", None)
    assert load_yaml_with_lines(path) == fast


# ---- the YAML reader's lines, whole, in process -----------------------------------------------------

def yaml_error(path: Path, name: str | None = "stacks.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        load_yaml_with_lines(path, name)
    return str(info.value)


@pytest.mark.parametrize(("text", "expected"), [
    ("a: &a {x: 1}\nb:\n  <<: *a\n", "stacks.yaml:3: YAML merge keys (<<) are not supported"),
    ("stacks:\n  ? [a, b]\n  : c\n",
     "stacks.yaml:2: key 'stacks': a mapping key must be a plain value, not a sequence"),
    ("stacks:\n  s:\n    ? {a: 1}\n    : x\n",
     "stacks.yaml:3: key 'stacks.s': a mapping key must be a plain value, not a mapping"),
    ("stacks:\n  a: {}\n  b: {}\n  a: {}\n", "stacks.yaml:4: stack 'a': duplicate stack 'a'"),
    ("stacks:\n  a:\n    x: 1\n    x: 2\n", "stacks.yaml:4: stack 'a': key 'stacks.a.x': duplicate key"),
    ("a: 1\na: 2\n", "stacks.yaml:2: key 'a': duplicate key"),
    ("defaults:\n  serving:\n    a: 1\n    a: 2\n", "stacks.yaml:4: key 'defaults.serving.a': duplicate key"),
    ("stacks:\n  s: !!int abc\n",
     "stacks.yaml:2: key 'stacks.s': invalid value for tag tag:yaml.org,2002:int: invalid literal for int() with "
     "base 10: 'abc'"),
    ("stacks:\n  s: !custom x\n",
     "stacks.yaml:2: key 'stacks.s': invalid value for tag !custom: could not determine a constructor for the tag "
     "'!custom'"),
    # PyYAML's constructors end these in IndexError and KeyError: one line too, not a traceback.
    ('stacks:\n  s: !!int ""\n',
     "stacks.yaml:2: key 'stacks.s': invalid value for tag tag:yaml.org,2002:int: string index out of range"),
    ('stacks:\n  s: !!float ""\n',
     "stacks.yaml:2: key 'stacks.s': invalid value for tag tag:yaml.org,2002:float: string index out of range"),
    ("stacks:\n  s: !!bool maybe\n",
     "stacks.yaml:2: key 'stacks.s': invalid value for tag tag:yaml.org,2002:bool: 'maybe'"),
    ("stacks: {}\n---\nstacks: {}\n",
     "stacks.yaml:2: invalid YAML: expected a single document in the stream but found another document"),
    ("stacks: &s\n  s: [*s]\n", "stacks.yaml:1: a YAML alias refers to its own anchor (a cycle)"),
    ("a: &a " + "[" * 60 + "]" * 60 + "\nb: &b " + "[" * 10 + "*a" + "]" * 10 + "\n",
     f"stacks.yaml:2: nests more than {MAX_DEPTH} levels deep through YAML aliases"),
    ("\n\n\nc: \x07\nd: 1\n", "stacks.yaml:4: invalid YAML: character #x0007 is not allowed in YAML"),
])
def test_yaml_errors_are_whole_lines(tmp_path, parser, text, expected):
    assert yaml_error(write(tmp_path, text)) == expected


def test_a_parse_error_is_the_parsers_problem_without_its_context(tmp_path, parser):
    # "while parsing a flow sequence" is the context; each parser words the problem its own way.
    expected = {"libyaml": "did not find expected ',' or ']'",
                "pure Python": "expected ',' or ']', but got '<stream end>'"}[parser]
    assert yaml_error(write(tmp_path, "stacks:\n  s: [unclosed\n")) == f"stacks.yaml:3: invalid YAML: {expected}"


def test_nesting_is_bounded_at_max_depth_levels_exactly(tmp_path, parser):
    deepest, _ = load_yaml_with_lines(write(tmp_path, "[" * MAX_DEPTH + "]" * MAX_DEPTH))
    for _ in range(MAX_DEPTH - 1):
        [deepest] = deepest
    assert deepest == []
    assert load_yaml_with_lines(write(tmp_path, "[" * (MAX_DEPTH - 1) + "a" + "]" * (MAX_DEPTH - 1)))[0]
    too_deep = f"stacks.yaml:1: invalid YAML: nested more than {MAX_DEPTH} levels deep"
    assert yaml_error(write(tmp_path, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))) == too_deep
    # A scalar is a level for both parsers (libyaml's check once let it through to the alias check).
    assert yaml_error(write(tmp_path, "[" * MAX_DEPTH + "a" + "]" * MAX_DEPTH)) == too_deep
    # Closed collections give their levels back, each one level.
    text = "{a: [[[x]], " + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + "]}"
    assert load_yaml_with_lines(write(tmp_path, text))[0]["a"][0] == [["x"]]
    assert yaml_error(write(tmp_path, text.replace("[[[x]], [", "[[[x]], [["))) == too_deep


def test_the_value_budget_counts_aliases_in_full_and_is_inclusive(tmp_path, monkeypatch):
    # {a: [x, x], b: [*a, *a]}: the mapping, 2 keys, a's list of 3 and b's list of 1 + 2 * 3 = 13 values.
    path = write(tmp_path, "a: &a [x, x]\nb: [*a, *a]\n")
    monkeypatch.setattr(yamlsrc, "MAX_VALUES", 13)
    data, _ = load_yaml_with_lines(path)
    assert data == {"a": ["x", "x"], "b": [["x", "x"], ["x", "x"]]} and data["b"][0] is data["a"]
    monkeypatch.setattr(yamlsrc, "MAX_VALUES", 12)
    assert yaml_error(path) == "stacks.yaml:1: expands to more than 12 values through YAML aliases (an alias bomb?)"


def test_a_file_that_cannot_be_read_is_named_as_given(tmp_path):
    assert yaml_error(tmp_path / "none.yaml", None) == f"{tmp_path}/none.yaml: file not found"
    assert yaml_error(tmp_path, None) == f"{tmp_path}: is a directory, not a YAML file"
    assert yaml_error(Path("/dev/zero"), None) == "/dev/zero: is not a regular file"
    plain = write(tmp_path, "a: 1\n", "plain.yaml")
    assert yaml_error(plain / "below.yaml", None) == f"{plain}/below.yaml: cannot read: Not a directory"
    latin1 = write(tmp_path, b"\nstacks: caf\xe9\n", "latin1.yaml")
    assert yaml_error(latin1, None) == f"{latin1}:2: is not UTF-8 text (byte 0xe9 cannot be decoded)"


def test_the_size_limit_is_inclusive(tmp_path):
    line = "# " + "x" * 1021 + "\n"  # 1 KiB
    path = write(tmp_path, line * (MAX_FILE_BYTES // len(line)))
    assert path.stat().st_size == MAX_FILE_BYTES
    assert load_yaml_with_lines(path) == ({}, {})
    path.write_text(line * (MAX_FILE_BYTES // len(line)) + "\n")
    assert yaml_error(path) == f"stacks.yaml: is larger than the {MAX_FILE_BYTES // 1024} KiB limit for a YAML file"


def test_a_yaml_error_without_a_problem_or_a_mark_is_its_first_line():
    assert yamlsrc._yaml_problem(yaml.YAMLError("first\nsecond")) == "first"
    assert yamlsrc._yaml_problem(yaml.YAMLError()) == "unreadable"
    assert yamlsrc._yaml_line(yaml.YAMLError("first"), "a\nb\n") is None
