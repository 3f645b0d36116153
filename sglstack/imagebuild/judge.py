"""What a built image's facts say against its stack (pure): its pins (torch's local label too), its lock, its
`pip check`, its shared libraries (with the stack's declared exceptions), its JIT toolchain, the server's help
and argv. `verify` reads the facts from the image; each function here turns them into one message per problem.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..config.fields import cuda_release
from ..config.schema import Stack
from ..config.settings import SharedLibrariesPolicy
from ..lockfile.current import compare_installed, same_version
from ..lockfile.model import Lock


def torch_version_matches(reported: str, pinned: str) -> bool:
    """`torch.__version__` against the pin: PyPI's CUDA builds report a local label the distribution's own
    version lacks (torch 2.14.1 from PyPI says `2.14.1+cu130`), so a pin without one matches any label."""
    if reported == pinned:
        return True
    try:
        want = Version(pinned)
        return not want.local and Version(reported).public == want.public
    except InvalidVersion:
        return False


def pin_mismatches(stack: Stack, image_info: dict[str, Any]) -> list[str]:
    """One message per pin the image does not honour; empty when the image matches its stack."""
    installed: dict[str, str] = {str(canonicalize_name(k)): v for k, v in image_info.get("distributions", {}).items()}
    problems: list[str] = []
    for name, want in sorted(stack.pins().items()):
        got = installed.get(name)
        if got is None:
            problems.append(f"{name}: pinned {want}, not installed")
        elif not same_version(got, want):
            problems.append(f"{name}: pinned {want}, installed {got}")
    torch = image_info.get("torch")
    if stack.torch:
        if not torch or "version" not in torch:
            problems.append(f"torch: pinned {stack.torch.version}, but 'import torch' failed: "
                            f"{(torch or {}).get('import_error', 'not importable')}")
        else:
            if not torch_version_matches(torch["version"], stack.torch.version):
                problems.append(f"torch reports {torch['version']}, pinned {stack.torch.version}")
            if stack.cuda:
                want_cuda = stack.cuda_release
                if not torch.get("cuda"):
                    problems.append(f"torch {torch['version']} is a CPU build; the stack needs CUDA {want_cuda}")
                elif torch["cuda"] != want_cuda:
                    problems.append(f"torch was built for CUDA {torch['cuda']}, the stack needs CUDA {want_cuda}")
    return problems


def lock_mismatches(lock: Lock, image_info: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The installed set against the lock, exactly: (problems naming every missing, extra or different
    package; notices for the extras an unresolved layer's own dependencies explain)."""
    comparison = compare_installed(lock, image_info.get("distributions", {}))
    return list(comparison.problems), list(comparison.notices)


# pip check's lines (pip 23-25): "A 1.0 requires B, which is not installed." and
# "A 1.0 has requirement B==2, but you have B 3." (anything else is reported as written).
_PIP_MISSING = re.compile(r"^(?P<dist>\S+) (?P<version>\S+) requires (?P<req>.+), which is not installed\.?$")
_PIP_CONFLICT = re.compile(r"^(?P<dist>\S+) (?P<version>\S+) has requirement (?P<req>.+), "
                           r"but you have (?P<have>\S+) (?P<have_version>\S+?)\.?$")


def _requirement_name(text: str) -> str | None:
    try:
        return str(canonicalize_name(Requirement(text).name))
    except InvalidRequirement:
        return None


def pip_check_problems(stack: Stack, image_info: dict[str, Any]) -> list[str]:
    """`pip check` in the image, less the contradictions the stack declares as overrides.

    With `sglang.install_deps: false` SGLang's own requirements are not installed, on purpose.
    An override replaces a requirement wherever it occurs (as the resolver applies it), so a line whose
    requirement is an override's `replaces`, and whose installed version is the override's pin (or, for a
    missing one, which the override replaced by another package), is the declared choice, not a finding.
    """
    check = image_info.get("pip_check")
    if check is None:  # an installed.json from before pip check ran in the verify step
        return []
    if not check.get("ran"):
        return [f"pip check could not run in the image: {check.get('error', 'unknown error')}"]
    replaced = {}
    for o in stack.overrides:
        name = _requirement_name(o.replaces)
        if name:
            replaced[name] = Requirement(o.pin)
    problems = []
    for line in check.get("problems", []):
        m = _PIP_CONFLICT.match(line) or _PIP_MISSING.match(line)
        if m and not stack.sglang.install_deps and canonicalize_name(m.group("dist")) == "sglang":
            continue  # `sglang.install_deps: false`: SGLang's own requirements are left out on purpose
        name = _requirement_name(m.group("req")) if m else None
        override = replaced.get(name) if name else None
        if override is not None and m is not None:
            pin = next(iter(override.specifier)).version
            have = m.groupdict().get("have_version")
            if (have is not None and have == pin) or (have is None and canonicalize_name(override.name) != name):
                continue
        problems.append(f"pip check: {line.rstrip('.')}")
    return problems


def site_relative(path: str, folders: Sequence[str]) -> str:
    """`/opt/venv/.../site-packages/a/b.so` -> `a/b.so` (the path as a stack's exceptions name it)."""
    for folder in folders:
        if path.startswith(folder.rstrip("/") + "/"):
            return path[len(folder.rstrip("/")) + 1:]
    return path


