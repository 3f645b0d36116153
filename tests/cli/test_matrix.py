"""stacks.yaml validation: every problem is one line naming the file, stack, key and line."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from clirun import run_invoke

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

GOOD = """
defaults:
  python: "3.12"
  serving:
    model: org/model
    tp: 1
    gpus: 1
stacks:
  base:
    base_image: debian:bookworm-slim
    sglang:
      version: 0.5.9
    patches: [kimi-k25-eagle3]
  child:
    inherits: base
    sglang:
      version: 0.5.10
    patches: []
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stacks.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def error_for(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_matrix(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message
    assert "stacks.yaml" in message
    return info.value


def test_real_matrix_loads_and_pins_cu130_exactly():
    matrix = load_matrix(REPO / "stacks.yaml")
    assert {"cu130", "cu129"} <= set(matrix.names())
    cu130 = matrix.get("cu130")
    assert cu130.base_image == "ubuntu:24.04"  # CUDA from NVIDIA's wheels: one copy of each library
    assert cu130.python == "3.12"
    assert cu130.cuda_home == "/opt/venv/lib/python3.12/site-packages/nvidia/cu13"
    pins = cu130.pins()
    assert pins["nvidia-cuda-nvcc"] == "13.0.88" and pins["nvidia-cuda-cccl"] == "13.0.85"  # CUDA 13.0's JIT
    assert pins["torch"] == "2.9.1+cu130"
    assert pins["sgl-kernel"] == "0.3.21+cu130"
    assert pins["flashinfer-python"] == pins["flashinfer-cubin"] == "0.6.4"
    assert pins["sglang"] == "0.5.9"
    assert cu130.patches == ("kimi-k25-eagle3",)
    assert cu130.serving.tp == 8
    assert cu130.serving.speculative.draft_model == "AQ-MedAI/Kimi-K25-eagle3"
    assert (
        cu130.serving.speculative.num_steps,
        cu130.serving.speculative.eagle_topk,
        cu130.serving.speculative.num_draft_tokens,
    ) == (3, 1, 4)


def test_inheritance_merges_and_overrides(tmp_path):
    matrix = load_matrix(write(tmp_path, GOOD))
    child = matrix.get("child")
    assert child.sglang.version == "0.5.10"
    assert child.base_image == "debian:bookworm-slim"
    assert child.patches == ()
    assert child.serving.model == "org/model"


def test_stacks_are_immutable(tmp_path):
    stack = load_matrix(write(tmp_path, GOOD)).get("base")
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its ValidationError for frozen models
        stack.python = "3.11"  # type: ignore[misc]


def test_unknown_key_names_stack_key_and_line(tmp_path):
    err = error_for(tmp_path, GOOD.replace("    sglang:\n      version: 0.5.9", "    sglang:\n      versoin: 0.5.9"))
    assert err.stack == "base"
    assert err.key == "sglang.versoin"
    assert "unknown key" in str(err)
    assert err.line == 12


def test_wrong_type(tmp_path):
    err = error_for(tmp_path, GOOD.replace("    tp: 1", "    tp: eight"))
    assert err.key == "serving.tp" and err.line == 6


def test_missing_pin(tmp_path):
    err = error_for(tmp_path, GOOD.replace("    base_image: debian:bookworm-slim\n", ""))
    assert err.stack == "base" and err.key == "base_image" and "missing" in str(err)


@pytest.mark.parametrize("version", ["'>=0.5.9'", "latest", "'0.5.*'", "'~=0.5'"])
def test_non_exact_version(tmp_path, version):
    err = error_for(tmp_path, GOOD.replace("version: 0.5.9", f"version: {version}"))
    assert err.key == "sglang.version"


def test_unpinned_base_image(tmp_path):
    err = error_for(tmp_path, GOOD.replace("debian:bookworm-slim", "debian:latest"))
    assert err.key == "base_image" and "latest" in str(err)


def test_range_in_requirements(tmp_path):
    text = GOOD.replace(
        "    patches: [kimi-k25-eagle3]\n",
        "    patches: [kimi-k25-eagle3]\n    extra_layers:\n      - name: x\n        requirements: ['six>=1.0']\n",
        1,
    )
    err = error_for(tmp_path, text)
    assert err.key == "extra_layers.0.requirements.0"


def test_unknown_patch_id(tmp_path):
    err = error_for(tmp_path, GOOD.replace("[kimi-k25-eagle3]", "[no-such-patch]"))
    assert err.key == "patches[0]" and "no-such-patch" in str(err) and err.line == 13


def test_duplicate_stack(tmp_path):
    text = GOOD + "  base:\n    base_image: debian:bookworm-slim\n"
    err = error_for(tmp_path, text)
    assert err.stack == "base" and "duplicate stack" in str(err)


def test_unknown_parent(tmp_path):
    err = error_for(tmp_path, GOOD.replace("inherits: base", "inherits: nope"))
    assert err.stack == "child" and err.key == "inherits" and "nope" in str(err)


def test_inheritance_cycle(tmp_path):
    text = GOOD.replace("  base:\n    base_image", "  base:\n    inherits: child\n    base_image")
    err = error_for(tmp_path, text)
    assert "cycle" in str(err)


def test_invalid_yaml_reports_line(tmp_path):
    err = error_for(tmp_path, GOOD + "  broken: [unclosed\n")
    assert err.line is not None and "invalid YAML" in str(err)


def test_torch_build_must_match_cuda(tmp_path):
    text = GOOD.replace(
        "    base_image: debian:bookworm-slim\n    sglang:",
        "    base_image: debian:bookworm-slim\n    cuda: '13.0.1'\n    torch:\n      version: 2.9.1+cu129\n    sglang:",
        1,
    )
    err = error_for(tmp_path, text)
    assert "cu130" in str(err)


def test_cli_prints_one_line_and_exits_nonzero(tmp_path):
    path = write(tmp_path, GOOD.replace("[kimi-k25-eagle3]", "[no-such-patch]"))
    proc = run_invoke("stacks", "--stacks-file", str(path), cwd=tmp_path)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "stack 'base'" in lines[0] and "patches[0]" in lines[0] and "Traceback" not in proc.stderr


def test_cross_field_checks_name_their_key_and_line(tmp_path):
    text = GOOD.replace(
        "    base_image: debian:bookworm-slim\n    sglang:",
        "    base_image: debian:bookworm-slim\n    cuda_arch_list:\n      - '9.0'\n      - sm90\n    sglang:",
        1,
    )
    err = error_for(tmp_path, text)
    assert err.stack == "base" and err.key == "cuda_arch_list.1" and "sm90" in str(err) and err.line == 13

    err = error_for(tmp_path, GOOD.replace("    tp: 1", "    tp: 4"))
    assert err.key == "serving.tp" and err.line == 6


def test_list_item_error_points_at_the_item_line(tmp_path):
    text = GOOD.replace(
        "    patches: [kimi-k25-eagle3]\n",
        "    patches: [kimi-k25-eagle3]\n    extra_layers:\n      - name: x\n        requirements:\n"
        "          - six==1.16.0\n          - 'idna>=3'\n",
        1,
    )
    err = error_for(tmp_path, text)
    assert err.key == "extra_layers.0.requirements.1" and err.line == 18


def test_default_stacks_file_is_the_repo_roots_from_any_folder(tmp_path):
    proc = run_invoke("stacks", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "cu130" in proc.stdout and "cu129" in proc.stdout


def test_override_pin_must_agree_with_the_stacks_own_pin(tmp_path):
    text = GOOD.replace(
        "    patches: [kimi-k25-eagle3]\n",
        "    patches: [kimi-k25-eagle3]\n    flashinfer:\n      version: 0.6.4\n    overrides:\n"
        "      - replaces: flashinfer_python==0.6.3\n        pin: flashinfer-python==0.6.5\n        reason: newer\n",
        1,
    )
    err = error_for(tmp_path, text)
    assert err.stack == "base" and err.key == "overrides.0.pin" and err.line == 18
    assert "flashinfer-python==0.6.5" in str(err) and "0.6.4" in str(err)
    agreed = load_matrix(write(tmp_path, text.replace("flashinfer-python==0.6.5", "flashinfer-python==0.6.4")))
    assert agreed.get("base").pins()["flashinfer-python"] == "0.6.4"


# ---- the exact one-line errors of the loader: file, line, stack and key ----------------------------

PINS = "    base_image: debian:bookworm-slim\n    sglang: {version: 0.5.9}\n    serving: {model: m}\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("- a\n", ": the top level must be a mapping with 'defaults' and 'stacks'"),
        ("stacks:\n  s:\n" + PINS + "bogus: 1\n",
         ":6: key 'bogus': unknown top-level key (expected 'defaults', 'stacks')"),
        ("defaults: [1]\nstacks:\n  s:\n" + PINS, ":1: key 'defaults': must be a mapping"),
        ("stacks: {}\n", ":1: key 'stacks': must be a non-empty mapping of stack name to settings"),
        ("defaults: {}\n", ": key 'stacks': must be a non-empty mapping of stack name to settings"),
        ("stacks:\n  s: 1\n", ":2: stack 's': must be a mapping"),
        ("stacks:\n  s:\n    inherits: [a]\n" + PINS,
         ":3: stack 's': key 'inherits': must be the name of another stack"),
        ("stacks:\n  s:\n    inherits: nope\n" + PINS, ":3: stack 's': key 'inherits': unknown parent stack 'nope'"),
        ("stacks:\n  a:\n    inherits: b\n  b:\n    inherits: a\n",
         ":5: stack 'b': key 'inherits': inheritance cycle a -> b -> a"),
        ("stacks:\n  s:\n" + PINS + "    patches: [kimi-k25-eagle3, nope]\n",
         ":6: stack 's': key 'patches[1]': unknown patch id 'nope' (no patches/nope/patch.toml)"),
        ("defaults:\n  patches: [nope]\nstacks:\n  s:\n" + PINS,
         ":2: stack 's': key 'patches[0]': unknown patch id 'nope' (no patches/nope/patch.toml)"),
        ("defaults:\n  cache: {registry: ghcr.io/t/c}\nstacks:\n  a:\n" + PINS + "  b:\n" + PINS,
         ":2: stack 'b': key 'cache.registry': cache reference 'ghcr.io/t/c' is also stack 'a''s: each build would "
         "overwrite the other's cache (put '{stack}' in the reference)"),
        ("defaults:\n  serving: {model: m, tp: x}\nstacks:\n  s:\n    base_image: debian:bookworm-slim\n"
         "    sglang: {version: 0.5.9}\n",
         ":2: stack 's': key 'serving.tp': Input should be a valid integer, unable to parse string as an integer"),
        ("stacks:\n  s:\n    sglang: {version: 0.5.9}\n    serving: {model: m}\n",
         ":2: stack 's': key 'base_image': missing required key"),
    ],
)
def test_loader_errors_are_exact_lines(tmp_path, text, line):
    path = tmp_path / "stacks.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    assert str(info.value) == f"{path}{line}"


def test_an_unknown_stack_names_the_known_ones():
    with pytest.raises(ConfigError) as info:
        load_matrix(REPO / "stacks.yaml").get("zz")
    assert str(info.value).endswith(
        "stacks.yaml: stack 'zz': unknown stack (known: cu129, cu130, h200-field, pypi-cu130, pypi-cu130-gb)")


# ---- the pure value checks, each with its exact message ---------------------------------------------

from sglstack.config import matrix as matrix_module  # noqa: E402
from sglstack.config.fields import (  # noqa: E402
    _bind_mount,
    _exact_requirement,
    _exact_version,
    _matching,
    _pinned_image,
    _requirement,
    cache_reference,
    package_name,
    parse_bind,
)
from sglstack.config.matrix import _pydantic_message, _ValueBudget  # noqa: E402
from sglstack.config.schema import Matrix  # noqa: E402
from sglstack.config.settings import RegistryCache  # noqa: E402


def value_error(check, value) -> str:
    with pytest.raises(ValueError) as info:
        check(value)
    return str(info.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (5, "must be a version string (quote it in YAML)"),
        *((word, f"'{word}' is not an exact version") for word in ("latest", "main", "master", "nightly", "*", "")),
        (" LATEST ", "' LATEST ' is not an exact version"),
        ("1.0,2", "'1.0,2' is a range, not an exact version"),
        ("1.0X", "'1.0X' is not a valid PEP 440 version"),
        (" 1.0", "' 1.0' is not an exact version: it has surrounding whitespace or a control character"),
        ("1.0\x07", "'1.0\x07' is not an exact version: it has surrounding whitespace or a control character"),
    ],
)
def test_exact_version_messages(value, message):
    assert value_error(_exact_version, value) == message


