"""A build record says which platform its image is for: a stack of two platforms has two images of one name."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.record import record_for_reused_image

REPO = Path(__file__).resolve().parents[2]


class Images:
    """docker-py's `client.images`, as far as a reused image's record reads it (its labels)."""

    def get(self, image_id: str) -> SimpleNamespace:
        assert image_id == "sha256:" + "1" * 64
        return SimpleNamespace(labels={"io.sglstack.stack": "pypi-cu130-gb"})


def test_a_reused_images_record_names_the_platform_it_was_built_for(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    whole = load_matrix(REPO / "stacks.yaml").get("pypi-cu130-gb")
    client = SimpleNamespace(images=Images())
    seen = {}
    for platform in whole.platforms:
        out = tmp_path / platform.replace("/", "-")
        out.mkdir()
        path = record_for_reused_image(client, whole.for_platform(platform), "sha256:" + "1" * 64, "t:1",  # type: ignore[arg-type]
                                       "c" * 64, "runtime", out)
        seen[platform] = json.loads(path.read_text())["platform"]
    assert seen == {"linux/amd64": "linux/amd64", "linux/arm64": "linux/arm64"}
