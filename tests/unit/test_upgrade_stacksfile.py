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

EDITS = {"description": "new desc", "not-there": None, "platforms": ("linux/arm64",), "patches": ["p3"],
         "extra": {"k": 2}, "torch": {"version": "2.11.0", "packages": None}, "gone": None, "scalar": ["l1", "l2"],
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
    not-there:
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
    ("stacks:\n  a: [\n", "s.yaml:3: cannot be edited by invoke upgrade (while parsing a flow node): write that line "
     "as plain block YAML (spaces, no tabs)"),
    ("stacks: {a: 1}\n  b\n", "s.yaml:2: cannot be edited by invoke upgrade (while parsing a block mapping): write "
     "that line as plain block YAML (spaces, no tabs)"),
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


# What ends an entry (blank lines, the comment above the next entry) stays at its end: keys the upgrade adds go
# before it, and a block list the upgrade replaces does not take it away.
BETWEEN = """\
stacks:
  a:
    python: "3.12"{last}

  # the next stack
  b:
    inherits: a
"""


@pytest.mark.parametrize(("last", "after"), [
    # the lines hang on the list's last item, which the new list replaces
    ("\n    patches:\n      - p1", "\n    patches:\n      - p3\n    torch:\n      version: '2'\n    glibc: '2.39'"),
    # on a nested mapping's last key
    ("\n    torch:\n      version: 1", "\n    torch:\n      version: '2'\n    patches: [p3]\n    glibc: '2.39'"),
    # on the entry's last key
    ("\n    glibc: '2.28'", "\n    glibc: '2.39'\n    patches: [p3]\n    torch:\n      version: '2'"),
    # on the end of a list of flow mappings
    ("\n    layers:\n      - {name: a}",
     "\n    layers:\n      - {name: a}\n    patches: [p3]\n    torch:\n      version: '2'\n    glibc: '2.39'"),
])
def test_keys_added_to_an_entry_go_before_the_lines_that_end_it(last: str, after: str) -> None:
    text = upgraded_text(BETWEEN.format(last=last), file="s.yaml", stack="a",
                         edits={"patches": ["p3"], "torch": {"version": "2"}, "glibc": "2.39"}, as_name=None)
    assert text == BETWEEN.format(last=after)


def test_a_comment_on_the_last_line_stays_on_it_and_a_deleted_last_key_leaves_the_lines_after_it() -> None:
    text = upgraded_text(BETWEEN.format(last="\n    glibc: '2.28'  # the base's"), file="s.yaml", stack="a",
                         edits={"glibc": "2.39", "patches": ["p"]}, as_name=None)
    assert text == BETWEEN.format(last="\n    glibc: '2.39'  # the base's\n    patches: [p]")
    text = upgraded_text(BETWEEN.format(last="\n    gone: 1"), file="s.yaml", stack="a", edits={"gone": None},
                         as_name=None)
    assert text == BETWEEN.format(last="")


def test_a_new_entry_goes_before_what_ends_the_stacks() -> None:
    text = upgraded_text("stacks:\n  a:\n    x: 1\n    l:\n      - 1\n\n# after the stacks\nother: 1\n", file="s.yaml",
                         stack="a", edits={"y": 1}, as_name="n")
    assert text == ("stacks:\n  a:\n    x: 1\n    l:\n      - 1\n\n  n:\n    inherits: a\n    y: 1\n\n"
                    "# after the stacks\nother: 1\n")


def test_a_comment_on_the_last_line_keeps_its_column_and_a_flow_entry_stays_one() -> None:
    text = upgraded_text(BETWEEN.format(last="\n    glibc: '2.28'      # the base's"), file="s.yaml", stack="a",
                         edits={"glibc": "2.39"}, as_name=None)
    assert text == BETWEEN.format(last="\n    glibc: '2.39'      # the base's")
    flow = 'stacks:\n  a: {python: "3.12"}\n\n  # the next stack\n  b:\n    inherits: a\n'
    assert upgraded_text(flow, file="s.yaml", stack="a", edits={"glibc": "2.39"}, as_name=None) == (
        'stacks:\n  a: {python: "3.12", glibc: \'2.39\'}\n\n  # the next stack\n  b:\n    inherits: a\n')
    assert upgraded_text(flow, file="s.yaml", stack="b", edits={"glibc": "2.39"}, as_name="c") == (
        flow + "\n  c:\n    inherits: b\n    glibc: '2.39'\n")


# ---- only the lines the edit means: the rest of the file keeps its own layout, byte for byte -------------------

LAYOUTS = """\
# the matrix
defaults: &d
  python: "3.12"   # the house python

stacks:
  base:
    sglang: {pypi: 0.5.5}
    platforms: [linux/amd64,
                linux/arm64]
    packages:
    - a==1
    - b==2
    env: &e {A: "1",  B: '2'}

  other:
    inherits: base   # a comment
    cuda_arch_list: [ "9.0",   "10.0" ]
    env: *e
    patches:
        - p1
"""


def test_a_new_stack_leaves_every_line_of_the_others_as_it_was() -> None:
    text = upgraded_text(LAYOUTS, file="s.yaml", stack="base", edits={"sglang": {"pypi": "0.5.6"}}, as_name="new")
    assert text == LAYOUTS + "\n  new:\n    inherits: base\n    sglang: {pypi: 0.5.6}\n"


def test_an_edit_in_place_changes_only_the_lines_of_the_keys_it_edits() -> None:
    text = upgraded_text(LAYOUTS, file="s.yaml", stack="other", edits={"cuda_arch_list": ["10.0"]}, as_name=None)
    assert text == LAYOUTS.replace('cuda_arch_list: [ "9.0",   "10.0" ]', "cuda_arch_list: ['10.0']")
    text = upgraded_text(LAYOUTS, file="s.yaml", stack="base", edits={"sglang": {"pypi": "0.5.6"}}, as_name=None)
    assert text == LAYOUTS.replace("{pypi: 0.5.5}", "{pypi: 0.5.6}")
