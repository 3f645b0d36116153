"""The resolver adapter: `uv pip compile`, for a target Python version and platform, with hashes.

sglstack never resolves requirements itself. uv picks the index the way it always does (its default,
`UV_DEFAULT_INDEX` / `UV_INDEX_URL`, a `uv.toml`); the caller adds only the indexes a stack names itself.
This module turns one request into one uv run, parses uv's requirements.txt output into typed packages,
and turns uv's errors into typed exceptions: an unreachable index or URL, a conflict (with both sides
named), a pin that does not exist.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from ..core.credentials import HostLogin, netrc_environment, public_url, redact_text, secret_values, tool_environment
from ..core.errors import SglstackError
from ..core.safefiles import write_text
from ..core.signals import deferred

# The names of the files uv reads; its `# via` annotations point at them, which is how roots are told apart.
REQUIREMENTS_IN = "requirements.in"
OVERRIDES_IN = "overrides.txt"
CONSTRAINTS_IN = "constraints.txt"
EXCLUDES_IN = "excludes.txt"
OUTPUT = "resolved.txt"

# Causes uv prints when it could not talk to a host at all (as opposed to a host that answered "no").
_NETWORK_CAUSES = re.compile(
    r"dns error|error resolving|client error \(Connect\)|Connection refused|connection reset|timed out|"
    r"operation timed out|tcp connect error|certificate|tls handshake|Network is unreachable|No route to host",
    re.IGNORECASE)
_FAILED_URL = re.compile(r"Failed to (?:fetch|download)(?: distribution)?:?\s+`?([a-z][a-z0-9+.-]*://[^\s`]+)`?")


class ResolverError(SglstackError):
    """uv could not resolve the request (the message is uv's reason, on one line)."""


class ResolverUnavailable(ResolverError):
    """No uv binary: the `uv` package is a declared dependency, so this is a broken install."""


class SourceUnreachable(ResolverError):
    """An index or a direct URL could not be reached at all."""

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(f"cannot reach {url}: {cause}")
        self.url = url
        self.cause = cause


NO_RELEASE = "no release"


@dataclass(frozen=True)
class ConflictSide:
    """One side of a resolution conflict: who requires what (`who` is 'the stack' for a direct input)."""

    who: str
    requires: str

    def __str__(self) -> str:
        if self.who == NO_RELEASE:
            return f"no release matches {self.requires}"
        return f"{self.who} requires {self.requires}"


class ResolutionConflict(ResolverError):
    """No set of versions satisfies the requirements; `explanation` is uv's derivation, `sides` its parts."""

    def __init__(self, explanation: str) -> None:
        self.explanation = explanation
        self.sides = conflict_sides(explanation)
        super().__init__(f"no solution: {explanation}")


@dataclass(frozen=True)
class ResolvedPackage:
    """One line of uv's output: a pinned distribution, the sha256 of each of its files, who needs it."""

    name: str  # canonical
    version: str  # "" for a direct URL requirement (the URL names the file)
    url: str | None = None
    hashes: tuple[str, ...] = ()  # "sha256:<hex>"
    required_by: tuple[str, ...] = ()  # canonical names of the packages that require it
    direct: bool = False  # required by the request itself (requirements.in or constraints)
    index: str | None = None  # the index uv took it from (credentials removed)


@dataclass(frozen=True)
class ResolveRequest:
    requirements: tuple[str, ...]
    python_version: str  # "3.12"
    python_platform: str  # a uv target, e.g. "x86_64-manylinux_2_28"
    indexes: tuple[str, ...] = ()  # extra indexes, before uv's default index, highest priority first
    default_index: str | None = None  # None: whatever uv uses by default (its config, the environment)
    overrides: tuple[str, ...] = ()  # replace every requirement on these packages
    constraints: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()  # package names left out of the resolution entirely
    no_deps: bool = False
    only_binary: bool = False  # wheels only (`--only-binary :all:`): what a stack that unpacks its wheels installs
    preferences: tuple[str, ...] = ()  # `name==version` pins of an earlier resolution, kept where possible
    upgrade_packages: tuple[str, ...] = ()  # freed from `preferences`
    # Credentials for the indexes and URLs above (which carry none): uv reads them as a netrc named in
    # its environment, never from its command line or a file on a disk.
    logins: tuple[HostLogin, ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class Resolution:
    packages: tuple[ResolvedPackage, ...]
    uv_version: str
    seconds: float
    argv: tuple[str, ...] = field(default=(), compare=False)

    @property
    def indexes_used(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.index for p in self.packages if p.index))

    def get(self, name: str) -> ResolvedPackage | None:
        want = canonicalize_name(name)
        return next((p for p in self.packages if p.name == want), None)


# ---- the uv binary ---------------------------------------------------------------------------------

@functools.cache
def uv_binary() -> str:
    """The uv binary of the installed `uv` package, else the first `uv` on PATH."""
    try:
        import uv  # the PyPI package ships the binary and knows where it is

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise ResolverUnavailable("uv is not installed (pip install uv): sglstack resolves with "
                                      "`uv pip compile`") from None
        return found


@functools.cache
def uv_version() -> str:
    """`0.13.9`: the version of the uv that resolves (recorded in every lock)."""
    proc = subprocess.run([uv_binary(), "--version"], capture_output=True, text=True, check=False,
                          env=tool_environment())
    parts = proc.stdout.split()
    return parts[1] if proc.returncode == 0 and len(parts) > 1 else "unknown"


# ---- one resolution --------------------------------------------------------------------------------

def compile_argv(request: ResolveRequest, workdir: Path) -> list[str]:
    """The uv command line for `request`, reading and writing the files `write_inputs` put in `workdir`."""
    argv = [uv_binary(), "pip", "compile", REQUIREMENTS_IN, "--output-file", OUTPUT,
            "--python-version", request.python_version, "--python-platform", request.python_platform,
            "--generate-hashes", "--emit-index-annotation", "--no-header", "--quiet", "--color", "never",
            "--no-progress", "--no-python-downloads"]
    if request.no_deps:
        argv.append("--no-deps")
    if request.only_binary:
        argv += ["--only-binary", ":all:"]
    if request.overrides:
        argv += ["--overrides", OVERRIDES_IN]
    if request.constraints:
        argv += ["--constraints", CONSTRAINTS_IN]
    if request.excludes:
        argv += ["--excludes", EXCLUDES_IN]
    if request.default_index:
        argv += ["--default-index", request.default_index]
    for index in request.indexes:
        argv += ["--index", index]
    for name in request.upgrade_packages:
        argv += ["--upgrade-package", name]
    return argv


def write_inputs(request: ResolveRequest, workdir: Path) -> None:
    def lines(items: tuple[str, ...]) -> str:
        return "".join(f"{item}\n" for item in items)

    write_text(workdir, workdir / REQUIREMENTS_IN, lines(request.requirements))
    if request.overrides:
        write_text(workdir, workdir / OVERRIDES_IN, lines(request.overrides))
    if request.constraints:
        write_text(workdir, workdir / CONSTRAINTS_IN, lines(request.constraints))
    if request.excludes:
        write_text(workdir, workdir / EXCLUDES_IN, lines(request.excludes))
    # uv keeps the pins of an existing output file unless told to upgrade them: that is how an earlier
    # lock is the starting point of `--upgrade-package`.
    if request.preferences:
        write_text(workdir, workdir / OUTPUT, lines(request.preferences))


def compile_requirements(request: ResolveRequest) -> Resolution:
    """Run `uv pip compile` for `request`; raise a typed `ResolverError` when uv fails."""
    result = compile_many([request])[0]
    if isinstance(result, ResolverError):
        raise result
    return result


def compile_many(requests: Sequence[ResolveRequest]) -> list[Resolution | ResolverError]:
    """Run several resolutions side by side (one uv process each); each one's result or error, in order.

    Waiting on an unreachable host costs uv several seconds of retries, so independent resolutions run at
    once. Every uv process still running when this returns or is interrupted is killed.
    """
    with contextlib.ExitStack() as stack:
        started: list[tuple[subprocess.Popen[str], ResolveRequest, Path, list[str], float]] = []
        try:
            for request in requests:
                # A signal landing between Popen and the append would leave a uv nobody kills.
                with deferred():
                    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sglstack-resolve-")))
                    write_inputs(request, workdir)
                    argv = compile_argv(request, workdir)
                    netrc_env, fds = stack.enter_context(netrc_environment(request.logins))
                    proc = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True, env=tool_environment({"NO_COLOR": "1", **netrc_env}),
                                            pass_fds=fds)
                    started.append((proc, request, workdir, argv, time.monotonic()))
            results: list[Resolution | ResolverError] = []
            for proc, request, workdir, argv, start in started:
                out, err = proc.communicate()
                seconds = round(time.monotonic() - start, 3)
                if proc.returncode != 0:
                    results.append(classify_failure(redact_text(err or out, secret_values(request.logins))))
                    continue
                packages = parse_compiled((workdir / OUTPUT).read_text(encoding="utf-8"))
                results.append(Resolution(packages=packages, uv_version=uv_version(), seconds=seconds,
                                          argv=tuple(argv)))
            return results
        finally:
            for proc, *_ in started:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


