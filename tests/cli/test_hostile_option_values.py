"""Option values no task can take (bytes that are not UTF-8, a 100 KB string, a name the OS refuses) are one
`error:` line naming the option or the file, exit 2, never a traceback (attack pass of issue 34)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import pkgutil
import stat

import pytest
from clirun import REPO, run_invoke

import sglstack.cli
from sglstack.core.options import LIST, MAX_TEXT_CHARS, TaskOptions
from sglstack.core.safefiles import OutputNotWritable, write_text

NOT_UTF8 = "m\udcff"  # what Python makes of the byte 0xff in argv
LONG_NAME = "A" * 300  # one path component over the 255 bytes Linux allows
SHOWN = f"{'A' * 80}... (300 characters)"


def _every_options_class() -> list[type[TaskOptions]]:
    for module in pkgutil.iter_modules(sglstack.cli.__path__):
        importlib.import_module(f"sglstack.cli.{module.name}")
    found, todo = [], list(TaskOptions.__subclasses__())
    while todo:
        cls = todo.pop()
        if dataclasses.is_dataclass(cls):
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__qualname__)


CASES = [(cls, f.name) for cls in _every_options_class() for f in dataclasses.fields(cls)
         if f.metadata["kind"] is not bool]


@pytest.mark.parametrize(("options", "name"), CASES, ids=[f"{c.__name__}.{n}" for c, n in CASES])
def test_every_text_option_refuses_bytes_that_are_not_utf8_and_a_100kb_value(options, name):
    flag = "--" + name.replace("_", "-")
    too_long = f"'{'x' * 40}... (100000 characters)': longer than {MAX_TEXT_CHARS} characters"
    for value, why in ((NOT_UTF8, "'m\\udcff': not valid UTF-8"), ("x" * 100_000, too_long)):
        given = [value] if _kind(options, name) is LIST else value
        with pytest.raises(options.bad_value) as caught:
            options.from_cli({name: given})
        assert (str(caught.value), caught.value.exit_code) == (f"{flag} {why}", 2)


def _kind(options, name):
    return next(f.metadata["kind"] for f in dataclasses.fields(options) if f.name == name)


@pytest.mark.parametrize(("args", "line"), [
    # was a UnicodeEncodeError traceback from the serving spec's model, exit 1
    (("smoke", "--image", "img:1", "--model", "m", "--draft-model", NOT_UTF8),
     "error: --draft-model 'm\\udcff': not valid UTF-8"),
    (("smoke", "--image", "img:1", "--model", "m", "--draft-model", "d", "--env", "A=1", "--env", "B=" + NOT_UTF8),
     "error: --env 'B=m\\udcff': not valid UTF-8"),
    # were an OSError (File name too long) traceback, exit 1
    (("diff", LONG_NAME, "b.json"), f"error: {SHOWN}: File name too long"),
    (("render", "--stack", "cu130", "--out", LONG_NAME), f"error: {SHOWN}: File name too long"),
    (("smoke", "--image", "img:1", "--model", "m", "--draft-model", "d", "--report", f"{LONG_NAME}/r.json"),
     f"error: {'A' * 80}... (307 characters): File name too long"),
    # were a ValueError traceback from the Docker SDK (an URL that does not parse), exit 1
    (("status", "--docker-host", "tcp://[x"),
     "error: --docker-host 'tcp://[x': not a Docker engine URL (unix:///PATH, tcp://HOST:PORT or ssh://USER@HOST)"),
    (("smoke", "--image", "img:1", "--model", "m", "--draft-model", "d", "--docker-host", "[/bold]"),
     "error: --docker-host '[/bold]': not a Docker engine URL (unix:///PATH, tcp://HOST:PORT or ssh://USER@HOST)"),
    # were exit 1
    (("registry.cleanup", "--older-than-days", "soon"),
     "error: --older-than-days 'soon' is not a number of days (0 or more)"),
    (("registry.up", "--port", "0"), "error: --port '0' is not a TCP port (1-65535)"),
])
def test_a_value_no_task_can_take_is_one_line_exit_2(tmp_path, args, line):
    proc = run_invoke(*args, cwd=tmp_path, timeout=120,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build"), "DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["build"])


HOSTILE_FOLDER = "[/bold]\x1b[2Jx"  # rich markup that closes nothing, then a clear-screen escape
SHOWN_FOLDER = "[/bold]\\x1b[2Jx"


def test_an_output_folder_is_printed_as_plain_text(tmp_path):
    # was a MarkupError traceback (exit 1) after the Dockerfile was written, leaving half a render
    proc = run_invoke("render", "--stack", "cu130", "--out", HOSTILE_FOLDER, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == [f"cu130: Dockerfile   {SHOWN_FOLDER}/Dockerfile",
                                            f"cu130: context      {SHOWN_FOLDER}/context/ (27 files)"]
    proc = run_invoke("bake", "--stack", "cu130", "--out", f"{HOSTILE_FOLDER}/bake.json", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (f"bake file: {SHOWN_FOLDER}/bake.json (2 targets, 1 stacks; group "
                                           f"'default' is the whole matrix)")


@pytest.mark.parametrize(("args", "line"), [
    (("render", "--stack", "A" * 8000),
     f"error: {REPO / 'stacks.yaml'}: stack '{'A' * 80}... (8000 characters)': unknown stack (known: cu129, cu130, "
     f"h200-field, pypi-cu130, pypi-cu130-gb)"),
    (("smoke", "--bisect-exit", "9" * 5000, "--image", "img:1"),
     f"error: --bisect-exit '{'9' * 40}... (5000 characters)': a known-good baseline value must be a finite "
     f"positive number"),
])
def test_a_long_refused_value_is_named_by_its_start(tmp_path, args, line):
    proc = run_invoke(*args, cwd=tmp_path, timeout=120)
    assert proc.stderr == line + "\n" and proc.returncode in (2, 128)


def _specials(folder):
    """A FIFO, and where we may make one (root), a character device with /dev/null's numbers."""
    os.mkfifo(folder / "fifo")
    made = [(folder / "fifo", "a FIFO")]
    with contextlib.suppress(PermissionError):
        os.mknod(folder / "null", 0o644 | stat.S_IFCHR, os.makedev(1, 3))
        made.append((folder / "null", "a character device"))
    return made


def test_a_device_or_fifo_named_as_an_output_is_never_replaced_by_a_file(tmp_path):
    # `bake --out /dev/zero` (root) replaced the machine's /dev/zero with the bake file: the rename that writes
    # an output whole puts a regular file in place of whatever is at the path
    for path, kind in _specials(tmp_path):
        before = os.lstat(path)
        proc = run_invoke("bake", "--stack", "cu130", "--out", str(path), cwd=tmp_path, timeout=120)
        assert (proc.returncode, proc.stderr) == (
            1, f"error: {path}: cannot be written (it is {kind}, not a regular file: not replaced)\n")
        after = os.lstat(path)
        assert (after.st_mode, after.st_rdev, after.st_ino) == (before.st_mode, before.st_rdev, before.st_ino)
    (tmp_path / "unit").mkdir()
    for path, kind in _specials(tmp_path / "unit"):
        with pytest.raises(OutputNotWritable) as caught:
            write_text(tmp_path, path, "x")
        assert str(caught.value) == f"{path}: cannot be written (it is {kind}, not a regular file: not replaced)"
    assert not [p for p in tmp_path.rglob("*.tmp")]