def test_exact_requirements():
    assert _exact_requirement("six===1.16.0") == "six===1.16.0"
    assert _exact_requirement("six==1.16.0") == "six==1.16.0"
    for value in ("six==1.*", "six>=1"):
        assert value_error(_exact_requirement, value) == f"'{value}' must pin exactly one version with '==' (no ranges)"
    assert value_error(_exact_requirement, "???").startswith("'???' is not a valid requirement: Expected package name")
    assert value_error(_requirement, "???").startswith("'???' is not a valid requirement: Expected package name")


def test_pinned_images():
    assert _pinned_image("localhost:5000/img:1.0") == "localhost:5000/img:1.0"
    for value in ("debian", "localhost:5000/img", "debian:"):
        assert value_error(_pinned_image, value) == f"image '{value}' has no tag: pin a version tag or a digest"
    assert value_error(_pinned_image, "debian:latest") == (
        "image 'debian:latest' uses 'latest': pin a version tag or a digest")


def test_bind_mounts():
    assert parse_bind("/h:/c") == ("/h", "/c", False)
    assert parse_bind("/h:/c:ro") == ("/h", "/c", True)
    assert parse_bind("/h:/c:rw") == ("/h", "/c", False)
    expected = "expected HOST:CONTAINER[:ro] with an absolute container path"
    for value in ("/h", ":/c", "/h:c", "/h:/c:ro:x"):
        assert value_error(parse_bind, value) == expected, value
    assert value_error(parse_bind, "/h:/c:RO") == "mode 'RO' is not ro or rw"
    assert value_error(_bind_mount, "/h:c") == f"mount '/h:c': {expected}"
    assert _bind_mount("/h:/c:ro") == "/h:/c:ro"


