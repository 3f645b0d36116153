"""Pure rendering: a `Stack` -> its Dockerfile text and build-context files.

Nothing here touches Docker or the network. The same stack renders byte-identical output, so the
config hash (`confighash.py`) of a rendered context identifies a build.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2

from ..config.imageref import image_reference_problem
from ..config.matrix import Stack, load_matrix
from ..core.console import console as make_console
from ..core.errors import one_line
from ..core.quoting import (
    QuotingError,
    dockerfile_comment,
    dockerfile_label_key,
    dockerfile_string,
    shell_word,
    shell_word_with,
)
from ..core.records import build_root
from ..core.resources import DEFAULT_PATCHES_DIR, IMAGES_DIR, PATCHKIT_DIR, TOOLS_DIR
from ..core.safefiles import (
    OutputNotWritable,
    check_inside,
    containing_root,
    folder_lock,
    remove_file,
    replace_folder,
    write_text,
)
from ..lock.file import Lock, lock_for_build
from .compose import deployment_files, moving_tag_ref
from .k8s import DIGEST_REF, K8S_DIR, LWS_FILE, SERVICE_FILE, K8sOptions, k8s_spec, render_k8s

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
        # The base pinned by image id (a local base): not in the Dockerfile, so here, for the config hash to
        # change with it; only when set, so that no other stack's hash moves.
        **({"base_image_id": stack.base_image_id} if stack.base_image_id else {}),
    }


def _from_image(ref: str) -> str:
    if problem := image_reference_problem(ref):
        raise QuotingError(f"image '{dockerfile_comment(ref)}' {problem}")
    return ref


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(IMAGES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # Every value the template writes goes through the rule of the language it lands in (quoting.py).
    env.filters.update(comment=dockerfile_comment, dq=dockerfile_string, label_key=dockerfile_label_key,
                       shell=shell_word, image=_from_image)
    return env


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
        index_auth=INDEX_NETRC_SECRET if stack.credentials else None,
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
    """Write the Dockerfile and exactly the files it COPYs (or mounts) into `out_dir`.

    The context is filled in a new folder beside the old one and swapped in whole (`safefiles`): a
    failure (a full disk, a signal) leaves the previous context as it was, and a `context` or
    `Dockerfile` that is a link out of the folder is refused, never written through or deleted.
    """
    root = containing_root(out_dir, build_root())
    context = out_dir / "context"

    def fill(folder: Path) -> None:
        (folder / "tools").mkdir(parents=True)
        (folder / "patches").mkdir()
        for name in ("pip-env.sh", "wheelkit.py", "imageinfo.py", "imagecheck.py", "elfdeps.py"):
            shutil.copy2(TOOLS_DIR / name, folder / "tools" / name)
        _copy_tree(PATCHKIT_DIR, folder / "tools" / "patchkit")
        for pid in stack.patches:
            _copy_tree(patches_dir / pid, folder / "patches" / pid)
        (folder / "stack.json").write_text(json.dumps(stack_manifest(stack), indent=2, sort_keys=True) + "\n")
        # Each locked layer's part: mounted by its RUN step, and in the config hash like every context file.
        for layer in lock.layers if lock else ():
            if lock and lock.installs_layer(layer):
                (folder / "lock").mkdir(exist_ok=True)
                (folder / "lock" / f"{layer}.txt").write_text(lock.part_text(layer), encoding="utf-8")

    check_inside(root, out_dir / "Dockerfile")  # refused before the context is swapped, not after
    replace_folder(root, context, fill)
    dockerfile = write_text(root, out_dir / "Dockerfile", render_dockerfile(stack, lock))
    files = tuple(sorted(p for p in context.rglob("*") if p.is_file()))
    return RenderedContext(stack.name, dockerfile, context, files)


def default_out_dir(stack_name: str) -> Path:
    """build/STACK under the one build root (SGLSTACK_BUILD_DIR when set)."""
    return build_root() / stack_name


# What `invoke render` wrote into its folder, so that a later render replaces or removes only those.
RENDER_MANIFEST = ".sglstack-render.json"
CONTEXT_ENTRY = "context/"


def _written_before(out: Path) -> set[str]:
    try:
        data = json.loads((out / RENDER_MANIFEST).read_text(encoding="utf-8"))
        return {str(name) for name in data["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def foreign_files(out: Path, planned: list[str], owned: set[str] | None) -> list[str]:
    """The planned names that exist in `out` and that render did not write (`owned` None: every name is
    ours, the stack's own folder under the build root, which build and deploy write too)."""
    if owned is None:
        return []
    return [name for name in planned
            if name not in owned and os.path.lexists(out / name.rstrip("/"))]


def render_command(
    stacks_file: str, stack_name: str, out_dir: str | None = None, image: str | None = None,
    k8s_options: K8sOptions | None = None,
) -> RenderedContext:
    """`invoke render`: the Dockerfile, its context, the compose files and, for an image by digest, the
    Kubernetes manifests. Reads no records: the compose file serves `image`, by default the stack's moving
    tag, which `invoke deploy` replaces with a digest; the manifests serve only a digest.

    An `--out DIR` of the user's keeps a list of what render wrote there (`.sglstack-render.json`): a
    file render did not write is never replaced or removed (a one-line refusal before anything is
    written). The stack's own folder under the build root is sglstack's, written by build and deploy too.
    """
    matrix = load_matrix(stacks_file)
    stack = matrix.get(stack_name)
    out = Path(out_dir) if out_dir else default_out_dir(stack_name)
    own_folder = os.path.abspath(out) == os.path.abspath(default_out_dir(stack_name))
    ref = image or moving_tag_ref(stack)
    # Checked (schemas included) before anything is written: bad k8s options change no file.
    k8s_files = render_k8s(stack, ref, k8s_options) if DIGEST_REF.match(ref) else None
    if k8s_files is None:
        k8s_spec(stack, k8s_options or K8sOptions())
    compose_files = deployment_files(stack, ref)
    k8s_names = [f"{K8S_DIR}/{name}" for name in (LWS_FILE, SERVICE_FILE)]
    planned = ["Dockerfile", CONTEXT_ENTRY, *compose_files, *(k8s_names if k8s_files is not None else [])]
    owned = None if own_folder else _written_before(out)
    foreign = foreign_files(out, planned, owned)
    if foreign:
        raise OutputNotWritable(one_line(
            f"render --out {out}: {', '.join(foreign)} already there and not written by sglstack render: "
            "not replaced (move it away, or render into another folder)"))
    root = containing_root(out, build_root())
    with folder_lock(out, "render", root=root, stack=stack_name):
        rendered = write_build_context(stack, out, lock=lock_for_build(stacks_file, stack))
        console = make_console()
        console.print(f"[bold]{stack_name}[/]: Dockerfile   {rendered.dockerfile}")
        console.print(f"[bold]{stack_name}[/]: context      {rendered.context}/ ({len(rendered.files)} files)")
        for name, text in compose_files.items():
            console.print(f"[bold]{stack_name}[/]: compose      {write_text(root, out / name, text)}")
        written = ["Dockerfile", CONTEXT_ENTRY, *compose_files]
        if k8s_files is None:
            console.print(f"[bold]{stack_name}[/]: k8s          not written: the manifests serve an image by digest "
                          "(--image REPO@sha256:...), not the tag " + ref)
            for name in k8s_names:  # an earlier render's, which would serve another image
                if owned is None or name in owned:
                    remove_file(root, out / name)
        else:
            for name, text in k8s_files.items():
                console.print(f"[bold]{stack_name}[/]: k8s          {write_text(root, out / K8S_DIR / name, text)}")
            written += k8s_names
        write_text(root, out / RENDER_MANIFEST, json.dumps({"files": sorted(written)}, indent=2) + "\n")
    return rendered
