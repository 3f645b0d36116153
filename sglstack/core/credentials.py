"""Secrets, in one home: credentials inside URLs, and env keys that name a secret.

A URL of `stacks.yaml` may carry credentials (`https://user:token@host/simple`). The `Stack` keeps only
the URL without them (`public_url`) and the credentials apart (`HostLogin`, never dumped, never in a
repr), so every file sglstack writes from a stack (Dockerfile, context, stack.json, records, labels,
locks, bake file, manifests, reports) holds the public URL, and a credential rotation changes no config
hash. The tools that need the credentials get them as a netrc (one `machine` entry per host, the form
pip, uv, requests and curl all read): a BuildKit secret for a build, an in-memory file named by `NETRC`
in the environment of a host-side pip or uv, an `http.extraHeader` in git's environment. None of them
is a file on a disk, an argument on a command line, or a layer.

`redact_url`/`redact_text` are what may be shown of a URL or of a tool's message (`***` for the
credentials), and `names_secret` says whether an environment variable's name names a secret, whose value
must then be a reference (`${NAME}`), never a value in a file.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

REDACTED = "***"
# Schemes whose user part is a login name, not a secret (ssh authenticates with keys).
_LOGIN_SCHEMES = ("ssh", "git+ssh", "ssh+git")
# `scheme://userinfo@` anywhere in a text (a tool's message, a log line).
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^/\s@'\"`<>]+)@")
# Characters a netrc token cannot hold unquoted (pip's, uv's and curl's parsers differ on quoting).
_NETRC_UNSAFE = re.compile(r"[\s\"'\\#]")


@dataclass(frozen=True)
class HostLogin:
    """The credentials a URL carried for its host: what one netrc `machine` entry holds."""

    host: str  # hostname, without port: netrc has one entry per host name
    login: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return f"HostLogin(host={self.host!r}, login={REDACTED!r})"


class CredentialError(ValueError):
    """A URL's credentials cannot be handed to the tools safely (the message holds no secret)."""


def has_credentials(url: str) -> bool:
    """True when `url` carries a secret: a password, or a user part of a non-ssh URL (a token as user)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return False
    if parts.scheme.lower() in _LOGIN_SCHEMES:
        return parts.password is not None
    return True


def _netloc_without_userinfo(url: str) -> str:
    return urlsplit(url).netloc.rpartition("@")[2]


def public_url(url: str) -> str:
    """`url` with its credentials removed (an ssh login name stays): what tools are given, with a netrc."""
    if not has_credentials(url):
        return url
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, _netloc_without_userinfo(url), parts.path, parts.query, parts.fragment))


def redact_url(url: str) -> str:
    """`url` as it may be shown: its user part replaced by `***` (so a reader sees one was there)."""
    if "@" not in urlsplit(url).netloc:
        return url
    parts = urlsplit(url)
    netloc = f"{REDACTED}@{_netloc_without_userinfo(url)}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """A message or log line with every URL's credentials and every one of `secrets` replaced by `***`."""
    out = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    for secret in secrets:
        if secret and len(secret) >= 4:  # a one-letter "secret" would blank half the text
            out = out.replace(secret, REDACTED)
    return out


def host_login(url: str) -> HostLogin | None:
    """The credentials `url` carries, for its host; None when it carries none."""
    if not has_credentials(url):
        return None
    parts = urlsplit(url)
    if not parts.hostname:
        raise CredentialError(f"'{redact_url(url)}' carries credentials but names no host")
    login, password = unquote(parts.username or ""), unquote(parts.password or "")
    if not login or _NETRC_UNSAFE.search(login) or _NETRC_UNSAFE.search(password):
        raise CredentialError(f"'{redact_url(url)}': its user or password is empty or holds a space, quote, "
                              "backslash or '#', which a netrc (how builds and pip/uv receive it) cannot carry")
    return HostLogin(parts.hostname.lower(), login, password)


def merge_logins(logins: Iterable[HostLogin]) -> tuple[HostLogin, ...]:
    """One login per host, sorted by host; two different ones for one host are refused (netrc holds one)."""
    by_host: dict[str, HostLogin] = {}
    for item in logins:
        seen = by_host.get(item.host)
        if seen is not None and (seen.login, seen.password) != (item.login, item.password):
            raise CredentialError(f"two URLs on host {item.host} carry different credentials: a netrc (how the "
                                  "build and pip/uv receive them) holds one per host")
        by_host[item.host] = item
    return tuple(by_host[h] for h in sorted(by_host))


def netrc_text(logins: Iterable[HostLogin]) -> str:
    """The netrc holding `logins` (empty text for none)."""
    return "".join(f"machine {x.host}\nlogin {x.login}\npassword {x.password}\n" for x in logins)


