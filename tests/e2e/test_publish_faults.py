# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""Promotion is all-or-nothing: a real distribution registry behind a fault-injecting proxy refuses,
hangs or garbles chosen requests, and every release tag still ends on one digest, with the records and
the one-line error saying what moved and whether it was put back."""

from __future__ import annotations

import datetime as dt
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest
from clirun import start_invoke
from faultproxy import BlackHole, Fault, FaultProxy
from registry_fixtures import plain_registry  # noqa: F401 - fixture

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import RegistryError
from sglstack.publish import (
    PromotionError,
    PublishError,
    publish_digest,
    published_release,
    push_candidate,
    read_records,
    records_path,
    release,
    target_repository,
)
from sglstack.publish.tags import release_tags
from sglstack.registry.client import RegistryClient

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "tests" / "fixtures" / "stacks-cpu.yaml"
DAY = dt.date(2026, 12, 2)
LAST_MOVING_TAG = r"/manifests/cpu-test$"  # the third tag a promotion of cpu-test writes


@pytest.fixture(scope="module")
def stack():
    return load_matrix(STACKS).get("cpu-test")


@pytest.fixture(scope="module")
def scratch_images(docker_cli, docker_client, tmp_path_factory):
    """Three one-file images (three digests), built with BuildKit from scratch: cheap to push."""
    tags = []
    for i in range(3):
        ctx = tmp_path_factory.mktemp(f"scratch-{i}")
        (ctx / "nonce").write_text(secrets.token_hex(16))
        (ctx / "Dockerfile").write_text('FROM scratch\nCOPY nonce /nonce\nCMD ["/nonce"]\n')
        tag = f"sglstack-test-faults-{i}:{secrets.token_hex(4)}"
        subprocess.run([docker_cli, "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True,
                       env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"})
        tags.append(tag)
    yield tags
    for tag in tags:
        docker_client.images.remove(tag, force=True)


@pytest.fixture
def proxy(plain_registry):
    p = FaultProxy(plain_registry.port)
    yield p
    p.close()


@pytest.fixture
def setup(stack, proxy, plain_registry, scratch_images, docker_client, tmp_path):
    """A fresh repository with two pushed digests (old, new), `old` published; reached through the proxy."""
    path = f"sglstack-test/faults-{secrets.token_hex(4)}"
    direct = target_repository(stack, f"{plain_registry.host}/{path}")
    direct_client = RegistryClient(direct.registry)
    old = push_candidate(docker_client, scratch_images[0], direct, "cand-old", direct_client)
    new = push_candidate(docker_client, scratch_images[1], direct, "cand-new", direct_client)
    repo_name = f"{proxy.host}/{path}"
    old_hash, new_hash = secrets.token_hex(32), secrets.token_hex(32)
    publish_digest(stack, old, unsigned=True, registry=repo_name, config_hash=old_hash, build_dir=tmp_path, today=DAY)
    return {
        "repo_name": repo_name,
        "repo": target_repository(stack, repo_name),
        "client": direct_client,
        "path": path,
        "old": old,
        "new": new,
        "old_tags": release_tags(stack, old_hash, DAY),
        "new_hash": new_hash,
        "new_tags": release_tags(stack, new_hash, DAY),
        "build": tmp_path,
    }


def _points(s, tags):
    return {tag: s["client"].manifest_digest(s["path"], tag) for tag in tags}


def _events(build, digest):
    return [r for r in read_records(records_path(build)) if r.get("digest") == digest]


def test_a_refused_third_put_puts_every_tag_back(stack, setup, proxy):
    s = setup
    proxy.add(Fault("PUT", LAST_MOVING_TAG, "status", status=500))
    with pytest.raises(PromotionError) as err:
        publish_digest(stack, s["new"], unsigned=True, registry=s["repo_name"], config_hash=s["new_hash"],
                       build_dir=s["build"], today=DAY)
    # Every release tag is where it was: the old release, whole; the new immutable tag is gone again.
    assert _points(s, s["old_tags"].release) == dict.fromkeys(s["old_tags"].release, s["old"])
    assert _points(s, [s["new_tags"].immutable]) == {s["new_tags"].immutable: None}
    line = str(err.value)
    assert "\n" not in line and err.value.reverted
    assert f"failed at {s['repo'].ref('cpu-test')}" in line and "HTTP 500" in line
    assert f"{s['new_tags'].immutable}, 0.5.9-cpu-test had moved and were put back" in line
    refused = [e for e in proxy.requests("PUT", LAST_MOVING_TAG) if e[2] == "answered 500"]
    assert len(refused) == 4  # the first try and the bounded retries, then no more
    events = _events(s["build"], s["new"])
    assert {r["event"] for r in events} == {"reverted"}
    by_tag = {r["tag"]: r for r in events}
    assert set(by_tag) == set(s["new_tags"].release)
    assert by_tag[s["new_tags"].immutable]["previous"] is None and by_tag[s["new_tags"].immutable]["now"] is None
    assert by_tag["0.5.9-cpu-test"]["moved"] and by_tag["0.5.9-cpu-test"]["now"] == s["old"]
    assert by_tag["cpu-test"]["previous"] == by_tag["cpu-test"]["now"] == s["old"]
    assert published_release(stack.name, s["build"]).digest == s["old"]


def test_a_transient_failure_within_the_retry_budget_publishes_once(stack, setup, proxy):
    s = setup
    proxy.add(Fault("PUT", LAST_MOVING_TAG, "status", status=503, times=2))
    assert publish_digest(stack, s["new"], unsigned=True, registry=s["repo_name"], config_hash=s["new_hash"],
                          build_dir=s["build"], today=DAY) == 0
    assert _points(s, s["new_tags"].release) == dict.fromkeys(s["new_tags"].release, s["new"])
    outcomes = [e[2] for e in proxy.requests("PUT", LAST_MOVING_TAG)]
    assert outcomes[-3:] == ["answered 503", "answered 503", "forwarded"]  # after the setup's own PUT
    events = _events(s["build"], s["new"])
    assert sorted(r["tag"] for r in events) == sorted(s["new_tags"].release)
    assert {r["event"] for r in events} == {"published"}
    assert all(r["previous"] == s["old"] for r in events if r["kind"] == "moving")


def test_a_promotion_that_cannot_be_put_back_is_recorded_partial_then_finished(stack, setup, proxy):
    s = setup
    # The 3rd manifest PUT and every one after it fail: the promotion stops, and so does putting back.
    proxy.add(Fault("PUT", r"/manifests/", "status", nth=3, status=500))
    with pytest.raises(PromotionError) as err:
        publish_digest(stack, s["new"], unsigned=True, registry=s["repo_name"], config_hash=s["new_hash"],
                       build_dir=s["build"], today=DAY)
    assert not err.value.reverted
    line = str(err.value)
    assert "NOT put back" in line and "recorded as partial" in line and "0.5.9-cpu-test -> sha256:" in line
    assert f"invoke publish --stack cpu-test --digest {s['new']}" in line
    assert _points(s, ["0.5.9-cpu-test", "cpu-test"]) == {"0.5.9-cpu-test": s["new"], "cpu-test": s["old"]}
    partial = {r["tag"]: r for r in _events(s["build"], s["new"]) if r["event"] == "partial"}
    assert partial["0.5.9-cpu-test"]["now"] == s["new"] and partial["0.5.9-cpu-test"]["previous"] == s["old"]
    assert partial["cpu-test"]["now"] == s["old"] and not partial["cpu-test"]["moved"]

    # A release of the same config does not mistake the leftover immutable tag for a release.
    with pytest.raises(PublishError, match="was left partial"):
        release(stack, image_ref="unused:local", config_hash=s["new_hash"], registry=s["repo_name"],
                build_dir=s["build"], today=DAY, smoke=lambda *a: (True, {}))

    # Finishing it records a first publication (not a rollback), with what the tags had before it all.
    proxy.clear()
    assert publish_digest(stack, s["new"], unsigned=True, registry=s["repo_name"], build_dir=s["build"], today=DAY) == 0
    assert _points(s, s["new_tags"].release) == dict.fromkeys(s["new_tags"].release, s["new"])
    published = {r["tag"]: r for r in _events(s["build"], s["new"]) if r["event"] == "published"}
    assert set(published) == set(s["new_tags"].release)
    assert published["0.5.9-cpu-test"]["previous"] == published["cpu-test"]["previous"] == s["old"]
    assert published[s["new_tags"].immutable]["previous"] is None
    assert not [r for r in _events(s["build"], s["new"]) if r["event"] == "rollback"]
    assert published_release(stack.name, s["build"]).digest == s["new"]


def test_a_release_whose_promotion_fails_keeps_only_the_candidate(stack, proxy, scratch_images, tmp_path):
    repo_name = f"{proxy.host}/sglstack-test/faults-rel-{secrets.token_hex(4)}"
    config_hash = secrets.token_hex(32)
    proxy.add(Fault("PUT", LAST_MOVING_TAG, "status", status=400))  # refused outright: no retry
    smoked = []
    with pytest.raises(PromotionError) as err:
        release(stack, image_ref=scratch_images[2], config_hash=config_hash, registry=repo_name,
                build_dir=tmp_path, today=DAY, smoke=lambda *a: smoked.append(a) or (True, {}))
    assert smoked and err.value.reverted
    tags = release_tags(stack, config_hash, DAY)
    client = RegistryClient(proxy.host)
    repo = target_repository(stack, repo_name)
    assert client.list_tags(repo.path) == [tags.candidate]  # new tags removed again, the candidate kept
    assert "removed again where they were new" in str(err.value)
    events = [r["event"] for r in read_records(records_path(tmp_path))]
    assert events == ["candidate", "reverted", "reverted", "reverted"]
    assert published_release(stack.name, tmp_path) is None


def test_a_registry_that_never_answers_costs_the_deadline_and_says_so():
    hole = BlackHole()
    lines: list[str] = []
    client = RegistryClient(hole.host, timeout_s=2, notice_every_s=0.5, notify=lines.append)
    try:
        with pytest.raises(RegistryError) as err:
            client.manifest_digest("team/app", "v1")
    finally:
        hole.close()
    assert str(err.value).startswith(f"registry {hole.host}: HEAD manifest team/app:v1: no answer within 2 s")
    assert f"waiting for registry {hole.host} (HEAD manifest team/app:v1), 1 s of 2 s" in lines
    assert hole.accepted >= 1


def _publish_args(s, stack_name="cpu-test"):
    return ("publish", "--stack", stack_name, "--digest", s["new"], "--registry", s["repo_name"],
            "--config-hash", s["new_hash"], "--stacks-file", str(STACKS), "--unsigned")


def test_a_hanging_put_ends_at_the_deadline_with_every_tag_back(setup, proxy):
    s = setup
    proxy.add(Fault("PUT", LAST_MOVING_TAG, "hang"))
    proc = start_invoke(*_publish_args(s), env={"SGLSTACK_BUILD_DIR": str(s["build"]),
                                                "SGLSTACK_REGISTRY_TIMEOUT": "3"})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    lines = err.strip().splitlines()
    waits = [ln for ln in lines if ln.startswith("waiting for registry")]
    assert f"waiting for registry {proxy.host} (PUT manifest {s['path']}:cpu-test), 1 s of 3 s" in waits
    assert len(lines) == len(waits) + 1, err  # the waits, then one error line
    assert "no answer within 3 s" in lines[-1] and "were put back" in lines[-1]
    assert "Traceback" not in err
    new_today = [t for t in s["client"].list_tags(s["path"]) if t.endswith(s["new_hash"][:8])]
    assert new_today == []
    assert _points(s, s["old_tags"].release) == dict.fromkeys(s["old_tags"].release, s["old"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_during_promotion_puts_every_tag_back(setup, proxy, sig):
    s = setup
    proxy.add(Fault("PUT", LAST_MOVING_TAG, "hang"))
    proc = start_invoke(*_publish_args(s), env={"SGLSTACK_BUILD_DIR": str(s["build"])})
    try:
        assert proxy.hanging.wait(60), "the promotion never reached its third tag"
        time.sleep(0.2)  # well inside the PUT's wait for an answer
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, out + err
    assert f"interrupted by {sig.name}" in err and "were put back" in err
    assert _points(s, s["old_tags"].release) == dict.fromkeys(s["old_tags"].release, s["old"])
    assert _points(s, [s["new_tags"].immutable]) == {s["new_tags"].immutable: None}
    events = _events(s["build"], s["new"])
    assert events and {r["event"] for r in events} == {"reverted"}
    assert {r["cause"] for r in events} == {f"interrupted by {sig.name}"}


def test_cleanup_against_a_registry_answering_200_with_a_non_json_body(proxy):
    repo_name = f"{proxy.host}/sglstack-test/faults-garbled"
    proxy.add(Fault("GET", r"/tags/list", "status", status=200, body=b"<html>maintenance</html>",
                    content_type="text/html"))
    proc = start_invoke("registry.cleanup", "--stack", "cpu-test", "--registry", repo_name, "--stacks-file",
                        str(STACKS), env={})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    assert err.strip() == (
        f"error: registry {proxy.host}: GET /v2/sglstack-test/faults-garbled/tags/list answered HTTP 200 "
        "with a body that is not JSON (text/html, 24 bytes)"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("registry.up", "--port", "abc"), "error: --port 'abc': not a whole number"),
        (("registry.up", "--port", "70000"), "error: --port '70000' is not a TCP port (1-65535)"),
        (("registry.cleanup", "--older-than-days", "soon"),
         "error: --older-than-days 'soon' is not a number of days (0 or more)"),
    ],
)
def test_non_numeric_registry_options_are_one_line_errors(args, needle):
    extra = ("--stacks-file", str(STACKS)) if args[0] == "registry.cleanup" else ()
    proc = start_invoke(*args, *extra, env={})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.strip() == needle, out + err  # bad input
