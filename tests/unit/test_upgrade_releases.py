"""`invoke releases` in process: what each newer SGLang release requires, from recorded METADATA lines
(the index and the wheels are doubles: no network)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglstack.adapters.index import IndexSettings
from sglstack.cli.reporting import json_report
from sglstack.cli.upgrade import ReleasesOptions, releases_command
from sglstack.config.matrix import load_matrix
from sglstack.core.jsonreport import JsonReport
from sglstack.core.options import BadOption
from sglstack.upgrade import releases

STACKS = """\
defaults:
  python: "3.12"
  serving:
    model: org/model
stacks:
  pinned:
    base_image: debian:bookworm-slim
    sglang:
      version: 0.5.9
  newest:
    base_image: debian:bookworm-slim
    sglang:
      version: 0.5.11
  fromgit:
    base_image: debian:bookworm-slim
    sglang:
      git:
        repo: https://github.com/sgl-project/sglang
        ref: 0123456789abcdef0123456789abcdef01234567
  also-pinned:
    inherits: pinned
"""

# Recorded from sglang 0.5.10's METADATA (abridged), and a later one that still names the old kernel package.
METADATA = {
    "0.5.10": {"Requires-Dist": ["sglang-kernel==0.4.1", "torch==2.9.1", "flashinfer_python==0.6.7.post2",
                                 "torchvision", "sglang[test]; extra == \"dev\""],
               "Requires-Python": [">=3.10"]},
    "0.5.10.post1": {"Requires-Dist": ["sgl-kernel==0.3.21", "torch==2.9.1",
                                       "outlines==0.1.11; python_version < \"3.12\""]},
    "0.5.11": {"Requires-Dist": []},
}
AVAILABLE = ["0.5.8", "0.5.9", "0.5.10rc0", "0.5.10", "0.5.10.post1", "0.5.11", "0.6.0.dev1"]


def test_release_pins_reads_exact_pins_on_the_stack_target() -> None:
    requires = ["Torch===2.9.1", "sgl-kernel==0.3.21", "sglang-kernel==0.4.1", "Flashinfer_Python==0.6.4",
                "numpy>=1.26,<3", "xgrammar~=0.1", "outlines==0.1.11; python_version < \"3.12\"",
                "triton==3.5.0; platform_machine == \"x86_64\"", "aarch64-only==1; platform_machine == \"aarch64\""]
    pins = releases.release_pins("0.5.10", {"Requires-Dist": requires, "Requires-Python": [">=3.10", "x"]}, "3.12",
                                 ("linux/amd64",))
    assert pins == releases.ReleasePins(
        sglang="0.5.10", torch="2.9.1", kernel_package="sglang-kernel", kernel="0.4.1", flashinfer="0.6.4",
        requires_python=">=3.10",
        exact={"torch": "2.9.1", "sgl-kernel": "0.3.21", "sglang-kernel": "0.4.1", "flashinfer-python": "0.6.4",
               "triton": "3.5.0"})
    assert pins.summary() == {"sglang": "0.5.10", "torch": "2.9.1", "kernel_package": "sglang-kernel",
                              "kernel": "0.4.1", "flashinfer": "0.6.4", "requires_python": ">=3.10"}
    arm = releases.release_pins("0.5.10", {"Requires-Dist": requires}, "3.11", ("linux/arm64",))
    assert arm.exact == {"torch": "2.9.1", "sgl-kernel": "0.3.21", "sglang-kernel": "0.4.1",
                         "flashinfer-python": "0.6.4", "outlines": "0.1.11", "aarch64-only": "1"}
    assert arm.requires_python is None


def test_release_pins_without_a_kernel_or_anything_pinned() -> None:
    old = releases.release_pins("0.4.0", {"Requires-Dist": ["sgl-kernel==0.1.0"]}, "3.12", ("linux/amd64",))
    assert (old.kernel_package, old.kernel) == ("sgl-kernel", "0.1.0")
    none = releases.release_pins("0.1.0", {}, "3.12", ("linux/amd64",))
    assert none == releases.ReleasePins("0.1.0", None, None, None, None, None, {})


def test_newer_releases_in_the_bisect_order() -> None:
    assert releases.newer_releases(AVAILABLE, "0.5.9") == ["0.5.10", "0.5.10.post1", "0.5.11"]
    assert releases.newer_releases(AVAILABLE, "0.5.10") == ["0.5.10.post1", "0.5.11"]
    assert releases.newer_releases(AVAILABLE, "0.5.11") == []
    assert releases.newer_releases(AVAILABLE, "0.5.12") == []
    assert releases.newer_releases(["0.5.9", "0.5.10"], "0.5.9.1") == ["0.5.10"]  # a pin the index lacks
    assert releases.newer_releases(["0.6.0rc1", "not-a-version"], "0.5.9") == []  # no stable release at all
    assert releases.newer_releases(["0.5.10", "not-a-version", "0.5.11b1"], "0.5.9") == ["0.5.10"]


def test_stack_releases_reads_each_newer_release_once(tmp_path: Path) -> None:
    (tmp_path / "stacks.yaml").write_text(STACKS)
    matrix = load_matrix(tmp_path / "stacks.yaml")
    read: list[str] = []

    def metadata_of(version: str) -> dict[str, list[str]]:
        read.append(version)
        return METADATA[version]

    result = releases.stack_releases(matrix.get("pinned"), AVAILABLE, metadata_of)
    assert (result.stack, result.pinned) == ("pinned", "0.5.9")
    assert [(r.sglang, r.kernel_package, r.kernel) for r in result.releases] == [
        ("0.5.10", "sglang-kernel", "0.4.1"), ("0.5.10.post1", "sgl-kernel", "0.3.21"), ("0.5.11", None, None)]
    assert read == ["0.5.10", "0.5.10.post1", "0.5.11"]
    assert releases.stack_releases(matrix.get("fromgit"), AVAILABLE, metadata_of) == releases.StackReleases(
        "fromgit", None, ())


@pytest.fixture()
def index(monkeypatch):
    """The package index and the wheel cache as doubles; records what was asked of them."""
    asked: list[tuple[str, ...]] = []

    def available(name: str) -> list[str]:
        asked.append(("available", name))
        return AVAILABLE

    def fetch(name: str, version: str) -> Path:
        asked.append(("fetch", name, version))
        return Path(f"{name}-{version}.whl")

    def metadata(wheel: Path) -> dict[str, list[str]]:
        return METADATA[wheel.name.removeprefix("sglang-").removesuffix(".whl")]

    monkeypatch.setattr(releases, "available_versions", available)
    monkeypatch.setattr(releases, "index_settings", lambda: IndexSettings((), True))  # no metadata files: wheels
    monkeypatch.setattr(releases, "fetch_wheel", fetch)
    monkeypatch.setattr(releases, "wheel_metadata", metadata)
    return asked


def test_the_releases_command_prints_a_table_per_stack(tmp_path, index, capsys) -> None:
    (tmp_path / "stacks.yaml").write_text(STACKS)
    out = tmp_path / "r.json"
    assert releases_command(str(tmp_path / "stacks.yaml"), as_json=JsonReport(path=out)) == 0
    # each release's METADATA is read once, for every stack that needs it
    assert index == [("available", "sglang"), ("fetch", "sglang", "0.5.10"), ("fetch", "sglang", "0.5.10.post1"),
                     ("fetch", "sglang", "0.5.11")]
    table = [
        "┏━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┓",
        "┃ sglang       ┃ torch ┃ kernel package       ┃ flashinfer-python ┃ python ┃",
        "┡━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━┩",
        "│ 0.5.10       │ 2.9.1 │ sglang-kernel==0.4.1 │ 0.6.7.post2       │ >=3.10 │",
        "│ 0.5.10.post1 │ 2.9.1 │ sgl-kernel==0.3.21   │ -                 │ -      │",
        "│ 0.5.11       │ -     │ -                    │ -                 │ -      │",
        "└──────────────┴───────┴──────────────────────┴───────────────────┴────────┘",
    ]
    printed = capsys.readouterr()
    assert printed.err == ""  # the progress is a bar on a terminal's stderr, nothing in a pipe or a log
    lines = [line.rstrip() for line in printed.out.splitlines()]
    assert lines == ["pinned: releases newer than sglang 0.5.9", *table,
                     "newest: sglang 0.5.11 is the newest release",
                     "fromgit: SGLang from git: no release to compare with",
                     "also-pinned: releases newer than sglang 0.5.9", *table]
    doc = json.loads(out.read_text())
    assert out.read_text().endswith("}\n") and out.read_text().startswith('{\n  "also-pinned": {')
    assert list(doc) == ["also-pinned", "fromgit", "newest", "pinned"]
    assert doc["fromgit"] == {"pinned": None, "releases": []}
    assert doc["newest"] == {"pinned": "0.5.11", "releases": []}
    assert doc["pinned"] == doc["also-pinned"] == {"pinned": "0.5.9", "releases": [
        {"sglang": "0.5.10", "torch": "2.9.1", "kernel_package": "sglang-kernel", "kernel": "0.4.1",
         "flashinfer": "0.6.7.post2", "requires_python": ">=3.10",
         "requires": {"sglang-kernel": "0.4.1", "torch": "2.9.1", "flashinfer-python": "0.6.7.post2"}},
        {"sglang": "0.5.10.post1", "torch": "2.9.1", "kernel_package": "sgl-kernel", "kernel": "0.3.21",
         "flashinfer": None, "requires_python": None, "requires": {"sgl-kernel": "0.3.21", "torch": "2.9.1"}},
        {"sglang": "0.5.11", "torch": None, "kernel_package": None, "kernel": None, "flashinfer": None,
         "requires_python": None, "requires": {}}]}


def test_the_releases_command_for_one_stack(tmp_path, index, capsys) -> None:
    (tmp_path / "stacks.yaml").write_text(STACKS)
    assert releases_command(str(tmp_path / "stacks.yaml"), stack_name="newest") == 0
    assert capsys.readouterr().out == "newest: sglang 0.5.11 is the newest release\n"
    assert index == [("available", "sglang")]
    assert not list(tmp_path.glob("*.json"))


def _refused(stacks: Path, json_out: Path) -> BadOption:
    """The face's check of `releases --json-out`, made before the task is called (`sglstack.cli.reporting`)."""
    with pytest.raises(BadOption) as err:
        json_report(ReleasesOptions(stacks_file=str(stacks), json_out=str(json_out)), "releases")
    return err.value


