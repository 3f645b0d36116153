"""The host-side verdicts on what a built image says of itself, and the in-image JIT check's logic, in process:
every problem line word for word (pure: no Docker, no child Python; a stand-in nvcc is a shell script)."""

from __future__ import annotations

import hashlib
import importlib
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.config.settings import LibraryException, SharedLibrariesPolicy
from sglstack.core import labels as lb
from sglstack.core.errors import PinMismatch
from sglstack.imagebuild import emulation, judge, verify
from sglstack.imagebuild.judge import image_check_problems, jit_problems
from sglstack.lock.plan import root_names

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "sglstack" / "inimage" / "incontainer"
HOME = "/opt/venv/lib/python3.11/site-packages/nvidia/cu13"


def jit(**fields) -> dict:
    base = {"cuda_home": HOME, "archs": ["9.0", "12.0"], "release": "13.0", "returncode": 0, "error": None,
            "driver_stub": "/usr/lib/x86_64-linux-gnu/libcuda.so.1"}
    return {**base, **fields}


# ---- the JIT toolchain's verdict ---------------------------------------------------------------------

def test_a_toolchain_that_compiles_at_the_stacks_cuda_has_no_problem():
    assert jit_problems(jit(), "13.0") == [] and jit_problems(jit(), "13.0.1") == []
    assert jit_problems(jit(), None) == []  # no CUDA to compare with
    assert jit_problems(jit(release=None), "13.0") == []  # an nvcc that did not say its release
    assert jit_problems({k: v for k, v in jit().items() if k != "driver_stub"}, "13.0") == []  # an older report


@pytest.mark.parametrize("error", ["CUDA_HOME is not set", f"no nvcc at {HOME}/bin/nvcc"])
def test_no_compiler_is_one_line_and_nothing_else(error):
    assert jit_problems(jit(returncode=None, error=error, release=None, driver_stub=None), "13.0") == [
        f"JIT toolchain: {error} (FlashInfer, DeepGEMM and torch compile kernels with $CUDA_HOME/bin/nvcc at run time)"]


def test_a_compiler_of_another_cuda_is_named_with_the_pin_that_fixes_it():
    assert jit_problems(jit(release="13.5"), "13.0.1") == [
        f"JIT toolchain: {HOME}/bin/nvcc is CUDA 13.5, the stack's CUDA is 13.0 (pin the compiler to the CUDA of its "
        "headers, e.g. cuda-toolkit[nvcc,cccl]==13.0.*)"]


@pytest.mark.parametrize("output,telling", [
    ("a.cu(3): warning: x\n/usr/bin/ld: cannot find -lcudart: No such file or directory\ncollect2: error: ld "
     "returned 1 exit status\n", "/usr/bin/ld: cannot find -lcudart: No such file or directory"),
    ("In file included from x.h:1,\n  x.h:41:8: error: #error \"incompatible\"\n  more\n", "x.h:41:8: error: #error "
     "\"incompatible\""),
    ("first\n\n  last line  \n", "last line"),
    ("", "no output"),
    (None, "no output"),
])
def test_a_failed_compile_names_its_most_telling_line(output, telling):
    assert jit_problems(jit(returncode=2, error=output), "13.0") == [
        f"JIT toolchain: {HOME}/bin/nvcc (CUDA 13.0) cannot build a CUDA extension for 9.0, 12.0 with "
        f"-L$CUDA_HOME/lib64 -lcudart: {telling}"]
    assert jit_problems(jit(returncode=2, error=output, release=None), "13.0")[0].startswith(
        f"JIT toolchain: {HOME}/bin/nvcc (CUDA unknown) cannot build")


def test_nothing_to_link_minus_lcuda_against_is_named():
    assert jit_problems(jit(driver_stub=None), "13.0") == [
        f"JIT toolchain: nothing for -lcuda: no {HOME}/lib64/stubs/libcuda.so (FlashInfer links every JIT module "
        "with -lcuda: a CUDA toolkit's stub, or a link to the driver's libcuda.so.1 that the NVIDIA runtime mounts)"]
    assert jit_problems(jit(driver_stub=""), "13.0") != []


# ---- the in-image check's own logic, with a stand-in nvcc ----------------------------------------------

@pytest.fixture
def imagecheck(monkeypatch):
    monkeypatch.syspath_prepend(str(TOOLS))
    return importlib.import_module("imagecheck")


def fake_toolkit(root: Path, *, release: str = "13.0", compile_exit: int = 0, stderr: str = "",
                 stub: str | None = "/usr/lib/x86_64-linux-gnu/libcuda.so.1") -> Path:
    """A CUDA home whose bin/nvcc answers --version and records its argv (and the source it was given)."""
    home = root / "cu13"
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "stubs").mkdir(parents=True)
    os.symlink("lib", home / "lib64")
    if stub is not None:
        os.symlink(stub, home / "lib" / "stubs" / "libcuda.so")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"""#!/bin/sh
if [ "$1" = --version ]; then echo "Cuda compilation tools, release {release}, V{release}.88"; exit 0; fi
echo "$@" > "{root}/argv"
for a in "$@"; do case "$a" in *.cu) cp "$a" "{root}/source.cu";; esac; done
printf '%s' '{stderr}' >&2
exit {compile_exit}
""")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return home


