"""Pure rendering: a `Stack` -> its Dockerfile text and build-context files.

Nothing here touches Docker or the network. The same stack renders byte-identical output, so the
config hash (`confighash.py`) of a rendered context identifies a build.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..config.cudaimages import cuda_image_tag
from ..config.platforms import MACHINE, unpacks_wheels
from ..config.schema import Stack
from ..core import labels as lb
from ..core.quoting import (
    shell_word,
    shell_word_with,
)
from ..core.resources import DEFAULT_PATCHES_DIR, IMAGES_DIR, PATCHKIT_DIR, TOOLS_DIR
from ..lockfile.model import VENV_BOOTSTRAP, Lock
from . import confighash
from .templates import environment

# pip matches --platform tags exactly, so the src stage lists every manylinux minor it accepts.
MANYLINUX_MINORS = tuple(range(17, 40))
PYTHON_PACKAGES = ("python{v}", "python{v}-venv")
# The context folder a git source's tree goes into. Rendering only names it; the build fills it from
# git on the host (build.add_git_source), so rendering stays pure.
GIT_SOURCE_DIR = "sglang-src"


@dataclass(frozen=True)
class InstallLayer:
    """One `pip install` RUN step of the runtime stage."""

    name: str
    comment: str
    args: tuple[str, ...]
    constrained: bool  # freeze what is installed as constraints, so nothing earlier is replaced silently
    uses_arch: bool = False
    after_sglang: bool = False
    lock_part: str | None = None  # installs context file lock/<name>.txt (hash-checked, no resolution)
    on_build_platform: bool = False  # a locked part unpacked in the wheels stage, natively; the runtime copies it


LOCK_MOUNT = "/run/sglstack-lock"
# Where a locked RUN step of an amd64 stack finds uv (the `uv` stage's /opt/uv, pinned in images/uv.txt).
UV_MOUNT = "/run/sglstack-uv"
UV_REQUIREMENT = IMAGES_DIR / "uv.txt"
# Where the wheels stage unpacks each locked part (`<root>/<part>/opt/venv/...`), for the runtime to COPY.
WHEELS_ROOT = "/stage"
# The wheels stage's build tools: the stack's Python, its venv, and pypa's installer (Debian's python3-installer).
WHEELS_APT = ("python{v}", "python{v}-venv", "python3-installer", "ca-certificates")
# The glibc a lock resolves for when neither the lock nor the stack names one (`lock.plan.MANYLINUX`).
BASELINE_GLIBC_MINOR = 28
# The BuildKit secret that carries the netrc of a stack whose URLs had credentials (`credentials.py`);
# pip-env.sh points NETRC at /run/secrets/<this id>. Mounted only by stacks that have credentials.
INDEX_NETRC_SECRET = "index_netrc"


def locked_layer(layer: InstallLayer, lock: Lock | None) -> InstallLayer:
    """The layer installing exactly its part of the lock, when the lock has all of it hashed."""
    if lock is None or not lock.installs_layer(layer.name):
        return layer
    force = ("--force-reinstall",) if "--force-reinstall" in layer.args else ()
    return dataclasses.replace(layer, args=("--no-deps", "--require-hashes", *force, "-r",
                                            f"{LOCK_MOUNT}/{layer.name}.txt"),
                               constrained=False, uses_arch=False, lock_part=layer.name)


def install_layers(stack: Stack, lock: Lock | None = None) -> tuple[InstallLayer, ...]:
    """The runtime stage's pip layers, heaviest and least often changed first (from the lock, if any)."""
    return tuple(locked_layer(layer, lock) for layer in _install_layers(stack))


