"""Every check of a built image: what it really contains against what its stack pinned (pure), and the
checks that read the image or run in it (patch manifest, installed set, shared libraries, the server's
argv), each in a container of its own with the network off."""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import re
import shlex
import tarfile
from collections.abc import Mapping, Sequence
from typing import Any

import docker
import docker.errors
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..adapters.docker import created_container, running_container
from ..attest.image import image_inventory
from ..attest.sbom import Inventory, lock_problems
from ..config.fields import cuda_release
from ..config.schema import Stack
from ..config.settings import SharedLibrariesPolicy
from ..core import labels as lb
from ..core.errors import BuildError, ImageCheckFailed, PinMismatch
from ..core.inputs import loads
from ..core.labels import PATCH_LABEL_PREFIX, VERIFIED_LABEL
from ..lock.plan import root_names
from ..lock.trust import unrequired_in_image
from ..lockfile.current import compare_installed, source_mismatches
from ..lockfile.model import Lock
from ..render.dockerfile import RELEASED_TARGET
from ..serving import LAUNCH, serving_argv, serving_spec
from .emulation import emulated_cpuinfo, time_scale, timeout_options
from .importclosure import import_closure_option, import_closure_record, judge_imports
from .seedbase import check_seeded_base


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


def same_version(installed: str, pinned: str) -> bool:
    """PEP 440 equality, as `==` in the pin means it: `cuda-toolkit==13.0.3` is met by 13.0.3.0."""
    if installed == pinned:
        return True
    try:
        return Version(installed) == Version(pinned)
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


FINAL_TARGET = RELEASED_TARGET


SRC_TREE, SRC_MANIFEST = "/src/tree", "/out/patches.json"

# Containers a build starts carry the stack's name here (and OWNER_LABEL), so that they can be found.
BUILD_CONTAINER_LABEL = lb.BUILD_CONTAINER_LABEL


# What the runtime stage's last RUN step verified and measured, inside the image (see Dockerfile.j2).
RUNTIME_MANIFEST = "/opt/sglstack/patches.json"


RUNTIME_INSTALLED = "/opt/sglstack/installed.json"


def verified_labels(manifest: list[dict[str, Any]], image_info: dict[str, Any] | None) -> dict[str, str]:
    labels = {VERIFIED_LABEL: "true"}
    for entry in manifest:
        labels[f"{PATCH_LABEL_PREFIX}{entry.get('id')}"] = (
            f"{entry.get('status')} sha256:{entry.get('sha256_before', '')[:16]}->"
            f"{entry.get('sha256_after', '')[:16]}")
    if image_info is not None:
        freeze = "\n".join(f"{k}=={v}" for k, v in sorted(image_info.get("distributions", {}).items()))
        labels[lb.FREEZE_LABEL] = hashlib.sha256(freeze.encode()).hexdigest()
        if image_info.get("torch") and image_info["torch"].get("version"):
            labels[lb.TORCH_LABEL] = f"{image_info['torch']['version']} cuda {image_info['torch'].get('cuda')}"
    return labels


def check_pins(stack: Stack, image_info: dict[str, Any], lock: Lock | None = None) -> None:
    """The installed set against the stack's pins and, when it has one, its lock (exactly)."""
    problems = pin_mismatches(stack, image_info) + pip_check_problems(stack, image_info)
    if lock is not None:
        problems += source_mismatches(lock, stack) + lock_mismatches(lock, image_info)[0]
    if problems:
        raise PinMismatch(f"stack '{stack.name}': the image does not match its pins: {'; '.join(problems)}")


def container_labels(stack: Stack) -> dict[str, str]:
    return {BUILD_CONTAINER_LABEL: stack.name}


def read_image_files(client: docker.DockerClient, image: str, paths: Sequence[str],
                     labels: Mapping[str, str]) -> dict[str, bytes]:
    """The bytes of each file at `paths` in `image`, without running anything in it."""
    out: dict[str, bytes] = {}
    with created_container(client, image, name_prefix="sglstack-verify", labels=labels, command=["true"],
                           entrypoint=[], network_disabled=True) as container:
        for path in paths:
            try:
                stream, _ = container.get_archive(path)
            except docker.errors.NotFound:
                raise BuildError(f"the built image has no {path}") from None
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                extracted = tar.extractfile(member) if member is not None else None
                if extracted is None:
                    raise BuildError(f"{path} in the built image is not a file")
                out[path] = extracted.read()
    return out


