"""The in-image checks of a build (`sglstack/inimage/incontainer/imagecheck.py`, `elfdeps.py`) on small real packages.

- ELF: the compiled files of scipy and numpy (runtime dependencies of sglstack, so present wherever the
  tests run): DT_NEEDED and RUNPATH as the loader reads them, resolved inside a folder standing for an
  image's root; removing a library its neighbour needs is found, and named.
- pip check: a fresh venv, clean, then with `requests` installed without its dependencies.
- the serving argv: parsed with `ServerArgs.add_cli_args` of the SGLang double (the real entry point's
  shape), so a renamed flag is refused with argparse's own words.
The whole SGLang 0.5.23 image runs the same code in `benchmarks/bench_pypi_stack.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import scipy

from sglstack.config.matrix import load_matrix
from sglstack.config.settings import LibraryException, SharedLibrariesPolicy
from sglstack.imagebuild.judge import image_check_problems, waived_libraries
from sglstack.imagebuild.verify import image_check_argv, serving_argvs
from sglstack.inimage.incontainer.elfdeps import check_needs, read_dynamic

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "sglstack" / "inimage" / "incontainer"
DOUBLE = REPO / "tests" / "doubles" / "sglang-double"
SCIPY = Path(scipy.__file__).parent
SITE = "/opt/venv/lib/python3.11/site-packages"


def _extension_with_private_libs() -> Path:
    """A scipy extension whose RPATH/RUNPATH ($ORIGIN/../../scipy.libs) names a bundled library it needs."""
    for path in sorted(SCIPY.glob("interpolate/*.so")):
        dyn = read_dynamic(str(path))
        if dyn and any(r.startswith("$ORIGIN") for r in (*dyn.rpath, *dyn.runpath)) and \
                any((SCIPY.parent / "scipy.libs" / n).exists() for n in dyn.needed):
            return path
    raise AssertionError(f"no scipy extension under {SCIPY}/interpolate bundles a library (auditwheel's layout)")


@pytest.fixture
def image_root(tmp_path):
    """A folder laid out like an image: the extension and the scipy.libs files it needs in a venv, the
    system libraries they need (empty stand-ins: only their presence matters) under /usr/lib/<triple>."""
    ext = _extension_with_private_libs()
    root = tmp_path / "root"
    dest = root / SITE.lstrip("/") / ext.relative_to(SCIPY.parent)
    dest.parent.mkdir(parents=True)
    shutil.copy2(ext, dest)
    libs_dir = SCIPY.parent / "scipy.libs"
    todo, bundled = [ext], []
    while todo:
        dyn = read_dynamic(str(todo.pop()))
        for need in dyn.needed if dyn else ():
            private = libs_dir / need
            if private.exists() and private not in bundled:
                bundled.append(private)
                todo.append(private)
                target = root / SITE.lstrip("/") / "scipy.libs" / need
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(private, target)
            elif not private.exists():
                system = root / "usr/lib" / f"{os.uname().machine}-linux-gnu" / need
                system.parent.mkdir(parents=True, exist_ok=True)
                system.touch()
    return root, dest.relative_to(root / SITE.lstrip("/")), [b.name for b in bundled]


def test_elf_dynamic_section_is_read_like_the_loader_reads_it():
    ext = _extension_with_private_libs()
    dyn = read_dynamic(str(ext))
    assert dyn is not None and dyn.machine in (62, 183)
    assert "libc.so.6" in dyn.needed and any(n.startswith("libgfortran") or "-" in n for n in dyn.needed)
    assert (*dyn.rpath, *dyn.runpath)[0].startswith("$ORIGIN/")
    assert read_dynamic(str(SCIPY / "__init__.py")) is None  # not ELF


def test_every_need_resolves_through_runpath_and_system_folders(image_root):
    root, _ext, bundled = image_root
    report = check_needs([SITE], root=str(root))
    assert report.files == 1 + len(bundled) and report.unresolved == {} and report.unreadable == {}
    # a bundled library without its own RPATH finds its neighbours through the RPATH of the extension that
    # loads it (DT_RPATH applies to the whole chain); the check counts those by name, inside the image
    assert report.by_path + report.by_name == report.needs and report.by_path >= report.needs - 1


def test_a_missing_bundled_library_is_named_with_the_file_that_needs_it(image_root):
    root, ext, bundled = image_root
    (root / SITE.lstrip("/") / "scipy.libs" / bundled[0]).unlink()
    report = check_needs([SITE], root=str(root))
    assert report.unresolved[f"{SITE}/{ext}"] == [bundled[0]]
    problems = image_check_problems({"shared_libraries": {**report.to_dict(), "folders": [SITE]}})
    assert problems == [f"shared libraries: {SITE}/{ext} needs {bundled[0]}, which the image does not have; "
                        "declare an exception under 'shared_libraries' with its reason, or add the library"]


def test_a_library_shipped_elsewhere_in_the_image_resolves_by_name(image_root):
    """torch's libc10.so for the extensions that link it: loaded first by the package, found by its name."""
    root, _ext, bundled = image_root
    libs = root / SITE.lstrip("/") / "scipy.libs"
    elsewhere = root / SITE.lstrip("/") / "other" / "lib"
    elsewhere.mkdir(parents=True)
    before = check_needs([SITE], root=str(root)).by_name
    shutil.move(str(libs / bundled[0]), elsewhere / bundled[0])
    report = check_needs([SITE], root=str(root))
    assert report.unresolved == {} and report.by_name == before + 1


