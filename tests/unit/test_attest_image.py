"""attest's engine side with a container double (the SBOM lister run in an image: each way it fails, whole),
and the provenance facts of a reused image from its labels. No Docker."""

from __future__ import annotations

import contextlib
import json

import docker.errors
import pytest

from sglstack.attest.release import reused_facts
from sglstack.core import labels as lb
from sglstack.core.errors import MESSAGE_CUT
from sglstack.inventory import listing as image_mod
from sglstack.inventory.model import InventoryError

LISTING = {"python": "3.11.2", "python_distributions": [{"name": "six", "version": "1.16.0"}],
           "debian_packages": [{"name": "bash", "version": "5.2", "arch": "amd64"}]}


class _Container:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err
        self.waited: list[float] = []

    def wait(self, timeout):
        self.waited.append(timeout)
        return {} if self.code is None else {"StatusCode": self.code}

    def logs(self, *, stdout, stderr):
        """As the engine answers: the streams asked for, both interleaved (here: one after the other)."""
        return (self.out if stdout else b"") + (self.err if stderr else b"")


@pytest.fixture
def engine(monkeypatch):
    """running_container's stand-in: records how it was asked, yields the test's container or raises."""
    state: dict = {"calls": [], "container": _Container(0, json.dumps(LISTING).encode(), b""), "error": None}

    @contextlib.contextmanager
    def running_container(client, image, **kwargs):
        state["calls"].append((client, image, kwargs))
        if state["error"] is not None:
            raise state["error"]
        yield state["container"]

    monkeypatch.setattr(image_mod, "running_container", running_container)
    return state


def test_the_lister_runs_as_a_program_text_without_network_and_its_json_is_the_inventory(engine):
    inv = image_mod.image_inventory("client", "img:1", labels={"a": "b"}, timeout_s=7)
    assert engine["calls"] == [("client", "img:1", {
        "command": ["python3", "-c", image_mod.LISTER.read_text(encoding="utf-8")], "entrypoint": [],
        "name_prefix": "sglstack-sbom", "labels": {"a": "b"}, "network_disabled": True})]
    assert engine["container"].waited == [7]
    assert (inv.python_version, inv.python, inv.debian) == ("3.11.2", {"six": "1.16.0"}, (("bash", "5.2", "amd64"),))


def test_the_default_wait_and_no_labels(engine):
    image_mod.image_inventory("client", "img:1")
    assert engine["container"].waited == [300] and engine["calls"][0][2]["labels"] is None


@pytest.mark.parametrize(("code", "out", "err", "line"), [
    (1, b"", b"Traceback\n  x\nOSError: boom\n", "listing the packages of image 'img:1' failed: OSError: boom"),
    (3, b"", b"  ", "listing the packages of image 'img:1' failed: exit 3"),
    (None, b"", b"", "listing the packages of image 'img:1' failed: exit 1"),  # no status: not a success
    (0, b"not json", b"", "listing the packages of image 'img:1' printed no JSON"),
    (1, b"[partial", b"Traceback\nOSError: boom\n", "listing the packages of image 'img:1' failed: OSError: boom"),
    (1, b"[partial", b"", "listing the packages of image 'img:1' failed: exit 1"),  # stdout is not the error
    (2, b"", b"UnicodeError: \xff\xfe not text\n",
     "listing the packages of image 'img:1' failed: UnicodeError: \ufffd\ufffd not text"),  # shown, not raised
])
def test_a_lister_that_fails_is_one_line(engine, code, out, err, line):
    engine["container"] = _Container(code, out, err)
    with pytest.raises(InventoryError) as caught:
        image_mod.image_inventory("client", "img:1")
    assert str(caught.value) == line


@pytest.mark.parametrize(("error", "line"), [
    (docker.errors.ImageNotFound("gone"), "image 'img:1' is not in the engine"),
    (docker.errors.APIError("x", explanation='exec: "python3": executable file not found in $PATH\nmore'),
     "image 'img:1' has no python3 on its PATH: its packages cannot be listed for an SBOM"),
    (docker.errors.APIError("x", explanation="stat python3: No such file or directory"),
     "image 'img:1' has no python3 on its PATH: its packages cannot be listed for an SBOM"),
    (docker.errors.APIError("x", explanation="conflict: " + "y" * 300 + "\nsecond line"),
     # the message's first line, cut at core.errors' MESSAGE_CUT (300: "conflict: " and 290 of the y's)
     "listing the packages of image 'img:1' failed: conflict: " + "y" * (MESSAGE_CUT - len("conflict: "))),
])
def test_an_engine_refusal_is_one_line(engine, error, line):
    engine["error"] = error
    with pytest.raises(InventoryError) as caught:
        image_mod.image_inventory("client", "img:1")
    assert str(caught.value) == line and caught.value.__suppress_context__


def test_a_reused_image_s_facts_come_from_its_labels():
    record = {"stack": "s", "reused": "sha256:1", "labels": {lb.BASE_DIGEST_LABEL: "sha256:b", lb.BUILDER_LABEL: "bk",
                                                             lb.LOCK_LABEL: "l0ck"}}
    assert reused_facts(record) == {"patches": {}, "sglstack": {}, "reused": "sha256:1"}
    assert record == {"stack": "s", "reused": "sha256:1", "labels": record["labels"],
                      "base_image": {"name": "unknown", "digest": "sha256:b"}, "built_at": "1970-01-01T00:00:00Z",
                      "builder": {"kind": "bk"}, "lock": {"content_sha256": "l0ck"}}


def test_a_reused_image_s_record_keeps_what_it_has_and_labels_are_optional():
    record = {"stack": "s", "built_at": "2026-12-03T00:00:00Z", "base_image": {"name": "debian", "digest": "d"}}
    assert reused_facts(record) == {"patches": {}, "sglstack": {}, "reused": None}
    assert record == {"stack": "s", "built_at": "2026-12-03T00:00:00Z", "base_image": {"name": "debian", "digest": "d"},
                      "builder": {"kind": "unknown"}}