def verified_facts(client: docker.DockerClient, image: str, stack: Stack, target: str,
                   lock: Lock | None = None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The patch manifest and, for the serving image, what is really installed in it.

    The runtime stage verified its installed, patched tree and wrote both files in its last RUN step (a
    failure there fails the build), so they are read back here without running the image again. The
    `sglang-src` stage only applies the patches (`apply` checks its result before writing), so a build
    of that target verifies its tree once, in one container.
    """
    labels = container_labels(stack)
    if target == FINAL_TARGET:
        files = read_image_files(client, image, (RUNTIME_MANIFEST, RUNTIME_INSTALLED), labels)
        manifest, info = (loads(files[p]) for p in (RUNTIME_MANIFEST, RUNTIME_INSTALLED))
        check_pins(stack, info, lock)
        return manifest, info
    if not stack.patches:
        return loads(read_image_files(client, image, (SRC_MANIFEST,), labels)[SRC_MANIFEST]), None
    verify = (f"PYTHONPATH=/opt/sglstack/tools python3 -m patchkit verify --root {SRC_TREE} "
              f"--patches-dir /opt/sglstack/patches --manifest {SRC_MANIFEST} "
              f"{' '.join(shlex.quote(i) for i in stack.patches)} >&2 && cat {SRC_MANIFEST}")
    with running_container(client, image, command=["bash", "-c", verify], name_prefix="sglstack-verify",
                           labels=labels, entrypoint=[], network_disabled=True) as container:
        code = int(container.wait(timeout=600).get("StatusCode", 1))
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    if code != 0:
        last = (err or out).strip().splitlines()
        raise BuildError(f"stack '{stack.name}': patch verification in the built image failed: "
                         f"{last[-1] if last else f'exit {code}'}")
    return loads(out), None


IMAGECHECK = "/opt/sglstack/tools/imagecheck.py"


IMAGECHECK_TIMEOUT_S = 1200  # importing SGLang and torch for --help on a loaded 2-core machine takes minutes
def check_base_image(client: docker.DockerClient, stack: Stack) -> None:
    """A stack that pins its base by image id builds only on that image, a seeded base only on its pinned root
    file system for the platform built (one line otherwise)."""
    if stack.base_seed:
        check_seeded_base(client, stack.for_platform(stack.platforms[0]))
        return
    if not stack.base_image_id:
        return
    try:
        found = str(client.images.get(stack.base_image).id)
    except docker.errors.ImageNotFound:
        raise BuildError(f"stack '{stack.name}': base_image {stack.base_image} is not on this engine (the stack "
                         f"pins image {stack.base_image_id}: make or load that image and tag it so)") from None
    if found != stack.base_image_id:
        raise BuildError(f"stack '{stack.name}': base_image {stack.base_image} is image {found}, but the stack pins "
                         f"base_image_id {stack.base_image_id}")


def serving_argvs(stack: Stack) -> list[list[str]]:
    """The server argv of each way the stack is served (with speculation, and the smoke's baseline), after
    `python3 -m sglang.launch_server`: what smoke, compose and the manifests run."""
    spec = serving_spec(stack)
    argvs = [serving_argv(spec)[len(LAUNCH):]]
    if spec.speculative_on:
        argvs.append(serving_argv(spec.baseline())[len(LAUNCH):])
    return argvs


def image_check_argv(stack: Stack, scale: int = 1) -> list[str]:
    """`imagecheck.py`'s command line: shared libraries always; the server's --help, the serving argv and the
    import closure of the serving path where SGLang is installed with its requirements (a `install_deps: false`
    test stack's SGLang cannot import, by design); the JIT toolchain for a CUDA stack's capabilities."""
    command = ["python", IMAGECHECK, *timeout_options(scale)]
    if stack.sglang.install_deps:
        command += ["--server-help", *(f"--argv={json.dumps(a)}" for a in serving_argvs(stack)),
                    import_closure_option(stack)]
    if stack.cuda and stack.cuda_arch_list:
        command += [f"--jit-arch={arch}" for arch in stack.cuda_arch_list]
    return command


def run_image_checks(client: docker.DockerClient, image: str, stack: Stack) -> dict[str, Any]:
    """Run the in-image checks in a container of `image` (network off); raise ImageCheckFailed on a problem."""
    scale = time_scale(client, stack)
    return judged_image_checks(stack, image_check_report(client, image, stack, image_check_argv(stack, scale), scale))


def image_check_report(client: docker.DockerClient, image: str, stack: Stack, command: list[str],
                       scale: int = 1) -> dict[str, Any]:
    """imagecheck.py's report, run as `command` in a container of `image` (network off), not yet judged; `scale`
    multiplies the time it is given (`time_scale`: an emulated platform's)."""
    with emulated_cpuinfo(stack, scale) as cpuinfo, running_container(
            client, image, command=command, name_prefix="sglstack-check", labels=container_labels(stack),
            entrypoint=[], network_disabled=True, **cpuinfo) as container:
        code = int(container.wait(timeout=IMAGECHECK_TIMEOUT_S * scale).get("StatusCode", 1))
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    try:
        report = loads(out) if code == 0 else None
    except ValueError:
        report = None
    if report is None:
        last = (err or out).strip().splitlines()
        raise ImageCheckFailed(f"stack '{stack.name}': the in-image checks did not run: "
                               f"{last[-1] if last else f'exit {code}'}")
    return report


def judged_image_checks(stack: Stack, report: dict[str, Any]) -> dict[str, Any]:
    """The in-image checks' report judged: ImageCheckFailed on a problem, else the report with its notes."""
    imports = judge_imports(report.get("import_closure"), stack.runtime_imports)
    problems = image_check_problems(report, stack.shared_libraries, stack.cuda) + imports["errors"]
    if problems:
        raise ImageCheckFailed(f"stack '{stack.name}': the image fails its in-image checks: {'; '.join(problems)}")
    _, waived, stale = waived_libraries(report, stack.shared_libraries)
    return {**report, "import_closure": import_closure_record(report.get("import_closure"), imports),
            "waived_libraries": waived, "notes": stale + imports["stale"]}


def sbom_inventory(client: docker.DockerClient, image: str, stack: Stack, lock: Lock | None) -> Inventory:
    """The image's packages as listed inside it for its SBOM; a Python distribution in the image and not
    in the lock, or the reverse, fails the build (Debian packages are listed, not compared), and so does a
    locked one that no package the stack asks for requires, by the installed distributions' own metadata."""
    inventory = image_inventory(client, image, labels=container_labels(stack))
    problems = [*lock_problems(inventory, lock),
                *unrequired_in_image(lock, root_names(stack), inventory.python, inventory.requires)
                ] if lock is not None else []
    if problems:
        raise PinMismatch(f"stack '{stack.name}': the image's SBOM does not match its lock: {'; '.join(problems)}")
    return inventory