def test_the_check_compiles_for_each_capability_as_flashinfer_links(imagecheck, tmp_path):
    home = fake_toolkit(tmp_path)
    report = imagecheck.jit_toolchain(["9.0", "10.3", "12.0"], str(home))
    assert {k: v for k, v in report.items() if k != "seconds"} == {
        "cuda_home": str(home), "archs": ["9.0", "10.3", "12.0"], "release": "13.0", "returncode": 0, "error": None,
        "driver_stub": "/usr/lib/x86_64-linux-gnu/libcuda.so.1"}
    argv = (tmp_path / "argv").read_text().split()
    assert argv[:5] == ["-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-gencode=arch=compute_90,code=sm_90"]
    assert argv[5:7] == ["-gencode=arch=compute_103,code=sm_103", "-gencode=arch=compute_120,code=sm_120"]
    assert argv[-2:] == [f"-L{home}/lib64", "-lcudart"] and argv[-3].endswith("jit_check.so")
    source = (tmp_path / "source.cu").read_text()
    for header in ("<cuda_runtime.h>", "<cuda_fp16.h>", "<cuda_bf16.h>", "<cuda/std/utility>"):
        assert f"#include {header}" in source


def test_a_failed_compile_keeps_its_output_without_the_temporary_folder(imagecheck, tmp_path):
    home = fake_toolkit(tmp_path, release="13.5", compile_exit=1, stderr="boom: error here", stub=None)
    report = imagecheck.jit_toolchain(["9.0"], str(home))
    assert (report["release"], report["returncode"], report["error"], report["driver_stub"]) == (
        "13.5", 1, "boom: error here", None)
    assert jit_problems(report, "13.0") == [
        f"JIT toolchain: {home}/bin/nvcc is CUDA 13.5, the stack's CUDA is 13.0 (pin the compiler to the CUDA of its "
        "headers, e.g. cuda-toolkit[nvcc,cccl]==13.0.*)",
        f"JIT toolchain: nothing for -lcuda: no {home}/lib64/stubs/libcuda.so (FlashInfer links every JIT module "
        "with -lcuda: a CUDA toolkit's stub, or a link to the driver's libcuda.so.1 that the NVIDIA runtime mounts)",
        f"JIT toolchain: {home}/bin/nvcc (CUDA 13.5) cannot build a CUDA extension for 9.0 with -L$CUDA_HOME/lib64 "
        "-lcudart: boom: error here"]


def test_a_real_stub_file_is_named_by_its_path_and_a_missing_compiler_is_not_run(imagecheck, tmp_path):
    home = fake_toolkit(tmp_path, stub=None)
    (home / "lib" / "stubs" / "libcuda.so").write_bytes(b"\x7fELF stub")
    assert imagecheck.jit_toolchain(["9.0"], str(home))["driver_stub"] == f"{home}/lib64/stubs/libcuda.so"
    missing = imagecheck.jit_toolchain(["9.0"], str(tmp_path / "none"))
    assert (missing["error"], missing["returncode"], missing["release"]) == (
        f"no nvcc at {tmp_path}/none/bin/nvcc", None, None)
    assert imagecheck.jit_toolchain(["9.0"], None)["error"] == "CUDA_HOME is not set"
    assert imagecheck.jit_toolchain(["9.0"], "")["error"] == "CUDA_HOME is not set"


def test_a_compiler_that_hangs_is_stopped(imagecheck, tmp_path):
    home = fake_toolkit(tmp_path)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "release 13.0," && exit 0\nexec sleep 30\n')
    report = imagecheck.jit_toolchain(["9.0"], str(home), timeout=0.5)
    assert report["error"] == "nvcc did not finish within 0.5 s"
    assert report["returncode"] is None and jit_problems(report, "13.0") == [
        f"JIT toolchain: {report['error']} (FlashInfer, DeepGEMM and torch compile kernels with $CUDA_HOME/bin/nvcc "
        "at run time)"]


@pytest.mark.parametrize("arch,flag", [("9.0", "-gencode=arch=compute_90,code=sm_90"),
                                       ("10.0", "-gencode=arch=compute_100,code=sm_100"),
                                       ("12.1", "-gencode=arch=compute_121,code=sm_121")])
def test_gencode_is_flashinfers_form(imagecheck, arch, flag):
    assert imagecheck.gencode(arch) == flag


# ---- the other in-image verdicts -----------------------------------------------------------------------