def secret_values(logins: Iterable[HostLogin]) -> tuple[str, ...]:
    """What must never appear in anything written: each password, and each login used as a token (one
    with no password); a plain login name (`alice`) is not hidden, which would blank the word everywhere."""
    return tuple(x.password or x.login for x in logins)


def netrc_secrets(text: str) -> tuple[str, ...]:
    """`secret_values` of the logins a netrc text (as `netrc_text` writes it) holds: what a log must not show."""
    lines = text.splitlines()
    return tuple(secret_values(HostLogin(m.partition(" ")[2], u.partition(" ")[2], p.partition(" ")[2])
                               for m, u, p in zip(lines[0::3], lines[1::3], lines[2::3], strict=False)))


# ---- handing credentials to a host-side process -----------------------------------------------------

NETRC_ENV = "NETRC"
# sglstack's own secret: read from its environment, never handed on. uv and pip run packages' build
# backends (any sdist's setup.py), compose and bake interpolate variables into what they run.
SIGNING_KEY_ENV = "SGLSTACK_SIGNING_KEY"
# sglstack's registry client reads this password itself (registry.auth); no tool it starts needs it (they
# log in through the Docker config).
REGISTRY_PASSWORD_ENV = "SGLSTACK_REGISTRY_PASSWORD"
OWN_SECRET_ENV = (SIGNING_KEY_ENV, REGISTRY_PASSWORD_ENV)


