"""The shape of the house, checked: the import rules of the design, read from the source with `ast`.

A rule that lives only in a document is broken by the first hurried change; these tests fail on it.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from parsed import parse, parsed_once_a_module  # noqa: F401  (its fixture: autouse)

PACKAGE = Path(__file__).resolve().parents[2] / "sglstack"


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
    tree = parse(path.read_text(encoding="utf-8"))
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


class _Graph(dict[str, set[str]]):
    """Each module's imports of ours, read as a rule first asks for them: read at import, every xdist worker
    parsed all of sglstack while collecting, though one runs these tests."""

    def __missing__(self, module: str) -> set[str]:
        self[module] = targets = {t for _, t in _imports(module)}
        return targets


GRAPH = _Graph()


def _part(module: str) -> str:
    """`sglstack.deploy.flow` -> `deploy`; `sglstack.render.dockerfile` -> `render`."""
    return module.split(".")[1] if "." in module else module


def test_the_graph_is_read():
    assert len(MODULES) > 60
    assert "sglstack.config.schema" in GRAPH["sglstack.render.dockerfile"]
    assert _part("sglstack.adapters.docker") == "adapters" and _part("sglstack.serving") == "serving"
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


# What each part may import (shared/DESIGN.md, as built). A part not listed here fails the test below: a new
# folder says where it sits in the flow before it lands.
MAY_USE: dict[str, set[str]] = {
    "core": set(),
    "inimage": set(),
    # config validates patch specs with the in-image engine's own parser (one home for the patch format)
    "config": {"core", "inimage"},
    "serving": {"config", "core"},
    # lockfile: a stack's lock file (parsed, pure) is part of what render writes into the build context
    "render": {"config", "serving", "core", "lockfile"},
    "adapters": {"core"},
    # lockfile: the lock model (the parsed lock file, its text format, when it is current), below lock, diff, render
    "lockfile": {"config", "core"},
    "lock": {"config", "lockfile", "adapters", "core", "inimage"},
    # inimage: a RECORD's hashes are read with the in-image RECORD check's own parser (one home for the format)
    "coverage": {"config", "adapters", "core", "inimage"},
    # size: the size report of an image and the CUDA libraries a stage holds twice (build gates on it, diff shows it)
    "size": {"config", "adapters", "core"},
    "diff": {"config", "lockfile", "registry", "size", "adapters", "core"},
    "registry": {"config", "adapters", "core"},
    # inventory: what an image holds (listed inside it, compared with the lock, its SBOM document), below
    # imagebuild (whose verify lists it and writes the SBOM beside the record) and attest (which signs what the
    # build recorded): the build never imports attest
    "inventory": {"lockfile", "adapters", "core"},
    "attest": {"config", "inventory", "registry", "kernelcache", "adapters", "core"},
    # imagebuild: the image build (not named `build`: packaging and import-graph tools skip that name)
    "imagebuild": {"config", "serving", "render", "lock", "lockfile", "coverage", "size", "inventory", "adapters",
                   "core"},
    # kernelcache: the kernel-cache artifact (key, layer, on-disk OCI layout), below smoke, attest and deploy
    "kernelcache": {"serving", "core"},
    # patches: the host side of the patch engine (which patches, a release checked, a tree patched)
    "patches": {"config", "inimage", "adapters", "core"},
    "smoke": {"config", "serving", "diff", "preflight", "kernelcache", "adapters", "core"},
    "bisect": {"config", "imagebuild", "smoke", "patches", "adapters", "core"},
    "publish": {"config", "smoke", "registry", "attest", "kernelcache", "adapters", "core"},
    # inimage: the node side of preflight (its checks, the report) is in-image code, shipped into the stack image
    "preflight": {"config", "inimage", "adapters", "core"},
    "deploy": {"config", "serving", "render", "lock", "publish", "attest", "preflight", "kernelcache", "adapters",
               "core"},
    "upgrade": {"config", "serving", "lock", "lockfile", "coverage", "diff", "bisect", "patches", "inimage",
                "adapters", "core"},
    # build, then (--push) release: the one place image build and publish meet, above both
    "pipeline": {"config", "serving", "lock", "lockfile", "imagebuild", "publish", "attest", "registry", "adapters",
                 "core"},
    # the face: every task parses its options, calls its part and prints; nothing imports it. It talks to no
    # registry and no engine itself (`test_the_face_talks_to_no_registry_or_engine`).
    "cli": {"config", "serving", "render", "lock", "lockfile", "coverage", "size", "diff", "registry", "attest",
            "imagebuild", "patches", "smoke", "bisect", "publish", "preflight", "deploy", "upgrade", "pipeline",
            "inimage", "core"},
}
# Edges the design does not want, each waiting for its move (empty when the house is as designed).
DEBTS: set[tuple[str, str]] = set()


def _documented_may_use(text: str) -> dict[str, set[str]]:
    """docs/architecture.md's "What each part may use" table as {part: parts it may import} (the face's row,
    which says it in words, left out; a parenthesis is a reason, not a part)."""
    section = text.split("## What each part may use", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("part", "---") or cells[0].startswith("face"):
            continue
        uses = re.sub(r"\([^)]*\)", "", cells[1])
        named = set() if uses.strip() == "nothing of ours" else {u.strip() for u in uses.split(",") if u.strip()}
        out.update({part.strip(): named for part in cells[0].split(",")})
    return out


def test_the_documented_table_is_may_use():
    """The page a newcomer reads states the same rules the test enforces (the face's row aside)."""
    documented = _documented_may_use((PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert documented == {part: uses for part, uses in MAY_USE.items() if part != "cli"}


def test_the_table_reader_reads_reasons_and_shared_rows():
    page = ("## What each part may use\n\n| part | may import |\n| --- | --- |\n| core, inimage | nothing of ours |\n"
            "| render | config, lock (why, and how), core |\n| face (`cli`) | every part |\n\n## Never\n| x | y |\n")
    assert _documented_may_use(page) == {"core": set(), "inimage": set(), "render": {"config", "lock", "core"}}


def test_each_part_imports_only_what_the_design_allows():
    wrong = sorted({(_part(m), _part(t), f"{m} -> {t}") for m in MODULES for t in GRAPH[m]
                    if _part(t) not in (_part(m), "sglstack") and _part(m) in MAY_USE
                    and _part(t) not in MAY_USE[_part(m)] and (_part(m), _part(t)) not in DEBTS})
    assert not wrong, wrong
    unknown = {_part(m) for m in MODULES} - set(MAY_USE) - {"sglstack"}
    assert not unknown, f"parts with no place in MAY_USE: {unknown}"


def _part_cycles(edges: dict[str, set[str]]) -> list[str]:
    """Each cycle among parts as `a -> b -> a` (found from each part by a depth-first walk)."""
    cycles = []
    for start in sorted(edges):
        stack = [(start, (start,))]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, ())):
                if nxt == start:
                    cycles.append(" -> ".join((*path, nxt)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, (*path, nxt)))
    return cycles


def test_no_loop_between_parts():
    """Parts form a one-way flow: no part reaches itself through other parts, in the code as built or in
    MAY_USE (the lock model sits below lock and diff, so lock may show a diff without diff reading lock)."""
    built: dict[str, set[str]] = {}
    for m in MODULES:
        for t in GRAPH[m]:
            if _part(t) not in (_part(m), "sglstack"):
                built.setdefault(_part(m), set()).add(_part(t))
    assert _part_cycles(built) == []
    assert _part_cycles(MAY_USE) == []


def test_the_part_loop_finder_finds_a_loop():
    assert _part_cycles({"lock": {"diff", "core"}, "diff": {"lock"}, "core": set()}) == ["diff -> lock -> diff",
                                                                                       "lock -> diff -> lock"]


def test_every_allowed_edge_is_used():
    """MAY_USE is the house as built: an edge no module uses is a door nobody walks through, and the next
    hurried change walks through it unseen (add it back with the code that needs it)."""
    built = {(_part(m), _part(t)) for m in MODULES for t in GRAPH[m] if _part(t) not in (_part(m), "sglstack")}
    unused = sorted((part, used) for part, uses in MAY_USE.items() for used in uses if (part, used) not in built)
    assert unused == [], "remove from MAY_USE (and docs/architecture.md) the edges no module uses"


# How many of our modules one module may import: past it, a module does several jobs and a reader holds too much
# at once (upgrade/command imported 23 before it was split into inputs, world, planning, edit and command).
MOST_IMPORTS = 13
# Modules that import more, each waiting for its split along a seam (a test fails when one is added unlisted,
# or split and still listed).
IMPORT_DEBTS = {
    "sglstack.smoke.runner", "sglstack.pipeline.flow", "sglstack.deploy.flow",
    "sglstack.imagebuild.flow", "sglstack.deploy.k8s_flow", "sglstack.imagebuild.verify", "sglstack.cli.collection",
    "sglstack.attest.release", "sglstack.bisect.driver", "sglstack.imagebuild.bake", "sglstack.publish.release",
    "sglstack.render.k8s", "sglstack.smoke.warm",
    "sglstack.imagebuild.context", "sglstack.imagebuild.plan", "sglstack.publish.digest",
}


def test_no_module_imports_too_many_of_ours():
    heavy = {m for m in MODULES if len(GRAPH[m]) > MOST_IMPORTS}
    assert sorted(heavy - IMPORT_DEBTS) == [], f"split along a seam: at most {MOST_IMPORTS} of our modules each"
    assert sorted(IMPORT_DEBTS - heavy) == [], "remove the split modules from IMPORT_DEBTS"


def test_no_debt_is_paid_and_still_listed():
    edges = {(_part(m), _part(t)) for m in MODULES for t in GRAPH[m]}
    assert not {d for d in DEBTS if d not in edges}, "remove the paid debts from DEBTS"


def test_in_image_code_uses_nothing_of_ours_beyond_itself():
    """It runs inside build stages and images, where only the standard library and itself exist."""
    for module in (m for m in MODULES if _part(m) == "inimage"):
        kind = module.split(".")[2] if module.count(".") >= 2 else ""
        own = {"patchkit", "incontainer"} if kind == "incontainer" else {kind}
        assert {t.split(".")[2] for t in GRAPH[module]} <= own, (module, GRAPH[module])


def test_smoke_knows_no_registry():
    for module in (m for m in MODULES if _part(m) == "smoke"):
        assert not {_part(t) for t in _reach(module)} & {"registry", "publish"}, module


def test_config_knows_nothing_downstream():
    for module in (m for m in MODULES if _part(m) == "config"):
        assert {_part(t) for t in _reach(module)} <= {"config", "core", "inimage"}, (module, _reach(module))


def test_core_and_adapters_know_nothing_above_them():
    for module in MODULES:
        if _part(module) in ("core", "adapters"):
            assert {_part(t) for t in _reach(module)} <= {"core", _part(module)}, (module, _reach(module))


def test_deploy_never_builds():
    for module in (m for m in MODULES if _part(m) == "deploy"):
        reached = _reach(module)
        assert not {_part(t) for t in reached} & {"imagebuild", "bisect"}, module
        assert "sglstack.adapters.buildkit" not in reached, module


def test_render_calls_no_engine_and_reads_no_records():
    """Pure text from a Stack, a serving spec and an image reference; the build root is a path, not a read."""
    engines = {"registry", "publish", "deploy", "smoke", "imagebuild"}
    for module in [m for m in MODULES if _part(m) == "render"] + ["sglstack.serving"]:
        reached = _reach(module)
        assert not {_part(t) for t in reached} & engines, (module, reached)
        assert not {t for t in reached if _part(t) == "adapters"}, (module, reached)
        for node, target in _imports(module):
            if target == "sglstack.core.records" or target.startswith("sglstack.core.records."):
                assert isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["build_root"], module


# ---- outside tools: started only by adapters ----------------------------------------------------------

_PROCESS_CALLS = {("subprocess", f) for f in ("run", "Popen", "call", "check_call", "check_output", "getoutput",
                                                 "getstatusoutput")}
_PROCESS_CALLS |= {("os", f) for f in ("system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execlp",
                                         "execle", "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
                                         "posix_spawnp")}
# Tools that have an adapter: no module outside adapters/ starts them.
ADAPTED_TOOLS = {"kubectl", "compose", "docker-compose", "hadolint"}
# Modules outside adapters/ (and inimage/, which runs inside images) that still start a process themselves, and
# what they start; each waits for its adapter. A test fails when one is added unlisted, or paid and still listed.
PROCESS_DEBTS = {
    "sglstack.cli.testing": "pytest (`invoke test`)",
    "sglstack.registry.local": "the embedded registry's binary",
    "sglstack.upgrade.argv": "the release's own serving-argv parser, in a throwaway venv",
}


def _process_calls(source: str) -> list[tuple[int, set[str]]]:
    """(line, the words it names) of each call that starts a process: `subprocess.run(...)` and the like, or
    such a function imported by name. The words: every string in the call's arguments, and every string handed
    to `shutil.which` in the module (the usual way a tool's path is found before it is run)."""
    tree = parse(source)
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module in ("subprocess", "os") for a in n.names if (n.module, a.name) in _PROCESS_CALLS}
    which = {c.value for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "which" for a in n.args for c in ast.walk(a)
             if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        starts = ((isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                   and (func.value.id, func.attr) in _PROCESS_CALLS)
                  or (isinstance(func, ast.Name) and func.id in imported))
        if starts:
            words = {c.value for a in [*node.args, *(k.value for k in node.keywords)] for c in ast.walk(a)
                     if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            out.append((node.lineno, {w for text in words | which for w in text.split()}))
    return out


def test_outside_tools_are_started_only_by_adapters():
    starting = {m: _process_calls(p.read_text(encoding="utf-8")) for m, p in MODULES.items()
                if _part(m) not in ("adapters", "inimage")}
    starting = {m: calls for m, calls in starting.items() if calls}
    adapted = sorted(f"{m}:{line} {sorted(words & ADAPTED_TOOLS)}" for m, calls in starting.items()
                     for line, words in calls if words & ADAPTED_TOOLS)
    assert not adapted, f"run these through their adapter (sglstack/adapters/): {adapted}"
    assert set(starting) - set(PROCESS_DEBTS) == set(), "start a new outside tool in an adapter of sglstack/adapters/"
    assert set(PROCESS_DEBTS) - set(starting) == set(), "remove the paid debts from PROCESS_DEBTS"


def test_the_process_call_finder_sees_a_tool_found_by_which():
    source = ("import shutil\nfrom subprocess import run as go\nimport subprocess\n"
              "kubectl = shutil.which('kubectl')\nsubprocess.run([kubectl, 'apply'])\ngo(['hadolint', '-'])\n")
    assert _process_calls(source) == [(5, {"kubectl", "apply"}), (6, {"kubectl", "hadolint", "-"})]
    assert _process_calls("import subprocess\nsubprocess.CompletedProcess\n") == []


# ---- the face and the parts: one seam ------------------------------------------------------------------

def _task_entries(source: str) -> list[str]:
    """Functions named like a task entry (`*_command`), at any depth."""
    return [node.name for node in ast.walk(parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.endswith("_command")]


def test_no_part_holds_a_task_entry():
    """A task's entry (its options turned into a call, what it prints, its exit code) is the face's, in
    `cli/<task or part>.py`; a part takes a Stack and typed values and returns results."""
    entries = sorted(f"{m}.{name}" for m, p in MODULES.items() if _part(m) != "cli"
                     for name in _task_entries(p.read_text(encoding="utf-8")))
    assert entries == [], f"move these task entries into sglstack/cli/ (a part returns results): {entries}"


def test_the_task_entry_finder_sees_methods_and_nested_functions():
    source = "def lock_command():\n    def inner_command(): pass\nclass A:\n    def b_command(self): pass\n" \
             "def pod_argv(): pass\n"
    assert sorted(_task_entries(source)) == ["b_command", "inner_command", "lock_command"]


# The registry's HTTP client, every adapter and the libraries they wrap; `registry.local` is a part's task
# (`invoke registry.up`) like any other.
FACE_MAY_NOT_TOUCH = ("sglstack.registry.client", "sglstack.registry.session", "sglstack.registry.transport",
                      "sglstack.registry.auth", "sglstack.adapters", "docker", "requests")


def _outside_imports(module: str) -> set[str]:
    """Every module name `module` imports (ours resolved, third-party as written)."""
    names = {t for _, t in _imports(module)}
    for node in ast.walk(parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


def test_the_face_talks_to_no_registry_or_engine():
    """cli/ parses options and prints: the registry, the Docker engine and every other outside system are
    reached through a part (a task that did it itself held domain logic the part's tests never saw)."""
    wrong = sorted(f"{m} -> {name}" for m in MODULES if _part(m) == "cli" for name in _outside_imports(m)
                   if any(name == x or name.startswith(x + ".") for x in FACE_MAY_NOT_TOUCH))
    assert wrong == [], wrong


_OPTION_MAKERS = {"option", "required", "repeatable", "stacks_file_option", "docker_host_option"}


def _option_helps(source: str) -> list[str]:
    """The help text written out in each option declaration of `source` (`option("...")` and the like)."""
    return [node.args[0].value for node in ast.walk(parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _OPTION_MAKERS
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]


def test_an_option_shared_by_tasks_is_declared_once():
    """An option two tasks share is one declaration in `cli/cmdoptions.py` (or `core/options.py`), as pip's
    cmdoptions: the same help text written in two task modules is a twin waiting to drift."""
    where: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if _part(module) == "cli":
            for text in _option_helps(path.read_text(encoding="utf-8")):
                where.setdefault(text, []).append(module)
    assert {text: modules for text, modules in where.items() if len(modules) > 1} == {}


def test_the_option_help_finder_reads_each_declaration():
    source = 'a: str = option("x y")\nb: str = required("z", check=f)\nc: int = option(HELP)\nd = other("w")\n'
    assert _option_helps(source) == ["x y", "z"]


def _class_names(part_of: dict[str, Path]) -> set[str]:
    return {node.name for path in part_of.values() for node in ast.walk(parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef)}


def test_no_class_name_is_declared_on_both_sides_of_the_seam():
    """The face's options (`BuildOptions`) and a part's typed value (`BuildSettings`) are different things with
    different names: one `BuildOptions` in cli/ and another in imagebuild/ left a reader to guess which."""
    face = _class_names({m: p for m, p in MODULES.items() if _part(m) == "cli"})
    parts = _class_names({m: p for m, p in MODULES.items() if _part(m) != "cli"})
    assert face & parts == set()


CLI_MODULES = {"command", "commands", "cli"}
CLI_DEBTS: set[str] = set()


def test_no_part_imports_another_parts_cli_module():
    wrong = {f"{m} -> {t}" for m in MODULES for t in GRAPH[m]
             if _part(t) != _part(m) and _part(m) != "cli" and set(t.split(".")[2:]) & CLI_MODULES}
    assert wrong <= CLI_DEBTS, sorted(wrong - CLI_DEBTS)
    assert wrong >= CLI_DEBTS, f"remove the paid debts: {sorted(CLI_DEBTS - wrong)}"


def test_nothing_imports_the_face():
    """`sglstack.cli` is the top: a library module that imported it would run a task's option parsing."""
    assert not {f"{m} -> {t}" for m in MODULES for t in GRAPH[m] if _part(t) == "cli" and _part(m) != "cli"}


def test_the_face_is_light_at_import():
    """invoke imports `tasks.py`, and with it every cli module, for each call (`invoke --list` too): the
    library and its heavy dependencies are imported when a task runs, not before."""
    probe = ("import sys, tasks; heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('pydantic', 'docker', 'rich', 'jinja2', 'cryptography', 'packaging')); print(heavy)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=PACKAGE.parent, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert out.stdout.strip() == "[]", out.stdout


def _explained(lines: list[str], func_line: int, lineno: int) -> bool:
    """A comment on the import's line, or in the function above it."""
    return "#" in lines[lineno - 1] or any(line.strip().startswith("#") for line in lines[func_line:lineno - 1])


def test_a_function_level_import_says_why():
    """Imports belong at the top; one inside a function says why, in a comment beside or above it."""
    silent = []
    for module, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for func in ast.walk(parse("\n".join(lines))):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                silent += [f"{module}:{node.lineno}" for node in ast.walk(func)
                           if isinstance(node, ast.Import | ast.ImportFrom)
                           and not _explained(lines, func.lineno, node.lineno)]
    assert not silent, silent


# ---- size: a module a reader can hold, a function a reader can follow ------------------------------

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
# Long functions waiting to be broken into named steps (or marked `# long: why`); none now. A test fails if one
# stays listed once it is short or marked.
LONG_DEBTS: set[str] = set()


def _functions(source: str) -> list[tuple[str, int, bool]]:
    """(qualified name, length in lines from def to last line, marked) of each function and method in
    `source`; marked: the line above its def (or its first decorator) says `# long: why`."""
    lines = source.splitlines()
    out: list[tuple[str, int, bool]] = []
    todo: list[tuple[ast.AST, str]] = [(parse(source), "")]
    while todo:
        node, prefix = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                marked = first >= 2 and lines[first - 2].strip().startswith("# long:")
                out.append((prefix + child.name, (child.end_lineno or child.lineno) - child.lineno + 1, marked))
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                todo.append((child, f"{prefix}{child.name}."))
    return out


def _long_functions() -> dict[str, int]:
    """`module:qualified.name` -> length, of each function over the limit and not marked `# long: why`."""
    return {f"{module}:{name}": length for module, path in MODULES.items()
            for name, length, marked in _functions(path.read_text(encoding="utf-8"))
            if length > MAX_FUNCTION_LINES and not marked}


def test_no_module_is_over_450_lines():
    """sglstack/data (templates, SGLang's patch sources) is not ours and is not in MODULES."""
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    long = {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not long, f"split these modules (at most {MAX_MODULE_LINES} lines): {long}"


TESTS = PACKAGE.parent / "tests"
# Test files over the cap, each waiting for its split along its seams (pure moves, one commit a file); a test fails
# when one is added over the cap unlisted, or split and still listed. tests/doubles are other programs' stand-ins.
TEST_SIZE_DEBTS = {
    "cli/test_attest_trust.py", "cli/test_files_and_records.py", "cli/test_matrix.py", "unit/test_architecture.py",
    "unit/test_attest_documents.py", "unit/test_conflicts.py",
    "unit/test_coverage_rules.py", "unit/test_image_size.py", "unit/test_one_home.py",
    "unit/test_patch_bad_inputs.py",
    "unit/test_promises.py", "unit/test_records_core.py", "unit/test_serving.py",
    "unit/test_upgrade_command.py", "unit/test_upgrade_write.py", "unit/test_verify.py",
}


def test_no_test_file_is_over_450_lines():
    sizes = {str(p.relative_to(TESTS)): len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted(TESTS.rglob("*.py")) if not p.is_relative_to(TESTS / "doubles")}
    long = {f for f, n in sizes.items() if n > MAX_MODULE_LINES}
    assert sorted(long - TEST_SIZE_DEBTS) == [], f"split along a seam (at most {MAX_MODULE_LINES} lines a file)"
    assert sorted(TEST_SIZE_DEBTS - long) == [], "remove the split files from TEST_SIZE_DEBTS"


def test_no_function_is_over_60_lines_without_a_reason():
    long = _long_functions()
    unlisted = {f: n for f, n in long.items() if f not in LONG_DEBTS}
    assert not unlisted, (f"break these into named steps, or say why one reads best whole with a `# long: why` "
                          f"comment on the line above its def: {unlisted}")
    assert not LONG_DEBTS - set(long), f"remove the paid debts from LONG_DEBTS: {sorted(LONG_DEBTS - set(long))}"


def test_the_size_check_measures_methods_and_honours_the_mark():
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = f"class A:\n    def f(self):\n{body}\n    # long: a table\n    @staticmethod\n    def g():\n{body}"
    assert sorted(_functions(source)) == [("A.f", MAX_FUNCTION_LINES + 1, False), ("A.g", MAX_FUNCTION_LINES + 1, True)]