def test_the_in_image_problems_are_one_line_each():
    report = {
        "shared_libraries": {"folders": ["/site"], "unresolved": {"/site/b.so": ["libz.so.1"],
                                                                  "/site/a.so": ["libx.so.1", "liby.so.2"]},
                             "unreadable": {"/site/z.so": "truncated", "/site/c.so": "bad header"}},
        "server_help": {"returncode": 1, "lists_model_path": False, "error": "Traceback\nImportError: no torch\n"},
        "serving_argv": {"error": "cannot import sglang.srt.server_args: X", "results": [
            {"argv": ["--model-path", "m", "--bad"], "ok": False, "error": "unrecognized arguments: --bad"},
            {"argv": ["--model-path", "m"], "ok": True, "error": None}]},
        "jit_toolchain": jit(driver_stub=None)}
    assert image_check_problems(report, cuda="13.0") == [
        "shared libraries: /site/a.so needs libx.so.1, liby.so.2, which the image does not have (and 1 more file(s)); "
        "declare an exception under 'shared_libraries' with its reason, or add the library",
        "shared libraries: cannot read /site/c.so: bad header",
        "python -m sglang.launch_server --help failed (exit 1): ImportError: no torch",
        "serving argv: cannot import sglang.srt.server_args: X",
        "serving argv refused by the image's SGLang: unrecognized arguments: --bad (argv: --model-path m --bad)",
        f"JIT toolchain: nothing for -lcuda: no {HOME}/lib64/stubs/libcuda.so (FlashInfer links every JIT module "
        "with -lcuda: a CUDA toolkit's stub, or a link to the driver's libcuda.so.1 that the NVIDIA runtime mounts)"]
    one = {"shared_libraries": {"folders": ["/site"], "unresolved": {"/site/a.so": ["libx.so.1"]}}}
    waived = SharedLibrariesPolicy(exceptions=(LibraryException(file="a.so", reason="a plugin"),))
    assert image_check_problems(one) == [
        "shared libraries: /site/a.so needs libx.so.1, which the image does not have; declare an exception under "
        "'shared_libraries' with its reason, or add the library"]
    assert image_check_problems(one, waived) == []
    assert image_check_problems({"server_help": {"returncode": 0, "lists_model_path": False, "error": ""}}) == [
        "python -m sglang.launch_server --help failed (exit 0): no --model-path in its help"]
    assert image_check_problems({"server_help": {"returncode": 0, "lists_model_path": True}}) == []
    assert image_check_problems({}) == []


def test_verified_labels_name_each_patch_the_freeze_and_torch():
    manifest = [{"id": "p1", "status": "applied", "sha256_before": "a" * 64, "sha256_after": "b" * 64},
                {"id": "p2", "status": "retired"}]
    info = {"distributions": {"b": "2", "a": "1"}, "torch": {"version": "2.14.1+cu130", "cuda": "13.0"}}
    labels = verify.verified_labels(manifest, info)
    assert labels == {
        lb.VERIFIED_LABEL: "true",
        f"{lb.PATCH_LABEL_PREFIX}p1": f"applied sha256:{'a' * 16}->{'b' * 16}",
        f"{lb.PATCH_LABEL_PREFIX}p2": "retired sha256:->",
        lb.FREEZE_LABEL: hashlib.sha256(b"a==1\nb==2").hexdigest(),
        lb.TORCH_LABEL: "2.14.1+cu130 cuda 13.0"}
    assert verify.verified_labels([], None) == {lb.VERIFIED_LABEL: "true"}
    no_torch = verify.verified_labels([], {"distributions": {}, "torch": {"import_error": "x"}})
    assert lb.TORCH_LABEL not in no_torch and no_torch[lb.FREEZE_LABEL] == hashlib.sha256(b"").hexdigest()


def test_pins_torch_and_its_cuda_are_each_named(stacks_matrix):
    stack = stacks_matrix.get("pypi-cu130")
    pins = stack.pins()
    info = {"distributions": {k: v for k, v in pins.items() if k != "sglang"}, "torch": {"import_error": "boom"}}
    assert judge.pin_mismatches(stack, info) == [
        "sglang: pinned 0.5.23, not installed", "torch: pinned 2.14.1, but 'import torch' failed: boom"]
    assert judge.pin_mismatches(stack, {"distributions": pins})[-1] == (
        "torch: pinned 2.14.1, but 'import torch' failed: not importable")
    cpu = {"distributions": pins, "torch": {"version": "2.14.1", "cuda": None}}
    assert judge.pin_mismatches(stack, cpu) == ["torch 2.14.1 is a CPU build; the stack needs CUDA 13.0"]
    other = {"distributions": pins, "torch": {"version": "2.14.1", "cuda": "12.9"}}
    assert judge.pin_mismatches(stack, other) == ["torch was built for CUDA 12.9, the stack needs CUDA 13.0"]
    with pytest.raises(PinMismatch) as err:
        verify.check_pins(stack, other)
    assert str(err.value) == ("stack 'pypi-cu130': the image does not match its pins: torch was built for CUDA 12.9, "
                              "the stack needs CUDA 13.0")
    assert verify.check_pins(stack, {"distributions": pins, "torch": {"version": "2.14.1", "cuda": "13.0"}}) is None


@pytest.mark.parametrize("reported,pinned,ok", [
    ("2.14.1+cu130", "2.14.1", True), ("2.14.1", "2.14.1", True), ("2.14.1+cu130", "2.14.1+cu130", True),
    ("2.14.1+cu129", "2.14.1+cu130", False), ("2.14.0+cu130", "2.14.1", False), ("nonsense!", "2.14.1", False),
])
def test_torch_reports_a_local_label_its_pin_may_lack(reported, pinned, ok):
    assert judge.torch_version_matches(reported, pinned) is ok


