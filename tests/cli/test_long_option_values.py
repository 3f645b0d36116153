"""A version or a number given on the command line is checked where it is parsed: a long string of digits
(past Python's int-string conversion limit) or a value that is none is one line naming the option, exit 2,
before any work (issue 34)."""

from __future__ import annotations

import pytest
from clirun import run_invoke
from packaging.version import InvalidVersion

from sglstack.bisect.releases import ReleaseRangeError, releases_between
from sglstack.core.versions import MAX_VERSION_CHARS, parse_version
from sglstack.inimage import patchkit

DIGITS = "9" * 5000
SHOWN = f"{DIGITS[:40]}... (5000 characters)"
TOO_LONG = f"not a version (longer than {MAX_VERSION_CHARS} characters)"


@pytest.mark.parametrize(("args", "line"), [
    (("upgrade", "--stack", "cu130", "--sglang", DIGITS), f"error: --sglang {SHOWN}: {TOO_LONG}"),
    (("patches.check", "--sglang", DIGITS), f"error: patches.check --sglang {SHOWN}: {TOO_LONG}"),
    (("patches.check", "--sglang", "latest"), "error: patches.check --sglang latest: not a version (PEP 440)"),
    (("patches.apply", "--root", ".", "--patch", "x", "--sglang", DIGITS),
     f"error: patches.apply --sglang {SHOWN}: {TOO_LONG}"),
    (("deploy", "--stack", "cu130", "--port", DIGITS),
     f"error: --port '{DIGITS[:20]}...' (5000 characters): not a whole number sglstack takes"),
    (("render", "--stack", "cu130", "--nnodes", DIGITS),
     f"error: --nnodes '{DIGITS[:20]}...' (5000 characters): not a whole number sglstack takes"),
    (("deploy", "--stack", "cu130", "--wait-timeout", "1" + "0" * 400),
     f"error: --wait-timeout '{'1' + '0' * 19}...' (401 characters): not a number sglstack takes"),
])
def test_a_long_or_malformed_value_is_one_line_naming_the_option_exit_2(tmp_path, args, line):
    proc = run_invoke(*args, cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=300)
    assert (proc.returncode, proc.stderr) == (2, line + "\n")


def test_one_version_parser_bounds_the_length_before_parsing():
    assert str(parse_version("0.5.10.post1")) == "0.5.10.post1"
    assert str(parse_version("1" * MAX_VERSION_CHARS)) == "1" * MAX_VERSION_CHARS
    for text, why in ((DIGITS, TOO_LONG), ("1" * (MAX_VERSION_CHARS + 1), TOO_LONG),
                      ("banana", "not a version (PEP 440)")):
        with pytest.raises(InvalidVersion) as caught:
            parse_version(text)
        assert str(caught.value) == why


def test_a_release_list_with_a_huge_version_from_the_index_is_read_past_it():
    assert releases_between(["0.5.8", DIGITS, "0.5.9", "0.5.10"], "0.5.8", "0.5.10") == ["0.5.8", "0.5.9", "0.5.10"]
    with pytest.raises(ReleaseRangeError) as caught:
        releases_between(["0.5.8"], "0.5.8", DIGITS)
    assert str(caught.value) == TOO_LONG


def test_patchkit_bounds_its_own_parser_too():
    with pytest.raises(patchkit.InvalidVersion) as caught:
        patchkit.Version.parse(DIGITS)
    assert str(caught.value) == (f"'{DIGITS[:40]}...' (5000 characters) is not a PEP 440 version (longer than "
                                 f"{MAX_VERSION_CHARS} characters)")