def waived_libraries(report: dict[str, Any], policy: SharedLibrariesPolicy) -> tuple[dict[str, list[str]],
                                                                                   dict[str, str], list[str]]:
    """(unresolved files no exception covers, {covered file: reason}, stale exceptions matching nothing).

    An exception covers a file with a missing library and a file built for another CPU alike (a wheel's
    cross-compilation stubs for the other platform, never loaded here): `foreign_libraries` gives the rest."""
    libs = report.get("shared_libraries") or {}
    folders = libs.get("folders") or []
    left: dict[str, list[str]] = {}
    waived: dict[str, str] = {}
    used: set[int] = set()
    for path, needs in sorted((libs.get("unresolved") or {}).items()):
        rel = site_relative(path, folders)
        exc = next((i for i, e in enumerate(policy.exceptions) if fnmatch.fnmatchcase(rel, e.file)), None)
        if exc is None:
            left[path] = needs
        else:
            used.add(exc)
            waived[rel] = policy.exceptions[exc].reason
    for path in sorted(libs.get("foreign") or {}):
        rel = site_relative(path, folders)
        exc = next((i for i, e in enumerate(policy.exceptions) if fnmatch.fnmatchcase(rel, e.file)), None)
        if exc is not None:
            used.add(exc)
            waived[rel] = policy.exceptions[exc].reason
    stale = [f"shared_libraries exception '{e.file}' matches no file with a missing library or of another CPU: "
             "remove it" for i, e in enumerate(policy.exceptions) if i not in used]
    return left, waived, stale


def foreign_libraries(report: dict[str, Any], policy: SharedLibrariesPolicy) -> list[tuple[str, str]]:
    """(file, its CPU) of each compiled file built for another CPU than the image's that no exception covers."""
    libs = report.get("shared_libraries") or {}
    folders = libs.get("folders") or []
    return [(path, machine) for path, machine in sorted((libs.get("foreign") or {}).items())
            if not any(fnmatch.fnmatchcase(site_relative(path, folders), e.file) for e in policy.exceptions)]


NO_LIBRARY_EXCEPTIONS = SharedLibrariesPolicy()


def jit_problems(jit: dict[str, Any], cuda: str | None) -> list[str]:
    """The JIT toolchain check's failures: it did not compile and link, or its nvcc is another CUDA than the stack's."""
    archs = ", ".join(jit.get("archs") or [])
    nvcc = f"{jit.get('cuda_home')}/bin/nvcc"
    if jit.get("returncode") is None and jit.get("error"):
        return [f"JIT toolchain: {jit['error']} (FlashInfer, DeepGEMM and torch compile kernels with "
                "$CUDA_HOME/bin/nvcc at run time)"]
    problems: list[str] = []
    release = jit.get("release")
    wanted = cuda_release(cuda)
    if release and wanted and release != wanted:
        problems.append(f"JIT toolchain: {nvcc} is CUDA {release}, the stack's CUDA is {wanted} (pin the compiler "
                        f"to the CUDA of its headers, e.g. cuda-toolkit[nvcc,cccl]=={wanted}.*)")
    if "driver_stub" in jit and not jit["driver_stub"]:
        problems.append(f"JIT toolchain: nothing for -lcuda: no {jit.get('cuda_home')}/lib64/stubs/libcuda.so "
                        "(FlashInfer links every JIT module with -lcuda: a CUDA toolkit's stub, or a link to the "
                        "driver's libcuda.so.1 that the NVIDIA runtime mounts)")
    if jit.get("returncode") != 0:
        lines = [ln.strip() for ln in (jit.get("error") or "").splitlines() if ln.strip()]
        telling = next((ln for ln in lines if "error" in ln.lower() or "cannot find" in ln),
                       lines[-1] if lines else "no output")
        problems.append(f"JIT toolchain: {nvcc} (CUDA {release or 'unknown'}) cannot build a CUDA extension for "
                        f"{archs} with -L$CUDA_HOME/lib64 -lcudart: {telling}")
    return problems


def image_check_problems(report: dict[str, Any], policy: SharedLibrariesPolicy = NO_LIBRARY_EXCEPTIONS,
                         cuda: str | None = None) -> list[str]:
    """One message per failure of the in-image checks (`incontainer/imagecheck.py`'s report); empty when clean."""
    problems: list[str] = []
    libs = report.get("shared_libraries") or {}
    unresolved, _, _ = waived_libraries(report, policy)
    if unresolved:
        first, needs = next(iter(sorted(unresolved.items())))
        more = f" (and {len(unresolved) - 1} more file(s))" if len(unresolved) > 1 else ""
        problems.append(f"shared libraries: {first} needs {', '.join(needs)}, which the image does not have{more}; "
                        "declare an exception under 'shared_libraries' with its reason, or add the library")
    for path, why in sorted((libs.get("unreadable") or {}).items())[:1]:
        problems.append(f"shared libraries: cannot read {path}: {why}")
    if foreign := foreign_libraries(report, policy):
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        problems.append(f"shared libraries: {foreign[0][0]} is built for {foreign[0][1]}, not for the image's CPU"
                        f"{more}: a wheel of another platform was installed")
    helped = report.get("server_help")
    if helped is not None and (helped.get("returncode") != 0 or not helped.get("lists_model_path")):
        last = (helped.get("error") or "").strip().splitlines()
        problems.append(f"python -m sglang.launch_server --help failed (exit {helped.get('returncode')}): "
                        f"{last[-1] if last else 'no --model-path in its help'}")
    parsed = report.get("serving_argv")
    if parsed is not None:
        if parsed.get("error"):
            problems.append(f"serving argv: {parsed['error']}")
        for result in parsed.get("results") or []:
            if not result.get("ok"):
                problems.append(f"serving argv refused by the image's SGLang: {result.get('error')} "
                                f"(argv: {' '.join(result.get('argv') or [])})")
    if report.get("jit_toolchain") is not None:
        problems += jit_problems(report["jit_toolchain"], cuda)
    return problems
