"""NVIDIA's compatibility rules, the packages' loader models, the policy and the label: pure, table-driven."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglstack.adapters.cuobjdump import is_device_object_name, parse_listing
from sglstack.config.matrix import load_matrix
from sglstack.config.settings import CoverageException, CoveragePolicy
from sglstack.core.errors import ConfigError
from sglstack.core.labels import COVERAGE_LABEL, format_coverage_label, parse_coverage_label
from sglstack.coverage.report import PackageStatus, build_report
from sglstack.coverage.rules import (
    MISSING,
    NATIVE,
    PTX,
    Capability,
    DeviceObject,
    PackageObjects,
    Target,
    capabilities_of,
    cell,
    device_code_wheels,
    extension_name,
    extensions,
    flashinfer_cubin_takes,
    loader_notes,
    runs_on,
    sgl_kernel_variant,
)
from sglstack.coverage.stack import overall_exit
from sglstack.coverage.wheels import pip_platform_tags

REPO = Path(__file__).resolve().parents[2]

# (target, kind, capability, runs?) -- every rule, with its edges.
RULES = [
    # SASS sm_XY: same major, minor >= Y
    ("sm_80", "sass", "8.0", True), ("sm_80", "sass", "8.6", True), ("sm_80", "sass", "8.9", True),
    ("sm_86", "sass", "8.0", False), ("sm_80", "sass", "9.0", False), ("sm_89", "sass", "9.0", False),
    ("sm_90", "sass", "9.0", True), ("sm_90", "sass", "10.0", False), ("sm_100", "sass", "10.3", True),
    ("sm_103", "sass", "10.0", False), ("sm_100", "sass", "11.0", False), ("sm_100", "sass", "12.0", False),
    ("sm_120", "sass", "12.1", True), ("sm_75", "sass", "8.0", False),
    # `a` SASS: that capability only
    ("sm_90a", "sass", "9.0", True), ("sm_90a", "sass", "9.1", False), ("sm_90a", "sass", "10.0", False),
    ("sm_100a", "sass", "10.0", True), ("sm_100a", "sass", "10.3", False), ("sm_103a", "sass", "10.3", True),
    ("sm_120a", "sass", "12.0", True), ("sm_120a", "sass", "12.1", False), ("sm_100a", "sass", "12.0", False),
    # `f` SASS: within the family (sm_100f: 10.0, 10.3; sm_120f: 12.0, 12.1), never across majors
    ("sm_100f", "sass", "10.0", True), ("sm_100f", "sass", "10.3", True), ("sm_100f", "sass", "11.0", False),
    ("sm_100f", "sass", "12.0", False), ("sm_103f", "sass", "10.0", False), ("sm_103f", "sass", "10.3", True),
    ("sm_110f", "sass", "11.0", True), ("sm_120f", "sass", "12.0", True), ("sm_120f", "sass", "12.1", True),
    ("sm_121f", "sass", "12.0", False),
    # PTX compute_XY: JIT on X.Y and everything newer, across majors; never older
    ("compute_80", "ptx", "8.0", True), ("compute_80", "ptx", "9.0", True), ("compute_80", "ptx", "12.0", True),
    ("compute_90", "ptx", "8.9", False), ("compute_90", "ptx", "10.3", True), ("compute_100", "ptx", "9.0", False),
    ("compute_100", "ptx", "12.1", True),
    # `a` PTX: that capability only (the H200 ran PTX for sm_90a: it is its own capability)
    ("compute_90a", "ptx", "9.0", True), ("compute_90a", "ptx", "10.0", False), ("compute_100a", "ptx", "10.3", False),
    # `f` PTX: within the family only
    ("compute_100f", "ptx", "10.3", True), ("compute_100f", "ptx", "11.0", False),
    ("compute_100f", "ptx", "12.0", False),
    ("compute_120f", "ptx", "12.1", True), ("compute_103f", "ptx", "10.0", False),
]


@pytest.mark.parametrize(("name", "kind", "cap", "expected"), RULES)
def test_nvidia_compatibility_rules(name, kind, cap, expected):
    assert runs_on(Target.parse(name, kind), Capability.parse(cap)) is expected


def test_h200_measurements_are_what_the_rules_say():
    """REFERENCE: on 9.0 sm_80/86/89 fail, sm_90/90a load, sm_100/100a/120a fail; PTX sm_80, sm_90a run, sm_100 not."""
    h200 = Capability(9, 0)
    sass = {n: runs_on(Target.parse(n, "sass"), h200)
            for n in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120a")}
    assert [n for n, ok in sass.items() if ok] == ["sm_90", "sm_90a"]
    assert [n for n in ("sm_80", "sm_90a", "sm_100") if runs_on(Target.parse(n, "ptx"), h200)] == ["sm_80", "sm_90a"]


@pytest.mark.parametrize(("sass", "ptx", "cap", "expected"), [
    (("sm_90",), (), "9.0", NATIVE),
    (("sm_80",), ("sm_80",), "9.0", PTX),      # SASS does not cross majors; the PTX does
    (("sm_80",), (), "9.0", MISSING),
    ((), ("sm_90",), "10.0", PTX),
    (("sm_100a",), ("sm_90",), "10.0", NATIVE),  # native wins over ptx
    (("sm_100a",), ("sm_100a",), "10.3", MISSING),
    ((), (), "9.0", MISSING),
])
def test_cell_prefers_native_then_ptx(sass, ptx, cap, expected):
    targets = [*(Target.parse(a, "sass") for a in sass), *(Target.parse(a, "ptx") for a in ptx)]
    assert cell(targets, Capability.parse(cap)) == expected


def test_parsing_targets_and_capabilities():
    assert Target.parse("sm_100f", "sass") == Target("sass", 10, 0, "f")
    assert Target.parse("sm_121", "ptx") == Target("ptx", 12, 1, "")
    assert str(Target.parse("sm_90a", "ptx")) == "compute_90a"
    assert capabilities_of(["9.0", "10.0a", "12.0+PTX", "9.0"]) == (Capability(9, 0), Capability(10, 0),
                                                                     Capability(12, 0))
    for bad in ("sm90", "9", "ten"):
        with pytest.raises(ValueError):
            Capability.parse(bad) if "sm" not in bad else Target.parse(bad, "sass")


def test_cuobjdump_listing_parse():
    out = ("ELF file    1: common_ops.abi3.1.sm_90a.cubin\nELF file    2: common_ops.abi3.2.sm_100a.cubin\n"
           "ELF file    3: common_ops.abi3.3.sm_90a.cubin\nPTX file    1: common_ops.abi3.1.sm_90.ptx\n")
    code = parse_listing(out)
    assert code.sass == ("sm_100a", "sm_90a") and code.ptx == ("sm_90",) and code.images == 4
    assert parse_listing("").has_device_code is False


@pytest.mark.parametrize(("name", "wanted"), [
    ("sgl_kernel/sm90/common_ops.abi3.so", True), ("lib/mscclpp.so.0.6.0", True), ("x/k.cubin", True),
    ("x/k.fatbin", True), ("lib/libmscclpp_static.a", False), ("x/k.cubin.lock", False), ("x/y.py", False),
    ("x/so/readme", False),
])
def test_device_object_names(name, wanted):
    assert is_device_object_name(name) is wanted


@pytest.mark.parametrize(("path", "name"), [
    ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel.flash_ops"),
    ("_mscclpp.cpython-310-x86_64-linux-gnu.so", "_mscclpp"),
    ("deep_gemm/deep_gemm_cpp.abi3.so", "deep_gemm.deep_gemm_cpp"),
    ("torchvision/_C.so", "torchvision._C"),
    ("lib/mscclpp.so.0.6.0", "lib/mscclpp.so"),
    ("torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cuda.so"),
])
def test_extension_names(path, name):
    assert extension_name(path) == name


def obj(path: str, sass=(), ptx=(), sha: str | None = None) -> DeviceObject:
    return DeviceObject(path, sha or f"sha-{path}", tuple(sass), tuple(ptx), len(sass) + len(ptx))


CAPS = capabilities_of(["9.0", "10.0", "10.3", "12.0"])


def rows_of(package: str, objects, caps=CAPS):
    return {r.name: r for r in extensions(PackageObjects(package, "1", "test", tuple(objects)), caps)}


def test_sgl_kernel_loads_sm90_on_hopper_and_sm100_everywhere_else():
    assert [sgl_kernel_variant(Capability.parse(c)) for c in ("8.0", "9.0", "10.0", "10.3", "12.0")] == \
        ["sm100", "sm90", "sm100", "sm100", "sm100"]
    rows = rows_of("sgl-kernel", [
        obj("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a"]),
        obj("sgl_kernel/sm100/common_ops.abi3.so", ["sm_90a", "sm_100a", "sm_120a"]),
        obj("sgl_kernel/flash_ops.abi3.so", ["sm_80", "sm_90a"]),
        obj("deep_gemm/deep_gemm_cpp.abi3.so"),  # host only: no row
    ])
    common = rows["sgl_kernel.common_ops"]
    assert dict(common.cells) == {"9.0": NATIVE, "10.0": NATIVE, "10.3": MISSING, "12.0": NATIVE}
    assert common.detail["9.0"].startswith("sgl_kernel/sm90/") and common.detail["10.0"].startswith("sgl_kernel/sm100/")
    assert dict(rows["sgl_kernel.flash_ops"].cells) == {"9.0": NATIVE, "10.0": MISSING, "10.3": MISSING,
                                                        "12.0": MISSING}
    assert "deep_gemm.deep_gemm_cpp" not in rows


def test_sgl_kernel_variant_that_lacks_hopper_code_is_missing_on_hopper_even_if_the_other_has_it():
    rows = rows_of("sgl-kernel", [obj("sgl_kernel/sm90/common_ops.abi3.so", ["sm_80"]),
                                  obj("sgl_kernel/sm100/common_ops.abi3.so", ["sm_90a", "sm_100a"])])
    assert rows["sgl_kernel.common_ops"].cells["9.0"] == MISSING  # 9.0 loads sm90/, which has no 9.x code


def test_sgl_kernel_falls_back_to_the_flat_common_ops_and_is_missing_without_any():
    flat = rows_of("sgl-kernel", [obj("sgl_kernel/common_ops.abi3.so", ["sm_90", "sm_100"])])
    assert dict(flat["sgl_kernel.common_ops"].cells) == {"9.0": NATIVE, "10.0": NATIVE, "10.3": NATIVE,
                                                        "12.0": MISSING}
    only90 = rows_of("sgl-kernel", [obj("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a"])])
    assert only90["sgl_kernel.common_ops"].cells["10.0"] == MISSING
    assert "no sm100/common_ops" in only90["sgl_kernel.common_ops"].detail["10.0"]


def _kernel_package(name: str, sources: dict[str, str]) -> PackageObjects:
    return PackageObjects(name, "1", "t", (obj("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a"]),), sources)


def test_sgl_kernel_loader_notes():
    modelled = 'if compute_capability == 90:\n    ops_subdir = "sm90"\nelse:\n    ops_subdir = "sm100"\n'
    assert loader_notes(_kernel_package("sgl-kernel", {"sgl_kernel/load_utils.py": modelled})) == []
    assert "changed" in loader_notes(_kernel_package("sgl-kernel", {"sgl_kernel/load_utils.py": "x = 'sm120'"}))[0]
    assert "no sgl_kernel/load_utils.py" in loader_notes(_kernel_package("sgl-kernel", {}))[0]
    assert loader_notes(PackageObjects("torch", "1", "t", (obj("torch/lib/libc10_cuda.so", ["sm_90"]),))) == []


def test_the_kernel_packages_model_follows_the_sgl_kernel_files_not_the_distribution_name():
    """sglang-kernel 0.4.x is sgl-kernel renamed: same `sgl_kernel/` files, same loader, rows under its name."""
    caps = capabilities_of(["9.0", "10.0"])
    files = (obj("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a"]), obj("sgl_kernel/sm100/common_ops.abi3.so",
                                                                         ["sm_100a"]))
    rows = extensions(PackageObjects("sglang-kernel", "0.4.10", "t", files), caps)
    assert [(r.package, r.name) for r in rows] == [("sglang-kernel", "sgl_kernel.common_ops")]
    assert dict(rows[0].cells) == {"9.0": "native", "10.0": "native"}
    assert "sglang-kernel has no sgl_kernel/load_utils.py" in loader_notes(
        PackageObjects("sglang-kernel", "0.4.10", "t", files))[0]


def test_identical_files_are_one_row_with_aliases():
    rows = rows_of("sgl-kernel", [obj("lib/mscclpp.so", ["sm_90"], ["sm_90"], sha="same"),
                                  obj("lib/mscclpp.so.0", ["sm_90"], ["sm_90"], sha="same")])
    assert list(rows) == ["lib/mscclpp.so"] and rows["lib/mscclpp.so"].aliases == ("lib/mscclpp.so.0",)
    assert dict(rows["lib/mscclpp.so"].cells) == {"9.0": NATIVE, "10.0": PTX, "10.3": PTX, "12.0": PTX}


@pytest.mark.parametrize(("name", "cap", "taken"), [
    ("fmhaSm100aKernel_QkvE4m3.cubin", "10.0", True), ("fmhaSm100aKernel_QkvE4m3.cubin", "10.3", False),
    ("fmhaSm100fKernel_Qkv.cubin", "10.0", True), ("fmhaSm100fKernel_Qkv.cubin", "10.3", True),
    ("fmhaSm100fKernel_Qkv.cubin", "12.0", False), ("fmhaSm103aKernel_Qkv.cubin", "10.3", True),
    ("fmhaSm103aKernel_Qkv.cubin", "10.0", False), ("Bmm_Bfloat16_t128x8x512_s4_schedS_sm100f.cubin", "10.3", True),
    ("Bmm_Bfloat16_t128x8x512_s4_schedS_sm100f.cubin", "9.0", False),
    ("kernel.fp8_m_grouped_gemm.007404769193.cubin", "9.0", True),  # no tag: FlashInfer's kernel map decides
])
def test_flashinfer_cubin_selection_by_name(name, cap, taken):
    assert flashinfer_cubin_takes(name, Capability.parse(cap)) is taken


def test_flashinfer_cubin_groups_and_worst_of_the_cubins_taken():
    base = "flashinfer_cubin/cubins/75d477a640f268ea9ad117cc596eb39245713b9e"
    rows = rows_of("flashinfer-cubin", [
        obj(f"{base}/fmha/trtllm-gen/fmhaSm100fKernel_A.cubin", ["sm_100"]),
        obj(f"{base}/fmha/trtllm-gen/fmhaSm103aKernel_B.cubin", ["sm_103a"]),
        obj(f"{base}/fmha/trtllm-gen/fmhaSm103aKernel_C.cubin", ["sm_100a"]),  # misbuilt: named 103a, holds 100a
        obj(f"{base}/batched_gemm-2a674db-79e4d37/Bmm_x_sm100f.cubin", ["sm_100"]),
    ])
    assert set(rows) == {"flashinfer_cubin/fmha/trtllm-gen", "flashinfer_cubin/batched_gemm"}
    fmha = rows["flashinfer_cubin/fmha/trtllm-gen"]
    assert dict(fmha.cells) == {"9.0": MISSING, "10.0": NATIVE, "10.3": MISSING, "12.0": MISSING}
    assert "1 without native code" in fmha.detail["10.3"]
    assert dict(rows["flashinfer_cubin/batched_gemm"].cells)["10.3"] == NATIVE


def _report(policy: CoveragePolicy, objects, statuses=None):
    package = PackageObjects("sgl-kernel", "1", "test", tuple(objects))
    statuses = statuses or [PackageStatus("sgl-kernel", "1", "test", True)]
    return build_report("s", "linux/amd64", CAPS, policy, [package], statuses)


OBJECTS = [obj("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a"]),
           obj("sgl_kernel/sm100/common_ops.abi3.so", ["sm_100a", "sm_120a"], ["sm_100a"]),
           obj("sgl_kernel/flash_ops.abi3.so", ["sm_90a"]),
           obj("lib/mscclpp.so", ["sm_90"], ["sm_90"])]


def test_policy_native_names_every_missing_and_ptx_cell_and_exits_1():
    report = _report(CoveragePolicy(), OBJECTS)
    assert {(v.extension, v.capability, v.cell) for v in report.violations} == {
        ("sgl_kernel.common_ops", "10.3", MISSING), ("sgl_kernel.flash_ops", "10.0", MISSING),
        ("sgl_kernel.flash_ops", "10.3", MISSING), ("sgl_kernel.flash_ops", "12.0", MISSING),
        ("lib/mscclpp.so", "10.0", PTX), ("lib/mscclpp.so", "10.3", PTX), ("lib/mscclpp.so", "12.0", PTX)}
    assert report.exit_code == 1
    assert report.summary() == {"9.0": NATIVE, "10.0": MISSING, "10.3": MISSING, "12.0": MISSING}


def test_policy_ptx_accepts_jit_and_exceptions_waive_with_their_reason():
    policy = CoveragePolicy(require="ptx", exceptions=(
        CoverageException(extension="sgl_kernel.flash_ops", reason="FA3 is Hopper-only; SGLang picks another backend"),
        CoverageException(extension="sgl_kernel.common_ops", capability="10.3", reason="B300 waits for 0.3.22"),
    ))
    report = _report(policy, OBJECTS)
    assert report.violations == () and report.exit_code == 0
    assert ("sgl_kernel.common_ops", "10.3", MISSING, "B300 waits for 0.3.22") in report.waived
    assert len([w for w in report.waived if w[0] == "sgl_kernel.flash_ops"]) == 3
    # lib/mscclpp.so brings only PTX to Blackwell: the label says so even though the policy accepts it
    assert report.summary() == {"9.0": NATIVE, "10.0": PTX, "10.3": PTX, "12.0": PTX}
    assert report.labels() == {COVERAGE_LABEL: "9.0:native,10.0:ptx,10.3:ptx,12.0:ptx"}
    assert report.stale_exceptions == ()


def test_globs_and_stale_exceptions():
    policy = CoveragePolicy(require="ptx", exceptions=(
        CoverageException(extension="sgl_kernel.*", capability="10.3", reason="glob"),
        CoverageException(extension="sgl_kernel.flash_ops", capability="9.0", reason="not needed: it is native"),
        CoverageException(extension="gone.extension", reason="renamed upstream"),
        CoverageException(extension="sgl_kernel.flash_ops", reason="Hopper-only"),
    ))
    report = _report(policy, OBJECTS)
    assert report.violations == ()
    assert any("'sgl_kernel.flash_ops' on 9.0 is not needed" in s for s in report.stale_exceptions)
    assert any("'gone.extension' matches no extension" in s for s in report.stale_exceptions)
    assert not any("sgl_kernel.*" in s for s in report.stale_exceptions)


def test_a_capability_whose_every_row_is_excepted_still_shows_in_the_label():
    policy = CoveragePolicy(exceptions=(CoverageException(extension="*", capability="10.3", reason="no B300 yet"),
                                        CoverageException(extension="*", capability="12.0", reason="r"),
                                        CoverageException(extension="*", capability="10.0", reason="r")))
    # 10.0 and 12.0 keep common_ops' native cells; on 10.3 every row is excepted: the worst of them shows
    assert _report(policy, OBJECTS).summary() == {"9.0": NATIVE, "10.0": NATIVE, "10.3": MISSING, "12.0": NATIVE}
    assert _report(CoveragePolicy(), []).label() is None


def test_an_unchecked_package_makes_the_report_incomplete_exit_3_unless_something_is_missing():
    unchecked = [PackageStatus("sgl-kernel", "1", "test", True),
                 PackageStatus("torch", "2.9.1", "idx", False, "https://x is unreachable from here")]
    ok = _report(CoveragePolicy(require="ptx", exceptions=(
        CoverageException(extension="*", capability="10.3", reason="r"),
        CoverageException(extension="sgl_kernel.flash_ops", reason="r"))), OBJECTS, unchecked)
    assert not ok.complete and ok.exit_code == 3
    assert _report(CoveragePolicy(), OBJECTS, unchecked).exit_code == 1
    assert overall_exit([ok]) == 3 and overall_exit([ok, _report(CoveragePolicy(), OBJECTS)]) == 1


def test_label_round_trip_and_rejects():
    text = format_coverage_label({"9.0": "native", "10.3": "ptx", "12.0": "missing"})
    assert text == "9.0:native,10.3:ptx,12.0:missing"
    assert parse_coverage_label(text) == {"9.0": "native", "10.3": "ptx", "12.0": "missing"}
    for bad in ("9.0", "9.0:fast", "sm90:native", ""):
        with pytest.raises(ValueError):
            parse_coverage_label(bad)


def test_the_wheels_each_real_stack_checks():
    matrix = load_matrix(REPO / "stacks.yaml")
    cu129 = {w.package: w for w in device_code_wheels(matrix.get("cu129"), "linux/amd64")}
    assert list(cu129) == ["sgl-kernel", "flashinfer-cubin", "torch", "torchvision", "torchaudio"]
    assert cu129["sgl-kernel"].requirement == "sgl-kernel==0.3.21" and cu129["sgl-kernel"].index_url is None
    assert cu129["torch"].index_url == matrix.get("cu129").torch.index_url
    cu130 = {w.package: w for w in device_code_wheels(matrix.get("cu130"), "linux/arm64")}
    assert cu130["sgl-kernel"].requirement.endswith("manylinux2014_aarch64.whl")
    assert cu130["flashinfer-cubin"].requirement == "flashinfer-cubin==0.6.4" and cu130["flashinfer-cubin"].extra_index


def test_pip_platform_tags_follow_the_base_images_glibc():
    tags = pip_platform_tags("linux/amd64", "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04")
    assert tags[0] == "manylinux_2_39_x86_64" and "manylinux_2_17_x86_64" in tags and tags[-1] == "manylinux2014_x86_64"
    assert pip_platform_tags("linux/arm64", "nvidia/cuda:12.4.1-devel-ubuntu22.04")[0] == "manylinux_2_35_aarch64"


STACK = """stacks:
  s:
    base_image: debian:bookworm-slim
    cuda_arch_list: ["9.0", "10.0"]
    sglang: {version: "0.5.9"}
    serving: {model: m}
    coverage:
