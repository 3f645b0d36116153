"""The README's promises, each tested across every input it covers, not at one point (hypothesis).

The inputs are derived from the code (a schema's fields, a dataclass's fields, the files a build context
holds), and each test first checks that it knows every one of them: a new field fails here until it is
covered, instead of being silently left out. Examples are bounded and derandomized: seconds, no flakes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import os
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.console import Console

from sglstack import compose as cmp
from sglstack import k8s
from sglstack.matrix import ServingSettings, SpeculativeSettings, load_matrix
from sglstack.serving import serving_argv
from sglstack.smoke import launch_argvs, smoke_options
from sglstack.smoke.plan import container_plan

REPO = Path(__file__).resolve().parent.parent
CPU_STACK = load_matrix(REPO / "tests" / "fixtures" / "stacks-cpu.yaml").get("cpu-test")
DIGEST_REF = "127.0.0.1:5000/sglstack/sglang@sha256:" + "ab" * 32
BOUNDED = settings(max_examples=25, deadline=None, derandomize=True,
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
SERVING_FIELDS = {
    "model": _model,
    "speculative": st.fixed_dictionaries(SPECULATIVE_FIELDS).map(lambda d: SpeculativeSettings(**d)),
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
    assert serving_argv  # the one renderer all three go through (imported so a rename fails here)


# ---- the config hash covers every input of the image -----------------------------------------------

from sglstack.build import compute_config_hash  # noqa: E402
from sglstack.lockfile import LockedPackage, lock_for_build  # noqa: E402
from sglstack.render import write_build_context  # noqa: E402

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
PACKAGE_FIELDS_NOT_IN_THE_IMAGE = {"required_by": "why the resolver chose it", "note": "a remark for people"}


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
    import tempfile  # here: hypothesis runs many examples per call, each in its own folder

    assert LOCK is not None
    packages = list(LOCK.packages)
    packages[index] = _changed(packages[index], field, salt)
    changed = dataclasses.replace(LOCK, packages=tuple(packages))
    with tempfile.TemporaryDirectory() as tmp:
        assert _hash(Path(tmp) / "a", changed) != _hash(Path(tmp) / "b"), f"{field} of {packages[index].name}"
