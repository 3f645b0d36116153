"""The promises of the README and docs/ guides, each tested across every input it covers, not at one point (hypothesis).

The inputs are derived from the code (a schema's fields, a dataclass's fields, the files a build context
holds), and each test first checks that it knows every one of them: a new field fails here until it is
covered, instead of being silently left out. Examples are bounded and derandomized: seconds, no flakes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from rich.console import Console

from sglstack.config.matrix import load_matrix
from sglstack.config.schema import Stack
from sglstack.config.settings import ServingSettings, SpeculativeSettings
from sglstack.core.clock import utc_timestamp, utc_today
from sglstack.core.errors import SmokeError
from sglstack.core.labels import PATCH_LABEL_PREFIX, PIN_LABEL_PREFIX
from sglstack.diff.compare import Snapshot, diff_to_json, print_diff, record_snapshot, snapshot_diff
from sglstack.imagebuild.context import write_build_context
from sglstack.imagebuild.plan import BuildSettings, compute_config_hash
from sglstack.lock.trust import lock_for_build
from sglstack.lockfile.model import LockedPackage
from sglstack.pipeline.flow import describe_plan
from sglstack.publish.tags import release_tags
from sglstack.render import compose as cmp
from sglstack.render import k8s
from sglstack.serving import serving_spec
from sglstack.smoke import launch_argvs, smoke_options
from sglstack.smoke.launch import container_plan

REPO = Path(__file__).resolve().parents[2]
CPU_STACK = load_matrix(REPO / "tests" / "fixtures" / "stacks-cpu.yaml").get("cpu-test")
DIGEST_REF = "127.0.0.1:5000/sglstack/sglang@sha256:" + "ab" * 32
BOUNDED = settings(max_examples=examples(25), deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# ---- smoke serves what deploy serves: every serving and speculative setting ------------------------

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
_model = st.builds(lambda org, name: f"{org}/{name}", _word, _word)

SPECULATIVE_FIELDS = {
    "algorithm": st.sampled_from(["EAGLE3", "EAGLE", "NEXTN"]),
    "draft_model": _model,
    "num_steps": st.integers(1, 12),
    "eagle_topk": st.integers(1, 16),
    "num_draft_tokens": st.integers(1, 64),
}
def _served(values: dict) -> dict:
    """The settings SGLang serves as given: with topk 1 it serves steps + 1 draft tokens, whatever was asked."""
    return {**values, "num_draft_tokens": values["num_steps"] + 1} if values["eagle_topk"] == 1 else values


SERVING_FIELDS = {
    "model": _model,
    "speculative": st.fixed_dictionaries(SPECULATIVE_FIELDS).map(lambda d: SpeculativeSettings(**_served(d))),
    "tp": st.integers(1, 8),
    "gpus": st.integers(0, 8),
    # (not the port torch.distributed uses between pods: k8s refuses that one, one line, tested elsewhere)
    "port": st.integers(1024, 65535).filter(lambda port: port != k8s.DIST_INIT_PORT),
    "startup_timeout_s": st.integers(1, 7200).map(float),
    "shm_size": st.sampled_from(["256m", "1g", "32g", "64g"]),
    "extra_args": st.lists(st.sampled_from(["--trust-remote-code", "--mem-fraction-static", "0.8",
                                            "--context-length", "4096", "--enable-metrics"]),
                           max_size=4).map(tuple),
    "env": st.dictionaries(st.sampled_from(["NCCL_DEBUG", "SGLANG_X", "OMP_NUM_THREADS"]), _word, max_size=2),
    "mounts": st.lists(st.sampled_from(["/srv/models:/models:ro", "/tmp/cache:/cache", "/data:/data:rw"]),
                       max_size=2, unique=True).map(tuple),
}


def test_the_serving_properties_know_every_setting_of_the_schema() -> None:
    """A field added to `serving:` or `serving.speculative:` must be added above, and so be varied."""
    assert set(SERVING_FIELDS) == set(ServingSettings.model_fields)
    assert set(SPECULATIVE_FIELDS) == set(SpeculativeSettings.model_fields)


@st.composite
def _serving_settings(draw) -> ServingSettings:
    values = {name: draw(strategy) for name, strategy in SERVING_FIELDS.items()}
    if values["gpus"]:
        values["tp"] = min(values["tp"], values["gpus"])  # tensor parallelism needs as many GPUs
    return ServingSettings(**values)


def _without_node_args(argv: list[str]) -> list[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--nnodes", "--node-rank", "--dist-init-addr"):
            skip = True
        else:
            out.append(token)
    return out


@BOUNDED
@given(serving=_serving_settings())
@example(serving=ServingSettings(model="o/m", speculative=SpeculativeSettings(
    draft_model="o/d", num_steps=5, eagle_topk=8, num_draft_tokens=32)))
def test_smoke_measures_the_argv_compose_and_kubernetes_serve(serving: ServingSettings) -> None:
    """Smoke's two servers run the argv deploy runs, whatever the stack's settings (not only the defaults)."""
    stack = CPU_STACK.model_copy(update={"serving": serving})
    smoke = launch_argvs(smoke_options(stack))
    for eagle3, kind in ((True, "eagle3"), (False, "baseline")):
        compose = yaml.safe_load(cmp.render_compose(stack, DIGEST_REF, options=cmp.ComposeOptions(eagle3=eagle3)))
        assert smoke[kind] == compose["services"][cmp.SERVICE]["command"]
        # The objects render_k8s dumps (its schema check, slow, is test_k8s_render's job).
        pods = k8s.manifests(stack, DIGEST_REF, k8s.K8sOptions(eagle3=eagle3))[k8s.LWS_FILE]
        for role in ("leaderTemplate", "workerTemplate"):
            for container in pods["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"]:
                assert _without_node_args(container["command"]) == smoke[kind]
    assert list(container_plan(smoke_options(stack), "img", "eagle3", host_env={}).command) == smoke["eagle3"]
    # and the stack's own speculative values are what is served, flag by flag
    spec = serving.speculative
    assert spec is not None
    argv = smoke["eagle3"]
    for flag, value in (("--speculative-algorithm", spec.algorithm), ("--speculative-num-steps", spec.num_steps),
                        ("--speculative-eagle-topk", spec.eagle_topk),
                        ("--speculative-num-draft-tokens", spec.num_draft_tokens),
                        ("--speculative-draft-model-path", spec.draft_model)):
        assert argv[argv.index(flag) + 1] == str(value)



# smoke's CLI names of the speculative settings, and the server flag each one sets
SPECULATIVE_OVERRIDES = {
    "speculative_algorithm": ("algorithm", "--speculative-algorithm"),
    "draft_model": ("draft_model", "--speculative-draft-model-path"),
    "num_steps": ("num_steps", "--speculative-num-steps"),
    "eagle_topk": ("eagle_topk", "--speculative-eagle-topk"),
    "num_draft_tokens": ("num_draft_tokens", "--speculative-num-draft-tokens"),
}


@BOUNDED
@given(serving=_serving_settings(), given_=st.fixed_dictionaries(
    {}, optional={name: SPECULATIVE_FIELDS[field] for name, (field, _) in SPECULATIVE_OVERRIDES.items()}))
def test_a_speculative_setting_given_to_smoke_wins_and_the_others_stay_the_stacks(serving, given_) -> None:
    """`invoke smoke --num-steps 5` (or any subset of the five): those flags take the given values, every
    other one keeps the stack's value, never a built-in default; except that with topk 1 the draft tokens
    not given follow the steps (steps + 1, what SGLang serves), and given ones that differ are refused."""
    assert {field for field, _ in SPECULATIVE_OVERRIDES.values()} == set(SpeculativeSettings.model_fields)
    stack = CPU_STACK.model_copy(update={"serving": serving})
    assert serving.speculative is not None
    want = {field: given_.get(name, getattr(serving.speculative, field))
            for name, (field, _) in SPECULATIVE_OVERRIDES.items()}
    if want["eagle_topk"] == 1:
        served = want["num_steps"] + 1
        if "num_draft_tokens" in given_ and given_["num_draft_tokens"] != served:
            with pytest.raises(SmokeError) as err:
                smoke_options(stack, **given_)
            assert str(err.value) == (f"stack 'cpu-test': --num-draft-tokens '{given_['num_draft_tokens']}': "
                                      f"with topk 1 SGLang serves steps + 1 = {served} draft tokens, not "
                                      f"{given_['num_draft_tokens']} (set {served}, or a topk above 1)")
            return
        want["num_draft_tokens"] = served
    argv = launch_argvs(smoke_options(stack, **given_))["eagle3"]
    for name, (field, flag) in SPECULATIVE_OVERRIDES.items():
        assert argv[argv.index(flag) + 1] == str(want[field]), (name, given_)


@pytest.mark.parametrize(("name", "value", "why"), [
    ("speculative_algorithm", "MEDUSA", "not one of 'EAGLE3', 'EAGLE' or 'NEXTN'"), ("num_steps", 0, "must be >= 1"),
    ("eagle_topk", -1, "must be >= 1"), ("num_draft_tokens", 0, "must be >= 1")])
def test_a_bad_speculative_value_is_one_line_naming_its_flag_and_value(name: str, value: object, why: str) -> None:
    with pytest.raises(SmokeError) as err:
        smoke_options(CPU_STACK, **{name: value})
    flag = "--" + name.replace("_", "-")
    assert str(err.value) == f"stack 'cpu-test': {flag} '{value}': {why}"


# ---- the config hash covers every input of the image -----------------------------------------------


LOCK_MATRIX = REPO / "tests" / "fixtures" / "stacks-lock.yaml"
LOCK_STACK = load_matrix(LOCK_MATRIX).get("cpu-lock")
LOCK = lock_for_build(LOCK_MATRIX, LOCK_STACK)  # what `invoke build` reads: locks/cpu-lock.txt beside it


def _hash(out: Path, lock=LOCK) -> str:
    """The production path of `invoke build`: render the context (with the lock), then hash it."""
    return compute_config_hash(write_build_context(LOCK_STACK, out, lock=lock), "runtime", LOCK_STACK.build_platform)


def test_every_file_of_the_build_context_is_in_the_config_hash(tmp_path: Path) -> None:
    """Each file the build can see, found on disk (not from the list the hash is given), lock parts included:
    a changed byte in any one of them is a new config, never the old image reused."""
    assert LOCK is not None
    rendered = write_build_context(LOCK_STACK, tmp_path / "b", lock=LOCK)
    before = compute_config_hash(rendered, "runtime", LOCK_STACK.build_platform)
    on_disk = sorted(Path(root, name) for root, _, names in os.walk(rendered.context) for name in names)
    names = {p.relative_to(rendered.context).as_posix() for p in on_disk}
    # every layer that installs its part of the lock has it in the context (the Dockerfile mounts it)
    assert {f"lock/{layer}.txt" for layer in LOCK.layers if LOCK.installs_layer(layer)} <= names
    assert {"stack.json"} <= names and any(n.startswith("patches/") for n in names)
    for path in [rendered.dockerfile, *on_disk]:
        original = path.read_bytes()
        path.write_bytes(original + b"\n# edited\n")
        try:
            assert compute_config_hash(rendered, "runtime", LOCK_STACK.build_platform) != before, (
                f"{path.relative_to(tmp_path)} is not in the config hash")
        finally:
            path.write_bytes(original)
    assert compute_config_hash(rendered, "runtime", LOCK_STACK.build_platform) == before


# The fields of a locked package that decide what the image installs, and those that do not (and why).
PACKAGE_FIELDS_IN_THE_IMAGE = ("name", "version", "layer", "hashes", "url", "unhashed")
PACKAGE_FIELDS_NOT_IN_THE_IMAGE = {"required_by": "why the resolver chose it",
                                   "requires": "the same edges, from the parent", "note": "a remark for people"}


def test_the_lock_properties_know_every_field_of_a_locked_package() -> None:
    assert {f.name for f in dataclasses.fields(LockedPackage)} == (
        set(PACKAGE_FIELDS_IN_THE_IMAGE) | set(PACKAGE_FIELDS_NOT_IN_THE_IMAGE))


def _changed(package: LockedPackage, field: str, salt: str) -> LockedPackage:
    value = {
        "name": f"{package.name}-{salt}",
        "version": f"{package.version}.post{len(salt)}",
        "layer": next(layer for layer in LOCK.layers if layer != package.layer),
        "hashes": (*package.hashes[:-1], "sha256:" + (salt * 64)[:64]),
        "url": f"https://files.example/{salt}/{package.name}-{package.version}-py3-none-any.whl",
        "unhashed": f"no hash: {salt}",
    }[field]
    return dataclasses.replace(package, **{field: value})


@BOUNDED
@given(index=st.integers(0, len(LOCK.packages) - 1 if LOCK else 0),
       field=st.sampled_from(PACKAGE_FIELDS_IN_THE_IMAGE), salt=st.sampled_from(["a", "b7", "c0ffee"]))
def test_a_lock_only_change_changes_the_config_hash(index: int, field: str, salt: str) -> None:
    """The stack unchanged, one pin of its lock changed (a version, a hash, a layer...): a new config."""
    assert LOCK is not None
    packages = list(LOCK.packages)
    packages[index] = _changed(packages[index], field, salt)
    changed = dataclasses.replace(LOCK, packages=tuple(packages))
    with tempfile.TemporaryDirectory() as tmp:
        assert _hash(Path(tmp) / "a", changed) != _hash(Path(tmp) / "b"), f"{field} of {packages[index].name}"


# ---- `invoke diff` reports every difference ---------------------------------------------------------


SHA = {c: c * 64 for c in "0123456789abcdef"}
RECORD = {  # a build record as build.py writes it
    "stack": "cu130", "target": "runtime", "image_id": "sha256:" + SHA["1"], "tag": "sglstack/cu130:111111111111",
    "config_hash": SHA["1"], "built_at": "2026-12-01T10:00:00Z",
    "pins": {"torch": "2.9.1+cu130", "flashinfer-python": "0.6.4", "sglang": "0.5.9"},
    "overrides": [],
    "patches": [{"id": "kimi-k25-eagle3", "status": "applied", "sha256_before": SHA["a"], "sha256_after": SHA["b"],
                 "file": "sglang/srt/models/kimi_k25.py"}],
    "installed": {"torch": "2.9.1+cu130", "flashinfer-python": "0.6.4", "sglang": "0.5.9", "idna": "3.7"},
    "torch": {"version": "2.9.1+cu130", "cuda": "13.0"},
    "base_image": {"name": "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04", "digest": "sha256:" + SHA["c"],
                   "image_id": "sha256:" + SHA["d"]},
    "sglang": {"version": None, "git": {"repo": "https://git.example/sglang.git", "ref": "1" * 40},
               "install_deps": True},
    "labels": {"io.sglstack.stack": "cu130", "io.sglstack.config-hash": SHA["1"],
               PIN_LABEL_PREFIX + "sglang": "0.5.9", "org.opencontainers.image.version": "0.5.9"},
}
# Snapshot fields that say which thing a side is, not what it holds (the diff's header names both sides),
# and the one carried by another: a git source's commit is also its `sglang` value (git-<commit12>).
SNAPSHOT_IDENTITY = {"ref": "named in the header", "kind": "named in the header",
                     "stack": "which stack, not what it holds", "sglang_git": "varies with sglang",
                     "size": "a consequence of the fields compared: shown, never a difference by itself",
                     "platform": "a lock's platform, named in the header (two platforms: a line of its own)"}
_value = st.text(alphabet="0123456789abcdefz.+-", min_size=1, max_size=10)


def _printed(diff) -> str:
    console = Console(file=io.StringIO(), width=240, color_system=None)
    print_diff(diff, console)
    return console.file.getvalue()


@st.composite
def _varied(draw, value, prefixes: tuple[str, ...] = ()):
    """A different value of the same shape: a text changed, or a mapping with one entry changed, added
    or removed (never a key the section leaves to another one)."""
    if not isinstance(value, dict):
        return draw(_value.filter(lambda v: v != value))
    keys = sorted(k for k in value if not k.startswith(prefixes))
    how = draw(st.sampled_from(["change", "add", "remove"] if keys else ["add"]))
    out = dict(value)
    if how == "add":
        key = draw(st.sampled_from(["six", "io.sglstack.extra", "zlib-ng", "a"]).filter(lambda k: k not in value))
        out[key] = draw(_value)
    else:
        key = draw(st.sampled_from(keys))
        if how == "remove":
            del out[key]
        else:
            out[key] = draw(_value.filter(lambda v: v != value[key]))
    return out


def test_the_diff_properties_know_every_field_of_a_snapshot() -> None:
    compared = {f.name for f in dataclasses.fields(Snapshot)} - set(SNAPSHOT_IDENTITY)
    assert compared == {"config_hash", "base_image", "base_digest", "base_image_id", "pins", "packages", "patches",
                        "sglang", "labels"}


@BOUNDED
@given(data=st.data(), field=st.sampled_from(sorted({f.name for f in dataclasses.fields(Snapshot)}
                                                    - set(SNAPSHOT_IDENTITY))))
def test_diff_reports_a_difference_in_any_one_field(data, field: str) -> None:
    """Two snapshots that differ in one field (pins only, labels only...): never "no difference"."""
    a = record_snapshot(RECORD, "a.json")
    prefixes = (PIN_LABEL_PREFIX, PATCH_LABEL_PREFIX) if field == "labels" else ()
    b = dataclasses.replace(a, ref="b.json", **{field: data.draw(_varied(getattr(a, field), prefixes))})
    diff = snapshot_diff(a, b)
    assert not diff.identical and diff_to_json(diff)["identical"] is False
    out = _printed(diff)
    assert "no difference" not in out
    old, new = getattr(a, field), getattr(b, field)
    if isinstance(old, dict):  # the entry that differs is named
        for key in set(old) ^ set(new) | {k for k in old if k in new and old[k] != new[k]}:
            assert key in out, f"{field}: {key} not shown\n{out}"
    else:
        assert new[:12] in out or new in out


def _paths(value, prefix=()):
    """Every leaf of a record, as a path of keys and list indices."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))
    else:
        yield prefix


