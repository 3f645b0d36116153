"""The size report, the budget, what grew and the bytes a node re-pulls: pure, no Docker."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from sglstack.config.matrix import load_matrix
from sglstack.config.settings import SizePolicy
from sglstack.core.errors import ConfigError
from sglstack.diff.compare import diff_to_json, print_diff, record_snapshot, snapshot_diff
from sglstack.inimage.incontainer import imagefiles
from sglstack.size import measure as measure_module
from sglstack.size.measure import LibraryCopies, SizeOverBudget
from sglstack.size.report import (
    GB,
    MB,
    Growth,
    Layer,
    OverBudget,
    SameName,
    copies_message,
    growth_table,
    layer_step,
    layers_from_history,
    over_budget,
    pull_bytes,
    recorded_size,
    report_from,
    report_text,
    report_to_json,
    site_relative,
    size_changes,
    size_summary,
    undeclared_copies,
)

REPO = Path(__file__).resolve().parents[2]
CPU_MATRIX = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"

# The engine's history of a serving image, newest first, as the API returns it (shortened from a real one).
HISTORY = [
    {"Size": 0, "CreatedBy": "LABEL io.sglstack.cuda=13.0"},
    {"Size": 0, "CreatedBy": "EXPOSE map[30000/tcp:{}]"},
    {"Size": 0, "CreatedBy": "WORKDIR /sgl-workspace"},
    {"Size": 131847, "CreatedBy": "RUN /bin/bash -o pipefail -c site=\"$(python -c 'x')\" && python refresh-record"},
    {"Size": 207344030, "CreatedBy": "RUN /bin/bash -o pipefail -c pip install --no-deps --no-cache-dir "
                                     "/run/sglang-dist/sglang-*.whl # buildkit"},
    {"Size": 5760144579, "CreatedBy": "RUN /bin/bash -o pipefail -c . /opt/sglstack/tools/pip-env.sh  && pip install "
                                      "--no-deps --require-hashes -r /run/sglstack-lock/torch.txt # buildkit"},
    {"Size": 533450022, "CreatedBy": "RUN /bin/bash -o pipefail -c apt-get update  && apt-get install -y "
                                     "--no-install-recommends python3.11 g++ numactl  && rm -rf /var/lib/apt/lists/*"},
    {"Size": 0, "CreatedBy": "ENV DEBIAN_FRONTEND=noninteractive"},
    {"Size": 0, "CreatedBy": "SHELL [/bin/bash -o pipefail -c]"},
    {"Size": 116667617, "CreatedBy": ""},
]
DIFF_IDS = [f"sha256:{i:064x}" for i in range(6)]


def files_fact(packages=(), duplicates=(), same_name=()):
    return {"files": 10, "bytes": 1, "packages": [list(p) for p in packages], "duplicates": list(duplicates),
            "same_name": list(same_name)}


def report(packages=(("torch", "2.14.1", 1_200 * MB, 10), ("sglang", "0.5.23", 207 * MB, 5)), duplicates=()):
    layers = layers_from_history(HISTORY, DIFF_IDS)
    return report_from("img:tag", "sha256:" + "a" * 64, 6_618 * MB, layers, files_fact(packages, duplicates), 1.5)


def test_layers_leave_out_config_only_entries_and_match_rootfs_bottom_first():
    layers = layers_from_history(HISTORY, DIFF_IDS)
    assert [la.bytes for la in layers] == [116667617, 533450022, 5760144579, 207344030, 131847, 0]
    assert [la.diff_id for la in layers] == DIFF_IDS
    assert [la.step for la in layers][:4] == ["base image", "apt: python3.11 g++ numactl", "pip: lock part torch",
                                              "pip: the SGLang wheel"]
    assert layers[-1].step == "WORKDIR /sgl-workspace"  # BuildKit makes WORKDIR a layer: it is one of RootFS's


def test_layers_keep_no_digest_when_history_and_rootfs_disagree():
    layers = layers_from_history(HISTORY, DIFF_IDS[:5])
    assert len(layers) == 6 and all(la.diff_id is None for la in layers)
    # ... and a node holding everything still fetches them: an unknown layer is never taken as held
    assert pull_bytes(DIFF_IDS, layers)[0] == sum(la.bytes for la in layers)


@pytest.mark.parametrize("created_by,step", [
    ("/bin/sh -c #(nop)  CMD [\"bash\"]", "CMD [\"bash\"]"),
    ("COPY tools/ /opt/sglstack/tools/ # buildkit", "COPY tools/ /opt/sglstack/tools/"),
    ("RUN |1 TARGETARCH=amd64 /bin/bash -o pipefail -c pip install -r /run/sglstack-lock/flashinfer.txt",
     "pip: lock part flashinfer"),
])
def test_layer_step_names_what_a_layer_adds(created_by, step):
    assert layer_step(created_by) == step


def test_report_orders_packages_and_duplicates_by_room_taken():
    dups = [{"sha256": "1" * 64, "bytes": 100, "paths": [["/b", None], ["/a", "x"]]},
            {"sha256": "2" * 64, "bytes": 60, "paths": [["/c", "y"], ["/d", "y"], ["/e", "z"]]}]
    rep = report(packages=(("small", "1", 5, 1), ("big", "1", 50, 1), ("Alpha", "1", 50, 1)), duplicates=dups)
    assert [p[0] for p in rep.packages] == ["Alpha", "big", "small"]
    assert [d.wasted for d in rep.duplicates] == [120, 100]  # 60 x 2 extra copies first
    assert rep.duplicate_bytes == 220
    data = report_to_json(rep, top=2)
    assert [p["name"] for p in data["largest_packages"]] == ["Alpha", "big"] and data["packages"] == 3
    assert data["duplicates"][0]["paths"][2] == {"path": "/e", "distribution": "z"}
    text = report_text(rep)
    assert "pip: lock part torch" in text and "220" not in text.split("taken twice")[1][:3]
    assert "2 contents, 0.0 MB taken twice" in text


def test_summary_and_growth_table_name_what_grew():
    before = size_summary(report())
    after = size_summary(report(packages=(("torch", "2.14.1", 1_500 * MB, 10), ("sglang", "0.5.23", 207 * MB, 5),
                                          ("new-thing", "1.0", 40 * MB, 3))))
    after["bytes"] += 340 * MB
    after["layers"][2]["bytes"] += 340 * MB
    rows = size_changes(before, after)
    assert [r.what for r in rows] == ["image", "layer: pip: lock part torch", "package: torch", "package: new-thing"]
    assert rows[0].delta == 340 * MB and rows[3].before is None
    # unchanged parts (sglang) and changes under min_bytes are left out
    assert all("sglang" not in r.what for r in rows)


def test_budget_passes_under_and_fails_over_with_what_grew():
    before = size_summary(report())
    assert over_budget("s", before, 6.7, None) is None
    grown = {**before, "bytes": before["bytes"] + 500 * MB, "packages": {**before["packages"], "torch": 1_700 * MB}}
    verdict = over_budget("s", grown, 6.7, before)
    assert verdict is not None
    assert verdict.headline.startswith("stack 's': image is 7.118 GB, over its size budget (size.max_gb: 6.7) by 418.0")
    assert "\n" not in verdict.headline
    lines = verdict.table.splitlines()
    assert lines[1].split() == ["image", "6.618", "7.118", "+500.0"]
    assert lines[2].split() == ["package:", "torch", "1.200", "1.700", "+500.0"]
    first = over_budget("s", grown, 6.7, None)
    assert first is not None and "no earlier build" in first.headline
    assert first.table.splitlines()[1].split()[:3] == ["layer:", "pip:", "lock"]  # the torch layer, largest


def test_recorded_size_only_from_a_record_of_that_stack():
    summary = size_summary(report())
    assert recorded_size({"stack": "a", "size": summary}, "a") == summary
    assert recorded_size({"stack": "b", "size": summary}, "a") is None
    assert recorded_size({"stack": "a"}, "a") is None  # a record from before sizes were recorded
    assert recorded_size(["not", "a", "record"], "a") is None


def test_pull_bytes_counts_only_layers_the_node_lacks():
    old = layers_from_history(HISTORY, DIFF_IDS)
    new = (*old[:4], Layer(4, 140_000, "RUN refresh-record", "sha256:" + "f" * 64), old[5])
    fetched, which = pull_bytes([la.diff_id for la in old if la.diff_id], new)
    assert fetched == 140_000 and [la.index for la in which] == [4]


def test_size_budget_in_the_schema(tmp_path):
    text = CPU_MATRIX.read_text()
    good = tmp_path / "good.yaml"
    good.write_text(text.replace("  cpu-test:\n", "  cpu-test:\n    size: {max_gb: 0.5}\n", 1))
    assert load_matrix(good).get("cpu-test").size.max_gb == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  cpu-test:\n", "  cpu-test:\n    size: {max_gb: -1}\n", 1))
    with pytest.raises(ConfigError) as err:
        load_matrix(bad)
    assert "max_gb" in str(err.value) and "cpu-test" in str(err.value)


def test_diff_of_two_records_shows_the_size_change():
    a = {"stack": "s", "config_hash": "1" * 64, "size": size_summary(report())}
    b = {"stack": "s", "config_hash": "2" * 64,
         "size": {**size_summary(report()), "bytes": size_summary(report())["bytes"] - 235 * MB,
                  "packages": {"torch": 1_200 * MB, "sglang": 207 * MB}}}
    b["size"]["packages"]["nvidia-cutlass-dsl-libs-cu12"] = 0
    diff = snapshot_diff(record_snapshot(a, "a.json"), record_snapshot(b, "b.json"))
    assert diff.size[0].what == "image" and diff.size[0].delta == -235 * MB
    data = diff_to_json(diff)
    assert data["size"][0] == {"what": "image", "before": 6_618 * MB, "after": 6_383 * MB, "delta": -235 * MB}
    same = snapshot_diff(record_snapshot(a, "a.json"), record_snapshot(a, "a2.json"))
    assert same.size == ()


def test_imagefiles_finds_copies_by_content_and_one_library_name_twice(tmp_path, monkeypatch):
    # Package ownership reads every RECORD of this Python's distributions (an lstat of each of their files,
    # most of this test's time before); nothing below is owned by a package, and no owner is asserted.
    monkeypatch.setattr(imagefiles, "owners", lambda: ({}, []))
    payload = bytes(range(256)) * 400  # 100 KiB, over the duplicate threshold
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "libfoo.so").write_bytes(payload)
    (tmp_path / "b" / "copy.bin").write_bytes(payload)
    (tmp_path / "b" / "libfoo.so").write_bytes(payload[::-1] + b"x")  # same name, another build
    (tmp_path / "b" / "small").write_bytes(b"x" * 10)
    (tmp_path / "b" / "small2").write_bytes(b"x" * 10)  # a copy below the threshold: not reported
    (tmp_path / "a" / "hard").hardlink_to(tmp_path / "a" / "libfoo.so")  # one file on disk, not a copy
    # Python extension modules share names across packages (pandas' and pyarrow's `lib`): not libraries
    (tmp_path / "a" / "lib.cpython-311-x86_64-linux-gnu.so").write_bytes(b"pandas")
    (tmp_path / "b" / "lib.cpython-311-x86_64-linux-gnu.so").write_bytes(b"pyarrow")
    data = json.loads(json.dumps(imagefiles.scan(str(tmp_path))))
    assert data["files"] == 7
    assert [[p for p, _ in d["paths"]] for d in data["duplicates"]] == [
        [str(tmp_path / "a" / "libfoo.so"), str(tmp_path / "b" / "copy.bin")]]
    assert [s["name"] for s in data["same_name"]] == ["libfoo.so"]
    assert [p[2] for p in data["same_name"][0]["paths"]] == [len(payload), len(payload) + 1]


def test_each_cuda_library_once_beside_the_declared_copies():
    site = "/opt/venv/lib/python3.11/site-packages/"
    files = files_fact(same_name=[
        {"name": "libnccl_m2n.so", "paths": [[site + "nccl/m2n/lib/cu12/libnccl_m2n.so", "nccl-extensions", 30],
                                             [site + "nccl/m2n/lib/cu13/libnccl_m2n.so", "nccl-extensions", 31]]},
        {"name": "libcublas.so.13", "paths": [["/usr/local/cuda/lib64/libcublas.so.13", None, 500],
                                              [site + "nvidia/cu13/lib/libcublas.so.13", "nvidia-cublas", 600]]},
        {"name": "libgfortran.so.5", "paths": [[site + "numpy.libs/libgfortran.so.5", "numpy", 3],
                                               [site + "scipy.libs/libgfortran.so.5", "scipy", 4]]},  # not CUDA
    ])
    rep = report_from("i", "sha256:" + "b" * 64, 1, (), files)
    assert [c.name for c in undeclared_copies(rep.same_name, [])] == ["libcublas.so.13", "libnccl_m2n.so"]
    left = undeclared_copies(rep.same_name, ["nccl/*/lib/cu12/*"])
    assert [c.name for c in left] == ["libcublas.so.13"]  # a devel base's cuBLAS beside the wheel's: no glob fits
    message = copies_message("cu130", left)
    assert message == ("stack 'cu130': 1 CUDA library is in the image in more than one build: libcublas.so.13 at "
                       "usr/local/cuda/lib64/libcublas.so.13, nvidia/cu13/lib/libcublas.so.13 (declare an accepted "
                       "copy under size.library_copies with its reason)")
    assert undeclared_copies(rep.same_name, ["nccl/*/lib/cu12/*", "nvidia/cu13/lib/libcublas*"]) == []


def test_library_copies_in_the_schema_need_a_reason(tmp_path):
    text = CPU_MATRIX.read_text()
    good = tmp_path / "good.yaml"
    good.write_text(text.replace("  cpu-test:\n", "  cpu-test:\n    size:\n      library_copies:\n"
                                 "        - {file: 'nccl/*/lib/cu12/*', reason: 'one wheel, both CUDAs'}\n", 1))
    policy = load_matrix(good).get("cpu-test").size
    assert policy.max_gb is None and [c.file for c in policy.library_copies] == ["nccl/*/lib/cu12/*"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  cpu-test:\n", "  cpu-test:\n    size:\n      library_copies:\n"
                                "        - {file: 'nccl/*'}\n", 1))
    with pytest.raises(ConfigError) as err:
        load_matrix(bad)
    assert "reason" in str(err.value) and "cpu-test" in str(err.value)


def test_diff_of_otherwise_identical_records_still_says_the_size_change():
    a = {"stack": "s", "config_hash": "1" * 64, "size": size_summary(report())}
    b = {**a, "size": {**a["size"], "bytes": a["size"]["bytes"] + 29}}
    diff = snapshot_diff(record_snapshot(a, "a.json"), record_snapshot(b, "b.json"))
    assert diff.identical  # size is a consequence of what diff compares, never a difference by itself
    out = io.StringIO()
    print_diff(diff, Console(file=out, width=200, color_system=None))
    printed = out.getvalue()
    assert "no difference" in printed and f"size: {6_618 * MB} -> {6_618 * MB + 29} bytes (+29)" in printed


# ---- each output whole, word for word ---------------------------------------------------------------

def _small_report():
    layers = (Layer(0, 116_700_000, "", "sha256:0"),
              Layer(1, 2_500_000, "RUN /bin/sh -c apt-get install -y --no-install-recommends g++ numactl && rm -rf x"))
    files = {"files": 7,
             "packages": [["torch", "2.1", 1_234_500_000, 9], ["abc", "1", 5_000_000, 1], ["Abd", "1", 5_000_000]],
             "duplicates": [{"sha256": "2" * 64, "bytes": 1_000_000, "paths": [["/c", "y"], ["/d", "y"], ["/e", None]]},
                            {"sha256": "1" * 64, "bytes": 2_000_000, "paths": [["/b", None], ["/z", "x"]]}],
             "same_name": [{"name": "libz.so",
                            "paths": [["/x/libz.so", None, 1_000_000], ["/y/libz.so", "zlib", 3_000_000]]},
                           {"name": "liba.so", "paths": [["/p", None, 4_000_000], ["/q", None, 1]]}]}
    return report_from("img:1", "sha256:" + "ab" * 32, 1_500_000_000, layers, files, 2.25)


def test_the_report_text_whole():
    assert report_text(_small_report(), top=2, duplicates=1) == """\