def _install_layers(stack: Stack) -> tuple[InstallLayer, ...]:
    layers: list[InstallLayer] = []
    constraint = ("--constraint", "/run/sglstack/installed.txt")
    if stack.torch:
        index = ("--index-url", shell_word(stack.torch.index_url)) if stack.torch.index_url else ()
        layers.append(InstallLayer(
            "torch", f"torch {stack.torch.version}: the heaviest layer, first, so later changes keep it",
            (*constraint, *index, *map(shell_word, stack.torch.requirements())), True))
    if stack.sgl_kernel:
        pin = stack.sgl_kernel
        if pin.url:
            url = pin.url + (f"#sha256={pin.sha256}" if pin.sha256 else "")
            layers.append(InstallLayer(
                pin.package, f"{pin.package} {pin.version}: the release wheel, as upstream installs it",
                ("--no-deps", "--force-reinstall", shell_word_with(url, {"{arch}": "${arch}"})), False,
                uses_arch="{arch}" in pin.url))
        else:
            index = ("--index-url", shell_word(pin.index_url)) if pin.index_url else ()
            layers.append(InstallLayer(pin.package, f"{pin.package} {pin.version}",
                                       (*constraint, *index, shell_word(f"{pin.package}=={pin.version}")), True))
    if stack.flashinfer:
        fi = stack.flashinfer
        index = ("--extra-index-url", shell_word(fi.index_url)) if fi.index_url else ()
        layers.append(InstallLayer("flashinfer", f"FlashInfer {fi.version}",
                                   (*constraint, *index, *map(shell_word, fi.requirements())), True))
    for extra in stack.extra_layers:
        flags: list[str] = []
        if extra.no_deps:
            flags.append("--no-deps")
        if extra.force_reinstall:
            flags.append("--force-reinstall")
        constrained = not extra.force_reinstall
        if constrained:
            flags += constraint
        if extra.index_url:
            flags += ["--index-url", shell_word(extra.index_url)]
        layers.append(InstallLayer(extra.name, f"{extra.name}: {' '.join(extra.requirements)}",
                                   (*flags, *map(shell_word, extra.requirements)), constrained,
                                   after_sglang=extra.after_sglang))
    return tuple(layers)


def apt_packages(stack: Stack) -> tuple[str, ...]:
    python = stack.python_packages or tuple(p.format(v=stack.python) for p in PYTHON_PACKAGES)
    out: list[str] = []
    for pkg in (*python, *stack.system_packages):
        if pkg not in out:
            out.append(pkg)
    return tuple(out)


def image_labels(stack: Stack) -> tuple[tuple[str, str], ...]:
    """OCI labels plus one label per pin, override and patch: what a registry UI shows of the image."""
    labels = {
        lb.OCI_TITLE_LABEL: f"sglstack {stack.name}",
        lb.OCI_DESCRIPTION_LABEL: stack.description or f"SGLang {stack.sglang.label}",
        lb.OCI_VERSION_LABEL: stack.sglang.label,
        lb.BASE_NAME_LABEL: stack.base_image,
        lb.OCI_VENDOR_LABEL: "sglstack",
        lb.STACK_LABEL: stack.name,
        lb.SGLANG_LABEL: stack.sglang.label,
        lb.PYTHON_LABEL: stack.python,
        lb.PATCHES_LABEL: ",".join(stack.patches),
    }
    if stack.cuda:
        labels[lb.CUDA_LABEL] = stack.cuda
        labels[lb.CUDA_ARCH_LIST_LABEL] = " ".join(stack.cuda_arch_list)
    for name, version in stack.pins().items():
        labels[lb.PIN_LABEL_PREFIX + name] = version
    for override in stack.overrides:
        labels[lb.OVERRIDE_LABEL_PREFIX + override.package] = f"{override.pin} (replaces {override.replaces})"
    labels.update(stack.labels)
    return tuple(sorted(labels.items()))


def stack_manifest(stack: Stack) -> dict:
    """The facts the in-build tools need (they are stdlib-only, so they read JSON, not YAML)."""
    return {
        "name": stack.name,
        "sglang": stack.sglang.model_dump(mode="json"),
        "python": stack.python,
        "overrides": [o.model_dump(mode="json") for o in stack.overrides],
        "patches": list(stack.patches),
        "patch_policy": stack.patch_policy.on_upstream,
        "pins": stack.pins(),
        "cuda": stack.cuda,
        # The base pinned by image id (a local base): not in the Dockerfile, so here, for the config hash to
        # change with it; only when set, so that no other stack's hash moves.
        **({"base_image_id": stack.base_image_id} if stack.base_image_id else {}),
        # A seeded base is its root file system: another digest is another image.
        **({"base_rootfs": {p: stack.base_seed.rootfs[p] for p in stack.platforms}} if stack.base_seed else {}),
    }


def _one_platform(stack: Stack) -> Stack:
    """A seeded base has a name per platform: a stack not narrowed to one (`Stack.for_platform`) renders its first."""
    return stack.for_platform(stack.platforms[0]) if stack.base_seed and stack.whole is None else stack


def target_platform_tags(stack: Stack, lock: Lock | None) -> tuple[str, ...]:
    """pip's exact `--platform` tags for the (narrowed) stack's platform, newest glibc first: every manylinux
    minor from the one the lock resolved for (its `resolved-for`, else the stack's `glibc`, else 2.28) down to
    2.17, then manylinux2014 (which pip widens to manylinux2010/1 on x86_64). Never a newer glibc than the
    lock's: a manylinux_2_39 file of a locked version would pass the hash check and not run on a 2.36 base."""
    machine = MACHINE[stack.platforms[0]]
    resolved = [p for p in (lock.python_platforms if lock else ()) if p.startswith(f"{machine}-manylinux_2_")]
    if resolved:
        newest = int(resolved[0].rsplit("_", 1)[1])
    else:
        newest = int(stack.glibc.split(".")[1]) if stack.glibc else BASELINE_GLIBC_MINOR
    return (*(f"manylinux_2_{minor}_{machine}" for minor in range(newest, 16, -1)), f"manylinux2014_{machine}")


