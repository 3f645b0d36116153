"""The stacks file as `invoke upgrade` rewrites it, compared whole: what a reviewer reads in the diff."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglstack.core.errors import ConfigError
from sglstack.upgrade.stacksfile import read_text, upgraded_text

LONG = "x" * 60 + " " + "y" * 60  # longer than a YAML emitter's default line width (80)

TEXT = f"""\
# the matrix
defaults:
  python: "3.12"

stacks:
  b:
    inherits: a

  a:
    description: "old desc"   # a comment after a value
    python: '3.12'
    platforms: [linux/amd64]
    extra: {{k: 1, j: 2}}
    patches:
      - p1
      - p2
    torch:
      version: 2.9.1
      packages: [tv==1]
    note: {LONG}
    gone: 1
    scalar: s
    last: x
"""

EDITS = {"description": "new desc", "platforms": ("linux/arm64",), "patches": ["p3"], "extra": {"k": 2},
         "torch": {"version": "2.11.0", "packages": None}, "gone": None, "scalar": ["l1", "l2"],
         "overrides": [{"replaces": "x==1", "pin": "x==2"}], "names": ["n1", "n2"], "nested": {"q": [1, 2]}}


def test_an_entry_edited_in_place_keeps_everything_else() -> None:
    text = upgraded_text(TEXT, file="s.yaml", stack="a", edits=EDITS, as_name=None)
    assert text == f"""\
# the matrix
defaults:
  python: "3.12"

stacks:
  b:
    inherits: a

  a:
    description: "new desc"   # a comment after a value
    python: '3.12'
    platforms: [linux/arm64]
    extra: {{k: 2, j: 2}}
    patches:
      - p3
    torch:
      version: 2.11.0
    note: {LONG}
    scalar:
      - l1
      - l2
    last: x
    overrides:
      - replaces: x==1
        pin: x==2
    names: [n1, n2]
    nested:
      q:
        - 1
        - 2
"""


def test_a_new_entry_inherits_the_old_one_and_takes_its_list_styles() -> None:
    text = upgraded_text(TEXT, file="s.yaml", stack="a", edits=EDITS, as_name="a-next")
    assert text == TEXT + """\

  a-next:
    description: new desc
    inherits: a
    platforms: [linux/arm64]
    patches:
      - p3
    extra: {k: 2}
    torch:
      version: 2.11.0
      packages:
    gone:
    scalar:
      - l1
      - l2
    overrides:
      - replaces: x==1
        pin: x==2
    names: [n1, n2]
    nested:
      q:
        - 1
        - 2
"""


def test_a_new_entry_without_a_description_starts_with_inherits() -> None:
    text = upgraded_text(TEXT, file="s.yaml", stack="b", edits={"patches": ["p"], "last": None}, as_name="c")
    assert text == TEXT + "\n  c:\n    inherits: b\n    patches: [p]\n    last:\n"


@pytest.mark.parametrize(("text", "message"), [
    ("stacks:\n  a: [\n", "s.yaml: cannot be edited: while parsing a flow node"),
    ("stacks: {a: 1}\n  b\n", "s.yaml: cannot be edited: while parsing a block mapping"),
    ("- a\n", "s.yaml: stack 'a': is not a mapping in the file's `stacks:`"),
    ("stacks: [a]\n", "s.yaml: stack 'a': is not a mapping in the file's `stacks:`"),
    ("stacks:\n  a: 1\n", "s.yaml: stack 'a': is not a mapping in the file's `stacks:`"),
    ("stacks:\n  b: {}\n", "s.yaml: stack 'a': is not a mapping in the file's `stacks:`"),
])
def test_a_file_that_cannot_be_edited_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        upgraded_text(text, file="s.yaml", stack="a", edits={}, as_name=None)
    assert str(err.value) == message


def test_read_text_reads_utf8_and_says_why_it_cannot(tmp_path: Path) -> None:
    good = tmp_path / "s.yaml"
    good.write_bytes("a: é\n".encode())
    assert read_text(good, "s.yaml") == "a: é\n"
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigError) as err:
        read_text(bad, "bad.yaml")
    assert str(err.value) == "bad.yaml: cannot be read: UnicodeDecodeError"
    with pytest.raises(ConfigError) as err:
        read_text(tmp_path / "missing.yaml", "missing.yaml")
    assert str(err.value) == "missing.yaml: cannot be read: FileNotFoundError"