image img:1 (sha256:abababababab): 1.50 GB uncompressed, 2 layers, 3 distributions installing 1.24 GB, 7 files

layers (bottom first)    MB  adds
    0         116.7  base image
    1           2.5  apt: g++ numactl

2 largest packages    MB
  torch==2.1                                      1,234.5
  abc==1                                              5.0

files present more than once (same sha256): 2 contents, 4.0 MB taken twice
       2.0 MB  x2  /b  (-, x)

shared libraries with one name at several paths, different content: 2
  liba.so: /p [-, 4.0 MB]; /q [-, 0.0 MB]

measured in 2.2 s"""
    text = report_text(_small_report())
    assert "  Abd==1 " in text and "x3  /c  (-, y)" in text
    assert "  libz.so: /x/libz.so [-, 1.0 MB]; /y/libz.so [zlib, 3.0 MB]" in text
    assert report_text(report_from("i", "sha256:1", 0, (), {})) == """\
image i (sha256:1): 0.00 GB uncompressed, 0 layers, 0 distributions installing 0.00 GB, 0 files

layers (bottom first)    MB  adds

0 largest packages    MB

files present more than once (same sha256): 0 contents, 0.0 MB taken twice

shared libraries with one name at several paths, different content: 0"""


def test_the_report_text_shows_fifteen_duplicates_by_default():
    dups = [{"sha256": f"{i:064x}", "bytes": 1_000_000 * (20 - i), "paths": [[f"/d{i:02}", None], ["/x", None]]}
            for i in range(16)]
    text = report_text(report_from("i", "sha256:1", 0, (), {"duplicates": dups}))
    assert "  /d14  (-)" in text and "/d15" not in text


def test_the_report_json_whole():
    rep = _small_report()
    assert rep.installed_bytes == 1_244_500_000
    assert report_to_json(rep, top=1) == {
        "image": "img:1", "image_id": "sha256:" + "ab" * 32, "bytes": 1_500_000_000,
        "installed_bytes": 1_244_500_000, "files": 7,
        "layers": [{"index": 0, "step": "base image", "bytes": 116_700_000, "diff_id": "sha256:0", "created_by": ""},
                   {"index": 1, "step": "apt: g++ numactl", "bytes": 2_500_000, "diff_id": None,
                    "created_by": "RUN /bin/sh -c apt-get install -y --no-install-recommends g++ numactl && rm -rf x"}],
        "largest_packages": [{"name": "torch", "version": "2.1", "bytes": 1_234_500_000}],
        "packages": 3,
        "duplicate_bytes": 4_000_000,
        "duplicates": [
            {"sha256": "1" * 64, "bytes": 2_000_000, "wasted": 2_000_000,
             "paths": [{"path": "/b", "distribution": None}, {"path": "/z", "distribution": "x"}]},
            {"sha256": "2" * 64, "bytes": 1_000_000, "wasted": 2_000_000,
             "paths": [{"path": "/c", "distribution": "y"}, {"path": "/d", "distribution": "y"},
                       {"path": "/e", "distribution": None}]}],
        "same_name": [
            {"name": "liba.so", "paths": [{"path": "/p", "distribution": None, "bytes": 4_000_000},
                                          {"path": "/q", "distribution": None, "bytes": 1}]},
            {"name": "libz.so", "paths": [{"path": "/x/libz.so", "distribution": None, "bytes": 1_000_000},
                                          {"path": "/y/libz.so", "distribution": "zlib", "bytes": 3_000_000}]}],
        "seconds": 2.25,
    }
    assert [p[0] for p in rep.packages] == ["torch", "abc", "Abd"]  # a tie by name, whatever its case
    tie = report_from("i", "sha256:1", 0, (), {"packages": [["aab", "1", 1], ["A_b", "1", 1]]})
    assert [p[0] for p in tie.packages] == ["A_b", "aab"]  # '_' sorts before letters once lowercased
    assert size_summary(rep) == {
        "bytes": 1_500_000_000, "installed_bytes": 1_244_500_000, "duplicate_bytes": 4_000_000,
        "layers": [{"step": "base image", "bytes": 116_700_000, "diff_id": "sha256:0"},
                   {"step": "apt: g++ numactl", "bytes": 2_500_000, "diff_id": None}],
        "packages": {"torch": 1_234_500_000, "abc": 5_000_000, "Abd": 5_000_000},
    }


@pytest.mark.parametrize(("created_by", "step"), [
    ("RUN /bin/sh -c pip install /tmp/sglang-0.5.whl", "pip: the SGLang wheel"),
    ("RUN /bin/sh -c pip install numpy", "RUN pip install numpy"),
    ("RUN /bin/sh -c echo sglang- && apt-get update", "RUN echo sglang- && apt-get update"),
    ("COPY sglang-x pip install apt-get install y", "COPY sglang-x pip install apt-get install y"),
    ("  ", "base image"),
    ("RUN /bin/bash -c apt-get install -y a b && c", "apt: a b"),
    ("ADD " + "x" * 200, "ADD " + "x" * 96),
    ("/bin/sh -c #(nop) " + "y" * 200, "y" * 100),
    ("RUN |2 A=1 B=2 /bin/sh -c true", "RUN |2 A=1 B=2 /bin/sh -c true"),
    ("RUN |1 A=1 /bin/sh -c true", "RUN true"),
    ("RUN   echo   hi # buildkit", "RUN echo hi"),
    ("pip install -r /run/sglstack-lock/a.b-c_d.txt", "pip: lock part a.b-c_d"),
    ("/bin/sh -c #(nop)  LABEL a=#(nop)b", "LABEL a=#(nop)b"),
    ("RUN /bin/sh -c apt-get install -y a && apt-get install b && c", "apt: a"),
    ("RUN /bin/sh -c apt-get install -y x; apt-get install -y y", "apt: x; apt-get install y"),
])
def test_layer_step_for_each_kind_of_instruction(created_by, step):
    assert layer_step(created_by) == step


def test_only_empty_config_instructions_are_left_out_of_the_layers():
    history = [{"Size": 0, "CreatedBy": "/bin/sh -c #(nop)  ENV A=1"}, {"Size": 5, "CreatedBy": "ENV B=2"},
               {"Size": 0, "CreatedBy": "RUN true"}, {"Size": None, "CreatedBy": None},
               {"Size": 0, "CreatedBy": "  USER   x"}, {"Size": 0, "CreatedBy": "ENVX=1"}]
    assert layers_from_history(history[::-1], ["d0", "d1", "d2", "d3"]) == (
        Layer(0, 5, "ENV B=2", "d0"), Layer(1, 0, "RUN true", "d1"), Layer(2, 0, "", "d2"), Layer(3, 0, "ENVX=1", "d3"))


BEFORE = {"bytes": 10 * GB,
          "layers": [{"step": "a", "bytes": GB}, {"step": "a", "bytes": GB}, {"step": "b", "bytes": GB}],
          "packages": {"p": GB, "q": 2 * GB}}
AFTER = {"bytes": 10 * GB + 3 * MB, "layers": [{"step": "a", "bytes": 2 * GB + MB}, {"step": "c", "bytes": MB - 1}],
         "packages": {"p": GB + MB, "r": 5 * MB}}
GROWTH = """\
what         before GB    after GB   change MB
image           10.000      10.003        +3.0
package: q       2.000           -     -2000.0
layer: b         1.000           -     -1000.0
package: r           -       0.005        +5.0
layer: a         2.000       2.001        +1.0
package: p       1.000       1.001        +1.0"""


def test_what_moved_by_a_megabyte_largest_change_first_as_a_table():
    rows = size_changes(BEFORE, AFTER)
    assert growth_table(rows) == GROWTH  # layer c moved by a byte less than the 1 MB floor
    assert [r.what for r in size_changes(BEFORE, AFTER, limit=2)] == ["image", "package: q", "layer: b"]
    assert [r.what for r in size_changes(BEFORE, AFTER, min_bytes=MB + 1)] == [
        "image", "package: q", "layer: b", "package: r"]
    assert [r.what for r in size_changes(BEFORE, AFTER, min_bytes=1)][-1] == "layer: c"
    assert len(size_changes(BEFORE, {**AFTER, "packages": {f"n{i}": (i + 1) * MB for i in range(30)}})) == 21
    assert size_changes(None, AFTER) == [Growth("image", None, 10 * GB + 3 * MB)]
    assert size_changes({"bytes": 1}, {"bytes": 2}) == [Growth("image", 1, 2)]
    assert growth_table([]) == "what   before GB    after GB   change MB"


def test_over_budget_headline_and_table_whole():
    assert over_budget("s", AFTER, 10.003, None) is None
    assert over_budget("s", AFTER, 10.003, BEFORE) is None
    grew = over_budget("s", AFTER, 10, BEFORE)
    assert grew == OverBudget("stack 's': image is 10.003 GB, over its size budget (size.max_gb: 10) by 3.0 MB; see "
                              "what grew since the last recorded build above", GROWTH)
    first = over_budget("s", AFTER, 10, None)
    assert first == OverBudget(
        "stack 's': image is 10.003 GB, over its size budget (size.max_gb: 10) by 3.0 MB; no earlier build of the "
        "stack is recorded: its largest parts are above", """\