# ---- uv's output -----------------------------------------------------------------------------------

def parse_compiled(text: str) -> tuple[ResolvedPackage, ...]:
    """uv's requirements.txt output (with hashes and split annotations) as packages, in file order."""
    entries: list[dict] = []
    in_via = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if not raw[:1].isspace() and not line.startswith(("#", "-")):
            spec = line.removesuffix("\\").strip()
            name, url, version = spec, None, ""
            if " @ " in spec:
                name, _, url = (s.strip() for s in spec.partition(" @ "))
            elif "==" in spec:
                name, _, version = (s.strip() for s in spec.partition("=="))
            name = name.split("[")[0].split(";")[0].strip()
            entries.append({"name": canonicalize_name(name), "version": version.split(";")[0].strip(),
                            "url": url, "hashes": [], "via": [], "index": None})
            in_via = False
            continue
        if not entries:
            continue
        entry = entries[-1]
        if line.startswith("--hash="):
            entry["hashes"].append(line.removeprefix("--hash=").removesuffix("\\").strip())
        elif line.startswith("# via"):
            rest = line.removeprefix("# via").strip()
            in_via = not rest
            if rest:
                entry["via"].append(rest)
        elif line.startswith("# from "):
            entry["index"] = public_url(line.removeprefix("# from ").strip())  # locks never carry credentials
            in_via = False
        elif in_via and line.startswith("#"):
            entry["via"].append(line.lstrip("#").strip())
    out = []
    for e in entries:
        via = e["via"]
        direct = any(v.startswith("-") for v in via)
        required_by = tuple(sorted({canonicalize_name(v.split()[0]) for v in via if not v.startswith("-")}))
        out.append(ResolvedPackage(name=e["name"], version=e["version"], url=e["url"], hashes=tuple(e["hashes"]),
                                   required_by=required_by, direct=direct, index=e["index"]))
    return tuple(out)


