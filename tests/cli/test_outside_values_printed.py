"""Outside values (image labels, package names and versions, registry and server answers, error texts that
quote them) are printed as plain text: rich markup is not read in them, and control and bidi characters are
written as escapes (issue 34)."""

from __future__ import annotations

import io
import json

import pytest
from clirun import run_invoke
from invoke import Exit
from rich.console import Console

from sglstack.cli.options import _run
from sglstack.core.console import plain, printable_lines
from sglstack.core.errors import RegistryError
from sglstack.diff.compare import print_diff, record_snapshot, snapshot_diff

# What an attacker puts in a label, a package name or a reply, and how each is shown.
HOSTILE = {
    "[/bold]": "[/bold]",
    "[red]x": "[red]x",
    "\x1b[2J": "\\x1b[2J",
    "a\rb": "a\\rb",
    "\x07": "\\x07",
    "\u202egnp.exe": "\\u202egnp.exe",
    "\x9b31m": "\\x9b31m",
    ":warning:": ":warning:",
}
CONTROLS = {chr(c) for c in range(0x20) if chr(c) != "\n"} | {chr(c) for c in range(0x7F, 0xA0)} | {"\u202e"}


def _record(labels: dict[str, str], installed: dict[str, str]) -> dict:
    return {"stack": "s", "config_hash": "1" * 64, "image_id": "sha256:" + "1" * 64, "labels": labels,
            "installed": installed, "pins": {}, "patches": []}


@pytest.mark.parametrize("value", sorted(HOSTILE))
def test_plain_escapes_markup_and_control_characters(value):
    console = Console(file=io.StringIO(), width=200, color_system=None, emoji=False)
    console.print(f"[bold]v[/] {plain(value)}", highlight=False)
    assert console.file.getvalue() == f"v {HOSTILE[value]}\n"


def test_printable_lines_keeps_line_breaks_and_escapes_the_rest():
    assert printable_lines("pkg \x1b[31m\nnext\u202e\r") == "pkg \\x1b[31m\nnext\\u202e\\r"


def test_diff_prints_hostile_labels_and_package_names_as_plain_text(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_record({f"l{i}": "old" for i in range(len(HOSTILE))}, {"idna": "3.7"})))
    b.write_text(json.dumps(_record({f"l{i}": v for i, v in enumerate(sorted(HOSTILE))},
                                    {"idna": "3.7", **{f"p{i}{v}": v for i, v in enumerate(sorted(HOSTILE))}})))
    proc = run_invoke("diff", str(a), str(b), cwd=tmp_path, env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert not CONTROLS & set(proc.stdout)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in proc.stdout.splitlines() if line.startswith("│")]
    for i, value in enumerate(sorted(HOSTILE)):
        assert ["label", f"l{i}", "changed", "old", HOSTILE[value]] in rows
        # a package's name is shown canonical (lower case, '.' as '-'); its version as read
        [package] = [row for row in rows if row[0] == "package" and row[1].startswith(f"p{i}")]
        assert package[2:] == ["added", "-", HOSTILE[value]]


def test_the_diff_title_and_notes_quote_hostile_names_as_plain_text():
    console = Console(file=io.StringIO(), width=300, color_system=None)
    name = "x[/bold]\x1b[2J"
    same = snapshot_diff(record_snapshot(_record({}, {}), name), record_snapshot(_record({}, {}), name))
    print_diff(same, console)
    assert console.file.getvalue().splitlines()[0] == (
        "no difference between x[/bold]\\x1b[2J (record) and x[/bold]\\x1b[2J (record)")


def test_an_error_quoting_an_outside_value_is_one_plain_line(capsys):
    def fail() -> int:
        raise RegistryError("registry r: answered 'x\x1b[2J\r\nnext\u202e\x07'")

    with pytest.raises(Exit) as exited:
        _run("diff", fail)
    assert exited.value.code == 1
    assert capsys.readouterr().err == "error: registry r: answered 'x\\x1b[2J\\r\\nnext\\u202e\\x07'\n"


def test_size_prints_hostile_package_names_and_versions_as_plain_text(tmp_path, monkeypatch, capsys):
    from sglstack.cli import size as size_cli
    from sglstack.size import stack as size_stack
    from sglstack.size.report import report_from

    stacks = tmp_path / "stacks.yaml"
    stacks.write_text("stacks:\n  s:\n    base_image: debian:bookworm-slim\n    sglang: {version: 0.5.9}\n"
                      "    serving: {model: org/model}\n")
    packages = [[f"pkg{i}{value}", f"1.{i}{value}", 1000 - i] for i, value in enumerate(sorted(HOSTILE))]
    report = report_from("img:1", "sha256:" + "a" * 64, 10_000, (), {"packages": packages, "files": 3})
    monkeypatch.setattr(size_stack, "docker_client", lambda host: None)
    monkeypatch.setattr(size_stack, "local_image", lambda client, ref: None)  # the engine cannot tell its platform
    monkeypatch.setattr(size_stack, "measure", lambda client, image: report)
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    assert size_cli.size_command(str(stacks), "s", image="img:1") == 0
    out = capsys.readouterr().out
    assert not CONTROLS & set(out)
    for i, value in enumerate(sorted(HOSTILE)):
        assert any(f"pkg{i}{HOSTILE[value]}" in line and f"1.{i}{HOSTILE[value]}" in line for line in out.splitlines())


def test_stacks_table_prints_hostile_values_as_plain_text(tmp_path):
    # the schema bounds every cell of a stack (names, exact pins, image references); the file's own name is
    # the outside value this table shows
    folder = tmp_path / "[red]x\u202e\x1b[2J"
    folder.mkdir()
    (folder / "stacks.yaml").write_text("stacks:\n  s:\n    base_image: debian:bookworm-slim\n"
                                        "    sglang: {version: 0.5.9}\n    serving: {model: org/model}\n")
    proc = run_invoke("stacks", "--stacks-file", f"{folder.name}/stacks.yaml", cwd=tmp_path, env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert not CONTROLS & set(proc.stdout)
    assert proc.stdout.splitlines()[0] == "stacks in [red]x\\u202e\\x1b[2J/stacks.yaml"
