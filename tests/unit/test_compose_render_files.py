"""The rendered Compose file word for word, the deployment folder and the env example, the options refused in one
line, and `render --out` writing safely: pure rendering, checked by the real `docker-compose config`."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from deploy_fixtures import DIGEST_REF, _service, make_test_stack

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError
from sglstack.render import compose as cmp
from sglstack.serving import ServingError


def _full_stack(tmp_path: Path):
    """The test stack with plain and `${NAME}` env (two keys sharing one reference) and a mount of its own."""
    stack = make_test_stack(tmp_path)
    env = {"PLAIN": "a$b", "API_KEY": "${MY_API_KEY}", "B": "${OTHER}", "C": "${MY_API_KEY}"}
    serving = stack.serving.model_copy(update={"env": env, "mounts": ("/srv/models:/models:ro",)})
    return stack.model_copy(update={"serving": serving})


FULL_OPTIONS = cmp.ComposeOptions(
    port=8080,
    restart="on-failure",
    stop_grace_period_s=45,
    env_file="secrets/prod.env",
    healthcheck_interval_s=7,
    healthcheck_timeout_s=4,
    healthcheck_retries=5,
    start_period_s=300,
)

FULL_COMPOSE = """\
# Rendered by sglstack for stack 'tiny': edit stacks.yaml and re-render instead.
# The Compose specification, as both `docker compose` v2 and `docker-compose` 1.29 read it.
# Secrets (HF_TOKEN) come from the env file below and are never written here; see compose.env.example.
services:
  sglang:
    image: "REF"
    command:
      - "python3"
      - "-m"
      - "sglang.launch_server"
      - "--model-path"
      - "test-org/tiny-model"
      - "--tp-size"
      - "1"
      - "--host"
      - "0.0.0.0"
      - "--port"
      - "30000"
      - "--speculative-algorithm"
      - "EAGLE3"
      - "--speculative-draft-model-path"
      - "test-org/tiny-eagle3"
      - "--speculative-num-steps"
      - "3"
      - "--speculative-eagle-topk"
      - "1"
      - "--speculative-num-draft-tokens"
      - "4"
      - "--trust-remote-code"
    restart: "on-failure"
    stop_grace_period: "45s"
    # SGLang's workers share tensors through /dev/shm; NCCL wants the host's IPC namespace.
    ipc: "host"
    shm_size: "256m"
    ports:
      - "8080:30000"
    # Upstream's limits for SGLang's workers: a 64 MiB stack, and with GPUs unlimited pinned memory for
    # NCCL/RDMA (not without: a host with a finite hard limit refuses a container that asks for more).
    ulimits:
      memlock: -1
      stack: 67108864
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: 1
              capabilities: [gpu]
    env_file:
      - "secrets/prod.env"
    environment:
      "API_KEY": "${MY_API_KEY:?set MY_API_KEY in the environment of invoke deploy}"
      "B": "${OTHER:?set OTHER in the environment of invoke deploy}"
      "C": "${MY_API_KEY:?set MY_API_KEY in the environment of invoke deploy}"
      "PLAIN": "a$$b"
    volumes:
      - "/srv/models:/models:ro"
    healthcheck:
      test: ["CMD", "python3", "-c", "PROBE"]
      interval: "7s"
      timeout: "6s"
      retries: 5
      # Loading a large model takes many minutes; failures before this do not count.
      start_period: "300s"
    labels:
      "io.sglstack.image": "REF"
      "io.sglstack.model": "test-org/tiny-model"
      "io.sglstack.node": "0/1"
      "io.sglstack.smoke-report": "REPORT"
      "io.sglstack.speculative": "EAGLE3 draft=test-org/tiny-eagle3 steps=3 topk=1 draft_tokens=4"
      "io.sglstack.stack": "tiny"
