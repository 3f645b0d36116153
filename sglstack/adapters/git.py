"""The git adapter: any repository that git on this host can clone, cached as a bare repository.

A URL (https, ssh, a private fork behind a credential helper), a local path or `file://` all work the
same way, because git itself fetches them: sglstack never asks a hosting service for an archive. The
cache lives under sglstack's cache folder (`git/`), one bare repository per source, and holds only
fetched history: the user's own clone (work tree, index, stash) is never touched. Source trees are
exported from one commit with `git archive`, so no work tree is ever checked out.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..core.credentials import (
    HostLogin,
    git_auth_environment,
    host_login,
    login_for,
    public_url,
    redact_text,
    redact_url,
    secret_values,
    tool_environment,
)
from ..core.errors import SglstackError
from ..core.safefiles import open_log
from .wheels import cache_root

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
HEX_PREFIX = re.compile(r"^[0-9a-f]{4,40}$")
# Every branch and every tag: refs a user names in --good/--bad, and the history between them.
REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
# A commit fetched by sha alone (not on any branch) is kept under this namespace.
FETCHED_COMMITS = "refs/sglstack/commits/"


class GitSourceError(SglstackError):
    """git could not fetch a source, resolve a ref or export a tree (the message names the source)."""


def checkout_commit(folder: Path) -> str | None:
    """The commit a git checkout is at, suffixed `-dirty` with local edits to tracked files; None when git
    cannot say (no git, not a repository git can read)."""
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True, env=tool_environment()).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True,
                               env=tool_environment()).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def git_cache_dir() -> Path:
    return cache_root() / "git"


def display_url(url: str) -> str:
    """The source as it may be printed: credentials in a URL (`https://user:token@host/...`) redacted."""
    return redact_url(url)


def normalize_source(url: str) -> str:
    """What git is asked to fetch: URLs unchanged, local paths made absolute (git runs elsewhere)."""
    if "://" in url or re.match(r"^[\w.-]+@[\w.-]+:", url):  # scheme URL, or scp-like user@host:path
        return url
    return str(Path(url).expanduser().resolve())


class GitSource:
    """One repository's bare cache. Construction only names it; `fetch()` is the only network step."""

    def __init__(self, url: str, *, cache: Path | None = None, logins: Iterable[HostLogin] = ()) -> None:
        # Credentials never stay in the URL git is given (it would show them in messages and `ps`): git
        # gets the URL without them and an Authorization header through its environment. The cache is
        # keyed by that URL, so a rotated token keeps the cache.
        logins = (*logins, *filter(None, [host_login(url)]))
        self.url = normalize_source(public_url(url))
        self._login = login_for(self.url, logins)
        key = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        tail = re.sub(r"[^A-Za-z0-9._-]+", "-", self.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))
        self.git_dir = (cache or git_cache_dir()) / f"{tail[:40] or 'repo'}-{key}.git"

    @property
    def label(self) -> str:
        return display_url(self.url)

    # ---- the cache -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer per cache: two sglstack runs fetching the same source must not interleave."""
        lock = self.git_dir.with_suffix(".lock")
        with open_log(lock.parent, lock, append=True) as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _ensure_repo(self) -> None:
        if not (self.git_dir / "HEAD").is_file():
            self._git("init", "--bare", "--quiet", str(self.git_dir), git_dir=False)

    def fetch(self, *refs: str) -> None:
        """Fetch every branch and tag of the source (or just `refs`, e.g. a sha on no branch)."""
        with self._locked():
            self._ensure_repo()
            if refs:
                specs = [f"+{r}:{FETCHED_COMMITS}{r}" for r in refs]
                self._git("fetch", "--quiet", "--no-tags", self.url, *specs, network=True)
            else:
                self._git("fetch", "--quiet", "--force", "--prune", self.url, *REFSPECS, network=True)

    def has_commit(self, ref: str) -> bool:
        if not (self.git_dir / "HEAD").is_file():
            return False
        return self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).returncode == 0

    def resolve(self, ref: str) -> str:
        """The full sha of `ref` (a sha, a short sha, a tag, a branch).

        A full sha already in the cache needs no network; anything else is fetched first, so a branch
        name means what the source says now. A sha on no branch is fetched by itself as a last resort.
        """
        ref = ref.strip()
        if not ref or ref.startswith("-"):
            raise GitSourceError(f"git source {self.label}: '{ref}' is not a commit, tag or branch")
        if FULL_SHA.match(ref) and self.has_commit(ref):
            return ref
        self.fetch()
        for candidate in (ref, f"refs/tags/{ref}", f"refs/heads/{ref}"):
            if self.has_commit(candidate):
                return self._git("rev-parse", f"{candidate}^{{commit}}").stdout.strip()
        if FULL_SHA.match(ref):
            with contextlib.suppress(GitSourceError):
                self.fetch(ref)
            if self.has_commit(ref):
                return ref
        raise GitSourceError(f"git source {self.label}: no commit, tag or branch '{ref}'")

    # ---- history -------------------------------------------------------------------------------

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self._git("merge-base", "--is-ancestor", older, newer, check=False).returncode == 0

    def first_parent_range(self, good: str, bad: str) -> list[str]:
        """The commits after `good` up to and including `bad`, oldest first, along first parents.

        First parents are the mainline's own history (each merge counts as the change it brought in),
        which is what a bisect of a release branch tests.
        """
        out = self._git("rev-list", "--first-parent", "--reverse", f"{good}..{bad}").stdout
        return [line for line in out.split() if line]

    def subject(self, sha: str) -> str:
        return self._git("log", "-1", "--format=%s", sha).stdout.strip()

    def subjects(self, shas: Sequence[str]) -> dict[str, str]:
        if not shas:
            return {}
        out = self._git("log", "--no-walk=unsorted", "--format=%H %s", *shas).stdout
        return dict(line.split(" ", 1) if " " in line else (line, "") for line in out.splitlines() if line)

    # ---- export --------------------------------------------------------------------------------

    def export(self, sha: str, subdirectory: str, dest: Path) -> list[Path]:
        """Write the tree of `sha:subdirectory` into a fresh `dest`; return the files written, sorted."""
        sub = subdirectory.strip("/")
        treeish = f"{sha}:{sub}" if sub else sha
        if not self.has_commit(sha):
            self.resolve(sha)
        if self._git("cat-file", "-t", treeish, check=False).stdout.strip() != "tree":
            raise GitSourceError(f"git source {self.label}: commit {sha[:12]} has no folder '{sub}'")
        archive = self._git("archive", "--format=tar", treeish, text=False).stdout
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            # The data filter refuses absolute paths, links out of `dest` and device files.
            tar.extractall(dest, filter="data")
        return sorted(p for p in dest.rglob("*") if p.is_file())

    # ---- the one subprocess call ---------------------------------------------------------------

    def _git(self, *args: str, git_dir: bool = True, check: bool = True, network: bool = False,
             text: bool = True) -> subprocess.CompletedProcess:
        cmd = ["git", *(("--git-dir", str(self.git_dir)) if git_dir else ()), *args]
        # No interactive password prompt: a long bisect must fail with a message, not hang on one.
        env = tool_environment({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C",
                                **(git_auth_environment(self.url, self._login) if network else {})})
        try:
            proc = subprocess.run(cmd, capture_output=True, text=text, check=False, env=env,
                                  timeout=3600 if network else 600)
        except FileNotFoundError:
            raise GitSourceError("git is not installed on this host (it fetches git sources)") from None
        except subprocess.TimeoutExpired:
            raise GitSourceError(f"git source {self.label}: `git {args[0]}` timed out") from None
        if check and proc.returncode != 0:
            err = proc.stderr if text else proc.stderr.decode("utf-8", "replace")
            lines = [line for line in err.strip().splitlines() if line.strip()]
            last = lines[-1] if lines else f"exit {proc.returncode}"
            hidden = secret_values([self._login] if self._login else [])
            raise GitSourceError(f"git source {self.label}: git {args[0]} failed: {redact_text(last, hidden)}")
        return proc
