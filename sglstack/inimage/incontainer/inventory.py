"""List what an image contains, for its SBOM: Python distributions and Debian packages (stdlib only).

Self-contained on purpose: `invoke build` and `invoke sbom` run this file's source with the image's own
`python3 -c`, in any image (not only ours, which carry /opt/sglstack/tools), so it imports no sibling.
Names are reported as the metadata spells them; the host canonicalizes them. Prints one JSON object.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import platform
import re
import sys

DPKG_STATUS = "/var/lib/dpkg/status"
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def required_names(dist: md.Distribution) -> list[str]:
    """The names a distribution's own metadata requires (Requires-Dist), whatever their markers or extras:
    the host checks that each locked package is one of these for a package the stack asked for."""
    names = set()
    for requirement in dist.requires or ():
        match = _REQUIREMENT_NAME.match(requirement)
        if match:
            names.add(match.group(1))
    return sorted(names)


def python_distributions() -> list[dict]:
    """Every distribution on the interpreter's path, with where it lives (a venv vs the base)."""
    out = []
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        location = str(getattr(dist, "_path", "") or "")
        out.append({"name": name, "version": dist.version, "requires": required_names(dist),
                    "location": location.rsplit("/", 1)[0] if location else None})
    return sorted(out, key=lambda d: (d["name"].lower(), d["version"], d["location"] or ""))


def debian_packages(path: str = DPKG_STATUS) -> list[dict]:
    """Installed packages from dpkg's status file (an image without dpkg has none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            out.append({"name": fields["Package"], "version": fields.get("Version", ""),
                        "arch": fields.get("Architecture", ""), "source": fields.get("Source") or None})
    return sorted(out, key=lambda d: (d["name"], d["arch"]))


def main() -> int:
    info = {"python": platform.python_version(), "executable": sys.executable, "machine": platform.machine(),
            "python_distributions": python_distributions(), "debian_packages": debian_packages()}
    json.dump(info, sys.stdout, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
