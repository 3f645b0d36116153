"""The shape of the house, checked: the import rules of the design, read from the source with `ast`.

A rule that lives only in a document is broken by the first hurried change; these tests fail on it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sglstack"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent)
        if rel.parts[1] == "data":  # templates and patch sources: SGLang's code, not ours
            continue
        name = ".".join(rel.with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(module: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Each import statement of `module` with each of our modules it names."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for target in (base, *(f"{base}.{alias.name}" for alias in node.names)):
                if target in MODULES and target != module:
                    yield node, target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield node, alias.name


GRAPH = {m: {t for _, t in _imports(m)} for m in MODULES}


def _part(module: str) -> str:
    """`sglstack.deploy.flow` -> `deploy`; `sglstack.render` -> `render`."""
    return module.split(".")[1] if "." in module else module


def test_the_graph_is_read():
    assert len(MODULES) > 60
    assert "sglstack.matrix" in GRAPH["sglstack.render"]
    assert "smoke" in {_part(t) for t in GRAPH["sglstack.publish.release"]}


def test_no_import_cycle():
    """No module reaches itself through its imports (a package importing its own submodules excepted)."""
    def inside(a: str, b: str) -> bool:
        return b.startswith(a + ".") or a.startswith(b + ".")

    cycles = []
    for start in MODULES:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path = stack.pop()
            for nxt in GRAPH[node]:
                if nxt == start and not inside(start, node):
                    cycles.append(" -> ".join((*path, nxt)))
                elif nxt not in seen and not inside(start, nxt):
                    seen.add(nxt)
                    stack.append((nxt, (*path, nxt)))
    assert not cycles, cycles[:5]


def _reach(module: str) -> set[str]:
    out, todo = set(), [module]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in out:
                out.add(nxt)
                todo.append(nxt)
    return out


@pytest.mark.parametrize("part", ["patchkit", "incontainer"])
def test_in_image_code_uses_nothing_of_ours_beyond_itself(part):
    """It runs inside build stages and images, where only the standard library and itself exist."""
    own = {"patchkit", "incontainer"} if part == "incontainer" else {part}
    for module in (m for m in MODULES if _part(m) == part):
        assert {_part(t) for t in GRAPH[module]} <= own, (module, GRAPH[module])


def test_smoke_knows_no_registry():
    for module in (m for m in MODULES if _part(m) == "smoke"):
        assert not {_part(t) for t in _reach(module)} & {"registry", "publish", "tags", "localregistry"}, module


def test_input_knows_nothing_downstream():
    # names and quoting: the pure rules of what a stack's name and values become in Compose, Kubernetes,
    # Dockerfiles and shells, which the schema checks and every renderer applies (one home each).
    allowed = {"errors", "yamlsrc", "dockerref", "resources", "incontainer", "patchkit", "matrix", "names", "quoting",
               "credentials"}
    for module in ("sglstack.matrix", "sglstack.yamlsrc"):
        assert {_part(t) for t in _reach(module)} <= allowed, (module, _reach(module))


def test_deploy_never_builds():
    building = {"build", "builder", "pipeline", "bisect"}
    for module in (m for m in MODULES if _part(m) == "deploy"):
        assert not {_part(t) for t in _reach(module)} & building, module


def test_render_calls_no_engine_and_reads_no_records():
    """Pure text from a Stack, a serving spec and an image reference; the build root is a path, not a read."""
    engines = {"dockerhost", "registry", "registry_transport", "publish", "deploy", "smoke", "builder", "build"}
    for module in ("sglstack.render", "sglstack.compose", "sglstack.confighash", "sglstack.serving", "sglstack.k8s",
                   "sglstack.k8s_lws"):
        assert not {_part(t) for t in _reach(module)} & engines, (module, _reach(module))
        for node, target in _imports(module):
            if target == "sglstack.records" or target.startswith("sglstack.records."):
                assert isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["build_root"], module


def _explained(lines: list[str], func_line: int, lineno: int) -> bool:
    """A comment on the import's line, or in the function above it."""
    return "#" in lines[lineno - 1] or any(line.strip().startswith("#") for line in lines[func_line:lineno - 1])


def test_a_function_level_import_says_why():
    """Imports belong at the top; one inside a function says why, in a comment beside or above it."""
    silent = []
    for module, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for func in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                silent += [f"{module}:{node.lineno}" for node in ast.walk(func)
                           if isinstance(node, ast.Import | ast.ImportFrom)
                           and not _explained(lines, func.lineno, node.lineno)]
    assert not silent, silent