what         before GB    after GB   change MB
layer: a             -       2.001     +2001.0
package: p           -       1.001     +1001.0
package: r           -       0.005        +5.0
layer: c             -       0.001        +1.0""")
    many = {"bytes": 2 * GB, "packages": {f"n{i:02}": MB for i in range(20)}}
    table = over_budget("s", many, 1.5, None).table.splitlines()
    assert len(table) == 16 and table[1].split()[:2] == ["package:", "n00"] and table[-1].split()[1] == "n14"
    empty_first = over_budget("s", {"bytes": 2 * GB, "packages": {"a0": 0, "b1": 1}}, 1, None).table.splitlines()
    assert [line.split()[1] for line in empty_first[1:]] == ["b1", "a0"]
    assert over_budget("s", {"bytes": 10 * GB + 3 * MB + 1}, 10.003, None).table == (
        "what   before GB    after GB   change MB")


def test_recorded_size_needs_a_whole_byte_count():
    assert recorded_size({"stack": "a", "size": {"bytes": 1}}, "a") == {"bytes": 1}
    assert recorded_size({"stack": "a", "size": {"bytes": "1"}}, "a") is None
    assert recorded_size({"stack": "a", "size": [1]}, "a") is None


def test_copies_message_counts_and_shows_at_most_four():
    copies = [SameName(f"libcu{i}.so", (("/a/site-packages/x", None, 1), ("/b", None, 2))) for i in range(6)]
    assert copies_message("s", copies) == (
        "stack 's': 6 CUDA libraries are in the image in more than one build: libcu0.so at x, b; libcu1.so at x, b; "
        "libcu2.so at x, b; libcu3.so at x, b; and 2 more (declare an accepted copy under size.library_copies with "
        "its reason)")
    assert copies_message("s", copies[:4]).endswith("libcu3.so at x, b (declare an accepted copy under "
                                                    "size.library_copies with its reason)")
    assert copies_message("s", copies, limit=1).count(" at ") == 1


def test_only_cuda_library_names_count_as_copies():
    paths = (("/x/lib/a.so", None, 1), ("/y/lib/a.so", None, 2))
    groups = [SameName(n, paths) for n in ("libz.so.1", "libcudart.so", "LIBNVRTC.so", "libnccl.so", "libcute_dsl.so",
                                           "libz.so", "xlibcu.so")]
    assert [g.name for g in undeclared_copies(groups, [])] == ["libcudart.so", "LIBNVRTC.so", "libnccl.so",
                                                              "libcute_dsl.so"]
    assert undeclared_copies(groups, ["x/*"]) == []  # one copy left is the one the image needs
    assert site_relative("/usr/lib/site-packages/a/b") == "a/b" and site_relative("/usr/lib/x") == "usr/lib/x"
    assert site_relative("/v/site-packages/a/site-packages/b") == "a/site-packages/b"
    assert site_relative("/Xlib/a") == "Xlib/a"


def test_a_node_fetches_layers_it_lacks_and_those_of_no_known_content():
    layers = (Layer(0, 1, "a", "d0"), Layer(1, 10, "b", None), Layer(2, 100, "c", "d2"))
    assert pull_bytes(["d0", "d2"], layers) == (10, [layers[1]])
    assert pull_bytes([], layers) == (111, list(layers))


def _policy_case(monkeypatch, tmp_path, image_bytes):
    """measure_and_gate over a fabricated measurement: one undeclared-unless-declared cuBLAS copy, and a last
    record of the same stack 100 MB smaller."""
    site = "/opt/venv/lib/python3.11/site-packages/"
    files = files_fact(same_name=[{"name": "libcublas.so.13", "paths": [
        ["/usr/local/cuda/lib64/libcublas.so.13", None, 500], [site + "nvidia/cu13/lib/libcublas.so.13", "x", 600]]}])
    rep = report_from("img:tag", "sha256:" + "c" * 64, image_bytes, (), files)
    monkeypatch.setattr(measure_module, "measure", lambda client, image: rep)
    last = tmp_path / "record.json"
    last.write_text(json.dumps({"stack": "s", "size": {**size_summary(rep), "bytes": image_bytes - 100 * MB}}))
    shown: list[str] = []
    return last, shown


@pytest.mark.parametrize(("policy", "image_gb", "outcome"), [
    (None, 99.0, "pass"),  # no policy: measured and recorded, never gated
    ({"library_copies": [{"file": "nvidia/cu13/lib/libcublas*", "reason": "r"}]}, 99.0, "pass"),  # no max_gb
    ({"library_copies": [{"file": "other/*", "reason": "r"}]}, 1.0, "copies"),  # only copies, one undeclared
    ({"max_gb": 2.0}, 1.0, "copies"),  # only max_gb: the copy has no declaration, so it fails first
    ({"max_gb": 2.0, "library_copies": [{"file": "nvidia/cu13/lib/libcublas*", "reason": "r"}]}, 1.0, "pass"),
    ({"max_gb": 2.0, "library_copies": [{"file": "nvidia/cu13/lib/libcublas*", "reason": "r"}]}, 2.5, "over"),
])
def test_the_size_gate_for_every_shape_of_policy(monkeypatch, tmp_path, policy, image_gb, outcome):
    last, shown = _policy_case(monkeypatch, tmp_path, int(image_gb * 1e9))
    size_policy = SizePolicy.model_validate(policy) if policy is not None else None
    gate = lambda: measure_module.measure_and_gate(None, "img:tag", "s", size_policy, last, shown.append)  # noqa: E731
    if outcome == "pass":
        assert gate()["bytes"] == int(image_gb * 1e9) and shown == []
    elif outcome == "copies":
        with pytest.raises(LibraryCopies, match=r"^stack 's': 1 CUDA library is in the image in more than one build"):
            gate()
        assert shown == []
    else:
        with pytest.raises(SizeOverBudget, match=r"^stack 's': image is 2\.500 GB, over its size budget "
                                                 r"\(size\.max_gb: 2\) by 500\.0 MB"):
            gate()
        assert len(shown) == 1 and "100.0" in shown[0]  # what grew since the last record: the 100 MB