def _wheels_stage(stack: Stack, lock: Lock | None) -> bool:
    """A stack built for more than amd64 unpacks its locked parts on the build machine (every platform alike,
    so one Dockerfile shape serves them all); an amd64-only stack's Dockerfile stays as it was."""
    return unpacks_wheels(stack.whole_platforms) and lock is not None \
        and any(lock.installs_layer(name) for name in lock.layers)


def _uv_parts(stack: Stack, lock: Lock | None, layers: tuple[InstallLayer, ...]) -> tuple[str, ...]:
    """The locked parts the serving stage installs with uv, in its order (none: it installs with pip). An amd64-only
    stack's: a stack of several platforms unpacks its parts in the wheels stage instead."""
    if lock is None or _wheels_stage(stack, lock) or stack.whole_platforms != ("linux/amd64",):
        return ()
    before = [x.lock_part for x in layers if x.lock_part and not x.after_sglang]
    after = [x.lock_part for x in layers if x.lock_part and x.after_sglang]
    middle = ["sglang-requirements"] if stack.sglang.install_deps and lock.installs_layer("sglang-requirements") else []
    return tuple(p for p in (*before, *middle, *after) if p)


def uv_platform(stack: Stack, lock: Lock | None) -> str:
    """uv's `--python-platform` of the wheels the lock names: the platform it resolved for (its newest glibc)."""
    machine = MACHINE[stack.platforms[0]]
    return f"{machine}-{target_platform_tags(stack, lock)[0].removesuffix('_' + machine)}"


def render_dockerfile(stack: Stack, lock: Lock | None = None) -> str:
    stack = _one_platform(stack)
    wheels_stage = _wheels_stage(stack, lock)
    layers = tuple(dataclasses.replace(x, on_build_platform=wheels_stage and x.lock_part is not None)
                   for x in install_layers(stack, lock))
    uv_parts = _uv_parts(stack, lock, layers)
    return environment().get_template("Dockerfile.j2").render(
        lock_mount=LOCK_MOUNT,
        locked_sglang_requirements=bool(lock and lock.installs_layer("sglang-requirements")),
        locked_sglang=bool(lock and lock.installs_layer("sglang")),
        stack=stack,
        # only where another platform than amd64 is built: every amd64-only stack's Dockerfile stays as it was
        src_on_build_platform=stack.whole_platforms != ("linux/amd64",),
        wheels_stage=wheels_stage,
        uv_installer=bool(uv_parts),
        uv_parts=uv_parts,
        uv_dir=UV_MOUNT,
        uv_platform=uv_platform(stack, lock) if uv_parts else "",
        wheels_root=WHEELS_ROOT,
        wheels_apt=tuple(p.format(v=stack.python) for p in WHEELS_APT),
        wheels_layers=_wheels_layers(layers, lock) if wheels_stage else (),
        replaced_bootstrap=_replaced_bootstrap(lock) if wheels_stage else (),
        target_tags=target_platform_tags(stack, lock),
        manylinux_minors=MANYLINUX_MINORS,
        git_source_dir=GIT_SOURCE_DIR,
        apt_packages=apt_packages(stack),
        layers_before=[x for x in layers if not x.after_sglang],
        layers_after=[x for x in layers if x.after_sglang],
        labels=image_labels(stack),
        index_auth=INDEX_NETRC_SECRET if stack.credentials else None,
        wheel_cuda_home=bool(stack.cuda) and stack.cuda_home.startswith("/opt/venv/"),
        runtime_env=nvidia_runtime_cuda(stack),
    )


@dataclass(frozen=True)
class _Part:
    name: str
    comment: str


def _wheels_layers(layers: tuple[InstallLayer, ...], lock: Lock | None) -> tuple[_Part, ...]:
    """The parts the wheels stage unpacks, in the runtime's order: the layers before SGLang's requirements,
    those requirements, the layers after them."""
    parts = [_Part(x.name, x.comment) for x in layers if x.on_build_platform and not x.after_sglang]
    if lock is not None and lock.installs_layer("sglang-requirements"):
        parts.append(_Part("sglang-requirements", "SGLang's own requirements, as resolved into the lock"))
    parts += [_Part(x.name, x.comment) for x in layers if x.on_build_platform and x.after_sglang]
    return tuple(parts)