def test_pip_check_keeps_what_the_stack_did_not_declare(stacks_matrix):
    cu130 = stacks_matrix.get("cu130")  # overrides cuda-python==12.9 with 13.0.3, flashinfer 0.6.3 with 0.6.4
    lines = ["sglang 0.5.9 has requirement cuda-python==12.9, but you have cuda-python 13.0.3.",
             "sglang 0.5.9 has requirement cuda-python==12.9, but you have cuda-python 13.0.2.",
             "sglang 0.5.9 requires flashinfer_python==0.6.3, which is not installed.",
             "foo 1.0 requires bar, which is not installed.",
             "something pip says in another form"]
    info = {"pip_check": {"ran": True, "problems": lines}}
    assert judge.pip_check_problems(cu130, info) == [
        "pip check: sglang 0.5.9 has requirement cuda-python==12.9, but you have cuda-python 13.0.2",
        "pip check: sglang 0.5.9 requires flashinfer_python==0.6.3, which is not installed",
        "pip check: foo 1.0 requires bar, which is not installed",
        "pip check: something pip says in another form"]
    assert judge.pip_check_problems(cu130, {}) == []
    assert judge.pip_check_problems(cu130, {"pip_check": {"ran": False, "error": "no pip"}}) == [
        "pip check could not run in the image: no pip"]
    assert judge.pip_check_problems(cu130, {"pip_check": {"ran": False}}) == [
        "pip check could not run in the image: unknown error"]


def test_site_relative_names_a_file_as_an_exception_does():
    assert judge.site_relative("/a/site/x/y.so", ["/b", "/a/site/"]) == "x/y.so"
    assert judge.site_relative("/a/sitex/y.so", ["/a/site"]) == "/a/sitex/y.so"


# ---- the container-driven steps, against a stand-in engine (the real one: tests/e2e) -------------------

class Engine:
    """The engine client verify is given: passed on as it is, asked only its `info()` (the platform it runs)."""

    def __init__(self, machine: str = "x86_64") -> None:
        self.machine = machine

    def info(self) -> dict:
        return {"Architecture": self.machine, "OSType": "linux"}


CLIENT = Engine()


class FakeContainer:
    def __init__(self, code: int | None, out: str | bytes, err: str | bytes = "") -> None:
        self.code, self.waited = code, None
        self.out, self.err = (x if isinstance(x, bytes) else x.encode() for x in (out, err))

    def wait(self, timeout):
        self.waited = timeout
        return {"StatusCode": self.code} if self.code is not None else {}

    def logs(self, stdout, stderr):
        if (stdout, stderr) == (True, False):
            return self.out
        if (stdout, stderr) == (False, True):
            return self.err
        raise AssertionError(f"logs(stdout={stdout!r}, stderr={stderr!r})")


class FakeEngine:
    """What verify asks of Docker: one running container per call (its argv and labels kept), image files."""

    def __init__(self, container: FakeContainer | None = None, files: dict[str, bytes] | None = None) -> None:
        self.container, self.files, self.runs = container, files or {}, []

    def running(self, client, image, **kwargs):
        import contextlib
        assert client is CLIENT
        self.runs.append((image, kwargs))
        return contextlib.nullcontext(self.container)


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine()
    monkeypatch.setattr(verify, "running_container", fake.running)

    def read(client, image, paths, labels):
        assert client is CLIENT
        fake.runs.append((image, {"read": tuple(paths), "labels": labels}))
        return {p: fake.files[p] for p in paths}

    monkeypatch.setattr(verify, "read_image_files", read)
    return fake


def test_the_image_checks_run_offline_and_a_clean_report_comes_back_with_its_waivers(engine, stacks_matrix):
    import json

    stack = stacks_matrix.get("pypi-cu130")
    report = {"python": "3.11.2", "shared_libraries": {"folders": ["/s"], "unresolved": {
        "/s/numba/np/ufunc/tbbpool.so": ["libtbb.so.12"]}}, "jit_toolchain": jit()}
    engine.container = FakeContainer(0, json.dumps(report))
    out = verify.run_image_checks(CLIENT, "img:1", stack)
    image, kwargs = engine.runs[0]
    assert image == "img:1" and kwargs["command"] == verify.image_check_argv(stack)
    assert kwargs["network_disabled"] is True and kwargs["entrypoint"] == []
    assert kwargs["labels"] == {lb.BUILD_CONTAINER_LABEL: "pypi-cu130"} and kwargs["name_prefix"] == "sglstack-check"
    assert engine.container.waited == verify.IMAGECHECK_TIMEOUT_S
    assert out["waived_libraries"] == {"numba/np/ufunc/tbbpool.so": (
        "numba's optional TBB threading layer; without libtbb numba uses its OpenMP or workqueue layer")}
    assert out["python"] == "3.11.2" and len(out["notes"]) == len(stack.shared_libraries.exceptions) - 1


@pytest.mark.parametrize("code,out,err,last", [
    (1, "", "Traceback\nModuleNotFoundError: No module named 'elfdeps'\n",
     "ModuleNotFoundError: No module named 'elfdeps'"),
    (0, "not json", "", "not json"),
    (137, "", "", "exit 137"),
    (2, b"", b"\xff\xfe not utf-8\nImportError: x\n", "ImportError: x"),
    (None, "", "", "exit 1"),
])
def test_checks_that_did_not_run_are_one_line(engine, stacks_matrix, code, out, err, last):
    from sglstack.core.errors import ImageCheckFailed

    engine.container = FakeContainer(code, out, err)
    with pytest.raises(ImageCheckFailed) as info:
        verify.run_image_checks(CLIENT, "img:1", stacks_matrix.get("cu130"))
    assert str(info.value) == f"stack 'cu130': the in-image checks did not run: {last}"