def test_a_json_path_without_its_folder_is_refused_first(tmp_path) -> None:
    (tmp_path / "stacks.yaml").write_text(STACKS)
    err = _refused(tmp_path / "stacks.yaml", tmp_path / "no" / "r.json")
    assert str(err) == f"releases: --json-out {tmp_path}/no/r.json: its folder does not exist"


def test_a_json_path_that_is_an_input_or_a_folder_is_refused_first(tmp_path) -> None:
    """`releases --json stacks.yaml` wrote the report over the matrix, exit 0; `--json DIR` crashed after the work."""
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(STACKS)
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "pinned.txt").write_text("a lock\n")
    (tmp_path / "link.json").symlink_to("stacks.yaml")
    (tmp_path / "out").mkdir()
    for given, message in [
        ("stacks.yaml", f"is the stacks file {stacks}, an input of `invoke releases` (never overwritten): give "
                        "another path"),
        ("link.json", f"is the stacks file {stacks}, an input of `invoke releases` (never overwritten): give "
                      "another path"),
        ("locks/pinned.txt", f"is the lock {tmp_path / 'locks' / 'pinned.txt'}, an input of `invoke releases` (never "
                             "overwritten): give another path"),
        ("out", "is a folder (give the path of a file)"),
    ]:
        err = _refused(stacks, tmp_path / given)
        assert (str(err), err.exit_code) == (f"releases: --json-out {tmp_path / given}: {message}", 2)
    assert stacks.read_text() == STACKS
    assert (tmp_path / "locks" / "pinned.txt").read_text() == "a lock\n"


