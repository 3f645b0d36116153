"""size/measure.py's Docker side with an engine double: what it asks the engine, what it makes of each answer,
and the size gate's order (copies before budget, the last record read only with a budget). No Docker."""

from __future__ import annotations

import json
import time

import docker.errors
import pytest

from sglstack.adapters import docker as docker_adapter
from sglstack.config.settings import SizePolicy
from sglstack.core.errors import BuildError
from sglstack.size import measure as measure_module
from sglstack.size.measure import IMAGEFILES, IMAGEFILES_TIMEOUT_S, ImageNotInEngine, LibraryCopies, SizeOverBudget
from sglstack.size.report import MB, Layer, over_budget, recorded_size, size_summary

IMAGE_ID = "sha256:" + "b" * 64
HISTORY = [
    {"Size": 0, "CreatedBy": "LABEL a=b"},
    {"Size": 20 * MB, "CreatedBy": "RUN pip install x"},
    {"Size": 0, "CreatedBy": "ENV A=1"},
    {"Size": 100 * MB, "CreatedBy": ""},
]
DIFF_IDS = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
FILES = {"files": 7, "bytes": 120 * MB, "packages": [["torch", "2.1", 10 * MB, 3]], "duplicates": [],
         "same_name": []}


class _Image:
    def __init__(self, attrs):
        self.id = IMAGE_ID
        self.attrs = attrs


class _Engine:
    """images.get and api.history as the docker SDK has them; records every call."""

    def __init__(self, attrs=None, missing=False):
        self.calls: list[tuple] = []
        self.attrs = {"Size": 120 * MB, "RootFS": {"Layers": DIFF_IDS}} if attrs is None else attrs
        self.missing = missing
        self.images = self
        self.api = self

    def get(self, ref):
        self.calls.append(("get", ref))
        if self.missing:
            raise docker.errors.ImageNotFound("no such image")
        return _Image(self.attrs)

    def history(self, image_id):
        self.calls.append(("history", image_id))
        return HISTORY


@pytest.fixture
def listing(monkeypatch):
    """run_to_completion's stand-in: records its arguments, answers what the test sets."""
    seen: list[tuple] = []
    answer: dict = {"code": 0, "out": "a note\n" + json.dumps(FILES) + "\n", "error": None}

    def run(client, image, command, **kwargs):
        seen.append((client, image, command, kwargs))
        if answer["error"] is not None:
            raise answer["error"]
        return answer["code"], answer["out"]

    monkeypatch.setattr(docker_adapter, "run_to_completion", run)
    return seen, answer


def test_image_layers_reads_id_size_and_layers_bottom_first():
    engine = _Engine()
    image_id, size, layers = measure_module.image_layers(engine, "img:tag")
    assert (image_id, size) == (IMAGE_ID, 120 * MB)
    assert layers == (Layer(0, 100 * MB, "", DIFF_IDS[0]), Layer(1, 20 * MB, "RUN pip install x", DIFF_IDS[1]))
    assert engine.calls == [("get", "img:tag"), ("history", IMAGE_ID)]


@pytest.mark.parametrize("attrs", [{}, {"Size": None, "RootFS": None}, {"Size": 0, "RootFS": {"Layers": None}}])
def test_image_layers_without_size_or_rootfs_keeps_layers_without_digests(attrs):
    _, size, layers = measure_module.image_layers(_Engine(attrs), "img:tag")
    assert size == 0
    assert [(layer.bytes, layer.diff_id) for layer in layers] == [(100 * MB, None), (20 * MB, None)]


def test_image_files_runs_the_walker_as_a_program_text_with_the_network_off(listing):
    seen, _ = listing
    engine = object()
    assert measure_module.image_files(engine, IMAGE_ID, shown="img:tag") == FILES
    assert seen == [(engine, IMAGE_ID, ["python3", "-c", IMAGEFILES.read_text(encoding="utf-8")],
                     {"name_prefix": "sglstack-size", "timeout": IMAGEFILES_TIMEOUT_S, "entrypoint": [],
                      "network_disabled": True, "cpu_shares": 256})]  # yields the CPU to the verify beside it
    assert IMAGEFILES_TIMEOUT_S == 900


