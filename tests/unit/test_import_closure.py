"""The import closure (issue 41): the in-image scan (`inimage/incontainer/importcheck.py`, pure ast, on small
trees written here) and the host's verdict on its report (`imagebuild/importclosure.py`)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from sglstack.config.matrix import load_matrix
from sglstack.config.settings import RuntimeImportsPolicy
from sglstack.imagebuild.importclosure import flag_values, import_closure_args, judge_imports
from sglstack.imagebuild.verify import image_check_argv
from sglstack.inimage.incontainer import filefacts, importcheck

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "sglstack" / "inimage" / "incontainer" / "importcheck.py"

SOURCE = textwrap.dedent("""\
    import os, undeclared_top.sub
    from undeclared_from import x
    from . import sibling
    from typing import TYPE_CHECKING
    if TYPE_CHECKING:
        import only_for_types
    if sys.version_info >= (3, 14):
        import annotationlib
    if _is_cuda:
        from gpu_only import kernel
    else:
        import cpu_only
    try:
        import optional_one
    except ImportError:
        import fallback_one
    try:
        import plain_try
    except KeyError:
        import in_handler
    class Holder:
        import in_class_body
    def later():
        import in_function
    with lock:
        import in_with
    with suppress(ImportError):
        import suppressed_one
    with contextlib.suppress(KeyError):
        import suppressed_other
    """)


def test_the_scan_counts_what_module_level_runs_and_says_which_is_conditional():
    assert filefacts.top_level_imports(ast.parse(SOURCE)) == [
        ("os", 1, False), ("undeclared_top", 1, False), ("undeclared_from", 2, False), ("typing", 4, False),
        ("gpu_only", 10, True), ("cpu_only", 12, True), ("plain_try", 18, False), ("in_handler", 20, True),
        ("in_class_body", 22, False), ("in_with", 26, False), ("suppressed_other", 30, False)]


def _site(root: Path) -> Path:
    """A site with `plug` (a distribution: serving, its net module importing a missing module at top level)
    and `side` (no distribution, off the serving path, importing another missing module)."""
    files = {
        "plug/__init__.py": "import os\nfrom plug import net\n",
        "plug/net.py": "import json\nimport undeclared_runtime_dep\n",
        "plug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: plug\nVersion: 1.0\n",
        "plug-1.0.dist-info/RECORD": "plug/__init__.py,,\nplug/net.py,,\n",
        "gpuplug.py": "GPU = False\nif GPU:\n    import gpu_dep\n",
        "side/__init__.py": "def f():\n    import lazy_dep\nimport cachetools_missing\n",
        "side/tests/test_x.py": "import pytest_missing\n",
        "usesplug.py": "import gpuplug\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_in_image_scan_finds_a_failing_serving_import_and_the_unprovided_ones(tmp_path):
    site = _site(tmp_path / "site")
    report = _run_with_path(site, "plug", "usesplug")
    real = str(site.resolve())
    assert report["modules"] == [
        {"module": "plug", "ok": False, "missing": "undeclared_runtime_dep", "importer": f"{real}/plug/net.py",
         "error": "ModuleNotFoundError: No module named 'undeclared_runtime_dep'"},
        {"module": "usesplug", "ok": True}]
    assert [(u["module"], u["importer"].removeprefix(real + "/"), u["line"], u["serving"], u["conditional"])
            for u in report["unprovided"]] == [
        ("gpu_dep", "gpuplug.py", 3, True, True),
        ("undeclared_runtime_dep", "plug/net.py", 2, True, False),
        ("cachetools_missing", "side/__init__.py", 3, False, False)]


def _run_with_path(site: Path, *modules: str) -> dict:
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); sys.argv = ['importcheck']; "
            f"sys.path.insert(0, {str(SCRIPT.parent)!r}); import importcheck; "
            f"sys.exit(importcheck.main([*{[f'--module={m}' for m in modules]!r}, '--site', {str(site)!r}]))")
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False,
                          timeout=600, cwd=site)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _sglang_tree(root: Path) -> Path:
    files = {
        "sglang/__init__.py": "",
        "sglang/srt/models/llama.py": "class LlamaForCausalLM: pass\nEntryClass = LlamaForCausalLM\n",
        "sglang/srt/models/llama_eagle3.py": ("class LlamaForCausalLMEagle3: pass\n"
                                              "EntryClass = [LlamaForCausalLMEagle3]\n"),
        "sglang/srt/speculative/eagle_worker_v2.py": "", "sglang/srt/speculative/eagle_utils.py": "",
        "sglang/srt/layers/attention/attention_registry.py": textwrap.dedent("""\
            @register_attention_backend("fa3")
            def create_fa3(runner):
                from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend
                return FlashAttentionBackend(runner)
            @register_attention_backend("triton")
            def create_triton(runner):
                from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
            """),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "sglang"


def test_the_serving_path_modules_are_found_in_sglangs_own_tree(tmp_path):
    root = str(_sglang_tree(tmp_path))
    assert importcheck.model_modules(root, ["LlamaForCausalLMEagle3", "LlamaForCausalLM", "NoSuchLM"]) == (
        {"LlamaForCausalLMEagle3": "sglang.srt.models.llama_eagle3", "LlamaForCausalLM": "sglang.srt.models.llama"},
        ["NoSuchLM"])
    assert importcheck.speculative_modules(root) == ["sglang.srt.speculative.eagle_worker_v2"]
    assert importcheck.attention_modules(root, ["fa3", "fa9"]) == (
        ["sglang.srt.layers.attention.attention_registry", "sglang.srt.layers.attention.flashattention_backend"],
        ["fa9"])


def test_the_stacks_serving_path_is_the_entry_point_the_architectures_the_worker_and_the_backend(tmp_path):
    stacks = tmp_path / "stacks.yaml"
    cpu = (REPO / "tests" / "fixtures" / "stacks-cpu.yaml").read_text()
    stacks.write_text(cpu + textwrap.indent(textwrap.dedent("""\
          served:
            inherits: cpu-test
            sglang: {version: 0.5.9, install_deps: true}
            serving:
              model: org/m
              extra_args: ["--attention-backend", "fa3", "--decode-attention-backend=triton"]
            runtime_imports:
              architectures: [LlamaForCausalLM, LlamaForCausalLMEagle3]
        """), "  "))
    stack = load_matrix(stacks).get("served")
    assert import_closure_args(stack) == [
        "--module=sglang.launch_server", "--module=sglang.srt.entrypoints.http_server",
        "--architecture=LlamaForCausalLM", "--architecture=LlamaForCausalLMEagle3", "--speculative",
        "--attention-backend=fa3", "--attention-backend=triton"]
    assert image_check_argv(stack)[-1] == f"--import-closure={json.dumps(import_closure_args(stack))}"
    assert not any(a.startswith("--import-closure") for a in image_check_argv(load_matrix(stacks).get("cpu-test")))
    assert flag_values(["--attention-backend"], ["--attention-backend"]) == []


REPORT = {
    "sites": ["/opt/venv/site"],
    "modules": [
        {"module": "sglang.launch_server", "ok": False, "missing": "distro", "importer": "/opt/venv/site/sglang/x.py"},
        {"module": "sglang.srt.models.llama", "ok": False, "missing": None, "importer": "/opt/venv/site/t/c.py",
         "error": "RuntimeError: no CUDA GPUs are available"},
        {"module": "sglang.srt.entrypoints.http_server", "ok": True}],
    "unprovided": [
        {"module": "cachetools", "importer": "/opt/venv/site/verl/a.py", "line": 3, "serving": True,
         "conditional": False},
        {"module": "aiter", "importer": "/opt/venv/site/sglang/rocm.py", "line": 9, "serving": True,
         "conditional": True},
        {"module": "vllm", "importer": "/opt/venv/site/other/b.py", "line": 1, "serving": False,
         "conditional": False}],
    "unknown_architectures": ["NoSuchLM"], "unknown_attention_backends": [],
}


def test_the_verdict_names_module_and_importer_errors_on_the_serving_path_warnings_elsewhere():
    verdict = judge_imports(REPORT, RuntimeImportsPolicy())
    assert verdict["errors"] == [
        "import closure: importing sglang.launch_server (serving path) fails: module 'distro', imported by "
        "sglang/x.py, is provided by no installed distribution",
        "import closure: module 'cachetools', imported by verl/a.py:3 (serving path), is provided by no installed "
        "distribution"]
    assert verdict["warnings"] == [
        "importing sglang.srt.models.llama (serving path) without a GPU: RuntimeError: no CUDA GPUs are available "
        "(in t/c.py)",
        "module 'aiter', imported by sglang/rocm.py:9 (serving path, under a condition), is provided by no installed "
        "distribution",
        "module 'vllm', imported by other/b.py:1, is provided by no installed distribution",
        "architecture NoSuchLM: no SGLang model file's EntryClass names it (its module was not imported)"]
    assert verdict["waived"] == {} and verdict["stale"] == []


def test_declared_exceptions_waive_with_their_reasons_and_stale_ones_are_named():
    policy = RuntimeImportsPolicy.model_validate({"exceptions": [
        {"module": "distro", "reason": "patched out of the launch path"},
        {"module": "cache*", "importer": "verl/*", "reason": "verl's trainer only"},
        {"module": "nothing_imports_this", "reason": "old"}]})
    verdict = judge_imports(REPORT, policy)
    assert verdict["errors"] == []
    assert verdict["waived"] == {"distro (sglang/x.py)": "patched out of the launch path",
                                 "cachetools (verl/a.py:3)": "verl's trainer only"}
    assert verdict["stale"] == ["runtime_imports exception 'nothing_imports_this' matches no import: remove it"]
    assert judge_imports({"error": "exit 1: boom"}, policy)["errors"] == [
        "import closure: the check did not run: exit 1: boom"]


def test_the_first_pass_sees_every_name_an_import_statement_can_bring_in():
    """Only a file naming something not provided is parsed: the cheap pass must miss no name the parse would see."""
    assert filefacts.mentioned_imports(SOURCE) >= {name for name, _, _ in filefacts.top_level_imports(
        ast.parse(SOURCE))}
    assert filefacts.mentioned_imports("import a.b as c, d;import e\nx = 1; from f.g import (h,\n  i)\n"
                                         "    import j  # k\n") == {"a", "d", "e", "f", "j"}


def test_architectures_read_from_a_config_that_are_not_a_list_are_not_letters_nor_a_traceback(tmp_path):
    """The model's config.json at hand (through a serving mount) with `architectures` a string or a number: a
    string was passed on letter by letter (--architecture=L, --architecture=l, ...), a number was a TypeError."""
    from draft_fixtures import model_folder

    stacks = tmp_path / "stacks.yaml"
    cpu = (REPO / "tests" / "fixtures" / "stacks-cpu.yaml").read_text()
    stacks.write_text(cpu + textwrap.indent(textwrap.dedent(f"""\
          served:
            inherits: cpu-test
            serving:
              model: /models/target
              speculative: {{draft_model: /models/draft, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}
              mounts: ["{tmp_path / 'm'}:/models:ro"]
        """), "  "))
    model_folder(tmp_path / "m" / "draft", {"architectures": ["LlamaForCausalLMEagle3"]})
    for names in ("LlamaForCausalLM", 5):
        model_folder(tmp_path / "m" / "target", {"architectures": names})
        args = import_closure_args(load_matrix(stacks).get("served"))
        assert [a for a in args if a.startswith("--architecture=")] == ["--architecture=LlamaForCausalLMEagle3"]