def _with(record, path, new):
    if not path:
        return new
    copy = list(record) if isinstance(record, list) else dict(record)
    copy[path[0]] = _with(record[path[0]], path[1:], new)
    return copy


def _leaf(record, path):
    for key in path:
        record = record[key]
    return record


LEAVES = sorted(_paths(RECORD), key=repr)


@BOUNDED
@given(path=st.sampled_from(LEAVES), new=_value)
def test_whatever_of_a_record_the_diff_reads_it_reports(path, new: str) -> None:
    """Each leaf of a record, varied: when the snapshot diff reads from it changes, the diff is not empty."""
    old = _leaf(RECORD, path)
    if new == old:
        return
    a = record_snapshot(RECORD, "a.json")
    b = record_snapshot(_with(RECORD, path, new), "a.json")
    if a == b or path[0] in ("stack",) or path[:2] == ("labels", PIN_LABEL_PREFIX + "sglang"):
        return  # not read by the diff (e.g. the record's own path), or said by another section
    assert not snapshot_diff(a, b).identical, path


def test_the_record_fields_the_diff_reads_include_every_section() -> None:
    """The record fields whose change changes the snapshot: derived by varying each, so a section the
    reader stopped reading (pins, patches...) fails here, not in a user's terminal."""
    read = set()
    for path in LEAVES:
        if record_snapshot(_with(RECORD, path, "zz-changed"), "a") != record_snapshot(RECORD, "a"):
            read.add(path[0])
    assert read >= {"config_hash", "pins", "installed", "patches", "base_image", "sglang", "labels"}


