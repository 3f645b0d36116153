"""Pure rendering: a `Stack` -> its Dockerfile text and build-context files.

Nothing here touches Docker or the network. The same stack renders byte-identical output, so the
config hash (`confighash.py`) of a rendered context identifies a build.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .compose import moving_tag_ref, write_compose
from .k8s import DIGEST_REF, K8S_DIR, LWS_FILE, SERVICE_FILE, K8sOptions, k8s_spec, render_k8s, write_k8s
from .lockfile import Lock, lock_for_build
from .matrix import Stack, load_matrix
from .records import build_root
from .resources import DEFAULT_PATCHES_DIR, IMAGES_DIR, PATCHKIT_DIR, TOOLS_DIR
from .ui import console as make_console

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


LOCK_MOUNT = "/run/sglstack-lock"


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
        index = ("--index-url", shlex.quote(stack.torch.index_url)) if stack.torch.index_url else ()
        layers.append(InstallLayer(
            "torch", f"torch {stack.torch.version}: the heaviest layer, first, so later changes keep it",
            (*constraint, *index, *map(shlex.quote, stack.torch.requirements())), True))
    if stack.sgl_kernel:
        pin = stack.sgl_kernel
        if pin.url:
            url = pin.url.replace("{arch}", "${arch}")
            if pin.sha256:
                url += f"#sha256={pin.sha256}"
            layers.append(InstallLayer(
                pin.package, f"{pin.package} {pin.version}: the release wheel, as upstream installs it",
                ("--no-deps", "--force-reinstall", f'"{url}"'), False, uses_arch="{arch}" in pin.url))
        else:
            index = ("--index-url", shlex.quote(pin.index_url)) if pin.index_url else ()
            layers.append(InstallLayer(pin.package, f"{pin.package} {pin.version}",
                                       (*constraint, *index, shlex.quote(f"{pin.package}=={pin.version}")), True))
    if stack.flashinfer:
        fi = stack.flashinfer
        index = ("--extra-index-url", shlex.quote(fi.index_url)) if fi.index_url else ()
        layers.append(InstallLayer("flashinfer", f"FlashInfer {fi.version}",
                                   (*constraint, *index, *map(shlex.quote, fi.requirements())), True))
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
            flags += ["--index-url", shlex.quote(extra.index_url)]
        layers.append(InstallLayer(extra.name, f"{extra.name}: {' '.join(extra.requirements)}",
                                   (*flags, *map(shlex.quote, extra.requirements)), constrained,
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
        "org.opencontainers.image.title": f"sglstack {stack.name}",
        "org.opencontainers.image.description": stack.description or f"SGLang {stack.sglang.label}",
        "org.opencontainers.image.version": stack.sglang.label,
        "org.opencontainers.image.base.name": stack.base_image,
        "org.opencontainers.image.vendor": "sglstack",
        "io.sglstack.stack": stack.name,
        "io.sglstack.sglang": stack.sglang.label,
        "io.sglstack.python": stack.python,
        "io.sglstack.patches": ",".join(stack.patches),
    }
    if stack.cuda:
        labels["io.sglstack.cuda"] = stack.cuda
        labels["io.sglstack.cuda-arch-list"] = " ".join(stack.cuda_arch_list)
    for name, version in stack.pins().items():
        labels[f"io.sglstack.pin.{name}"] = version
    for override in stack.overrides:
        labels[f"io.sglstack.override.{override.package}"] = f"{override.pin} (replaces {override.replaces})"
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
    }


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(IMAGES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_dockerfile(stack: Stack, lock: Lock | None = None) -> str:
    layers = install_layers(stack, lock)
    return _environment().get_template("Dockerfile.j2").render(
        lock_mount=LOCK_MOUNT,
        locked_sglang_requirements=bool(lock and lock.installs_layer("sglang-requirements")),
        locked_sglang=bool(lock and lock.installs_layer("sglang")),
        stack=stack,
        manylinux_minors=MANYLINUX_MINORS,
        git_source_dir=GIT_SOURCE_DIR,
        apt_packages=apt_packages(stack),
        layers_before=[x for x in layers if not x.after_sglang],
        layers_after=[x for x in layers if x.after_sglang],
        labels=image_labels(stack),
    )


@dataclass(frozen=True)
class RenderedContext:
    stack: str
    dockerfile: Path
    context: Path
    files: tuple[Path, ...]


def _copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)


def write_build_context(stack: Stack, out_dir: Path, patches_dir: Path = DEFAULT_PATCHES_DIR,
                        lock: Lock | None = None) -> RenderedContext:
    """Write the Dockerfile and exactly the files it COPYs (or mounts) into a fresh `out_dir`."""
    context = out_dir / "context"
    if context.exists():
        shutil.rmtree(context)
    (context / "tools").mkdir(parents=True)
    (context / "patches").mkdir()
    for name in ("pip-env.sh", "wheelkit.py", "imageinfo.py", "imagecheck.py", "elfdeps.py"):
        shutil.copy2(TOOLS_DIR / name, context / "tools" / name)
    _copy_tree(PATCHKIT_DIR, context / "tools" / "patchkit")
    for pid in stack.patches:
        _copy_tree(patches_dir / pid, context / "patches" / pid)
    (context / "stack.json").write_text(json.dumps(stack_manifest(stack), indent=2, sort_keys=True) + "\n")
    # Each locked layer's part: mounted by its RUN step, and in the config hash like every context file.
    for layer in lock.layers if lock else ():
        if lock and lock.installs_layer(layer):
            (context / "lock").mkdir(exist_ok=True)
            (context / "lock" / f"{layer}.txt").write_text(lock.part_text(layer), encoding="utf-8")
    dockerfile = out_dir / "Dockerfile"
    dockerfile.write_text(render_dockerfile(stack, lock), encoding="utf-8")
    files = tuple(sorted(p for p in context.rglob("*") if p.is_file()))
    return RenderedContext(stack.name, dockerfile, context, files)


def default_out_dir(stack_name: str) -> Path:
    """build/STACK under the one build root (SGLSTACK_BUILD_DIR when set)."""
    return build_root() / stack_name


def render_command(
    stacks_file: str, stack_name: str, out_dir: str | None = None, image: str | None = None,
    k8s_options: K8sOptions | None = None,
) -> RenderedContext:
    """`invoke render`: the Dockerfile, its context, the compose files and, for an image by digest, the
    Kubernetes manifests. Reads no records: the compose file serves `image`, by default the stack's moving
    tag, which `invoke deploy` replaces with a digest; the manifests serve only a digest."""
    matrix = load_matrix(stacks_file)
    stack = matrix.get(stack_name)
    out = Path(out_dir) if out_dir else default_out_dir(stack_name)
    ref = image or moving_tag_ref(stack)
    # Checked (schemas included) before anything is written: bad k8s options change no file.
    k8s_files = render_k8s(stack, ref, k8s_options) if DIGEST_REF.match(ref) else None
    if k8s_files is None:
        k8s_spec(stack, k8s_options or K8sOptions())
    rendered = write_build_context(stack, out, lock=lock_for_build(stacks_file, stack))
    console = make_console()
    console.print(f"[bold]{stack_name}[/]: Dockerfile   {rendered.dockerfile}")
    console.print(f"[bold]{stack_name}[/]: context      {rendered.context}/ ({len(rendered.files)} files)")
    for path in write_compose(stack, ref, out):
        console.print(f"[bold]{stack_name}[/]: compose      {path}")
    if k8s_files is None:
        console.print(f"[bold]{stack_name}[/]: k8s          not written: the manifests serve an image by digest "
                      "(--image REPO@sha256:...), not the tag " + ref)
        for name in (LWS_FILE, SERVICE_FILE):  # an earlier render's, which would serve another image
            (out / K8S_DIR / name).unlink(missing_ok=True)
    else:
        for path in write_k8s(out / K8S_DIR, k8s_files):
            console.print(f"[bold]{stack_name}[/]: k8s          {path}")
    return rendered