"""


@pytest.mark.parametrize(("block", "key", "message"), [
    ("      require: fast\n", "coverage.require", "'native' or 'ptx'"),
    ("      exceptions:\n        - {extension: x, capability: '10.3', reason: r}\n",
     "coverage.exceptions.0.capability", "capability 10.3 is not in cuda_arch_list"),
    ("      exceptions:\n        - {extension: x}\n", "coverage.exceptions.0.reason", "missing required key"),
    ("      exceptions:\n        - {extension: x, reason: ''}\n", "coverage.exceptions.0.reason", "at least 1"),
    ("      strict: true\n", "coverage.strict", "unknown key"),
])
def test_coverage_policy_is_validated_with_file_key_and_line(tmp_path, block, key, message):
    from sglstack.core.errors import ConfigError

    path = tmp_path / "stacks.yaml"
    path.write_text(STACK + block)
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    assert info.value.key == key and message in str(info.value) and info.value.line, str(info.value)


def test_coverage_policy_defaults_to_native_without_exceptions(tmp_path):
    path = tmp_path / "stacks.yaml"
    path.write_text(STACK.replace("    coverage:\n", ""))
    assert load_matrix(path).get("s").coverage == CoveragePolicy(require="native", exceptions=())


# ---- exact rows, details, names and records (what the mutation run showed unchecked) ---------------


def test_parse_errors_name_the_bad_text_exactly():
    with pytest.raises(ValueError) as cap:
        Capability.parse("nine")
    assert str(cap.value) == "'nine' is not a compute capability like '9.0' or '10.3'"
    with pytest.raises(ValueError) as target:
        Target.parse("sm90", "sass")
    assert str(target.value) == "'sm90' is not a CUDA target like sm_90a or compute_100f"


def test_targets_print_as_cuobjdump_names_them_and_describe_sorts_sass_before_ptx():
    assert [str(Target.parse(n, k)) for n, k in (("sm_90a", "sass"), ("sm_100f", "ptx"), ("sm_120", "sass"))] == [
        "sm_90a", "compute_100f", "sm_120"]
    both = DeviceObject("x.so", "h", ("sm_100a", "sm_90"), ("sm_90",), 3)
    assert both.describe() == "sm_90, sm_100a, compute_90"
    assert DeviceObject("y.so", "h").describe() == "no device code"


def test_worst_of_nothing_is_missing():
    from sglstack.coverage.rules import worst

    assert worst([]) == MISSING and worst([NATIVE, PTX]) == PTX


@pytest.mark.parametrize(("path", "name"), [
    ("Foo/Bar_ops.abi3.so", "Foo.Bar_ops"),  # import names may start upper case
    ("nvidia/lib64/cudnn.so", "nvidia/lib64/cudnn.so"),  # a library folder: a shared library, by its path
    ("nvidia/lib/cudnn.so", "nvidia/lib/cudnn.so"),
    ("libnccl.so.2", "libnccl.so"),
    ("nvidia/nccl/libnccl.so", "nvidia/nccl/libnccl.so"),  # `lib...` outside a lib folder: still a library
    ("pkg/sub/libops.cpython-312-x86_64-linux-gnu.so", "pkg.sub.libops"),  # an extension tag wins over `lib`
])
def test_extension_names_of_libraries_and_nested_modules(path, name):
    assert extension_name(path) == name


def test_a_generic_row_is_exact_with_its_package_details_and_aliases():
    from sglstack.coverage.rules import Extension

    objects = (obj("pkg/ops.abi3.so", ["sm_100a", "sm_90"], ["sm_90"], sha="s"),
               obj("pkg/ops_copy.abi3.so", ["sm_90"], sha="s"), obj("pkg/host.abi3.so"))
    rows = extensions(PackageObjects("torch", "1", "test", objects), capabilities_of(["9.0", "10.0", "10.3"]))
    assert rows == [Extension("torch", "pkg.ops", {"9.0": NATIVE, "10.0": NATIVE, "10.3": PTX}, {
        "9.0": "pkg/ops.abi3.so: sm_90, compute_90",
        "10.0": "pkg/ops.abi3.so: sm_100a, compute_90",
        "10.3": "pkg/ops.abi3.so: compute_90"}, ("pkg/ops_copy.abi3.so",))]
    none = extensions(PackageObjects("torch", "1", "t", (obj("a.so", ["sm_80"]),)), capabilities_of(["9.0"]))
    assert none[0].detail == {"9.0": "a.so: none of sm_80"}


def test_sgl_kernel_rows_are_common_ops_first_then_the_rest_all_of_sgl_kernel():
    caps = capabilities_of(["9.0", "10.0"])
    rows = extensions(PackageObjects("sgl-kernel", "1", "t", (
        obj("sgl_kernel/a_ops.abi3.so", ["sm_90a"]), obj("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a"]),
        obj("sgl_kernel/sm100/common_ops.abi3.so", ["sm_100a"]))), caps)
    assert [(r.package, r.name) for r in rows] == [("sgl-kernel", "sgl_kernel.common_ops"),
                                                   ("sgl-kernel", "sgl_kernel.a_ops")]
    assert dict(rows[0].detail) == {"9.0": "sgl_kernel/sm90/common_ops.abi3.so: sm_90a",
                                    "10.0": "sgl_kernel/sm100/common_ops.abi3.so: sm_100a"}


def test_a_cubin_is_taken_by_the_tag_in_its_file_name_not_in_its_folders():
    assert flashinfer_cubin_takes("flashinfer_cubin/cubins/h/fmha_Sm100a/kernel.cubin", Capability(9, 0))
    assert flashinfer_cubin_takes("a/Sm100a/b/kernel_Sm90a.cubin", Capability(9, 0))


def test_flashinfer_cubin_rows_details_and_what_is_not_a_cubin_of_a_group():
    from sglstack.coverage.rules import Extension

    base = "flashinfer_cubin/cubins/0123abc"
    caps = capabilities_of(["9.0", "10.0"])
    rows = extensions(PackageObjects("flashinfer-cubin", "1", "t", (
        obj(f"{base}/gemm/gemm_Sm100a.cubin", ["sm_100a"]),
        obj(f"{base}/gemm/gemm_Sm100a_ptx.cubin", (), ["sm_100a"]),
        obj(f"{base}/gemm/gemm_Sm90a_ptx.cubin", (), ["sm_90a"]),
        obj(f"{base}/-0123abc/loose.cubin", ["sm_90"]),  # its group name is only a hash: "cubins"
        obj(f"{base}/gemm/libhelper.so", ["sm_90"]),  # in the cubin folder but not a cubin
        obj("flashinfer_cubin/cubins/flat.cubin", ["sm_90"]),  # too shallow for a group
    )), caps)
    assert [(r.package, r.name) for r in rows] == [
        ("flashinfer-cubin", "flashinfer_cubin/cubins"), ("flashinfer-cubin", "flashinfer_cubin/gemm"),
        ("flashinfer-cubin", f"{base}/gemm/libhelper.so"), ("flashinfer-cubin", "flashinfer_cubin/cubins/flat.cubin")]
    gemm = rows[1]
    assert gemm == Extension("flashinfer-cubin", "flashinfer_cubin/gemm", {"9.0": PTX, "10.0": PTX}, {
        "9.0": "1 of 3 cubins (no SASS), 1 without native code",
        "10.0": "2 of 3 cubins (sm_100a), 1 without native code"})
    only_100 = extensions(PackageObjects("flashinfer-cubin", "1", "t", (
        obj(f"{base}/g/a_Sm100a.cubin", ["sm_100a"]), obj(f"{base}/g/b_Sm100f.cubin", ["sm_100f", "sm_103a"]))), caps)
    assert dict(only_100[0].detail) == {"9.0": "none of 2 cubins is named for 9.0",
                                        "10.0": "2 of 2 cubins (sm_100a, sm_100f, sm_103a)"}
    assert rows[2].detail == {"9.0": f"{base}/gemm/libhelper.so: sm_90", "10.0": f"{base}/gemm/libhelper.so: none of "
                              "sm_90"}


def test_device_code_wheels_are_exact_for_an_index_pin_and_a_url_refused_on_an_unknown_platform():
    from sglstack.config.schema import KernelPin
    from sglstack.coverage.rules import WheelSource

    matrix = load_matrix(REPO / "stacks.yaml")
    cu129 = matrix.get("cu129")
    indexed = cu129.model_copy(update={"sgl_kernel": KernelPin(version="0.3.21", index_url="https://idx/simple")})
    torch = cu129.torch
    assert device_code_wheels(indexed, "linux/amd64") == [
        WheelSource("sgl-kernel", "0.3.21", "sgl-kernel==0.3.21", "https://idx/simple"),
        WheelSource("flashinfer-cubin", "0.6.3", "flashinfer-cubin==0.6.3", cu129.flashinfer.index_url, True),
        WheelSource("torch", "2.9.1+cu129", "torch==2.9.1+cu129", torch.index_url),
        WheelSource("torchvision", "0.24.1+cu129", "torchvision==0.24.1+cu129", torch.index_url),
        WheelSource("torchaudio", "2.9.1+cu129", "torchaudio==2.9.1+cu129", torch.index_url)]
    flashinfer = cu129.flashinfer.model_copy(update={"index_url": "https://fi/whl"})
    url = cu129.model_copy(update={"flashinfer": flashinfer, "sgl_kernel": KernelPin(
        version="0.3.21", url="https://x/sgl_kernel-{arch}.whl", index_url="https://ignored")})
    wheels = device_code_wheels(url, "linux/arm64")
    assert wheels[0] == WheelSource("sgl-kernel", "0.3.21", "https://x/sgl_kernel-aarch64.whl", None)
    assert wheels[1] == WheelSource("flashinfer-cubin", "0.6.3", "flashinfer-cubin==0.6.3", "https://fi/whl", True)
    # never another platform's wheel for a platform with no machine name (the silent fallback class)
    with pytest.raises(ConfigError) as err:
        device_code_wheels(url, "linux/s390x")
    assert str(err.value) == ("kernel package sgl-kernel: no wheel URL for platform linux/s390x "
                              "(known: linux/amd64 linux/arm64)")


def test_the_report_of_several_packages_keeps_every_row_and_note_and_serialises_exactly():
    caps = capabilities_of(["9.0"])
    kernel = PackageObjects("sgl-kernel", "1", "k.whl", (obj("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a"]),))
    torch = PackageObjects("torch", "2", "t.whl", (obj("torch/lib/libc.so", ["sm_80"]),))
    statuses = [PackageStatus("sgl-kernel", "1", "k.whl", True), PackageStatus("torch", "2", "t.whl", True)]
    report = build_report("cu", "linux/arm64", caps, CoveragePolicy(), [kernel, torch], statuses)
    assert [r.name for r in report.rows] == ["sgl_kernel.common_ops", "torch/lib/libc.so"]
    assert report.notes == ("sgl-kernel has no sgl_kernel/load_utils.py: the 0.3.x variant rule (9.0 -> sm90, else "
                            "sm100) is assumed",)
    assert [str(v) for v in report.violations] == ["torch/lib/libc.so on 9.0: missing (requires native)"]
    assert report.to_dict() == {
        "schema": "sglstack.coverage.rules/1", "stack": "cu", "platform": "linux/arm64", "capabilities": ["9.0"],
        "require": "native", "complete": True, "exit_code": 1, "label": "9.0:missing",
        "packages": [{"package": "sgl-kernel", "version": "1", "source": "k.whl", "checked": True, "reason": ""},
                     {"package": "torch", "version": "2", "source": "t.whl", "checked": True, "reason": ""}],
        "extensions": [
            {"package": "sgl-kernel", "name": "sgl_kernel.common_ops", "cells": {"9.0": "native"},
             "detail": {"9.0": "sgl_kernel/sm90/common_ops.abi3.so: sm_90a"}, "aliases": []},
            {"package": "torch", "name": "torch/lib/libc.so", "cells": {"9.0": "missing"},
             "detail": {"9.0": "torch/lib/libc.so: none of sm_80"}, "aliases": []}],
        "violations": [{"extension": "torch/lib/libc.so", "capability": "9.0", "cell": "missing",
                        "require": "native"}],
        "waived": [], "stale_exceptions": [], "notes": list(report.notes)}
    waived = build_report("cu", "linux/arm64", caps, CoveragePolicy(require="ptx", exceptions=(
        CoverageException(extension="torch/*", reason="old GPUs only"),)), [torch], statuses[1:]).to_dict()
    assert (waived["waived"], waived["violations"], waived["exit_code"]) == (
        [{"extension": "torch/lib/libc.so", "capability": "9.0", "cell": "missing", "reason": "old GPUs only"}], [], 0)
    assert build_report("cu", "p", caps, CoveragePolicy(), [], []).labels() == {}


def test_a_device_object_round_trips_through_its_record():
    o = DeviceObject("sgl_kernel/x.so", "ab" * 32, ("sm_90a",), ("sm_90",), 2)
    assert o.to_dict() == {"path": "sgl_kernel/x.so", "sha256": "ab" * 32, "sass": ["sm_90a"], "ptx": ["sm_90"],
                           "images": 2}
    assert DeviceObject.from_dict({**o.to_dict(), "images": "2"}) == o


@pytest.mark.parametrize("image,minor", [
    ("nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04", 39), ("ubuntu:24.04", 39), ("docker.io/library/ubuntu:22.04", 35),
    ("ubuntu:20.04@sha256:" + "0" * 64, 31), ("ubuntu:18.04", None), ("debian:bookworm-slim", None),
])
def test_the_ubuntu_release_a_base_names_gives_its_glibc(image, minor):
    """Both spellings: a CUDA image's tag (`...-ubuntu24.04`) and the official image (`ubuntu:24.04`, cu130's base)."""
    from sglstack.coverage.wheels import pip_platform_tags, ubuntu_glibc_minor

    assert ubuntu_glibc_minor(image) == minor
    assert pip_platform_tags("linux/amd64", image)[0] == f"manylinux_2_{minor or 39}_x86_64"


def test_the_upgrade_knows_cu130s_glibc_from_its_ubuntu_base():
    from sglstack.upgrade.engines import known_base_glibc

    cu130 = load_matrix(REPO / "stacks.yaml").get("cu130")
    assert cu130.base_image == "ubuntu:24.04" and cu130.glibc is None
    assert known_base_glibc(cu130) == "2.39"
