"""The code map of a file a verified import ran (`inimage/incontainer/codemap.py`), on real imports in a child
interpreter: which functions the import started (probes), which files something other than the importer read,
and which edits are confined to bodies the import never started (then its outcome cannot change)."""

from __future__ import annotations

import dis
import json
import marshal
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from sglstack.inimage.incontainer import codemap

TOOLS = Path(codemap.__file__).parent

MODULE = textwrap.dedent('''\
    """A served model's module."""
    import functools

    def helper(x):
        return x + 1

    VALUE = helper(1)

    class Model:
        """A model."""
        size = helper(2)

        @functools.lru_cache
        def probe(self, a, b=2):
            """probe doc"""
            return a * b

        def forward(self):
            def inner():
                return 1
            return [i for i in range(3)]

    def reads_later():
        return 0
''')

# Run in a child: the watch installs an import hook and an audit hook, which stay for the process's life.
CHILD = textwrap.dedent('''\
    import json, sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    import codemap, codewatch, filefacts
    exec(sys.argv[5])
    watch = codewatch.Watch([sys.argv[3]], sys.path, ours=[codemap.__file__, codewatch.__file__, filefacts.__file__])
    watch.install()
    import pkg.mod
    exec(sys.argv[4])
    print(json.dumps({"maps": watch.maps(filefacts.read_bytes), "complete": watch.complete}))
''')


def _run(tmp_path: Path, source: str = MODULE, after_import: str = "", before: str = "") -> tuple[Path, dict]:
    (tmp_path / "pkg").mkdir(exist_ok=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    path = tmp_path / "pkg" / "mod.py"
    path.write_text(source)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(TOOLS), str(tmp_path), str(path), after_import, before],
                          capture_output=True, text=True, check=True, timeout=60)
    return path, json.loads(proc.stdout)


def _verified(tmp_path: Path, source: str = MODULE, after_import: str = "") -> tuple[Path, dict]:
    path, out = _run(tmp_path, source, after_import)
    return path, out["maps"][str(path.resolve())]


def _started(stored: dict) -> dict[str, bool]:
    return {e[0].split(":", 1)[1]: e[-1] for e in stored["code"]}


def test_the_import_starts_the_module_what_it_calls_and_what_runs_with_them(tmp_path):
    _, stored = _verified(tmp_path)
    assert _started(stored) == {
        "<module>": True, "helper": True, "Model": True, "Model.probe": False, "Model.forward": False,
        "Model.forward.<locals>.inner": False, "Model.forward.<locals>.<listcomp>": False, "reads_later": False}
    assert stored["read"] is False


def _confined(stored: dict, path: Path, source: str) -> list[str]:
    _, changed = codemap.confined(stored, source.encode(), str(path))
    return changed


@pytest.mark.parametrize(("old", "new", "changed"), [
    ("return 1\n", "return 2\n", ["Model.forward"]),  # a nested function of a body never started
    ("return a * b", "return a + b", ["Model.probe"]),  # a decorated method: its decorator ran, its body did not
    ("range(3)", "range(4)", ["Model.forward"]),
    ("return 0", "return 0\n    pass", []),  # no other code
    ('"""A model."""', '"""A model."""\n', []),
])
def test_an_edit_confined_to_bodies_the_import_never_started_is_found(tmp_path, old, new, changed):
    path, stored = _verified(tmp_path)
    assert _confined(stored, path, MODULE.replace(old, new, 1)) == changed


@pytest.mark.parametrize(("old", "new", "why"), [
    ("return x + 1", "return x + 2", "helper ran during the verified import and changed"),
    ("size = helper(2)", "size = helper(3)", "Model ran during the verified import and changed"),
    ("VALUE = helper(1)", "VALUE = helper(1) + 0", "<module> ran during the verified import and changed"),
    ("def forward(self):", "def forward(self, z):", "Model.forward shows another signature, docstring or flags"),
    ('"""probe doc"""', '"""other doc"""', "Model.probe shows another signature, docstring or flags"),
    ("return 0", "yield 0", "reads_later shows another signature, docstring or flags"),  # now a generator
    # `super()` in a method gives its class body a __class__ cell: the class body, which ran, compiles otherwise
    ("return [i for i in range(3)]", "return super().x", "Model ran during the verified import and changed"),
    ("return 0", "return 0 +", "it does not compile: SyntaxError"),
    ("return 0", "break", "it does not compile: SyntaxError: 'break' outside loop"),  # the compiler's, not the parser's
])
def test_an_edit_the_import_may_see_is_not_confined(tmp_path, old, new, why):
    path, stored = _verified(tmp_path)
    with pytest.raises(codemap.NotConfined) as caught:
        _confined(stored, path, MODULE.replace(old, new, 1))
    assert str(caught.value).startswith(why)


def test_a_function_called_after_the_imports_counts_as_started(tmp_path):
    """The server's --help and argv run in the same process after the imports: what they call is watched too."""
    path, stored = _verified(tmp_path, after_import="pkg.mod.Model().probe(3)")
    assert _started(stored)["Model.probe"] is True
    with pytest.raises(codemap.NotConfined, match=r"Model\.probe ran during the verified import and changed"):
        _confined(stored, path, MODULE.replace("return a * b", "return a + b"))