def test_the_drivers_libraries_are_counted_as_the_hosts(image_root):
    root, _ext, bundled = image_root
    (root / SITE.lstrip("/") / "scipy.libs" / bundled[0]).unlink()
    report = check_needs([SITE], root=str(root), host_provided=(bundled[0],))
    assert report.unresolved == {} and report.host == {bundled[0]: 1}


def test_a_declared_exception_waives_the_file_and_an_unused_one_is_stale(image_root):
    root, ext, bundled = image_root
    (root / SITE.lstrip("/") / "scipy.libs" / bundled[0]).unlink()
    report = {"shared_libraries": {**check_needs([SITE], root=str(root)).to_dict(), "folders": [SITE]}}
    policy = SharedLibrariesPolicy(exceptions=(
        LibraryException(file="scipy/interpolate/*", reason="a plugin this image does not load"),
        LibraryException(file="nothing/*", reason="old"),
    ))
    assert image_check_problems(report, policy) == []
    left, waived, stale = waived_libraries(report, policy)
    assert left == {} and waived == {str(ext): "a plugin this image does not load"}
    assert stale == ["shared_libraries exception 'nothing/*' matches no file with a missing library or of another "
                     "CPU: remove it"]


# ---- pip check and the serving argv: imagecheck.py as the image runs it ---------------------------

