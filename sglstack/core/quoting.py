"""How a value of stacks.yaml is written into each other language: one home per language (pure, stdlib).

Every renderer quotes through these functions, and the matrix schema refuses, with the same predicates,
what has no legitimate reason to be in a value (a line break in a label key, a description or a package
name); what may legitimately hold a special character (`$` in an argument, `"` in a label) is quoted.

- Dockerfile: an instruction ends at a line break, so no rendered value may hold one (comments escape
  it, everything else refuses it). LABEL and ENV values expand `$VAR` and read `\\` and `"`, so they are
  written as a double-quoted word with those three escaped (`\\u003c` from JSON would stay literal).
- shell (a Dockerfile RUN line): single-quoted by `shlex.quote`, on one line.
- Compose YAML: a JSON string is a YAML double-quoted scalar; compose interpolates `$VAR` in every value
  (not in keys), so `$` is doubled; keys that would need it are refused by the schema.
- Kubernetes: `$(VAR)` in a container's command, args and env values is expanded, and `$$` is the escape,
  so every `$` is doubled; only the placement values LWS provides are left for it to expand.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping

from .errors import SglstackError, one_line

# Label keys: reverse-DNS like Docker's and OCI's own (`org.opencontainers.image.title`), and nothing a
# Dockerfile's `LABEL key=value` would read as another word, quote, variable or line.
LABEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
# Environment variable names: what a shell, Compose and Kubernetes all accept unquoted.
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A Debian package as apt-get install takes it: name, optional :arch, optional =version.
APT_PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+~:-]+)?")
# A patch id is a folder name under patches/ and one word of a RUN line.
PATCH_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")


def control_character(text: str) -> str | None:
    """The first line break or other control character in `text`, escaped (`\\n`); None if there is none."""
    for ch in text:
        if not ch.isprintable():
            return ch.encode("unicode_escape").decode("ascii")
    return None


def one_line_problem(text: str) -> str | None:
    """Why `text` cannot be one line of another language's file; None if it can."""
    ch = control_character(text)
    return f"holds a control character ({ch}): it must be one line of printable text" if ch else None


class QuotingError(SglstackError, ValueError):
    """A value that no quoting of the language can carry (the schema refuses it first, with its key; this
    is the renderer's own guard, one line too)."""


def _refuse_control(text: str, where: str) -> str:
    if problem := one_line_problem(text):
        raise QuotingError(f"{where} '{text.encode('unicode_escape').decode('ascii')}' {problem}")
    return text


# ---- Dockerfile ------------------------------------------------------------------------------------

def dockerfile_string(value: str) -> str:
    """A double-quoted Dockerfile word (LABEL and ENV values) that reads back as exactly `value`."""
    _refuse_control(value, "Dockerfile value")
    return '"' + re.sub(r'(["\\$])', r"\\\1", value) + '"'


def dockerfile_label_key(key: str) -> str:
    if not LABEL_KEY_RE.fullmatch(key):
        raise QuotingError(f"label key '{key}' is not like 'org.example.key' (letters, digits, '.', '_', '/', '-')")
    return key


def dockerfile_comment(text: str) -> str:
    """Text for after `# `: its line breaks escaped, so that nothing of it becomes an instruction."""
    return one_line(text)


# ---- shell -----------------------------------------------------------------------------------------

def shell_word(value: str) -> str:
    """One word of a shell command line on one Dockerfile line."""
    return shlex.quote(_refuse_control(value, "shell word"))


def shell_word_with(value: str, variables: Mapping[str, str]) -> str:
    """`value` as one shell word in which each placeholder (e.g. `{arch}`) becomes the shell variable
    named in `variables` (e.g. `${arch}`), double-quoted, and everything else stays literal."""
    _refuse_control(value, "shell word")
    if not variables:
        return shlex.quote(value)
    pattern = "(" + "|".join(re.escape(p) for p in variables) + ")"
    parts = [p for p in re.split(pattern, value) if p]
    if not any(ch in p for p in parts if p not in variables for ch in '"$`\\'):
        # Nothing a double-quoted word would read specially: one plain double-quoted word.
        return '"' + "".join(variables.get(p, p) for p in parts) + '"'
    return "".join(f'"{variables[p]}"' if p in variables else shlex.quote(p) for p in parts)


# ---- Compose YAML ----------------------------------------------------------------------------------

def compose_string(value: object) -> str:
    """A YAML double-quoted scalar with `$` doubled: compose interpolates `$VAR` in every value."""
    return json.dumps(str(value).replace("$", "$$"), ensure_ascii=False)


# ---- Kubernetes ------------------------------------------------------------------------------------

def k8s_literal(text: str) -> str:
    """Text for a container's command, args or env value that Kubernetes passes on as written: `$$` is
    its escape of `$`, so doubling every `$` leaves no `$(VAR)` and no `$$` for it to expand."""
    return text.replace("$", "$$")
