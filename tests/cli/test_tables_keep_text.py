"""Tables never lose text: at 80 columns on a terminal a cell wraps, piped a row is one whole line, and
NO_COLOR or a pipe gets no escape code (issue 36). Every table is made by `core.console.report_table`."""

from __future__ import annotations

import ast
import os
import pty

import pytest
from clirun import REPO, run_invoke, start_invoke

from sglstack.config.matrix import load_matrix

SGLSTACK = REPO / "sglstack"
STACKS = REPO / "stacks.yaml"


def _long_cells() -> dict[str, list[str]]:
    """Per column of `invoke stacks`, the cells of the repository's matrix that are long enough to be cut."""
    stacks = list(load_matrix(STACKS).stacks.values())
    return {"stack": [s.name for s in stacks], "base image": [s.base_image for s in stacks],
            "kernel package": [f"{s.sgl_kernel.package} {s.sgl_kernel.version}" if s.sgl_kernel else "-"
                               for s in stacks],
            "sglang": [s.sglang.label for s in stacks]}


def _in_a_terminal(*args: str, env: dict[str, str]) -> str:
    """`invoke ARGS` with a pseudo-terminal as its stdout (what a user at a shell sees)."""
    leader, follower = pty.openpty()
    proc = start_invoke(*args, env={"TERM": "xterm", **env}, stdout=follower, text=False)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closes when the child exits
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode().replace("\r\n", "\n")


def _columns(table: str) -> dict[str, str]:
    """Each column's text, top to bottom, with no space, by its heading with no space: a wrapped cell reads
    as it was."""
    def cells(line: str, bar: str) -> list[str]:
        return [cell.strip() for cell in line.strip(bar).split(bar)]

    heads = [cells(line, "┃") for line in table.splitlines() if line.startswith("┃")]
    body = [cells(line, "│") for line in table.splitlines() if line.startswith("│")]
    return {"".join(h[i] for h in heads).replace(" ", ""): "".join(row[i] for row in body).replace(" ", "")
            for i in range(len(heads[0]))}


def test_stacks_wide_wraps_at_80_columns_and_loses_nothing():
    out = _in_a_terminal("stacks", "-o", "wide", env={"COLUMNS": "80", "LINES": "50", "NO_COLOR": "1"})
    assert "…" not in out
    assert "\x1b" not in out  # NO_COLOR: not even bold
    assert max(len(line) for line in out.splitlines()) <= 80
    columns = _columns(out)
    assert len(columns) == 10
    for head, cells in _long_cells().items():
        assert columns[head.replace(" ", "")] == "".join(cells).replace(" ", ""), head


def test_a_narrow_terminal_gets_the_columns_that_fit_and_says_how_to_see_the_rest():
    out = _in_a_terminal("stacks", env={"COLUMNS": "80", "LINES": "50", "NO_COLOR": "1"})
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    columns = _columns(out)
    assert list(columns) == ["stack", "baseimage", "CUDA", "torch", "sglang", "patches"]
    for head in ("stack", "base image", "sglang"):
        assert columns[head.replace(" ", "")] == "".join(_long_cells()[head]).replace(" ", ""), head
    assert out.splitlines()[-1].strip() == "4 more columns (python, kernel package, flashinfer, overrides): -o wide"


def test_a_wide_terminal_gets_every_column():
    assert len(_columns(_in_a_terminal("stacks", env={"COLUMNS": "250", "NO_COLOR": "1"}))) == 10


@pytest.mark.parametrize("task", ["stacks", "status"])
def test_output_takes_wide_only(task):
    proc = run_invoke(task, "-o", "tall", cwd=REPO, real_process=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", "error: --output 'tall': not one of wide\n")


def test_a_terminal_without_no_color_gets_colour():
    """The other side of NO_COLOR: the same table at a terminal is styled."""
    assert "\x1b[" in _in_a_terminal("stacks", env={"COLUMNS": "80", "NO_COLOR": ""})


def test_piped_each_row_is_one_whole_line_without_escapes():
    proc = run_invoke("stacks", cwd=REPO, env={"COLUMNS": "80"}, real_process=True)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "…" not in proc.stdout
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("│").split("│")]
                                          for line in proc.stdout.splitlines() if line.startswith("│"))}
    long = _long_cells()
    for i, name in enumerate(long["stack"]):
        assert rows[name][1] == long["base image"][i]
        assert rows[name][5] == long["kernel package"][i]
        assert rows[name][7] == long["sglang"][i]


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


@pytest.mark.parametrize("path", sorted(p for p in SGLSTACK.rglob("*.py") if p != SGLSTACK / "core" / "console.py"),
                         ids=lambda p: str(p.relative_to(SGLSTACK)))
def test_every_table_and_console_comes_from_core_console(path):
    """A table made elsewhere would cut cells with `…`; a console made elsewhere would be 80 or 200 wide
    when piped and ignore NO_COLOR."""
    for call in _calls(ast.parse(path.read_text())):
        assert _name(call) not in ("Table", "Console", "Markdown"), f"{path.name}:{call.lineno}"
        if _name(call) == "add_column":
            overflow = {k.arg: getattr(k.value, "value", None) for k in call.keywords}.get("overflow")
            assert overflow == "fold", f"{path.name}:{call.lineno}: a column that is not folded"


def test_a_piped_markdown_report_keeps_every_note_and_cell_whole(capsys):
    """`upgrade` prints its Markdown report: piped, a note was cropped at 200 columns and a long cell ended
    in `…`."""
    from sglstack.core.console import MARKDOWN_WIDTH, console, print_markdown

    note = "the new entry would not pass the matrix check " + "because of a long reason " * 12 + "end."
    cell = "package-" + "x" * 300
    text = f"# Upgrade\n\n| package | before |\n| --- | --- |\n| {cell} | 1.0 |\n\n## Notes\n\n- {note}\n\n---\n"
    console.cache_clear()
    try:
        print_markdown(console(), text)
    finally:
        console.cache_clear()
    out = capsys.readouterr().out
    assert "…" not in out and "\x1b" not in out
    assert f"• {note}" in " ".join(line.strip() for line in out.splitlines())  # wrapped, whole
    assert cell in "".join(line.split()[0] for line in out.splitlines() if line.strip().startswith(("package-", "x")))
    assert max(len(line) for line in out.splitlines()) == MARKDOWN_WIDTH  # a page: no line padded to no end