def test_a_failing_check_fails_the_build_with_every_problem(engine, stacks_matrix):
    import json

    from sglstack.core.errors import ImageCheckFailed

    engine.container = FakeContainer(0, json.dumps({"jit_toolchain": jit(release="13.5", driver_stub=None)}))
    with pytest.raises(ImageCheckFailed) as info:
        verify.run_image_checks(CLIENT, "img:1", stacks_matrix.get("pypi-cu130"))
    message = str(info.value)
    assert message.startswith("stack 'pypi-cu130': the image fails its in-image checks: JIT toolchain: ")
    assert "is CUDA 13.5, the stack's CUDA is 13.0" in message and "; JIT toolchain: nothing for -lcuda" in message


def test_the_serving_image_is_verified_from_the_files_its_last_step_wrote(engine, stacks_matrix):
    import json

    stack = stacks_matrix.get("pypi-cu130")
    pins = stack.pins()
    engine.files = {verify.RUNTIME_MANIFEST: json.dumps([{"id": "kimi-k25-eagle3", "status": "retired"}]).encode(),
                    verify.RUNTIME_INSTALLED: json.dumps({"distributions": pins, "torch": {
                        "version": "2.14.1+cu130", "cuda": "13.0"}}).encode()}
    manifest, info = verify.verified_facts(CLIENT, "img:1", stack, verify.FINAL_TARGET)
    assert manifest == [{"id": "kimi-k25-eagle3", "status": "retired"}] and info["distributions"] == pins
    assert engine.runs == [("img:1", {"read": (verify.RUNTIME_MANIFEST, verify.RUNTIME_INSTALLED),
                                      "labels": {lb.BUILD_CONTAINER_LABEL: "pypi-cu130"}})]
    engine.files[verify.RUNTIME_INSTALLED] = json.dumps({"distributions": {**pins, "torch": "2.14.0"}}).encode()
    with pytest.raises(PinMismatch, match=r"^stack 'pypi-cu130': the image does not match its pins: torch: pinned "
                                          r"2\.14\.1, installed 2\.14\.0; "):
        verify.verified_facts(CLIENT, "img:1", stack, verify.FINAL_TARGET)


def test_the_source_stage_is_verified_in_one_container(engine, stacks_matrix):
    import json

    stack = stacks_matrix.get("cu130")
    engine.container = FakeContainer(0, json.dumps([{"id": "kimi-k25-eagle3", "status": "applied"}]))
    manifest, info = verify.verified_facts(CLIENT, "src:1", stack, "sglang-src")
    assert manifest == [{"id": "kimi-k25-eagle3", "status": "applied"}] and info is None
    image, kwargs = engine.runs[0]
    assert image == "src:1"
    assert kwargs["command"] == ["bash", "-c", "PYTHONPATH=/opt/sglstack/tools python3 -m patchkit verify --root "
                                 "/src/tree --patches-dir /opt/sglstack/patches --manifest /out/patches.json "
                                 "kimi-k25-eagle3 >&2 && cat /out/patches.json"]
    assert kwargs["network_disabled"] is True and engine.container.waited == 600
    assert (kwargs["name_prefix"], kwargs["labels"], kwargs["entrypoint"]) == (
        "sglstack-verify", {lb.BUILD_CONTAINER_LABEL: "cu130"}, [])
    two = stack.model_copy(update={"patches": ("kimi-k25-eagle3", "other patch")})
    engine.container = FakeContainer(0, "[]")
    verify.verified_facts(CLIENT, "src:1", two, "sglang-src")
    assert engine.runs[-1][1]["command"][2].endswith("kimi-k25-eagle3 'other patch' >&2 && cat /out/patches.json")
    engine.container = FakeContainer(3, "", "PatchDrift: kimi-k25-eagle3: class Foo not found\n")
    with pytest.raises(verify.BuildError) as info:
        verify.verified_facts(CLIENT, "src:1", stack, "sglang-src")
    assert str(info.value) == ("stack 'cu130': patch verification in the built image failed: PatchDrift: "
                               "kimi-k25-eagle3: class Foo not found")
    engine.container = FakeContainer(3, "", "")
    with pytest.raises(verify.BuildError, match=r"failed: exit 3$"):
        verify.verified_facts(CLIENT, "src:1", stack, "sglang-src")
    engine.container = FakeContainer(None, "", "")  # an engine that gives no exit status: a failure, exit 1
    with pytest.raises(verify.BuildError, match=r"failed: exit 1$"):
        verify.verified_facts(CLIENT, "src:1", stack, "sglang-src")
    bare = stack.model_copy(update={"patches": ()})
    engine.files = {verify.SRC_MANIFEST: b"[]"}
    assert verify.verified_facts(CLIENT, "src:1", bare, "sglang-src") == ([], None)
    assert engine.runs[-1] == ("src:1", {"read": (verify.SRC_MANIFEST,), "labels": {lb.BUILD_CONTAINER_LABEL: "cu130"}})


def test_the_serving_images_pins_are_checked_against_its_lock_too(engine, stacks_matrix, monkeypatch):
    import json

    seen = []
    monkeypatch.setattr(verify, "check_pins", lambda stack, info, lock=None: seen.append((stack.name, info, lock)))
    installed = json.dumps({"distributions": {}}).encode()
    engine.files = {verify.RUNTIME_MANIFEST: b"[]", verify.RUNTIME_INSTALLED: installed}
    lock = object()
    verify.verified_facts(CLIENT, "img:1", stacks_matrix.get("cu130"), verify.FINAL_TARGET, lock)  # type: ignore[arg-type]
    assert seen == [("cu130", {"distributions": {}}, lock)]