@pytest.mark.parametrize(("code", "out", "line"), [
    (1, "Traceback\n  File x\nOSError: boom\n",
     "error: image img:tag: listing its files failed (exit 1): OSError: boom"),
    (0, "  \n", "error: image img:tag: listing its files failed (exit 0): no output"),
    (3, "", "error: image img:tag: listing its files failed (exit 3): no output"),
])
def test_image_files_failing_says_the_exit_and_the_last_line(listing, code, out, line):
    _, answer = listing
    answer.update(code=code, out=out)
    with pytest.raises(BuildError) as caught:
        measure_module.image_files(object(), IMAGE_ID, shown="img:tag")
    assert f"error: {caught.value}" == line


def test_image_files_names_the_reference_it_is_given_when_none_is_shown(listing):
    _, answer = listing
    answer.update(code=2, out="")
    with pytest.raises(BuildError) as caught:
        measure_module.image_files(object(), "img:tag")
    assert str(caught.value) == "image img:tag: listing its files failed (exit 2): no output"


def test_image_files_not_json_is_a_build_error(listing):
    _, answer = listing
    answer.update(out="{not json\n")
    with pytest.raises(BuildError) as caught:
        measure_module.image_files(object(), IMAGE_ID, shown="img:tag")
    assert str(caught.value).startswith("image img:tag: its file listing is not JSON (")


@pytest.mark.parametrize(("explanation", "said"), [("no python3 here", "no python3 here"), (None, "bare")])
def test_an_image_without_python_cannot_list_its_files(listing, explanation, said):
    _, answer = listing
    answer["error"] = docker.errors.APIError("bare", explanation=explanation)
    with pytest.raises(BuildError) as caught:
        measure_module.image_files(object(), IMAGE_ID, shown="img:tag")
    assert str(caught.value).startswith("image img:tag: its files cannot be listed in a container: ")
    assert said in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_measure_lists_the_files_of_the_image_id_and_reports_under_the_reference(listing, monkeypatch):
    seen, _ = listing
    ticks = iter([100.0, 102.26])
    monkeypatch.setattr(time, "monotonic", lambda: next(ticks))
    engine = _Engine()
    rep = measure_module.measure(engine, "img:tag")
    assert (rep.image, rep.image_id, rep.bytes, rep.files, rep.seconds) == ("img:tag", IMAGE_ID, 120 * MB, 7, 2.3)
    assert rep.packages == (("torch", "2.1", 10 * MB),)
    assert len(rep.layers) == 2
    assert engine.calls == [("get", "img:tag"), ("history", IMAGE_ID)]
    assert [(client, image) for client, image, _, _ in seen] == [(engine, IMAGE_ID)]


def test_a_listing_that_fails_while_measuring_names_the_reference_not_the_id(listing):
    _, answer = listing
    answer.update(code=1, out="")
    with pytest.raises(BuildError) as caught:
        measure_module.measure(_Engine(), "img:tag")
    assert str(caught.value) == "image img:tag: listing its files failed (exit 1): no output"


def test_measure_of_an_image_not_in_the_engine_is_bad_input(listing):
    with pytest.raises(ImageNotInEngine) as caught:
        measure_module.measure(_Engine(missing=True), "img:tag")
    assert str(caught.value) == "image img:tag: not in the Docker engine"
    assert caught.value.exit_code == 2 and caught.value.__suppress_context__
    assert listing[0] == []  # nothing run


def _gate(tmp_path, listing, policy, record=None):
    _, answer = listing
    site = "/opt/venv/lib/python3.11/site-packages/"
    files = dict(FILES, same_name=[{"name": "libcublas.so.13", "paths": [
        ["/usr/local/cuda/lib64/libcublas.so.13", None, 500], [site + "nvidia/cu13/lib/libcublas.so.13", "x", 600]]}])
    answer["out"] = json.dumps(files)
    last = tmp_path / "record.json"
    if record is not None:
        last.write_text(record)
    shown: list[str] = []
    size_policy = None if policy is None else SizePolicy.model_validate(policy)
    return lambda: measure_module.measure_and_gate(_Engine(), "img:tag", "s", size_policy, last, shown.append), shown


DECLARED = [{"file": "nvidia/cu13/lib/libcublas*", "reason": "r"}]


@pytest.mark.parametrize("record", [None, "{not json", json.dumps({"stack": "other", "size": {"bytes": 1}})])
def test_over_budget_without_a_usable_last_record_has_nothing_to_compare(tmp_path, listing, record):
    gate, shown = _gate(tmp_path, listing, {"max_gb": 0.1, "library_copies": DECLARED}, record)
    with pytest.raises(SizeOverBudget) as caught:
        gate()
    summary = size_summary(measure_module.measure(_Engine(), "img:tag"))
    verdict = over_budget("s", summary, 0.1, None)
    assert verdict is not None
    assert (str(caught.value), shown) == (verdict.headline, [verdict.table])