@pytest.mark.parametrize("reader", ["import inspect; inspect.getsource(pkg.mod.reads_later)",
                                    "import linecache; linecache.getlines(pkg.mod.__file__)",
                                    "open(pkg.mod.__file__).close()"])
def test_a_file_read_as_source_during_the_import_is_never_confined(tmp_path, reader):
    """triton's @jit and torch.jit.script read a function's source at import: an unstarted body may matter."""
    path, stored = _verified(tmp_path, after_import=reader)
    assert stored["read"] is True
    with pytest.raises(codemap.NotConfined, match="read its source"):
        _confined(stored, path, MODULE.replace("return 1\n", "return 2\n"))


def test_a_file_the_import_did_not_run_may_change_all_but_the_classes_it_names_as_entry(tmp_path):
    """Not imported and not read: only its EntryClass could make an import take it (importcheck.py and SGLang's
    model registry look a served architecture up by it)."""
    path, stored = _verified(tmp_path)
    unimported = {**stored, "code": [[*e[:-1], False] for e in stored["code"]]}
    assert _confined(unimported, path, MODULE.replace("return x + 1", "return x + 2")) == [
        codemap.NOT_IMPORTED]
    with pytest.raises(codemap.NotConfined, match="the classes it names as EntryClass changed"):
        _confined(unimported, path, MODULE + "\nEntryClass = Model\n")


@pytest.mark.parametrize("bypass", [
    "import importlib.util as u; s = u.spec_from_file_location('again', pkg.mod.__file__); "
    "s.loader.exec_module(u.module_from_spec(s))",  # a second copy, loaded past the import system's finders
    "exec(compile(open(pkg.mod.__file__).read(), pkg.mod.__file__, 'exec'), {})",
])
def test_a_watched_file_run_past_the_probes_leaves_the_maps_incomplete(tmp_path, bypass):
    _, out = _run(tmp_path, after_import=bypass)
    assert out["complete"] is False


def test_a_watched_file_imported_before_the_probes_leaves_the_maps_incomplete(tmp_path):
    _, out = _run(tmp_path, before="import pkg.mod")
    assert out["complete"] is False
    _, out = _run(tmp_path, before="import json")
    assert out["complete"] is True


def test_the_new_map_carries_what_started_so_a_second_edit_is_compared_too(tmp_path):
    path, stored = _verified(tmp_path)
    first = MODULE.replace("return 1\n", "return 2\n")
    code, _ = codemap.confined(stored, first.encode(), str(path))
    again = {**stored, "code": code}
    assert _started(again) == _started(stored)
    assert _confined(again, path, first.replace("return a * b", "return a - b")) == ["Model.probe"]
    with pytest.raises(codemap.NotConfined):
        _confined(again, path, first.replace("return x + 1", "return x"))


def test_probes_name_the_code_object_the_compiler_makes():
    """A probe's number is its function's co_firstlineno (the first decorator's line), for every function."""
    lines = {int(e[0].split(":")[0]) for e in codemap.code_map(codemap.compiled(MODULE.encode(), "m.py"))
             if e[1] == codemap.FUNCTION}
    probes, stack = set(), [codemap.probed(MODULE.encode(), "m.py")]
    while stack:
        code = stack.pop()
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        ops = list(dis.get_instructions(code))
        probes |= {ops[i + 1].argval for i, op in enumerate(ops) if op.argval == codemap.PROBE}
        if code.co_name not in ("<module>", "Model", "<listcomp>"):
            assert ops[[op.argval for op in ops].index(codemap.PROBE) + 1].argval == code.co_firstlineno
    assert lines == probes == {4, 13, 18, 19, 23}


def test_bytecode_and_records_are_compared_by_what_they_hold():
    source = MODULE.encode()
    pyc = b"\0" * 16 + marshal.dumps(codemap.compiled(source, "m.py"))
    assert codemap.same_bytecode(pyc, source, "m.py")
    assert not codemap.same_bytecode(pyc, source.replace(b"return 0", b"return 1"), "m.py")
    assert not codemap.same_bytecode(b"\0" * 16 + b"junk", source, "m.py")
    record = b"a/x.py,sha256=AAA,10\na/y.py,sha256=BBB,20\n"
    assert codemap.listed_paths(record) == codemap.listed_paths(b"a/y.py,sha256=CCC,21\na/x.py,sha256=AAA,10\n")
    assert codemap.listed_paths(record) != codemap.listed_paths(record + b"a/z.py,,\n")


@pytest.mark.parametrize(("spawn", "complete"), [
    ("import subprocess; subprocess.run([sys.executable, '-c', 'pass'])", False),
    ("import subprocess; subprocess.run('python3 -c pass', shell=True)", False),
    ("import os; pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)", False),
    ("import subprocess; subprocess.run(['true'])", True),
])
def test_another_python_started_by_the_import_leaves_the_maps_incomplete(tmp_path, spawn, complete):
    """A child interpreter (or a fork) may run a watched function where no probe reports it."""
    _, out = _run(tmp_path, after_import=spawn)
    assert out["complete"] is complete