def test_cache_references():
    assert cache_reference("ghcr.io/t/{stack}-cache:c") == "ghcr.io/t/{stack}-cache:c"
    assert RegistryCache(registry="ghcr.io/t/c:{stack}").ref_for("cu130") == "ghcr.io/t/c:cu130"
    assert RegistryCache(registry="ghcr.io/t/c:{stack}").mode == "max"
    assert value_error(cache_reference, "Bad Ref") == (
        "'Bad Ref' is not a registry reference like 'ghcr.io/team/sglstack-cache:{stack}': it has a path component "
        "'Bad Ref' that has uppercase letters")


def test_a_pattern_field_says_what_it_wants():
    check = _matching(re.compile(r"[a-z]+"), "a lowercase word").func
    assert check("abc") == "abc"
    assert value_error(check, "aBc") == "'aBc' is not a lowercase word"


def test_package_names_are_canonical():
    assert package_name("SGLang_Kernel") == "sglang-kernel"
    assert package_name("sgl.kernel") == "sgl-kernel"
    assert value_error(package_name, "sgl kernel") == "'sgl kernel' is not a package name"


def test_pydantic_messages():
    assert _pydantic_message({"type": "extra_forbidden", "msg": "x"}) == "unknown key"
    assert _pydantic_message({"type": "missing", "msg": "x"}) == "missing required key"
    assert _pydantic_message({}) == "invalid value"
    assert _pydantic_message({"type": "value_error", "msg": "Value error, boom"}) == "boom"
    assert _pydantic_message({"type": "t", "msg": "boom Value error, "}) == "boom Value error, "