def _imagecheck(python: str, *args: str, site: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{TOOLS}{os.pathsep}{DOUBLE}"}
    proc = subprocess.run([python, str(TOOLS / "imagecheck.py"), "--site", site, *args], capture_output=True,
                          text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_stacks_serving_argv_parses_and_a_renamed_flag_is_refused(tmp_path):
    stack = load_matrix(REPO / "tests" / "fixtures" / "stacks-cpu.yaml").get("cpu-test")
    argvs = serving_argvs(stack)
    assert argvs[0][:2] == ["--model-path", "test-org/tiny-model"] and "--speculative-algorithm" in argvs[0]
    assert "--speculative-algorithm" not in argvs[1]  # the smoke's baseline
    ok = _imagecheck(sys.executable, "--server-help", *(f"--argv={json.dumps(a)}" for a in argvs),
                     site=str(tmp_path))
    assert [r["ok"] for r in ok["serving_argv"]["results"]] == [True, True]
    assert ok["server_help"]["returncode"] == 0 and ok["server_help"]["lists_model_path"]
    assert image_check_problems(ok) == []
    renamed = [a.replace("--speculative-eagle-topk", "--speculative-eagle-top-k") for a in argvs[0]]
    refused = _imagecheck(sys.executable, f"--argv={json.dumps(renamed)}", site=str(tmp_path))
    [problem] = image_check_problems(refused)
    assert problem.startswith("serving argv refused by the image's SGLang: unrecognized arguments: "
                              "--speculative-eagle-top-k 1 (argv: --model-path test-org/tiny-model")


def test_the_build_runs_the_server_checks_only_where_sglang_has_its_requirements():
    matrix = load_matrix(REPO / "tests" / "fixtures" / "stacks-cpu.yaml")
    assert image_check_argv(matrix.get("cpu-test")) == ["python", "/opt/sglstack/tools/imagecheck.py"]
    full = image_check_argv(load_matrix(REPO / "stacks.yaml").get("pypi-cu130"))
    assert full[2] == "--server-help"
    assert json.loads(full[3].removeprefix("--argv="))[-1] == "--trust-remote-code"
    assert "lightseekorg/kimi-k2.5-eagle3-mla" in full[3]
    # the import closure of its serving path: the entry point, Kimi K2.5's and its draft's model classes, EAGLE
    assert json.loads(full[5].removeprefix("--import-closure=")) == [
        "--module=sglang.launch_server", "--module=sglang.srt.entrypoints.http_server",
        "--architecture=KimiK25ForConditionalGeneration", "--architecture=Eagle3DeepseekV2ForCausalLM",
        "--speculative"]
    # a CUDA stack's JIT toolchain, for each capability it is built for
    assert full[6:] == ["--jit-arch=9.0", "--jit-arch=10.0", "--jit-arch=10.3", "--jit-arch=12.0"]


def test_a_shared_object_of_another_cpu_is_named_not_taken_for_the_images(image_root):
    """A wheel of the wrong platform in an arm64 image (or the reverse): its .so files are foreign, named."""
    root, ext, _ = image_root
    path = root / SITE.lstrip("/") / ext
    data = bytearray(path.read_bytes())
    data[18:20] = (183 if os.uname().machine == "x86_64" else 62).to_bytes(2, "little")  # ELF e_machine
    path.write_bytes(bytes(data))
    other = "aarch64" if os.uname().machine == "x86_64" else "x86_64"
    report = check_needs([SITE], root=str(root), machine=os.uname().machine)
    assert report.foreign == {f"{SITE}/{ext}": other} and report.unresolved == {}
    problems = image_check_problems({"shared_libraries": {**report.to_dict(), "folders": [SITE]}})
    assert problems == [f"shared libraries: {SITE}/{ext} is built for {other}, not for the image's CPU: a wheel of "
                        "another platform was installed"]


def test_a_declared_exception_covers_a_wheels_stubs_for_the_other_cpu(image_root):
    """nvidia-cutlass-dsl-libs' x86_64 wheels carry aarch64 stubs for cross-compiling: declared, with a reason,
    they are waived and named in the report; any other foreign file still fails the build."""
    root, ext, _ = image_root
    path = root / SITE.lstrip("/") / ext
    data = bytearray(path.read_bytes())
    data[18:20] = (183 if os.uname().machine == "x86_64" else 62).to_bytes(2, "little")  # ELF e_machine
    path.write_bytes(bytes(data))
    report = {"shared_libraries": {**check_needs([SITE], root=str(root), machine=os.uname().machine).to_dict(),
                                   "folders": [SITE]}}
    covering = SharedLibrariesPolicy(exceptions=(LibraryException(file=str(ext), reason="cross-compilation stubs"),))
    assert image_check_problems(report, covering) == []
    _, waived, stale = waived_libraries(report, covering)
    assert waived == {str(ext): "cross-compilation stubs"} and stale == []
    other = SharedLibrariesPolicy(exceptions=(LibraryException(file="elsewhere/*", reason="x"),))
    [problem] = image_check_problems(report, other)
    assert problem.startswith(f"shared libraries: {SITE}/{ext} is built for ")
    assert waived_libraries(report, other)[2] == ["shared_libraries exception 'elsewhere/*' matches no file with a "
                                                  "missing library or of another CPU: remove it"]