def test_a_base_pinned_by_id_builds_only_on_that_image(stacks_matrix):
    import docker.errors

    stack = stacks_matrix.get("pypi-cu130").model_copy(update={
        "base_image": "sglstack/base:debian12-slim-5ebdceea6080", "base_seed": None,
        "base_image_id": "sha256:5ebdceea608057fb31ed1f18296f09367307d2021c72d1557d16ee0f1b62de26"})

    class Images:
        def __init__(self, found):
            self.found = found

        def get(self, ref):
            assert ref == stack.base_image
            if self.found is None:
                raise docker.errors.ImageNotFound("no")
            return type("Image", (), {"id": self.found})()

    class Client:
        def __init__(self, found):
            self.images = Images(found)

    assert verify.check_base_image(Client(stack.base_image_id), stack) is None
    with pytest.raises(verify.BuildError) as info:
        verify.check_base_image(Client("sha256:" + "0" * 64), stack)
    assert str(info.value) == (f"stack 'pypi-cu130': base_image {stack.base_image} is image sha256:{'0' * 64}, but "
                               f"the stack pins base_image_id {stack.base_image_id}")
    with pytest.raises(verify.BuildError) as info:
        verify.check_base_image(Client(None), stack)
    assert str(info.value) == (f"stack 'pypi-cu130': base_image {stack.base_image} is not on this engine (the stack "
                               f"pins image {stack.base_image_id}: make or load that image and tag it so)")
    assert verify.check_base_image(None, stacks_matrix.get("cu130")) is None  # no id pinned: nothing asked


def test_small_rules_of_the_verdicts(stacks_matrix):
    assert judge.same_version("13.0.3.0", "13.0.3") and not judge.same_version("weird!", "13.0.3")
    assert not judge.same_version("13.0.3", "not a version!")
    cu130 = stacks_matrix.get("cu130")
    no_cuda = cu130.model_copy(update={"cuda": None})
    assert not [a for a in verify.image_check_argv(no_cuda) if a.startswith("--jit-arch")]
    no_archs = cu130.model_copy(update={"cuda_arch_list": ()})
    assert not [a for a in verify.image_check_argv(no_archs) if a.startswith("--jit-arch")]
    spec, baseline = verify.serving_argvs(cu130)
    assert "--speculative-algorithm" in spec and "--speculative-algorithm" not in baseline
    assert baseline[:2] == ["--model-path", "moonshotai/Kimi-K2.5"]
    assert judge.pip_check_problems(cu130, {"pip_check": {"ran": True}}) == []
    assert judge.pin_mismatches(cu130.model_copy(update={"torch": None}), {}) == [
        f"{name}: pinned {version}, not installed" for name, version in sorted(
            cu130.model_copy(update={"torch": None}).pins().items())]
    assert verify.verified_labels([], {})[lb.FREEZE_LABEL] == hashlib.sha256(b"").hexdigest()


def test_without_sglangs_requirements_pip_check_says_nothing_of_sglang_but_the_rest(stacks_matrix):
    stack = stacks_matrix.get("cu130")
    bare = stack.model_copy(update={"sglang": stack.sglang.model_copy(update={"install_deps": False})})
    lines = ["sglang 0.5.9 requires torch==2.9.1, which is not installed.",
             "sglang 0.5.9 has requirement numpy<2, but you have numpy 2.3.4.",
             "foo 1.0 requires bar, which is not installed."]
    assert judge.pip_check_problems(bare, {"pip_check": {"ran": True, "problems": lines}}) == [
        "pip check: foo 1.0 requires bar, which is not installed"]
    replaced = ["sglang 0.5.9 requires flashinfer_cubin==0.6.3, which is not installed."]
    # an override that names the same package (flashinfer-cubin 0.6.4 for 0.6.3) leaves a missing one a finding
    assert judge.pip_check_problems(stack, {"pip_check": {"ran": True, "problems": replaced}}) == [
        "pip check: sglang 0.5.9 requires flashinfer_cubin==0.6.3, which is not installed"]


def test_the_serving_images_facts_are_checked_against_the_lock(engine, stacks_matrix, tmp_path):
    import json

    from sglstack.lockfile.text import read_lock

    stack = stacks_matrix.get("pypi-cu130")
    lock = read_lock(REPO / "locks" / "pypi-cu130.txt")
    dists = {p.name: p.version for p in lock.packages}
    engine.files = {verify.RUNTIME_MANIFEST: b"[]", verify.RUNTIME_INSTALLED: json.dumps({
        "distributions": {**dists, "idna": "0.1"}, "torch": {"version": "2.14.1+cu130", "cuda": "13.0"}}).encode()}
    with pytest.raises(PinMismatch) as err:
        verify.verified_facts(CLIENT, "img:1", stack, verify.FINAL_TARGET, lock)
    assert str(err.value).startswith("stack 'pypi-cu130': the image does not match its pins: ")
    assert "idna" in str(err.value) and "0.1" in str(err.value)
    engine.files[verify.RUNTIME_INSTALLED] = json.dumps({"distributions": dists, "torch": {
        "version": "2.14.1+cu130", "cuda": "13.0"}}).encode()
    assert verify.verified_facts(CLIENT, "img:1", stack, verify.FINAL_TARGET, lock)[1]["distributions"] == dists