"""

FULL_ENV_EXAMPLE = """\
# Secrets for the compose deployment of stack 'tiny'.
# Copy this file to prod.env next to the compose file (chmod 600) and fill it in. The compose file
# reads it through `env_file:`; nothing from it is ever written into the compose file.
# A Hugging Face token, for gated or private models and drafts (test-org/tiny-model, test-org/tiny-eagle3):
HF_TOKEN=
# Not here: the secrets serving.env refers to (`${NAME}`) come from the environment `invoke deploy` runs in,
# which compose interpolates (a deploy without one is refused): MY_API_KEY, OTHER
"""


def test_every_option_and_serving_setting_renders_word_for_word(tmp_path: Path) -> None:
    """The whole file, byte for byte: what `docker-compose config` reads (checked above with the real CLI)."""
    report = "sha256:" + "5e" * 32
    text = cmp.render_compose(_full_stack(tmp_path), DIGEST_REF, options=FULL_OPTIONS, smoke_report=report)
    probe = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:30000/health', timeout=4)"
    assert text == FULL_COMPOSE.replace("REF", DIGEST_REF).replace("REPORT", report).replace("PROBE", probe)


def test_the_env_example_names_the_env_file_the_models_and_each_reference_once(tmp_path: Path) -> None:
    stack = _full_stack(tmp_path)
    assert cmp.render_env_example(stack, options=FULL_OPTIONS) == FULL_ENV_EXAMPLE
    plain = cmp.render_env_example(make_test_stack(tmp_path / "plain"))
    assert plain == FULL_ENV_EXAMPLE.split("# Not here")[0].replace("prod.env", "compose.env")
    # The options are checked as deploy checks them.
    with pytest.raises(ServingError, match=r"^stack 'tiny': --restart 'never': "):
        cmp.render_env_example(stack, options=cmp.ComposeOptions(restart="never"))


def test_a_deployment_folder_holds_one_file_per_node_and_the_env_example(tmp_path: Path) -> None:
    stack = _full_stack(tmp_path)
    options = replace(FULL_OPTIONS, nnodes=2, dist_init_addr="10.0.0.1:5000")
    files = cmp.deployment_files(stack, DIGEST_REF, options=options, smoke_report="sha256:" + "5e" * 32)

    assert sorted(files) == ["compose.env.example", "compose.node0.yaml", "compose.node1.yaml"]
    assert files[cmp.ENV_EXAMPLE_FILE] == FULL_ENV_EXAMPLE
    for rank in range(2):
        text = files[f"compose.node{rank}.yaml"]
        assert text.startswith(f"# Rendered by sglstack for stack 'tiny', node {rank} of 2: edit stacks.yaml")
        service = _service(text)
        assert service["command"][-7:] == [
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--dist-init-addr",
            "10.0.0.1:5000",
            "--trust-remote-code",
        ]
        assert service["network_mode"] == "host"
        assert "ports" not in service
        assert service["labels"][cmp.LABEL_NODE] == f"{rank}/2"
        assert service["labels"][cmp.LABEL_SMOKE_REPORT] == "sha256:" + "5e" * 32
    one = cmp.deployment_files(stack, DIGEST_REF)
    assert sorted(one) == ["compose.env.example", "compose.yaml"]
    assert one[cmp.COMPOSE_FILE] == cmp.render_compose(stack, DIGEST_REF)
    assert _service(one[cmp.COMPOSE_FILE])["labels"][cmp.LABEL_SMOKE_REPORT] == "unknown"


def test_the_options_as_given_are_checked_before_ranks_are_put_in(tmp_path: Path) -> None:
    """A rank out of range is refused, though every file would carry a rank of its own."""
    stack = make_test_stack(tmp_path)
    options = cmp.ComposeOptions(nnodes=2, node_rank=5, dist_init_addr="h:1")
    with pytest.raises(ServingError, match=r"^stack 'tiny': --node-rank 5: "):
        cmp.render_compose_nodes(stack, DIGEST_REF, options=options)
    assert list(cmp.render_compose_nodes(stack, DIGEST_REF)) == ["compose.yaml"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            cmp.ComposeOptions(restart="sometimes"),
            "--restart 'sometimes': not one of no, always, on-failure, unless-stopped",
        ),
        (cmp.ComposeOptions(stop_grace_period_s=0), "--stop-grace-period 0: must be at least 1 second"),
        (cmp.ComposeOptions(stop_grace_period_s=-5), "--stop-grace-period -5: must be at least 1 second"),
        (cmp.ComposeOptions(stop_grace_period_s=True), "--stop-grace-period True: must be at least 1 second"),
        (cmp.ComposeOptions(stop_grace_period_s="30"), "--stop-grace-period 30: must be at least 1 second"),
        (cmp.ComposeOptions(stop_grace_period_s=1.5), "--stop-grace-period 1.5: must be at least 1 second"),
        (cmp.ComposeOptions(env_file=""), "--env-file: needs a path"),
    ],
)
def test_compose_only_options_are_refused_word_for_word(tmp_path: Path, options, message) -> None:
    stack = make_test_stack(tmp_path)
    with pytest.raises(ServingError) as err:
        cmp.render_compose(stack, DIGEST_REF, options=options)
    assert str(err.value) == f"stack 'tiny': {message}"
    # The stack may be unknown: the line then names only the option.
    with pytest.raises(ServingError) as err:
        options.check(None)
    assert str(err.value) == message


@pytest.mark.parametrize("restart", cmp.RESTART_POLICIES)
def test_every_restart_policy_and_the_shortest_grace_period_are_taken(tmp_path: Path, restart: str) -> None:
    options = cmp.ComposeOptions(restart=restart, stop_grace_period_s=1)
    service = _service(cmp.render_compose(make_test_stack(tmp_path), DIGEST_REF, options=options))
    assert (service["restart"], service["stop_grace_period"]) == (restart, "1s")


def test_no_gpus_serves_on_a_cpu_with_the_stack_limit_only(tmp_path: Path) -> None:
    overrides = cmp.ComposeOptions(gpus=0, eagle3=False).serving_overrides()
    assert (overrides.gpus, overrides.eagle3, overrides.publish_port) == (0, False, True)
    assert cmp.ComposeOptions().serving_overrides().gpus is None
    text = cmp.render_compose(make_test_stack(tmp_path), DIGEST_REF, options=cmp.ComposeOptions(gpus=0))
    assert "    ulimits:\n      stack: 67108864\n    env_file:\n" in text


def test_a_value_the_template_is_not_given_fails_the_render_instead_of_writing_nothing() -> None:
    """A template naming a value the renderer forgot must not write an empty `image:` or `restart:`."""
    import jinja2

    from sglstack.render.templates import yaml_environment

    with pytest.raises(jinja2.UndefinedError, match="'restart' is undefined"):
        yaml_environment().from_string("    restart: {{ restart }}\n").render(image=DIGEST_REF)


@pytest.mark.parametrize("fails", ["Dockerfile", "compose.yaml", ".sglstack-render.json"])
def test_a_render_into_out_that_fails_midway_leaves_nothing_and_the_next_one_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str) -> None:
    """A full disk at the list of what render wrote left the Dockerfile, context and compose files in a
    user's --out folder with no list: the next render refused them as files it had not written."""
    from deploy_fixtures import write_test_matrix

    from sglstack.core.safefiles import OutputNotWritable
    from sglstack.imagebuild import context as context_mod

    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    matrix = write_test_matrix(tmp_path / "m")
    out = tmp_path / "out"
    real = {name: getattr(context_mod, name) for name in ("write_text", "write_bytes")}

    def full(name):
        def write(root, path, data, **kw):
            if path.name == fails:
                raise OutputNotWritable(f"{path}: cannot be written (No space left on device)")
            return real[name](root, path, data, **kw)
        return write

    for name in real:
        monkeypatch.setattr(context_mod, name, full(name))
    with pytest.raises(OutputNotWritable) as info:
        context_mod.render_stack_folder(str(matrix), load_matrix(matrix).get("tiny"), out_dir=str(out))
    assert str(info.value) == f"{out / fails}: cannot be written (No space left on device)"
    assert not out.exists()  # it was made for this render: nothing of it is left
    monkeypatch.undo()
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    context_mod.render_stack_folder(str(matrix), load_matrix(matrix).get("tiny"), out_dir=str(out))
    assert sorted(p.name for p in out.iterdir()) == [
        ".lock", ".sglstack-render.json", "Dockerfile", "compose.env.example", cmp.COMPOSE_FILE, "context"]


