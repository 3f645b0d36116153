"""Every failure sglstack reports to a user, as one typed exception family.

Each error renders as one line that names where the problem is (file, stack, key, patch, registry),
so that `invoke` can print it and exit non-zero without a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def one_line(text: str) -> str:
    """`text` with line breaks and other control characters written as escapes.

    Messages quote user input (a value from YAML, a file name); a newline in it must not turn the one
    line into two. (patchkit has its own copy: it runs in images without the rest of sglstack.)
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def shown(text: str, limit: int = 40) -> str:
    """`text` cut for an error line: a refused value of thousands of characters is named by its start."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


MESSAGE_CUT = 300  # the most of an outside message an error line quotes


def first_line(text: str, limit: int = MESSAGE_CUT) -> str:
    """The first line of an outside message (an engine's, a tool's, a library's exception), at most `limit`
    characters: what went wrong, never the page of a traceback or an HTML body after it ("" for none)."""
    return (text.splitlines() or [""])[0][:limit]


def last_line(text: str, limit: int = MESSAGE_CUT) -> str:
    """The last non-empty line of a tool's output, at most `limit` characters: where a failing command line
    tool says what went wrong, after its progress lines ("no output" for none)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else "no output"


# `git bisect run` aborts on an exit of 128 or more and marks the commit bad on any other but 0 and 125: what
# `smoke --bisect-exit` answers when it cannot judge, bad input on its command line included.
EXIT_ABORT_GIT_BISECT = 128


class SglstackError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code = 1


class ConfigError(SglstackError):
    """stacks.yaml (or another input file) is invalid: bad input, exit 2 as every task's bad input (coverage,
    bisect, upgrade, attest), apart from a check that ran and failed (exit 1)."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        stack: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.file, self.stack, self.key, self.line, self.reason = file, stack, key, line, message
        where = []
        if file:
            where.append(f"{file}:{line}" if line else file)
        if stack:
            where.append(f"stack '{stack}'")
        if key:
            where.append(f"key '{key}'")
        super().__init__(one_line(": ".join([*where, message])))


class BuildError(SglstackError):
    """An image build, or the verification of a built image, failed."""


class PinMismatch(BuildError):
    """What got installed in the image is not what the stack pinned."""


class ImageCheckFailed(BuildError):
    """The built image fails a check run inside it (pip check, shared libraries, the server's argv)."""


class BuildInputError(BuildError):
    """Bad input to a build (a `--target` that is no stage of the stack's Dockerfile): exit 2, decided
    before anything is rendered to disk or built."""

    exit_code = 2


class PatchCommandError(SglstackError):
    """A patch command (list, check, apply, verify) failed; the message names patch, file and class.

    The patch engine's own failures are `sglstack.inimage.patchkit.PatchError` (standard library only, it runs
    inside images); the host commands report them as this error so that every task prints one line.
    """


class PatchInputError(PatchCommandError):
    """A patch command's option is not a value it can take (a version that is none): bad input, exit 2."""

    exit_code = 2


class DockerUnavailable(SglstackError):
    """No Docker engine, or no BuildKit-capable client, could be found."""


class SmokeError(SglstackError):
    """The smoke test could not run (as opposed to running and failing its gates)."""


class SmokeInputError(SmokeError):
    """Bad input to a smoke (no model, an unknown option or runner, a value that is none): exit 2, decided
    before any container or process starts."""

    exit_code = 2


class RegistryError(SglstackError):
    """A registry call failed; the message names the registry, never the credentials."""


class DeployError(SglstackError):
    """A compose deployment failed or could not be found."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`; did you mean 'X'?` for the one of `choices` closest to a mistyped `word`, or "" when none is close:
    the ending of every refusal of an unknown name (task, option, stack)."""
    close = difflib.get_close_matches(word, sorted(set(choices)), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""