def test_undecodable_output_of_the_source_stage_is_still_one_line(engine, stacks_matrix):
    engine.container = FakeContainer(None, b"", b"\xff\xfe\nPatchDrift: gone\n")
    with pytest.raises(verify.BuildError) as err:
        verify.verified_facts(CLIENT, "src:1", stacks_matrix.get("cu130"), "sglang-src")
    assert str(err.value) == "stack 'cu130': patch verification in the built image failed: PatchDrift: gone"
    engine.container = FakeContainer(0, b'[{"id": "p", "note": "caf\xc3\xa9 \xff"}]', b"")
    facts = verify.verified_facts(CLIENT, "src:1", stacks_matrix.get("cu130"), "sglang-src")
    assert facts[0][0]["note"] == "café \ufffd"


def _tar(name: str, data: bytes | None) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        if data is None:
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        else:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_image_files_are_read_from_a_created_container_never_run(monkeypatch):
    import contextlib
    import io
    import tarfile

    import docker.errors

    nothing = io.BytesIO()
    tarfile.open(fileobj=nothing, mode="w").close()  # an archive with no member
    archives = {"/opt/a.json": _tar("a.json", b'{"a": 1}'), "/opt/dir": _tar("dir", None),
                "/opt/empty": nothing.getvalue()}
    made = []

    class Created:
        def get_archive(self, path):
            if path not in archives:
                raise docker.errors.NotFound("no such file")
            data = archives[path]
            return iter([data[:10], data[10:]]), {"name": path}

    def created(client, image, **kwargs):
        assert client is CLIENT
        made.append((image, kwargs))
        return contextlib.nullcontext(Created())

    monkeypatch.setattr(verify, "created_container", created)
    labels = {lb.BUILD_CONTAINER_LABEL: "s"}
    assert verify.read_image_files(CLIENT, "img:1", ["/opt/a.json"], labels) == {"/opt/a.json": b'{"a": 1}'}
    assert made == [("img:1", {"name_prefix": "sglstack-verify", "labels": labels, "command": ["true"],
                               "entrypoint": [], "network_disabled": True})]
    with pytest.raises(verify.BuildError) as err:
        verify.read_image_files(CLIENT, "img:1", ["/opt/a.json", "/opt/missing"], labels)
    assert str(err.value) == "the built image has no /opt/missing"
    with pytest.raises(verify.BuildError) as err:
        verify.read_image_files(CLIENT, "img:1", ["/opt/dir"], labels)
    assert str(err.value) == "/opt/dir in the built image is not a file"
    with pytest.raises(verify.BuildError) as err:
        verify.read_image_files(CLIENT, "img:1", ["/opt/empty"], labels)
    assert str(err.value) == "/opt/empty in the built image is not a file"


def test_the_sbom_inventory_must_match_the_lock(monkeypatch, stacks_matrix):
    stack = stacks_matrix.get("cu130")
    seen = []
    monkeypatch.setattr(verify, "image_inventory", lambda client, image, labels: seen.append((client, image, labels))
                        or "inventory")
    monkeypatch.setattr(verify, "lock_problems", lambda inventory, lock: [f"{inventory}: a, not in {lock}", "b extra"])
    inventory = SimpleNamespace(python={"a": "1"}, requires={"a": ("b",)}, name="inventory")
    monkeypatch.setattr(verify, "image_inventory", lambda client, image, labels: seen.append((client, image, labels))
                        or inventory)
    unneeded: list[tuple] = []
    monkeypatch.setattr(verify, "unrequired_in_image", lambda lock, roots, installed, requires: unneeded.append(
        (lock, roots, installed, requires)) or ["c==1 is installed from the lock, but nothing requires it"])
    with pytest.raises(PinMismatch) as err:
        verify.sbom_inventory(CLIENT, "img:1", stack, "LOCK")  # type: ignore[arg-type]
    assert str(err.value) == (f"stack 'cu130': the image's SBOM does not match its lock: {inventory}: a, not in "
                              "LOCK; b extra; c==1 is installed from the lock, but nothing requires it")
    assert seen == [(CLIENT, "img:1", {lb.BUILD_CONTAINER_LABEL: "cu130"})]
    assert unneeded == [("LOCK", root_names(stack), {"a": "1"}, {"a": ("b",)})]
    assert verify.sbom_inventory(CLIENT, "img:1", stack, None) is inventory  # no lock: listed, not compared
    monkeypatch.setattr(verify, "lock_problems", lambda inventory, lock: [])
    with pytest.raises(PinMismatch, match=r"its lock: c==1 is installed from the lock, but nothing requires it$"):
        verify.sbom_inventory(CLIENT, "img:1", stack, "LOCK")  # type: ignore[arg-type]
    monkeypatch.setattr(verify, "unrequired_in_image", lambda lock, roots, installed, requires: [])
    assert verify.sbom_inventory(CLIENT, "img:1", stack, "LOCK") is inventory  # type: ignore[arg-type]


# ---- the last survivors of the verify module's mutation run -------------------------------------------


def test_the_help_failure_names_the_last_line_of_its_error():
    report = {"server_help": {"returncode": 1, "error": "Traceback\n  File x\nImportError: no flashinfer\n",
                              "lists_model_path": False}}
    assert image_check_problems(report) == [
        "python -m sglang.launch_server --help failed (exit 1): ImportError: no flashinfer"]