# ---- uv's errors -----------------------------------------------------------------------------------

def _error_lines(stderr: str) -> list[str]:
    """uv's error and its causes, without warnings (e.g. about the interpreter that builds sdists)."""
    lines: list[str] = []
    in_error = False
    for raw in stderr.splitlines():
        low = raw.strip().lower()
        if low.startswith("warning:"):
            in_error = False
            continue
        if low.startswith("error:"):
            in_error = True
        if in_error and raw.strip():
            lines.append(raw.strip())
    return lines or [line.strip() for line in stderr.splitlines() if line.strip()]


def classify_failure(stderr: str) -> ResolverError:
    """uv's stderr as the matching typed error."""
    lines = _error_lines(stderr)
    text = "\n".join(lines)
    if "No solution found" in text:
        causes = [ln.removeprefix("cause:").strip() for ln in lines if not ln.lower().startswith("error:")]
        return ResolutionConflict(" ".join(causes) or text)
    url_match = _FAILED_URL.search(text)
    if url_match and _NETWORK_CAUSES.search(text):
        causes = [ln.removeprefix("cause:").strip() for ln in lines[1:]]
        cause = next((c for c in reversed(causes) if _NETWORK_CAUSES.search(c)), causes[-1] if causes else "")
        return SourceUnreachable(url_match.group(1).rstrip("`.,"), cause)
    return ResolverError("uv pip compile: " + " ".join(ln.removeprefix("error:").removeprefix("cause:").strip()
                                                      for ln in lines)[:600])


_CONCLUSION = re.compile(r"we can conclude that .*?(?:\.\s|\.$|$)", re.S)
_DEPENDS = re.compile(r"(\S+) depends on (\S+)")
_REQUIRE = re.compile(r"you require (.+?)(?:,\s*$|$)")
_NO_VERSION = re.compile(r"there is no version of (\S+)")


def _name(req: str) -> str:
    return canonicalize_name(re.split(r"[\s\[=<>!~;@]", req, maxsplit=1)[0])


def conflict_sides(explanation: str) -> tuple[ConflictSide, ...]:
    """Both sides of uv's conflict: the requirements on one package that no version satisfies together.

    uv explains a failure as premises ("A==1 depends on B>=2", "you require B==1") and conclusions drawn
    from them; the premises on the package that appears more than once are the two sides. A requirement
    of the request itself has `who` = "the stack"; a transitive one names the package and, where uv
    says it, who needs that package ("transformers==4.57.1 (needed by sglang==0.5.9)").
    """
    premises = _CONCLUSION.sub(". ", explanation)
    stated: list[ConflictSide] = []
    for clause in re.split(r"\.\s+|\band\s+because\b|\bBecause\b|, and |\s+and\s+(?=you\b|\S+ depends\b)",
                           premises):
        clause = clause.strip().rstrip(".,")
        for m in _DEPENDS.finditer(clause):
            stated.append(ConflictSide(m.group(1), m.group(2).rstrip(".,")))
        required = _REQUIRE.search(clause)
        if required:
            for req in re.split(r",\s*(?:and\s+)?|\s+and\s+", required.group(1)):
                req = req.strip().rstrip(".,")
                if req and " " not in req:
                    stated.append(ConflictSide("the stack", req))
        missing = _NO_VERSION.search(clause)
        if missing:
            stated.append(ConflictSide(NO_RELEASE, missing.group(1).rstrip(".,")))
    stated = list(dict.fromkeys(stated))
    by_name: dict[str, list[ConflictSide]] = {}
    for side in stated:
        by_name.setdefault(_name(side.requires), []).append(side)
    needed_by = {_name(s.requires): s.who for s in stated if s.who != "the stack"}
    for sides in by_name.values():
        if len({s.requires for s in sides}) > 1 or any(s.who == NO_RELEASE for s in sides):
            return tuple(ConflictSide(f"{s.who} (needed by {needed_by[_name(s.who)]})"
                                      if s.who not in ("the stack", NO_RELEASE) and _name(s.who) in needed_by
                                      else s.who, s.requires) for s in sides)
    return tuple(stated)