def test_over_budget_shows_what_grew_since_the_stack_s_last_record(tmp_path, listing):
    record = json.dumps({"stack": "s", "size": {"bytes": 100 * MB, "layers": [], "packages": []}})
    gate, shown = _gate(tmp_path, listing, {"max_gb": 0.1, "library_copies": DECLARED}, record)
    with pytest.raises(SizeOverBudget) as caught:
        gate()
    summary = size_summary(measure_module.measure(_Engine(), "img:tag"))
    previous = recorded_size(json.loads(record), "s")
    assert previous is not None
    verdict = over_budget("s", summary, 0.1, previous)
    assert verdict is not None and verdict != over_budget("s", summary, 0.1, None)
    assert (str(caught.value), shown) == (verdict.headline, [verdict.table])


def test_a_budget_met_returns_the_summary_and_shows_nothing(tmp_path, listing, monkeypatch):
    engines: list[_Engine] = []
    monkeypatch.setattr(measure_module, "image_layers",
                        lambda client, ref: engines.append(client) or client.calls.append(("layers of", ref))
                        or (IMAGE_ID, 120 * MB, ()))
    gate, shown = _gate(tmp_path, listing, {"max_gb": 1, "library_copies": DECLARED})
    summary = gate()
    assert summary["bytes"] == 120 * MB and shown == []
    assert engines[0].calls == [("layers of", "img:tag")]


def test_copies_are_refused_before_the_budget_is_looked_at(tmp_path, listing):
    gate, shown = _gate(tmp_path, listing, {"max_gb": 0.1})
    with pytest.raises(LibraryCopies):
        gate()
    assert shown == []


def test_without_a_policy_the_summary_is_returned_ungated(tmp_path, listing):
    gate, shown = _gate(tmp_path, listing, None)
    assert gate()["bytes"] == 120 * MB and shown == []


# ---- `invoke size`'s stack measure: every shape of policy, with and without a copy held twice ----------

@pytest.mark.parametrize(("policy", "copy_declared", "over", "copies_refused"), [
    (None, False, False, False),                                             # no policy: nothing gated
    ({"library_copies": DECLARED}, True, False, False),                       # only copies, the copy declared
    ({"library_copies": [{"file": "other/lib*", "reason": "r"}]}, False, False, True),  # only copies, not this one
    ({"max_gb": 0.1}, False, True, True),                                     # only a budget: over, copy undeclared
    ({"max_gb": 1}, False, False, True),                                      # only a budget: within
    ({"max_gb": 1, "library_copies": DECLARED}, True, False, False),          # both, all well
    ({"max_gb": 0.1, "library_copies": DECLARED}, True, True, False),         # both, over the budget
])
def test_the_stack_measure_applies_each_part_of_the_policy_that_is_set(tmp_path, listing, monkeypatch, policy,
                                                                       copy_declared, over, copies_refused):
    from sglstack.config.matrix import load_matrix
    from sglstack.size import stack as stack_module

    _, answer = listing
    site = "/opt/venv/lib/python3.11/site-packages/"
    answer["out"] = json.dumps(dict(FILES, same_name=[{"name": "libcublas.so.13", "paths": [
        ["/usr/local/cuda/lib64/libcublas.so.13", None, 500], [site + "nvidia/cu13/lib/libcublas.so.13", "x", 600]]}]))
    monkeypatch.setattr(stack_module, "docker_client", lambda host: _Engine())
    monkeypatch.setattr(stack_module, "recorded_build", lambda name, platform=None: (tmp_path / "record.json", None))
    stack = load_matrix("tests/fixtures/stacks-cpu.yaml").get("cpu-test")
    stack = stack.model_copy(update={"size": None if policy is None else SizePolicy.model_validate(policy)})
    measured = stack_module.measure_stack(stack, "img:tag")
    assert measured.max_gb == (policy or {}).get("max_gb")
    assert (measured.verdict is not None) == over
    assert [c.name for c in measured.copies] == (["libcublas.so.13"] if copies_refused else [])
    assert measured.data["undeclared_library_copies"] == [c.name for c in measured.copies]
    assert len(measured.problems) == over + copies_refused
    if copies_refused:
        assert "libcublas.so.13" in measured.problems[-1] and "size.library_copies" in measured.problems[-1]


# ---- a stack of several platforms: each platform's recorded image -----------------------------------------------

