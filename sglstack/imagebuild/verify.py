"""Every check of a built image that reads the image or runs in it (patch manifest, installed set, shared
libraries, the server's argv, the SBOM inventory), each in a container of its own with the network off; what
the facts say against the stack is `judge` (pure)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shlex
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import docker
import docker.errors

from ..adapters.docker import created_container, engine_image, running_container
from ..config.schema import Stack
from ..core import labels as lb
from ..core.errors import BuildError, ImageCheckFailed, PinMismatch
from ..core.inputs import loads
from ..core.labels import PATCH_LABEL_PREFIX, VERIFIED_LABEL
from ..inventory.listing import image_inventory
from ..inventory.model import Inventory, lock_problems
from ..lock.plan import root_names
from ..lock.trust import unrequired_in_image
from ..lockfile.current import source_mismatches
from ..lockfile.model import Lock
from ..render.dockerfile import RELEASED_TARGET
from ..serving import LAUNCH, serving_argv, serving_spec
from .emulation import emulated_cpuinfo, time_scale, timeout_options
from .importclosure import import_closure_option, import_closure_record, judge_imports
from .judge import image_check_problems, lock_mismatches, pin_mismatches, pip_check_problems, waived_libraries
from .seedbase import check_seeded_base

FINAL_TARGET = RELEASED_TARGET
WHEELS_TARGET = "wheels"  # a stack of several platforms: its locked wheels, unpacked on the build machine


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
    if target == WHEELS_TARGET:  # its every file was checked against the lock's hashes as it was fetched
        return [], None
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
        found = str(engine_image(client, stack.base_image).id)
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
                       scale: int = 1, files: Mapping[str, bytes] | None = None) -> dict[str, Any]:
    """imagecheck.py's report, run as `command` in a container of `image` (network off), not yet judged; `scale`
    multiplies the time it is given (`time_scale`: an emulated platform's); `files` ({absolute path: bytes}) are
    put in the container before it starts."""
    with emulated_cpuinfo(stack, scale) as cpuinfo, _check_container(client, image, stack, command, files or {},
                                                                     cpuinfo) as container:
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


@contextlib.contextmanager
def _check_container(client: docker.DockerClient, image: str, stack: Stack, command: list[str],
                     files: Mapping[str, bytes], options: Mapping[str, Any]) -> Iterator[Any]:
    """A started container of the in-image checks (network off), with `files` copied in first; removed on exit."""
    common = {"name_prefix": "sglstack-check", "labels": container_labels(stack), "entrypoint": [],
              "network_disabled": True, **options}
    if not files:
        with running_container(client, image, command=command, **common) as container:
            yield container
        return
    with created_container(client, image, command=command, **common) as container:
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for path, body in sorted(files.items()):
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode = len(body), 0o644
                tar.addfile(info, io.BytesIO(body))
        if not container.put_archive("/", data.getvalue()):
            raise ImageCheckFailed(f"stack '{stack.name}': could not copy {', '.join(sorted(files))} into the "
                                   "in-image checks' container")
        container.start()
        yield container


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