@pytest.mark.parametrize("code,out,err,last", [
    (0, b"\xff\xfe{not json\n", b"", "\ufffd\ufffd{not json"),  # stdout that is not UTF-8 is decoded, not raised
    (1, b'{"python": "3.11.2"}', b"", '{"python": "3.11.2"}'),  # a report from a check that exited 1 is not taken
])
def test_output_of_checks_that_failed_is_never_taken_as_a_report(engine, stacks_matrix, code, out, err, last):
    from sglstack.core.errors import ImageCheckFailed

    engine.container = FakeContainer(code, out, err)
    with pytest.raises(ImageCheckFailed) as info:
        verify.run_image_checks(CLIENT, "img:1", stacks_matrix.get("cu130"))
    assert str(info.value) == f"stack 'cu130': the in-image checks did not run: {last}"


def test_pins_pip_check_source_and_lock_problems_are_all_named(stacks_matrix):
    from sglstack.lockfile.text import read_lock

    stack = stacks_matrix.get("pypi-cu130")
    lock = read_lock(REPO / "locks" / "pypi-cu130.txt")
    dists = {p.name: p.version for p in lock.packages}
    info = {"distributions": {**dists, "sglang": "0.0.1"}, "torch": {"version": "2.14.1+cu130", "cuda": "13.0"},
            "pip_check": {"ran": True, "problems": ["foo 1.0 requires bar, which is not installed."]}}
    expected = (judge.pin_mismatches(stack, info) + judge.pip_check_problems(stack, info)
                + verify.source_mismatches(lock, stack) + judge.lock_mismatches(lock, info)[0])
    assert judge.pin_mismatches(stack, info) and judge.lock_mismatches(lock, info)[0]
    with pytest.raises(PinMismatch) as err:
        verify.check_pins(stack, info, lock)
    assert str(err.value) == f"stack 'pypi-cu130': the image does not match its pins: {'; '.join(expected)}"
    assert "pip check: foo 1.0 requires bar, which is not installed" in expected


def test_an_image_without_a_distribution_list_misses_every_locked_package(stacks_matrix):
    from sglstack.lockfile.text import read_lock

    lock = read_lock(REPO / "locks" / "pypi-cu130.txt")
    assert judge.lock_mismatches(lock, {}) == judge.lock_mismatches(lock, {"distributions": {}})
    assert len(judge.lock_mismatches(lock, {})[0]) >= len(lock.packages) // 2


def test_a_missing_requirement_an_override_replaced_by_another_package_is_the_declared_choice(stacks_matrix):
    from sglstack.config.schema import Override

    stack = stacks_matrix.get("cu130")
    stack = stack.model_copy(update={"overrides": (Override(replaces="flashinfer_cubin==0.6.3",
                                                            pin="flashinfer-jit-cache==0.6.4", reason="r"),)})
    lines = ["sglang 0.5.9 requires flashinfer_cubin==0.6.3, which is not installed.",
             "weird line from a newer pip about libX."]
    assert judge.pip_check_problems(stack, {"pip_check": {"ran": True, "problems": lines}}) == [
        "pip check: weird line from a newer pip about libX"]


def test_an_image_of_another_platform_than_the_engines_gets_emulated_time(engine, stacks_matrix, monkeypatch):
    """Its checks run under QEMU: the container's wait and the server's --help limit are scaled; a native
    image's argv and limit stay as they were."""
    import json

    whole = load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb")
    arm = whole.for_platform("linux/arm64")
    report = {"python": "3.11.2", "shared_libraries": {"folders": ["/s"], "unresolved": {}}, "jit_toolchain": jit()}
    engine.container = FakeContainer(0, json.dumps(report))
    given = {}
    running = verify.running_container

    def reading(client, image, **kwargs):  # the file mounted over /proc/cpuinfo, read while the container runs
        given.update({bind["bind"]: Path(src).read_text() for src, bind in kwargs.get("volumes", {}).items()})
        return running(client, image, **kwargs)

    monkeypatch.setattr(verify, "running_container", reading)
    verify.run_image_checks(CLIENT, "img:1", arm)  # this x86_64 engine runs an arm64 image under QEMU
    _, kwargs = engine.runs[-1]
    assert list(given) == ["/proc/cpuinfo"] and "CPU implementer\t: 0x41" in given["/proc/cpuinfo"]
    assert kwargs["volumes"][next(iter(kwargs["volumes"]))]["mode"] == "ro"
    assert not any(Path(src).exists() for src in kwargs["volumes"])  # removed after the run
    assert engine.container.waited == verify.IMAGECHECK_TIMEOUT_S * emulation.EMULATED_SLOWDOWN
    scaled = emulation.EMULATED_SLOWDOWN
    assert kwargs["command"][2:5] == [f"--help-timeout={emulation.HELP_TIMEOUT_S * scaled}",
                                      f"--import-timeout={emulation.IMPORT_TIMEOUT_S * scaled}",
                                      f"--jit-timeout={emulation.JIT_TIMEOUT_S * scaled}"]
    engine.container = FakeContainer(0, json.dumps(report))
    monkeypatch.setattr(CLIENT, "machine", "aarch64")
    verify.run_image_checks(CLIENT, "img:1", arm)  # an arm64 engine runs it natively
    _, kwargs = engine.runs[-1]
    assert engine.container.waited == verify.IMAGECHECK_TIMEOUT_S and "volumes" not in kwargs
    assert kwargs["command"] == verify.image_check_argv(arm)
    assert not any("--help-timeout" in a for a in kwargs["command"])