def test_value_budget_counts_every_value_once():
    budget = _ValueBudget(100)
    assert budget.size(5) == 1
    assert budget.size({"a": None}) == 3
    assert budget.size([1, 2, 3]) == 4
    assert budget.size(None) == 1
    assert budget.size({"a": 1, "b": [1, 2]}) == 7
    assert budget.size((1, {"k": "v"})) == 5
    shared = [1]
    assert budget.size(shared) == 2
    assert budget.sizes[id(shared)] == (shared, 2)
    remembered = ["a"]
    budget.sizes[id(remembered)] = (remembered, 99)
    assert budget.size(remembered) == 99  # a remembered size is not counted again


def test_value_budget_refuses_only_past_the_limit():
    budget = _ValueBudget(6)
    budget.spend({"a": 1}, file="f.yaml", name="a")
    assert budget.left == 3
    budget.spend({"b": 1}, file="f.yaml", name="b")
    assert budget.left == 0
    with pytest.raises(ConfigError) as info:
        budget.spend({"c": 1}, file="f.yaml", name="c")
    assert str(info.value) == ("f.yaml: stack 'c': the stacks hold more than 1,000,000 values once defaults and "
                               "parents are merged in")


def test_an_empty_matrix_knows_no_stacks():
    with pytest.raises(ConfigError) as info:
        Matrix(file="f.yaml", stacks={}).get("a")
    assert str(info.value) == "f.yaml: stack 'a': unknown stack (known: none)"


