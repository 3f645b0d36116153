"""Parsers and the node flow on outputs recorded on a real H200 (tests/data/preflight/h200-1gpu/).

The recordings were written by benchmarks/preflight_h200.sh on the device tool's nvidia-h200 machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglstack.inimage.preflight import checks as C
from sglstack.inimage.preflight import node, parse, probe

H200_RUN = Path(__file__).resolve().parents[1] / "data" / "preflight" / "h200-1gpu"


def _read(name: str) -> str:
    return (H200_RUN / name).read_text()


def test_query_gpu_csv_recorded_on_an_h200():
    driver, gpus = parse.parse_query_gpu(_read("nvidia-smi-query-gpu.csv"))
    assert driver == "580.159.04"
    assert len(gpus) == 1
    gpu = gpus[0]
    assert (gpu.index, gpu.name, gpu.compute_cap) == (0, "NVIDIA H200", "9.0")
    assert (gpu.memory_total_mib, gpu.memory_free_mib) == (143771, 143156)
    assert gpu.uuid.startswith("GPU-") and gpu.pci_bus_id == "00000000:00:06.0"


def test_query_gpu_skips_rows_that_are_not_gpus():
    assert parse.parse_query_gpu("No devices were found\n") == (None, [])
    assert parse.parse_query_gpu("") == (None, [])


def test_banner_recorded_on_an_h200():
    assert parse.parse_smi_banner(_read("nvidia-smi.txt")) == ("580.159.04", "13.0")
    assert parse.parse_smi_banner("NVIDIA-SMI has failed because it couldn't communicate") == (None, None)


def test_topo_matrix_recorded_on_an_h200_has_no_pairs():
    text = _read("nvidia-smi-topo-m.txt")
    assert "\x1b[4m" in text  # the real header is underlined with ANSI escapes
    assert parse.parse_topo_matrix(text) == (1, {})


def _eight_gpu_topo(link: str = "NV18") -> str:
    """The layout of `nvidia-smi topo -m` on an 8-GPU NVSwitch node with NICs (constructed, not recorded:
    issue 9's 8-GPU run did not get a machine)."""
    gpus = [f"GPU{i}" for i in range(8)]
    nics = ["NIC0", "NIC1"]
    lines = ["\t" + "\t".join([*gpus, *nics, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for i in range(8):
        cells = ["X" if i == j else link for j in range(8)] + ["PXB", "SYS"]
        lines.append("\t".join([f"GPU{i}", *cells, "0-55,112-167" if i < 4 else "56-111", str(i // 4), "N/A"]))
    for n in nics:
        lines.append("\t".join([n, *(["PXB"] * 8), "X", "SYS"]))
    lines += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks"]
    return "\n".join(lines) + "\n"


def test_topo_matrix_eight_gpus_with_nics():
    count, links = parse.parse_topo_matrix(_eight_gpu_topo())
    assert count == 8 and len(links) == 28
    assert set(links.values()) == {"NV18"}
    assert C.check_topology(count, links).value == "28/28 pairs NVLink (NV18)"


def test_topo_matrix_space_padded():
    text = "        GPU0    GPU1    CPU Affinity\nGPU0     X      PHB     0-15\nGPU1    PHB      X      0-15\n"
    assert parse.parse_topo_matrix(text) == (2, {(0, 1): "PHB"})


def test_nvml_snapshot_recorded_on_an_h200():
    snapshot = json.loads(_read("nvml-snapshot.json"))
    driver, gpus = parse.nvml_gpus(snapshot)
    assert driver == "580.159.04" and parse.nvml_cuda_version(snapshot) == "13.0"
    # NVML counts the driver's reserved 615 MiB as used; nvidia-smi's CSV shows 0 used.
    assert (gpus[0].compute_cap, gpus[0].memory_total_mib, gpus[0].memory_used_mib) == ("9.0", 143771, 615)
    assert parse.nvml_links(snapshot) == ({}, {})


def test_nvml_pairs():
    snapshot = {
        "pairs": [
            {"a": 0, "b": 1, "nvlinks": 18, "ancestor": "SYS", "p2p_read": "ok"},
            {"a": 0, "b": 2, "nvlinks": 0, "ancestor": "PHB", "p2p_read": "status 2"},
        ]
    }
    assert parse.nvml_links(snapshot) == ({(0, 1): "NV18", (0, 2): "PHB"}, {(0, 1): True, (0, 2): False})


def test_recorded_h200_reports_round_trip_and_meet_the_thresholds():
    data = json.loads(_read("report.json"))
    report = node.NodeReport.from_dict(data)
    assert report.status == C.PASS and report.exit_code == 0
    assert report.node["driver"] == "580.159.04" and report.node["nccl"] == "2.28.9"
    copy = next(c for c in report.checks if c.name == "copy bandwidth gpu0")
    # The thresholds in checks.py must pass the healthy card they were derived from, re-judged today.
    gpu = C.GpuInfo(0, report.node["gpus"][0]["name"])
    assert C.check_copy_bandwidth(gpu, copy.measured).status == C.PASS
    assert copy.measured / C.datasheet_memory_gbps(gpu.name) == pytest.approx(0.89, abs=0.01)
    tp8 = node.NodeReport.from_dict(json.loads(_read("report-cu130-tp8.json")))
    assert tp8.exit_code == 1 and [c.name for c in tp8.checks if c.status == C.FAIL] == ["gpu count"]


def test_from_dict_rejects_other_json():
    with pytest.raises(ValueError, match="not a preflight report"):
        node.NodeReport.from_dict({"schema": "something/else"})


@pytest.fixture
def recorded_h200(monkeypatch):
    """The node flow fed the H200's recorded outputs, on a machine without torch or a GPU."""
    smi = {name: _read(name) for name in ("nvidia-smi.txt", "nvidia-smi-query-gpu.csv", "nvidia-smi-topo-m.txt")}
    monkeypatch.setattr(probe, "smi_outputs", lambda: smi)
    monkeypatch.setattr(probe, "torch_cuda", lambda: (None, "torch is not importable (test)"))
    monkeypatch.setattr(probe, "torch_p2p", lambda count: {})
    monkeypatch.setattr(probe, "shm_bytes", lambda path="/dev/shm": 128 * C.GiB)
    monkeypatch.setattr(probe, "memlock_soft_limit", lambda: -1)
    return smi


@pytest.mark.parametrize("with_nvml", [True, False])
def test_inspect_node_on_recorded_outputs(recorded_h200, monkeypatch, tmp_path, with_nvml):
    snapshot = json.loads(_read("nvml-snapshot.json")) if with_nvml else None
    monkeypatch.setattr(probe, "nvml_snapshot", lambda: snapshot)
    req = C.Requirements(stack="cu130", cuda="13.0.1", tp=1, arch_list=("9.0", "10.0"))
    report = node.inspect_node(req, raw_dir=tmp_path)
    by_name = {c.name: c for c in report.checks}
    assert report.fatal is None and report.node["source"] == ("nvml" if with_nvml else "nvidia-smi")
    assert by_name["driver"].status == C.PASS and by_name["gpu count"].status == C.PASS
    assert by_name["topology"].value == "1 GPU: no pairs"
    # No torch here: the GPU-side measurements fail with the reason, they are not skipped silently.
    assert by_name["copy bandwidth gpu0"].status == C.FAIL
    assert by_name["all-reduce"].detail == "torch is not importable (test)"
    assert report.exit_code == 1
    assert (tmp_path / "nvidia-smi-topo-m.txt").read_text() == recorded_h200["nvidia-smi-topo-m.txt"]
    assert (tmp_path / "nvml-snapshot.json").exists() == with_nvml
    assert "preflight FAIL for stack cu130" in node.format_table(report)


def test_inspect_node_without_a_driver(monkeypatch):
    monkeypatch.setattr(
        probe,
        "smi_outputs",
        lambda: dict.fromkeys(("nvidia-smi.txt", "nvidia-smi-query-gpu.csv", "nvidia-smi-topo-m.txt")),
    )
    monkeypatch.setattr(probe, "nvml_snapshot", lambda: None)
    report = node.inspect_node(C.Requirements(cuda="13.0.1"))
    assert report.fatal.startswith("no NVIDIA driver on this node")
    assert [c.status for c in report.checks] == [C.FAIL] and report.exit_code == 1


def test_require_ready_raises_on_a_failed_check(monkeypatch):
    """What smoke and deploy call first: the recorded 1-GPU H200 fails the cu130 stack's tp 8."""
    from sglstack.config.matrix import load_matrix
    from sglstack.preflight import gate
    from sglstack.preflight.errors import PreflightFailed

    recorded = node.NodeReport.from_dict(json.loads(_read("report-cu130-tp8.json")))
    seen = {}

    def fake_inspect(req, progress=None):
        seen["req"] = req
        return recorded

    monkeypatch.setattr(gate, "inspect_node", fake_inspect)
    stack = load_matrix().get("cu130")
    failed = r"^preflight for stack 'cu130': check 'gpu count' failed: 1 \(needs >= 8 \(tp\)\)$"
    with pytest.raises(PreflightFailed, match=failed):
        gate.require_ready(stack)
    assert seen["req"].tp == 8 and seen["req"].sizes == (C.MiB, 64 * C.MiB, C.GiB)
    assert seen["req"].shm_bytes == 32 * C.GiB and seen["req"].cuda == "13.0.1"


def test_query_gpu_csv_with_header_and_units_on_two_b200s():
    """Two B200s as `--format=csv` prints them (header row, units, '[N/A]'), with a stray line first."""
    text = (
        "No devices were found on the second bus\n"
        "index, name, uuid, driver_version, compute_cap, memory.total [MiB], memory.used [MiB], memory.free [MiB],"
        " pci.bus_id\n"
        "0, NVIDIA B200, GPU-aaaa, 580.95.05, 10.0, 183359 MiB, 1024 MiB, 182335 MiB, 00000000:18:00.0\n"
        "1, NVIDIA B200, GPU-bbbb, 580.95.05, 10.0, [N/A], [N/A], [N/A], 00000000:2A:00.0\n"
    )
    assert parse.parse_query_gpu(text) == (
        "580.95.05",
        [
            C.GpuInfo(0, "NVIDIA B200", "GPU-aaaa", "10.0", 183359, 1024, 182335, "00000000:18:00.0"),
            C.GpuInfo(1, "NVIDIA B200", "GPU-bbbb", "10.0", 0, 0, 0, "00000000:2A:00.0"),
        ],
    )


def test_topo_matrix_without_a_header_or_affinity_columns():
    assert parse.parse_topo_matrix("") == (0, {})
    assert parse.parse_topo_matrix("GPU0\tX\n") == (0, {})  # a row but no header line
    bare = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"
    assert parse.parse_topo_matrix(bare) == (2, {(0, 1): "NV18"})


def test_topo_matrix_skips_stray_lines_and_stops_at_the_legend():
    text = (
        "  (a note indented like the header)\n"
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
        "GPU0\t X \tNV18\tNV18\t0-15\n"
        "\n"
        "GPU1\tNV18\t X \tNV18\t0-15\n"
        "GPU2\tNV18\tNV18\t X \t0-15\n"
        "\n"
        "Legend:\n"
        "GPU0\t X \tSYS\tSYS\n"
    )
    assert parse.parse_topo_matrix(text) == (3, {(0, 1): "NV18", (0, 2): "NV18", (1, 2): "NV18"})


def test_topo_matrix_short_rows_and_a_single_space_indent():
    truncated = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPHB\nGPU1\tPHB\n"
    assert parse.parse_topo_matrix(truncated) == (2, {(0, 1): "PHB"})
    indented = " GPU0  GPU1  CPU Affinity\nGPU0  X  PIX  0-15\nGPU1  PIX  X  0-15\n"
    assert parse.parse_topo_matrix(indented) == (2, {(0, 1): "PIX"})


def test_nvml_snapshot_whole_gpus_and_defaults():
    snapshot = {
        "driver_version": "580.95.05",
        "devices": [
            {
                "index": 3,
                "name": "NVIDIA B200",
                "uuid": "GPU-cccc",
                "pci_bus_id": "00000000:BA:00.0",
                "cuda_compute_capability": [10, 0],
                "memory": {"total": 192265846784, "used": 2 * C.MiB + 5, "free": 192263749632},
            },
            {"index": 4},  # a device NVML said little about
        ],
    }
    assert parse.nvml_gpus(snapshot) == (
        "580.95.05",
        [
            C.GpuInfo(3, "NVIDIA B200", "GPU-cccc", "10.0", 183359, 2, 183357, "00000000:BA:00.0"),
            C.GpuInfo(4, "", "", "0.0", 0, 0, 0, ""),
        ],
    )
    assert parse.nvml_gpus({}) == (None, [])


@pytest.mark.parametrize(
    ("raw", "version"),
    [
        (13000, "13.0"),
        (12080, "12.8"),
        (12090, "12.9"),
        (1, "0.0"),
        (0, None),
        (-1, None),
        ("13000", None),
        (None, None),
    ],
)
def test_nvml_cuda_version(raw, version):
    snapshot = {} if raw is None else {"cuda_driver_version": raw}
    assert parse.nvml_cuda_version(snapshot) == version


def test_nvml_pair_without_an_ancestor():
    assert parse.nvml_links({"pairs": [{"a": 1, "b": 2, "nvlinks": 0}]}) == ({(1, 2): "?"}, {})


def test_topo_matrix_empty_tab_cells_keep_their_column():
    """nvidia-smi leaves cells empty between tabs (the H200 recording has one in its affinity columns)."""
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \t\tNV18\nGPU1\t\t X \tNV18\nGPU2\tNV18\tNV18\t X \n"
    assert parse.parse_topo_matrix(text) == (3, {(0, 1): "", (0, 2): "NV18", (1, 2): "NV18"})