def test_a_fifo_as_render_s_list_does_not_hang_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """render reads its list of written files from --out first: a FIFO there blocked it for ever."""
    import os
    import threading

    from deploy_fixtures import write_test_matrix

    from sglstack.imagebuild.context import RENDER_MANIFEST, render_stack_folder

    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    matrix = write_test_matrix(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / RENDER_MANIFEST)
    raised: list[BaseException] = []

    def render() -> None:
        try:
            render_stack_folder(str(matrix), load_matrix(matrix).get("tiny"), out_dir=str(out))
        except BaseException as exc:  # the test reads it below
            raised.append(exc)

    worker = threading.Thread(target=render, daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():
        os.close(os.open(out / RENDER_MANIFEST, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked read end
        pytest.fail("render blocked on the FIFO")
    # A FIFO is no file of render's: refused in one line and left as it is (a writer never replaces a FIFO,
    # a socket or a device), and nothing of the render is written beside it.
    assert [str(exc) for exc in raised] == [
        f"{out / RENDER_MANIFEST}: cannot be written (it is a FIFO, not a regular file: not replaced)"]
    assert (out / RENDER_MANIFEST).is_fifo() and not (out / cmp.COMPOSE_FILE).exists()


@pytest.mark.parametrize(
    ("moving_tags", "expected_tag"),
    [
        (("{sglang}-{stack}", "{stack}"), "tiny"),
        (("{stack}", "{sglang}-{stack}"), "tiny"),
        (("latest-{stack}",), "latest-tiny"),
        (("{sglang}-{stack}",), None),  # filled in from the stack's release below
        (("{date}-{stack}", "stable-{stack}"), "stable-tiny"),
    ],
)
def test_the_compose_file_serves_a_moving_tag_that_publish_pushes(
    tmp_path: Path, moving_tags: tuple[str, ...], expected_tag: str | None
) -> None:
    """stacks.yaml's `publish.moving_tags` decides the tag, so render never names one no release pushes."""
    import datetime as dt

    from sglstack.publish.tags import release_tags

    base = make_test_stack(tmp_path)
    stack = base.model_copy(update={"publish": base.publish.model_copy(update={"moving_tags": moving_tags})})
    ref = cmp.moving_tag_ref(stack)
    pushed = release_tags(stack, "ab" * 20, dt.date(2026, 12, 5)).moving
    repository, _, tag = ref.rpartition(":")
    assert repository == stack.publish.repository
    assert tag in pushed
    if expected_tag is not None:
        assert tag == expected_tag
    else:
        assert tag == f"{stack.sglang.label}-tiny".replace("+", "-")


def test_render_refuses_without_image_when_no_moving_tag_names_the_stack(tmp_path: Path) -> None:
    base = make_test_stack(tmp_path)
    stack = base.model_copy(update={"publish": base.publish.model_copy(update={"moving_tags": ("{date}-{stack}",)})})
    with pytest.raises(ConfigError) as info:
        cmp.moving_tag_ref(stack)
    assert "key 'publish.moving_tags'" in str(info.value)
    assert "render with --image REF" in str(info.value)


def test_a_render_that_changes_nothing_leaves_every_file_and_its_mtime_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy_fixtures import write_test_matrix

    from sglstack.imagebuild.context import render_stack_folder

    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    matrix = write_test_matrix(tmp_path / "m")
    out = tmp_path / "out"
    render_stack_folder(str(matrix), load_matrix(matrix).get("tiny"), out_dir=str(out), image=DIGEST_REF)
    old = 1_000_000_000
    for path in [out, *out.rglob("*")]:
        os.utime(path, ns=(old, old), follow_symlinks=False)
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    render_stack_folder(str(matrix), load_matrix(matrix).get("tiny"), out_dir=str(out), image=DIGEST_REF)
    after = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    assert after == before and len(before) > 3
    assert [p for p in [out, *out.rglob("*")] if p.lstat().st_mtime_ns != old and p.name != ".lock"] == []

    # a change: written
    render_stack_folder(str(matrix), load_matrix(matrix).get("tiny"), out_dir=str(out), image="reg/sglang:other")
    assert "reg/sglang:other" in (out / cmp.COMPOSE_FILE).read_text()


@pytest.mark.parametrize(("recorded", "gpus"), [(True, None), (False, 0), (None, None), (0, 0), (2, 2)])
def test_a_deployment_record_of_gpus_as_a_flag_or_a_count_serves_the_same(recorded, gpus) -> None:
    """Records written before `deploy --gpus N` hold true/false (`--no-gpus`): read as the stack's count, or none."""
    assert cmp.ComposeOptions.from_record({"gpus": recorded}).serving_overrides().gpus == gpus