# ---- the loader's edges: limits, the patches folder, where each error points ------------------------

def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    return str(info.value)


def stacks_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stacks.yaml"
    path.write_text(text)
    return path


def test_a_bad_stack_name_points_at_its_line(tmp_path):
    path = stacks_file(tmp_path, "stacks:\n  ok:\n" + PINS + "  Bad:\n" + PINS)
    assert load_error(path) == (
        f"{path}:6: stack 'Bad': stack name has uppercase letters: it names the image sglstack/Bad (Docker's "
        "reference grammar: lowercase letters and digits, separated by one '.', '_', '__' or dashes)")


def test_yaml_errors_name_the_file_as_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = stacks_file(tmp_path, "stacks:\n  s: [unclosed\n")
    assert load_error(path).startswith("stacks.yaml:")


def test_the_stack_limit_is_inclusive(tmp_path, monkeypatch):
    monkeypatch.setattr(matrix_module, "MAX_STACKS", 2)
    assert load_matrix(stacks_file(tmp_path, "stacks:\n  a:\n" + PINS + "  b:\n" + PINS)).names() == ["a", "b"]
    path = stacks_file(tmp_path, "stacks:\n  a:\n" + PINS + "  b:\n" + PINS + "  c:\n" + PINS)
    assert load_error(path) == f"{path}:1: key 'stacks': has 3 stacks, over the limit of 2 for one matrix"


def test_the_value_budget_counts_each_merged_stack(tmp_path, monkeypatch):
    monkeypatch.setattr(matrix_module, "MAX_VALUES", 21)  # each stack holds 11
    path = stacks_file(tmp_path, "stacks:\n  a:\n" + PINS + "  b:\n" + PINS)
    assert load_error(path) == (f"{path}: stack 'b': the stacks hold more than 21 values once defaults and parents "
                                "are merged in")


def test_a_given_patches_folder_is_the_one_used(tmp_path):
    (tmp_path / "patches" / "mine").mkdir(parents=True)
    (tmp_path / "patches" / "mine" / "patch.toml").write_text("")
    path = stacks_file(tmp_path, "stacks:\n  s:\n" + PINS + "    patches: [mine]\n")
    assert load_matrix(path, tmp_path / "patches").get("s").patches == ("mine",)


def test_a_child_does_not_inherit_the_parents_description(tmp_path):
    path = stacks_file(tmp_path, "stacks:\n  a:\n    description: the parent\n" + PINS + "  b:\n    inherits: a\n")
    matrix = load_matrix(path)
    assert (matrix.get("a").description, matrix.get("b").description) == ("the parent", "")
    assert matrix.get("b").inherits == "a"


def test_a_shared_cache_reference_points_at_the_stacks_own_key(tmp_path):
    cache = "    cache: {registry: ghcr.io/t/c}\n"
    path = stacks_file(tmp_path, "stacks:\n  a:\n" + PINS + "  b:\n" + PINS + cache + "  c:\n" + PINS + cache)
    assert load_error(path) == (
        f"{path}:15: stack 'c': key 'cache.registry': cache reference 'ghcr.io/t/c' is also stack 'b''s: each "
        "build would overwrite the other's cache (put '{stack}' in the reference)")


def test_a_publish_tag_too_long_for_docker_names_its_key(tmp_path):
    # candidate-{stack}-{confighash12} is 23 + len(name) long, {sglang}-{stack}-{date}-{confighash8} 30 + len(name)
    # with the sglang label 0.5.9-Cu130 (its '+' made a tag character)
    pins = PINS.replace("0.5.9", "0.5.9+Cu130")
    name = "s" * 100
    immutable = f"0.5.9-Cu130-{name}-20000101-00000000"
    says = f"the tag '{immutable}' built from the stack name is 130 characters long, over Docker's limit of 128: use a "
    says += "shorter stack name"
    for publish in ("", "    publish: {candidate_tag: fixed}\n", "    publish: {candidate_tag: '{stack}{nope}'}\n"):
        path = stacks_file(tmp_path, f"stacks:\n  {name}:\n" + pins + publish)
        assert load_error(path) == f"{path}:2: stack '{name}': key 'publish.immutable_tag': {says}", publish
    name = "s" * 106
    path = stacks_file(tmp_path, f"stacks:\n  {name}:\n" + pins)
    assert load_error(path) == (f"{path}:2: stack '{name}': key 'publish.candidate_tag': the tag "
                                f"'candidate-{name}-{'0' * 12}' built from the stack name is 129 characters long, "
                                "over Docker's limit of 128: use a shorter stack name")
    name = "s" * 98
    assert load_matrix(stacks_file(tmp_path, f"stacks:\n  {name}:\n" + pins)).names() == [name]