class _Source:
    """An index that has a PEP 658 metadata file for the releases in `files` only; records what it was asked."""

    def __init__(self, files: dict[tuple[str, str], dict[str, list[str]]]) -> None:
        self.files, self.asked = files, []

    def metadata(self, name: str, version: str):
        self.asked.append((name, version))
        found = self.files.get((name, version))
        return None if found is None else SimpleNamespace(metadata=found)


def test_a_releases_metadata_comes_from_its_metadata_file_else_its_wheel(monkeypatch, tmp_path) -> None:
    wheels: list[tuple[str, str]] = []

    def fetch_wheel(name: str, version: str) -> Path:
        wheels.append((name, version))
        return tmp_path / f"{name}-{version}.whl"

    monkeypatch.setattr(releases, "fetch_wheel", fetch_wheel)
    monkeypatch.setattr(releases, "wheel_metadata", lambda path: {"Name": [path.name]})
    source = _Source({("sglang", "0.5.10"): {"Requires-Dist": ["torch==2.9.1"]}})
    assert releases.release_metadata(source, "sglang", "0.5.10") == {"Requires-Dist": ["torch==2.9.1"]}
    assert wheels == []
    assert releases.release_metadata(source, "sglang", "0.5.11") == {"Name": ["sglang-0.5.11.whl"]}
    assert wheels == [("sglang", "0.5.11")]
    assert source.asked == [("sglang", "0.5.10"), ("sglang", "0.5.11")]
