"""`invoke upgrade`'s world as doubles, shared by the upgrade tests: a small matrix, a lock of given pins, and
`World`, every engine the planner asks (no index, no uv, no Docker), each call recorded."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from sglstack.lock.flow import LockError
from sglstack.lockfile.model import Lock, LockedPackage
from sglstack.upgrade import world as upgrade_world
from sglstack.upgrade.releases import ReleasePins

STACKS = """\
# the matrix
defaults:
  python: "3.12"
  serving:
    model: org/model
    extra_args: ["--mem-fraction-static", "0.8"]

stacks:
  s1:
    description: SGLang 0.5.9 on Debian
    base_image: debian:bookworm-slim
    sglang:
      version: 0.5.9
    extra_layers:
      - name: grammar
        requirements: ["xgrammar==0.1.27"]
"""
METADATA = ("Metadata-Version: 2.1\nName: sglang\nVersion: {v}\nRequires-Dist: outlines==0.1.11\nRequires-Dist: {req}\n"
            "Requires-Dist: uvloop==0.21.0; python_version < \"3.12\"\n")
HASH = "sha256:" + "a" * 64


def lock_of(name: str, **versions: str) -> Lock:
    return Lock(name, "0" * 64, "2026-12-01T00:00:00Z", "uv 0.9.0", "3.12", ("linux/amd64",), ("sglang",),
                tuple(LockedPackage(n, v, "sglang", hashes=(HASH,)) for n, v in versions.items()))


class World:
    """The engines as doubles; `calls` says what each was asked."""

    def __init__(self, tmp: Path, *, requires: str = "xgrammar==0.1.27", lock: Lock | None = None,
                 lock_error: str | None = None, argv: dict[str, Any] | None = None) -> None:
        self.tmp, self.requires, self.lock, self.lock_error = tmp, requires, lock, lock_error
        self.argv_result = argv or {"checked": True, "argv": [], "accepted": True, "unknown": {}, "errors": [],
                                    "flags": 9}
        self.calls: list[tuple[Any, ...]] = []

    def engines(self, **kw: Any) -> upgrade_world.Engines:
        return upgrade_world.Engines(available=self.available, sglang_wheel=self.wheel, platform_wheel=self.platform,
                               patches=self.patches, family=self.family, base_glibc=self.glibc,
                               resolve=self.resolve, coverage=self.coverage, argv=self.argv, flags=self.flags,
                               **kw)

    def available(self, name: str) -> list[str]:
        self.calls.append(("available", name))
        known = {"sglang": ["0.5.9", "0.5.10", "0.5.11rc1"], "msgspec": ["0.9.0", "0.19.0", "0.20.0rc1"]}
        return known.get(name, ["1.0"])

    def wheel(self, version: str) -> Path:
        self.calls.append(("wheel", version))
        path = self.tmp / f"sglang-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(f"sglang-{version}.dist-info/METADATA", METADATA.format(v=version, req=self.requires))
        return path

    def platform(self, stack, version: str) -> Path | None:
        self.calls.append(("platform", stack.name, version))
        return Path(f"sglang-{version}-cp312-cp312-manylinux_2_28_x86_64.whl")

    def patches(self, version, stack):
        self.calls.append(("patches", version, stack.name))
        return {}

    def family(self, stack, target: ReleasePins, glibc: str) -> dict[str, str]:
        self.calls.append(("family", stack.name, target.sglang, glibc))
        return {}

    def glibc(self, stack) -> str | None:
        self.calls.append(("glibc", stack.name))
        return "2.36"

    def resolve(self, stack, previous: Lock | None, glibc: str | None) -> Lock:
        self.calls.append(("resolve", stack.name, stack.sglang.version, previous and previous.pins, glibc))
        if self.lock_error:
            raise LockError(f"stack '{stack.name}': {self.lock_error}")
        assert self.lock is not None
        return self.lock

    def coverage(self, stack) -> dict[str, Any] | None:
        self.calls.append(("coverage", stack.name, stack.sglang.version))
        return None

    def flags(self, wheel: Path, version_of) -> dict[str, Any]:
        self.calls.append(("flags", wheel.name))
        return {"flags": ["--model-path", "--tp-size", "--host", "--port", "--mem-fraction-static"], "deprecated": {}}

    def argv(self, wheel: Path, argv: list[str], version_of) -> dict[str, Any]:
        self.calls.append(("argv", wheel.name, argv, version_of("xgrammar"), version_of("outlines"),
                           version_of("msgspec")))
        return {**self.argv_result, "argv": argv}
