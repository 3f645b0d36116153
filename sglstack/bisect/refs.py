"""The refs of a bisect and what is tried on the host before a step builds: the refs between good and bad
(first-parent commits of a git stack, releases of a PyPI one), the stack at a ref, and whether that ref's own
source takes the stack's patches (a patch that does not apply makes the step a skip before any build).
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from pathlib import Path

from ..adapters.git import GitSource, GitSourceError
from ..adapters.wheels import WheelFetchError, available_versions, fetch_wheel
from ..config.schema import Stack
from ..core.errors import SglstackError, shown
from ..core.versions import version_problem
from ..patches.host import load_specs, stack_patch_problem, unpack_for_patches
from .releases import ReleaseRangeError, releases_between

MODE_GIT = "git"
MODE_RELEASE = "release"
EXIT_BAD_INPUT = 2


class BisectInputError(SglstackError):
    """Bad input to `invoke bisect` (stack, refs, options): exit 2, before any build."""

    exit_code = EXIT_BAD_INPUT



# ---- the refs ----------------------------------------------------------------------------------


def mode_of(stack: Stack) -> str:
    return MODE_GIT if stack.sglang.git is not None else MODE_RELEASE


def source_of(stack: Stack) -> str:
    git = stack.sglang.git
    return GitSource(git.repo, logins=stack.credentials).label if git is not None else "sglang on the package index"


def resolve_endpoint(stack: Stack, ref: str, name: str) -> str:
    """A full commit sha (git stacks) or the release as given (PyPI stacks)."""
    if stack.sglang.git is None:
        problem = version_problem(ref)
        if problem:
            raise BisectInputError(f"--{name} {shown(ref)}: stack '{stack.name}' takes SGLang releases: {problem}")
        return ref
    try:
        return GitSource(stack.sglang.git.repo, logins=stack.credentials).resolve(ref)
    except GitSourceError as exc:
        raise BisectInputError(f"--{name} {ref}: {exc}") from None


def refs_between(stack: Stack, good: str, bad: str) -> list[str]:
    """[good, ..., bad]: first-parent commits oldest first, or releases in version order."""
    if stack.sglang.git is not None:
        repo = GitSource(stack.sglang.git.repo, logins=stack.credentials)
        if good == bad:
            raise BisectInputError(f"--good and --bad are the same commit {good[:12]}")
        if not repo.is_ancestor(good, bad):
            raise BisectInputError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]} in {repo.label}")
        return [good, *repo.first_parent_range(good, bad)]
    try:
        return releases_between(available_versions("sglang"), good, bad)
    except (ReleaseRangeError, WheelFetchError) as exc:
        raise BisectInputError(f"--good {good} --bad {bad}: {exc}") from None


def stack_at(stack: Stack, ref: str) -> Stack:
    """The stack with SGLang at `ref`; everything else (pins, patches, smoke) as configured."""
    if stack.sglang.git is not None:
        git = stack.sglang.git.model_copy(update={"ref": ref})
        return stack.model_copy(update={"sglang": stack.sglang.model_copy(update={"git": git})})
    return stack.model_copy(update={"sglang": stack.sglang.model_copy(update={"version": ref})})


def subjects_of(stack: Stack, refs: list[str]) -> dict[str, str]:
    if stack.sglang.git is None:
        return {ref: f"sglang {ref}" for ref in refs}
    try:
        return GitSource(stack.sglang.git.repo, logins=stack.credentials).subjects(refs)
    except GitSourceError:
        return {}


# ---- the patches, tried on the host ------------------------------------------------------------


def source_version(tree: Path) -> str | None:
    """The version a source tree builds: pyproject's static one, else sglang/version.py's."""
    pyproject = tree / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project") or {}
        except tomllib.TOMLDecodeError:
            project = {}
        if isinstance(project.get("version"), str):
            return project["version"]
    version_py = tree / "sglang" / "version.py"
    if version_py.is_file():
        match = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", version_py.read_text(encoding="utf-8"))
        if match:
            return match.group(1)
    return None


def patch_skip(stack: Stack, ref: str, patches_dir: Path) -> tuple[str, str] | None:
    """(kind, reason) when this ref cannot get its patches, or no source; None when they apply."""
    git = stack.sglang.git
    if not stack.patches and git is None:
        return None
    with tempfile.TemporaryDirectory(prefix="sglstack-bisect-") as tmp:
        if git is not None:
            try:
                root = Path(tmp) / "tree"
                GitSource(git.repo, logins=stack.credentials).export(ref, git.subdirectory, root)
            except GitSourceError as exc:
                return "source", str(exc)
            if not stack.patches:
                return None
            version = source_version(root)
        else:
            wheel = fetch_wheel("sglang", ref)
            root = unpack_for_patches(wheel, load_specs(stack.patches, patches_dir), Path(tmp))
            version = ref
        if problem := stack_patch_problem(root, stack, version, patches_dir):
            return "patch", problem
    return None