# ---- the immutable tag's date is UTC, whatever this machine's time zone ----------------------------


@contextmanager
def _time_zone(offset_minutes: int):
    """This process's local time zone at UTC+offset (a POSIX TZ, no tz database needed), put back after."""
    sign = "-" if offset_minutes >= 0 else "+"  # POSIX counts west of Greenwich as positive
    hours, minutes = divmod(abs(offset_minutes), 60)
    saved = os.environ.get("TZ")
    os.environ["TZ"] = f"LOC{sign}{hours:02d}:{minutes:02d}"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


def _utc_dates() -> set[dt.date]:
    return {dt.date(*time.gmtime()[:3])}


# UTC+14 and UTC-12 are a day apart from UTC at every moment between them: one of the two is always on
# another date than UTC, so a local date fails this test at any time of day, not only near midnight.
@settings(max_examples=examples(12), deadline=None, derandomize=True)
@given(offset=st.integers(-12 * 60, 14 * 60).map(lambda m: m - m % 15))
@example(offset=14 * 60)
@example(offset=-12 * 60)
def test_tags_and_timestamps_are_utc_in_any_time_zone(offset: int) -> None:
    with _time_zone(offset):
        before = _utc_dates()
        today = utc_today()
        stamp = utc_timestamp()
        tag = release_tags(CPU_STACK, "ab" * 32, today).immutable
        after = _utc_dates()
    assert today in before | after, f"UTC{offset / 60:+g}: {today} is not the UTC date"
    assert stamp.endswith("Z") and dt.date.fromisoformat(stamp[:10]) in before | after
    assert any(day.strftime("%Y%m%d") in tag for day in before | after), tag