def _record(build, folder: str, image_id: str) -> None:
    (build / folder).mkdir(parents=True)
    (build / folder / "record.json").write_text(json.dumps({"image_id": image_id, "tag": f"sglstack/x:{folder}"}))


def test_size_of_a_stack_of_two_platforms_measures_each_platforms_recorded_image(tmp_path, listing, monkeypatch,
                                                                                  capsys):
    """`size --stack` measured the first platform's image only: each platform's recorded build is measured now and
    reported under its platform; `--platform` measures one; a platform never built is said (exit 1); another
    spelling of a platform is bad input (exit 2) before any engine is asked."""
    from pathlib import Path

    from sglstack.cli.size import size_command
    from sglstack.core.errors import ConfigError
    from sglstack.core.jsonreport import JsonReport
    from sglstack.size import stack as stack_module

    engine = _Engine()
    monkeypatch.setattr(stack_module, "docker_client", lambda host: engine)
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    stacks = str(Path(__file__).resolve().parents[2] / "stacks.yaml")
    amd, arm = "sha256:" + "a" * 64, "sha256:" + "e" * 64
    _record(tmp_path / "build", "pypi-cu130-gb", amd)

    assert size_command(stacks, "pypi-cu130-gb", as_json=JsonReport(stdout=True)) == 1  # arm64 never built
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert [(p["platform"], p["image"]) for p in data["platforms"]] == [("linux/amd64", "sglstack/x:pypi-cu130-gb")]
    assert data["not_measured"] == err.removeprefix("error: ").splitlines() == [
        f"stack 'pypi-cu130-gb': linux/arm64: no build recorded ({tmp_path}/build/pypi-cu130-gb.linux-arm64/"
        "record.json): not measured (invoke build --stack pypi-cu130-gb --platform linux/arm64)"]

    _record(tmp_path / "build", "pypi-cu130-gb.linux-arm64", arm)
    engine.calls.clear()
    assert size_command(stacks, "pypi-cu130-gb") == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("platform ")] == ["platform linux/amd64:", "platform linux/arm64:"]
    assert [c[1] for c in engine.calls if c[0] == "get"] == [amd, arm]

    engine.calls.clear()
    assert size_command(stacks, "pypi-cu130-gb", platform="linux/arm64", as_json=JsonReport(stdout=True)) == 0
    assert json.loads(capsys.readouterr().out)["platform"] == "linux/arm64"
    assert [c[1] for c in engine.calls if c[0] == "get"] == [arm]

    engine.calls.clear()
    with pytest.raises(ConfigError) as bad:
        size_command(stacks, "pypi-cu130-gb", platform="linux/aarch64")
    assert (str(bad.value), bad.value.exit_code, engine.calls) == (
        "stack 'pypi-cu130-gb': platform linux/aarch64 is not one of the stack's (linux/amd64 linux/arm64); did you "
        "mean linux/arm64?", 2, [])


def test_size_of_a_named_image_is_held_to_its_own_platforms_record_and_budget(tmp_path, listing, monkeypatch, capsys):
    """`size --image` of an arm64 image was compared with the first (amd64) platform's record; it is held to its
    own platform's now, and an image of a platform the stack (or `--platform`) does not name is bad input."""
    from pathlib import Path

    from sglstack.cli.size import size_command
    from sglstack.core.errors import ConfigError
    from sglstack.core.jsonreport import JsonReport
    from sglstack.size import stack as stack_module

    engine = _Engine(attrs={"Size": 120 * MB, "RootFS": {"Layers": DIFF_IDS}, "Os": "linux", "Architecture": "arm64"})
    monkeypatch.setattr(stack_module, "docker_client", lambda host: engine)
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    stacks = str(Path(__file__).resolve().parents[2] / "stacks.yaml")
    assert size_command(stacks, "pypi-cu130-gb", image="img:arm", as_json=JsonReport(stdout=True)) == 0
    assert json.loads(capsys.readouterr().out)["platform"] == "linux/arm64"
    for stack, platform, said in (
            ("pypi-cu130-gb", "linux/amd64", "stack 'pypi-cu130-gb': --image img:arm is a linux/arm64 image, not "
                                             "linux/amd64"),
            ("pypi-cu130", None, "stack 'pypi-cu130': --image img:arm is a linux/arm64 image; the stack is built for "
                                 "linux/amd64")):
        with pytest.raises(ConfigError) as err:
            size_command(stacks, stack, image="img:arm", platform=platform)
        assert (str(err.value), err.value.exit_code) == (said, 2)
