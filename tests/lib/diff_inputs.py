"""The diff source tests' inputs (tests/unit/test_diff_sources*.py): an engine that is down or none at all, a build
record naming an image id, and a file written as it is given."""

from __future__ import annotations

import json
from pathlib import Path

DOWN = "tcp://127.0.0.1:9"  # a port nothing listens on: the engine asked for is down
NO_ENGINE = "unix:///nonexistent/docker.sock"
IMAGE_ID = "sha256:" + "1" * 64
RECORD = {"stack": "cu130", "config_hash": "a" * 64, "image_id": IMAGE_ID, "installed": {"torch": "2.9.1"}}


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path