def test_the_plan_of_a_release_dates_its_tag_in_utc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The production path a user reads (`invoke build --dry-run`): its immutable tag, under UTC+14 and UTC-12."""
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    for offset in (14 * 60, -12 * 60):
        with _time_zone(offset):
            before = _utc_dates()
            lines = describe_plan(CPU_STACK, BuildSettings(), push=True, registry=None)
            after = _utc_dates()
        promote = next(line for line in lines if line.startswith("promote"))
        assert any(f"-{day.strftime('%Y%m%d')}-" in promote for day in before | after), (offset, promote)


# ---- smoke serves what deploy serves: the container, not only its argv -----------------------------


@BOUNDED
@given(serving=_serving_settings())
def test_smokes_container_gets_what_composes_service_gets_for_any_serving_settings(serving) -> None:
    """Environment, mounts, shared memory, GPUs, ports and limits of the container smoke measures equal those
    of the service compose deploys, for every serving setting varied (the fixtures set no env nor mounts)."""
    stack = CPU_STACK.model_copy(update={"serving": serving})
    spec = serving_spec(stack)
    service = yaml.safe_load(cmp.render_compose(stack, DIGEST_REF))["services"][cmp.SERVICE]
    plan = container_plan(smoke_options(stack), "img", "eagle3", host_env={})
    assert service["shm_size"] == plan.shm_size == serving.shm_size
    assert service["ipc"] == plan.ipc_mode
    assert service["ports"] == [f"{serving.port}:{plan.container_port}"] and plan.container_port == serving.port
    assert service.get("environment", {}) == dict(plan.environment) == dict(serving.env)
    assert {name: (soft, hard) for name, soft, hard in plan.ulimits} == {
        name: (value, value) for name, value in service.get("ulimits", {}).items()}
    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [{}])
    assert devices[0].get("count", 0) == plan.gpus == serving.gpus == spec.gpus
    targets = [bind.split(":")[1] for bind in plan.binds]
    assert [v.split(":")[1] for v in service.get("volumes", [])] == targets
    assert targets == [mount.split(":")[1] for mount in serving.mounts]


# ---- the config hash covers every input of the image: every field of the stack's schema ------------

# A changed value of each field of a stack (valid on its own over the lock fixture's stack), and whether
# it enters the image. Checked against Stack's fields: a new field fails here until it is placed.
STACK_CHANGES = {
    "name": "cpu-lock2", "description": "another", "base_image": "debian:trixie-slim",
    "base_image_id": "sha256:" + "c" * 64, "base_seed": {"rootfs": {"linux/amd64": "sha256:" + "d" * 64}},
    "src_image": "debian:trixie-slim", "cuda": "13.0.1", "python": "3.12",
    "python_packages": ["python3-minimal", "python3-venv"], "platforms": ["linux/arm64"],
    "system_packages": ["numactl"], "torch": {"version": "2.9.1"}, "sgl_kernel": {"version": "0.3.21"},
    "flashinfer": {"version": "0.6.4"}, "extra_layers": [{"name": "http-client", "requirements": ["requests==2.32.4"]}],
    "sglang": {"version": "0.5.10", "install_deps": False},
    "overrides": [{"replaces": "idna", "pin": "idna==3.7", "reason": "a fix"}], "patches": [],
    "patch_policy": {"on_upstream": "error"}, "labels": {"org.example.team": "a"},
}
# Fields that enter the image only with another one set (checked with it set), and the one they need.
STACK_CHANGES_WITH = {"cuda_arch_list": (["9.0"], {"cuda": "13.0.1"}), "cuda_home": ("/opt/cuda", {"cuda": "13.0.1"})}
STACK_FIELDS_NOT_IN_THE_IMAGE = {
    "inherits": "resolved when the matrix loads: what it brings is in the other fields",
    "glibc": "the platform the lock resolves for: it reaches the image through the lock (tested above)",
    "serving": "how the image is run (deploy, smoke), not what it holds",
    "smoke": "the smoke's workload and gates", "publish": "where the image is pushed and its tag names",
    "coverage": "a check of the built image", "shared_libraries": "a check of the built image",
    "runtime_imports": "a check of the built image",
    "size": "a budget checked after the build", "cache": "where BuildKit keeps layers, not what they hold",
    "credentials": "logins to the indexes: never in the context (the URLs keep none)",
    "whole": "the stack a one-platform stack came from (Stack.for_platform): its own fields are what is built",
}
_NOT_IN_IMAGE_CHANGES = {
    "inherits": "base", "glibc": "2.36", "serving": {"model": "o/other"}, "smoke": {"max_new_tokens": 64},
    "publish": {"repository": "127.0.0.1:5000/x/y"}, "coverage": {"require": "ptx"},
    "shared_libraries": {"exceptions": [{"file": "x/*", "reason": "r"}]}, "size": {"max_gb": 10},
    "runtime_imports": {"exceptions": [{"module": "x", "reason": "r"}]},
    "cache": {"registry": "127.0.0.1:5000/cache/x"},
}


def _stack_hash(stack: Stack) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        rendered = write_build_context(stack, Path(tmp) / "b")
        return compute_config_hash(rendered, "runtime", stack.build_platform)


def test_the_hash_properties_know_every_field_of_a_stack() -> None:
    assert (set(STACK_CHANGES) | set(STACK_CHANGES_WITH) | set(STACK_FIELDS_NOT_IN_THE_IMAGE)
            == set(Stack.model_fields))
    assert set(_NOT_IN_IMAGE_CHANGES) == set(STACK_FIELDS_NOT_IN_THE_IMAGE) - {"credentials", "whole"}


@pytest.mark.parametrize("field", sorted([*STACK_CHANGES, *STACK_CHANGES_WITH]))
def test_a_change_of_any_field_that_enters_the_image_changes_the_config_hash(field: str) -> None:
    """base_image_id included: a base re-made and re-pinned by id is a new config, never the old image."""
    value, given = STACK_CHANGES_WITH.get(field, (STACK_CHANGES.get(field), {}))
    dump = {**LOCK_STACK.model_dump(mode="json"), **given}
    before = Stack.model_validate(dump)
    after = Stack.model_validate({**dump, field: value})
    assert getattr(after, field) != getattr(before, field)
    assert _stack_hash(after) != _stack_hash(before), f"{field} is not in the config hash"


@pytest.mark.parametrize("field", sorted(_NOT_IN_IMAGE_CHANGES))
def test_a_change_of_a_field_the_image_does_not_hold_keeps_its_config_hash(field: str) -> None:
    """The same image is not built twice because a deploy or smoke setting moved."""
    dump = LOCK_STACK.model_dump(mode="json")
    after = Stack.model_validate({**dump, field: _NOT_IN_IMAGE_CHANGES[field]})
    assert getattr(after, field) != getattr(LOCK_STACK, field)
    assert _stack_hash(after) == _stack_hash(LOCK_STACK), STACK_FIELDS_NOT_IN_THE_IMAGE[field]