def test_a_shared_cache_reference_points_at_the_registry_line(tmp_path):
    cache = "    cache:\n      registry: ghcr.io/t/c\n"
    path = stacks_file(tmp_path, "stacks:\n  a:\n" + PINS + "  b:\n" + PINS + cache + "  c:\n" + PINS + cache)
    assert load_error(path) == (
        f"{path}:17: stack 'c': key 'cache.registry': cache reference 'ghcr.io/t/c' is also stack 'b''s: each "
        "build would overwrite the other's cache (put '{stack}' in the reference)")


SPECULATIVE = "    speculative:\n      draft_model: org/draft\n      num_steps: {steps}\n      eagle_topk: {topk}\n" \
              "      num_draft_tokens: {draft}\n"


@pytest.mark.parametrize(("steps", "topk", "draft", "refused"), [
    (3, 1, 4, False), (3, 1, 5, True), (5, 1, 4, True), (1, 1, 1, True), (3, 2, 5, False), (3, 4, 16, False)])
def test_topk_one_takes_only_the_draft_tokens_sglang_serves(tmp_path, steps, topk, draft, refused):
    """With topk 1 SGLang's server_args sets draft tokens to steps + 1 and only warns in its log, so any other
    count names a setting never served (and a sweep or history keyed by it): refused at its key and line."""
    text = GOOD.replace("    gpus: 1\n", "    gpus: 1\n" + SPECULATIVE.format(steps=steps, topk=topk, draft=draft), 1)
    if not refused:
        spec = load_matrix(write(tmp_path, text)).get("base").serving.speculative
        assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (steps, topk, draft)
        return
    err = error_for(tmp_path, text)
    assert err.stack == "base" and err.key == "serving.speculative.num_draft_tokens" and err.line == 12
    assert str(err).endswith(f"with topk 1 SGLang serves steps + 1 = {steps + 1} draft tokens, not {draft} "
                             f"(set {steps + 1}, or a topk above 1)")


@pytest.mark.parametrize(("platforms", "key", "line", "why"), [
    ("[]", "platforms", 11, "empty: a stack builds for at least one platform (linux/amd64, linux/arm64)"),
    ("[linux/amd64, linux/arm64, linux/arm64]", "platforms.2", 11, "linux/arm64 is listed twice"),
    # Spelled another way (Docker's, uname's, a variant): "Input should be ..." named no spelling; now the one meant,
    # as `--platform` does.
    ("[linux/amd64, linux/aarch64]", "platforms.1", 11,
     "linux/aarch64 is not one of linux/amd64 linux/arm64; did you mean linux/arm64?"),
    ("[arm64]", "platforms.0", 11, "arm64 is not one of linux/amd64 linux/arm64; did you mean linux/arm64?"),
    ("[linux/arm64/v8]", "platforms.0", 11,
     "linux/arm64/v8 is not one of linux/amd64 linux/arm64; did you mean linux/arm64?"),
    ("[linux/amd64, linux/arm]", "platforms.1", 11, "Input should be 'linux/amd64' or 'linux/arm64'")])
def test_a_stack_lists_each_platform_once_and_at_least_one(tmp_path, platforms, key, line, why):
    """An empty list planned nothing (a bake of no targets, an IndexError in build and lock); a repeated one
    doubled every per-platform step."""
    text = GOOD.replace("    base_image: debian:bookworm-slim\n", f"    base_image: debian:bookworm-slim\n"
                        f"    platforms: {platforms}\n", 1)
    err = error_for(tmp_path, text)
    assert (err.stack, err.key, err.line) == ("base", key, line)
    assert str(err).endswith(why)