def tool_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a tool it starts (uv, pip, git, compose, docker), less sglstack's
    own secrets, plus `extra`. (A server under test gets far less: `smoke.processenv`.)"""
    env = {k: v for k, v in os.environ.items() if k not in OWN_SECRET_ENV}
    env.update(extra or {})
    return env


@contextlib.contextmanager
def netrc_environment(logins: Iterable[HostLogin]) -> Iterator[tuple[dict[str, str], tuple[int, ...]]]:
    """(environment additions, fds to pass) that give a child pip or uv the netrc of `logins`.

    The netrc lives in an anonymous in-memory file (memfd): nothing is written to a disk, and the child
    reads it as `/proc/self/fd/N` (each open starts at its beginning, so a tool may read it many times).
    With no logins the environment is left as it is (a user's own ~/.netrc still works).
    """
    logins = tuple(logins)
    if not logins:
        yield {}, ()
        return
    fd = os.memfd_create("sglstack-netrc", os.MFD_CLOEXEC)
    try:
        os.write(fd, netrc_text(logins).encode())
        yield {NETRC_ENV: f"/proc/self/fd/{fd}"}, (fd,)
    finally:
        os.close(fd)


def git_auth_environment(url: str, login: HostLogin | None) -> dict[str, str]:
    """Environment that makes git send `login` to `url` (an `http.<url>.extraHeader`), never a file or argv."""
    if login is None or not url.lower().startswith(("http://", "https://")):
        return {}
    token = base64.b64encode(f"{login.login}:{login.password}".encode()).decode()
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"http.{url}.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {token}"}


def login_for(url: str, logins: Iterable[HostLogin]) -> HostLogin | None:
    host = (urlsplit(url).hostname or "").lower()
    return next((x for x in logins if x.host == host), None)


# ---- env keys that name a secret ---------------------------------------------------------------------

# A word of an env key (split at `_`, `-`, `.`) that makes it name a secret: HF_TOKEN, OPENAI_API_KEY,
# DB_PASSWORD, AWS_SECRET_ACCESS_KEY, HUGGING_FACE_HUB_TOKEN.
SECRET_WORDS = frozenset({"TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "KEY", "APIKEY", "CREDENTIAL",
                          "CREDENTIALS"})
# The one way to give such a value: a reference to a variable of the deployment's secret source
# (compose: the deploy environment; Kubernetes: a key of the Secret; smoke: the caller's environment).
SECRET_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def names_secret(key: str) -> bool:
    """True when the environment variable `key` names a token, password, key or other secret."""
    return any(word in SECRET_WORDS for word in re.split(r"[_\-.]+", key.upper()) if word)


# A secret may hide in a run-together word (HF_AUTHTOKEN, NVIDIA_APIKEY2, CUDA_PRIVATEKEY): `names_secret` splits
# at `_` and would let it through.
RUN_TOGETHER_SECRET_PARTS = ("TOKEN", "PASSW", "SECRET", "CREDENTIAL", "APIKEY", "PRIVATE", "AUTH")


def may_name_secret(key: str) -> bool:
    """The strict reading, where losing a setting is cheap and handing on a secret is not: `names_secret`, or a
    secret's word run together with another anywhere in `key`."""
    upper = key.upper()
    return names_secret(key) or any(part in upper for part in RUN_TOGETHER_SECRET_PARTS)


def secret_reference(value: str) -> str | None:
    """`${NAME}` -> NAME; None for any other value."""
    m = SECRET_REFERENCE.fullmatch(value)  # `$` alone would also take a value ending in a line break
    return m.group(1) if m else None


def plain_secret_problem(key: str, value: str) -> str | None:
    """Why `key: value` may not be written as is (a secret given as a plain value); None when it may."""
    if not names_secret(key) or secret_reference(value) is not None:
        return None
    return (f"names a secret, so its value must be a reference like '${{{key}}}' (from the deploy "
            f"environment, the Kubernetes Secret, or smoke's own environment), not a value written into "
            f"compose.yaml and the manifests")


# SGLang flags whose value is a secret: hidden in every argv shown, and in a stack's serving.extra_args
# given only as a `${NAME}` reference (`config.serverflags`).
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password")
# SGLang flags that are a prefix of a secret flag: argparse takes an exact name as that flag, not as an
# abbreviation (`--ssl-keyfile PATH` is the key file's path, not its password).
_EXACT_NOT_SECRET = ("--ssl-keyfile",)


def secret_flag(flag: str) -> str | None:
    """The secret flag `flag` (`--name`, no value) sets in SGLang's parser: itself, or an argparse
    abbreviation of it (`--api-k`); None for any other flag."""
    if len(flag) < 3:
        return None
    flag = "--" + flag[2:].replace("_", "-")  # `--api_key`: a parser that maps `_` to `-` reads it too
    if flag in _EXACT_NOT_SECRET:
        return None
    return next((name for name in SECRET_FLAGS if name.startswith(flag)), None)


@dataclass(frozen=True)
class SecretSlot:
    """Where a secret flag's value sits in an argv: word `index` is `text` followed by the value."""

    index: int
    text: str  # "" for `--api-key VALUE` (the value is its own word), "--api-key=" for `--api-key=VALUE`
    flag: str  # the secret flag SGLang reads it as
    value: str


def secret_slots(argv: Sequence[str]) -> list[SecretSlot]:
    """Each secret flag's value in `argv`, in either form and any abbreviation: the one walker that
    redaction, references, log hiding and smoke's client all read."""
    slots = []
    for i, word in enumerate(argv):
        given, eq, value = word.partition("=")
        name = secret_flag(given) if given.startswith("--") else None
        if name is None:
            continue
        if eq:
            slots.append(SecretSlot(i, f"{given}=", name, value))
        elif i + 1 < len(argv):
            slots.append(SecretSlot(i + 1, "", name, argv[i + 1]))
    return slots


def argv_references(argv: Sequence[str]) -> dict[int, tuple[str, str]]:
    """{index: (the word's text before the reference, NAME)} for each secret flag of `argv` whose value is a
    `${NAME}` reference. Each renderer puts NAME's value, or its own reference to it, there."""
    return {slot.index: (slot.text, name) for slot in secret_slots(argv)
            if (name := secret_reference(slot.value)) is not None}


def argv_secret_values(argv: Sequence[str]) -> tuple[str, ...]:
    """The values of `argv`'s secret flags: what a server's log may echo."""
    return tuple(slot.value for slot in secret_slots(argv) if slot.value)


def secret_values_of(environment: Mapping[str, str], referenced: Iterable[str], argv: Sequence[str]) -> tuple[str, ...]:
    """The secrets a server was given: the values of its secret-named and `${NAME}`-referenced variables
    (HF_TOKEN is one by its name) and of its secret flags, and the login of each URL in its argv or
    environment (`--chat-template https://user:token@host/...`). What its log may echo, and no report may show."""
    keys = set(referenced)
    logins = (m.group(2) for text in (*argv, *environment.values()) for m in _URL_USERINFO.finditer(text))
    return (*(v for k, v in environment.items() if v and (names_secret(k) or k in keys)), *argv_secret_values(argv),
            *logins)


def resolve_argv(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """`argv` with each secret flag's `${NAME}` replaced by NAME's value in `env` (left as written when unset)."""
    out = list(argv)
    for i, (text, name) in argv_references(argv).items():
        if name in env:
            out[i] = text + env[name]
    return out


def reference_map(env: Mapping[str, str]) -> dict[str, str]:
    """{env key: referenced variable} for the values of `env` that are secret references."""
    return {k: ref for k, v in env.items() if (ref := secret_reference(v)) is not None}