def _replaced_bootstrap(lock: Lock | None) -> tuple[str, ...]:
    """`name==version` of each package the venv brings itself (pip, setuptools) that the lock installs too."""
    return tuple(f"{p.name}=={p.version}" for p in (lock.packages if lock else ()) if p.name in VENV_BOOTSTRAP)


_STAGE = re.compile(r"^FROM\s+(?:--\S+\s+)*\S+\s+AS\s+(\S+)\s*$", re.IGNORECASE | re.MULTILINE)


def dockerfile_stages(text: str) -> tuple[str, ...]:
    """The named stages of a Dockerfile (`FROM image AS name`), in order: what `--target` may name."""
    return tuple(_STAGE.findall(text))


def nvidia_runtime_cuda(stack: Stack) -> str | None:
    """The CUDA (major.minor) a serving stage declares to the NVIDIA runtime itself: a CUDA stack whose base is
    not an nvidia/cuda image (which declares it). None otherwise."""
    return None if cuda_image_tag(stack.base_image) is not None else stack.cuda_release


# The tools every build stage COPYs from the context (tools/...), beside the patch engine.
CONTEXT_TOOLS = ("pip-env.sh", "wheelkit.py", "imageinfo.py", "imagecheck.py", "elfdeps.py", "importcheck.py",
                 "filefacts.py", "codemap.py", "codewatch.py")
# Folders the Dockerfile COPYs even when nothing is in them (a stack without patches).
CONTEXT_FOLDERS = ("tools", "patches")
_SKIPPED = (".pyc",)


@dataclass(frozen=True)
class BuildContext:
    """The rendered Dockerfile and exactly the context files it COPYs (or mounts), as content: the
    relative path of each file -> its bytes and mode. Writing them is imagebuild's (`imagebuild.context`)."""

    dockerfile: str
    files: dict[str, bytes]
    modes: dict[str, int]  # the permission bits, as the source file had them (tools stay executable)
    folders: tuple[str, ...] = CONTEXT_FOLDERS


def _tree_files(src: Path, prefix: str) -> dict[str, Path]:
    """Every file under `src` (links followed, as a copy would), by its path under `prefix`."""
    out: dict[str, Path] = {}
    for folder, dirs, names in os.walk(src, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = Path(folder).relative_to(src)
        for name in sorted(names):
            if not name.endswith(_SKIPPED):
                out[(Path(prefix) / rel / name).as_posix()] = Path(folder) / name
    return out


def build_context(stack: Stack, patches_dir: Path = DEFAULT_PATCHES_DIR, lock: Lock | None = None) -> BuildContext:
    """The Dockerfile and its context for `stack` (pure: reads the tools and patches, writes nothing). A stack
    on a seeded base not narrowed to a platform (`Stack.for_platform`) is rendered for its first."""
    stack = _one_platform(stack)
    sources = {f"tools/{name}": TOOLS_DIR / name for name in CONTEXT_TOOLS}
    sources.update(_tree_files(PATCHKIT_DIR, "tools/patchkit"))
    for pid in stack.patches:
        sources.update(_tree_files(patches_dir / pid, f"patches/{pid}"))
    files = {rel: path.read_bytes() for rel, path in sources.items()}
    modes = {rel: path.stat().st_mode & 0o777 for rel, path in sources.items()}
    files["stack.json"] = (json.dumps(stack_manifest(stack), indent=2, sort_keys=True) + "\n").encode()
    # Each locked layer's part: mounted by its RUN step, and in the config hash like every context file.
    for layer in lock.layers if lock else ():
        if lock and lock.installs_layer(layer):
            files[f"lock/{layer}.txt"] = lock.part_text(layer).encode("utf-8")
    dockerfile = render_dockerfile(stack, lock)
    if "source=buildtools/uv.txt" in dockerfile:
        files["buildtools/uv.txt"] = UV_REQUIREMENT.read_bytes()
    for rel in files:
        modes.setdefault(rel, 0o644)
    return BuildContext(dockerfile, files, modes)


RELEASED_TARGET = "runtime"  # the stage a release pushes (build's FINAL_TARGET): its config hash is the release's


def released_config_hash(stack: Stack, lock: Lock | None) -> str | None:
    """The config hash `invoke build` gives the stack's released image now, from the stack and its lock as
    the build would take it (`lock.trust.lock_for_build`). None for a git source: its exported tree is part
    of the hash, and only git can export it. What `--verify-key` binds a signature to."""
    if stack.sglang.git is not None:
        return None
    rendered = build_context(stack, lock=lock)
    return confighash.config_hash(rendered.dockerfile, rendered.files, target=RELEASED_TARGET,
                                  platform=stack.build_platform)
