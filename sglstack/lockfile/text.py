"""The lock file: `locks/NAME.txt` beside the stacks file, the exact Python set a stack's image installs.

It is a pip requirements file: every hashed entry is `name==version` (or `name @ url`) with one
`--hash=sha256:...` per file, so `pip install --no-deps --require-hashes -r locks/NAME.txt` works outside
sglstack too. Pins that could not be hashed (their index or URL was out of reach when the lock was made)
are comment lines `# unhashed: SPEC (reason)`: they are installed by version or URL, as without a lock,
and a hash is never invented for them. Comment headers say what was resolved, for which Python and
platform, from which indexes, when (UTC), with which uv, and from which stack entry (`stack-sha256`, a
hash of the stack's resolution inputs: a lock whose hash differs from its stack entry's is stale). The last
header line, `written-sha256`, is a hash of every other line the parser reads (header and entries, with their
`# via` and `# requires:` edges), so a lock changed after `invoke lock` wrote it is told apart from one it wrote.
`# ---- layer NAME` sections say which install layer of the image installs each entry.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

from ..core.errors import ConfigError
from ..core.inputs import MAX_INPUT_BYTES, read_regular
from ..core.replacing import replace_together, sibling_mode
from ..core.safefiles import make_folder, write_text
from .model import LOCK_FORMAT, Lock, LockedPackage, UnresolvedLayer

_SECTION = re.compile(r"^# ---- layer (?P<name>[a-z0-9][a-z0-9_-]*)(?: \((?P<note>.*)\))?$")
_UNHASHED = re.compile(r"^# unhashed: (?P<spec>\S+(?: @ \S+)?) \((?P<reason>.*)\)$")
_UNRESOLVED = re.compile(r"^(?P<layer>[a-z0-9][a-z0-9_-]*) \((?P<deps>with|no) dependencies\): (?P<reason>.+)$")
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


def written_sha256(lock: Lock) -> str:
    """The `written-sha256` of `lock`: sha256 of its text without that line and without the stacks file's name
    (a comment the parser does not read), so it is the same for the lock in memory and as read back."""
    return hashlib.sha256(_render(lock).encode()).hexdigest()


def render_lock(lock: Lock, *, stacks_file: str | None = None) -> str:
    return _render(lock, stacks_file=stacks_file, sha256=written_sha256(lock))


def _render(lock: Lock, *, stacks_file: str | None = None, sha256: str | None = None) -> str:
    hashed, unhashed = lock.hashed_count, len(lock.packages) - lock.hashed_count
    source = f" ({stacks_file})" if stacks_file else ""
    head = [
        f"# sglstack lock for stack '{lock.stack}'{source}: the exact Python packages its image installs.",
        f"# Written by `invoke lock --stack {lock.stack}`; `--upgrade-package NAME` moves one package. Do not edit.",
        "# Outside sglstack: pip install --no-deps --require-hashes -r THIS_FILE (hashed entries only).",
        "#",
        f"# lock-format: {LOCK_FORMAT}",
        f"# stack: {lock.stack}",
        f"# stack-sha256: {lock.stack_sha256}",
        f"# resolved-at: {lock.resolved_at}",
        f"# resolver: {lock.resolver}",
        f"# python: {lock.python}",
        f"# platforms: {' '.join(lock.platforms)}",
    ]
    if lock.python_platforms:
        head.append(f"# resolved-for: {' '.join(lock.python_platforms)}")
    if lock.sglang_commit:
        head.append(f"# sglang-git-commit: {lock.sglang_commit}")
    head += [f"# index: {index}" for index in lock.indexes]
    head.append(f"# packages: {len(lock.packages)} ({hashed} hashed, {unhashed} unhashed)")
    head.append(f"# layers: {' '.join(lock.layers)}")
    head += [f"# unresolved-layer: {u}" for u in lock.unresolved]
    head += [f"# note: {n}" for n in lock.notes]
    if sha256:
        head.append(f"# written-sha256: {sha256}")
    body: list[str] = []
    unresolved = {u.layer: u for u in lock.unresolved}
    for layer in lock.layers:
        part = lock.part(layer)
        if not part:
            continue
        u = unresolved.get(layer)
        body.append("")
        body.append(f"# ---- layer {layer}" + (" (not resolved: installed as without a lock)" if u else ""))
        for p in part:
            if not p.hashed:
                body.append(f"# unhashed: {p.requirement} ({p.unhashed or 'no hash'})")
                if p.url and p.version:
                    body.append(f"#     version: {p.version}")
                if p.required_by:  # an index without hashes: its entry still has its parents
                    body.append(f"#     via {', '.join(p.required_by)}")
                if p.requires:
                    body.append(f"#     requires: {', '.join(p.requires)}")
                continue
            body.append(" \\\n    ".join([p.requirement, *(f"--hash={h}" for h in p.hashes)]))
            if p.url:
                body.append(f"    # version: {p.version}")
            if p.required_by:
                body.append(f"    # via {', '.join(p.required_by)}")
            if p.requires:
                body.append(f"    # requires: {', '.join(p.requires)}")
            if p.note:
                body.append(f"    # note: {p.note}")
    return "\n".join(head + body) + "\n"


# long: a line parser of the lock format, one branch per kind of line, read top to bottom
def parse_lock(text: str, *, file: str = "lock") -> Lock:
    """The lock file's text as a `Lock`; a `ConfigError` naming file and line for anything malformed."""
    header: dict[str, list[str]] = {}
    packages: list[dict] = []
    layer: str | None = None

    def fail(n: int, message: str) -> ConfigError:
        return ConfigError(message, file=file, line=n)

    lines = text.splitlines()
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        section = _SECTION.match(line)
        if section:
            layer = section.group("name")
            continue
        if layer is None:
            if line.startswith("# ") and ":" in line:
                key, _, value = line[2:].partition(":")
                if re.fullmatch(r"[a-z0-9-]+", key):
                    header.setdefault(key, []).append(value.strip())
            elif not line.startswith("#"):
                raise fail(n, "a package entry before the first '# ---- layer NAME' line")
            continue
        unhashed = _UNHASHED.match(line)
        if unhashed:
            spec = unhashed.group("spec")
            name, url, version = _split_spec(spec)
            packages.append({"name": name, "version": version, "url": url, "layer": layer, "hashes": [],
                             "unhashed": unhashed.group("reason"), "via": (), "note": None, "requires": None,
                             "line": n})
            continue
        if raw[:1].isspace() or line.startswith("#"):
            if not packages:
                continue
            entry = packages[-1]
            body = line.lstrip("#").strip()  # "# version: ..." and "version: ..." alike
            if line.startswith("--hash="):
                value = line.removeprefix("--hash=").removesuffix("\\").strip()
                if not _HASH.fullmatch(value):
                    raise fail(n, f"'{value}' is not a sha256 hash (sha256:<64 hex digits>)")
                entry["hashes"].append(value)
            elif body.startswith("version:"):
                entry["version"] = body.removeprefix("version:").strip()
            elif body.startswith("via "):
                entry["via"] = tuple(v.strip() for v in body.removeprefix("via ").split(","))
            elif body.startswith("note:"):
                entry["note"] = body.removeprefix("note:").strip()
            elif body.startswith("requires:"):
                entry["requires"] = tuple(canonicalize_name(v.strip())
                                          for v in body.removeprefix("requires:").split(",") if v.strip())
            continue
        spec = line.removesuffix("\\").strip()
        name, url, version = _split_spec(spec)
        if not url and not version:
            raise fail(n, f"'{spec}' is not 'name==version' or 'name @ url'")
        packages.append({"name": name, "version": version, "url": url, "layer": layer, "hashes": [],
                         "unhashed": None, "via": (), "note": None, "requires": None, "line": n})

    def one(key: str) -> str:
        values = header.get(key)
        if not values:
            raise ConfigError(f"lock header has no '{key}:' line", file=file)
        return values[0]

    if one("lock-format") != LOCK_FORMAT:
        raise ConfigError(f"lock-format {one('lock-format')} is not {LOCK_FORMAT}: run invoke lock again", file=file)
    unresolved = []
    for value in header.get("unresolved-layer", []):
        m = _UNRESOLVED.match(value)
        if not m:
            raise ConfigError(f"unreadable 'unresolved-layer: {value}'", file=file)
        unresolved.append(UnresolvedLayer(m.group("layer"), m.group("deps") == "with", m.group("reason")))
    out = []
    seen: dict[str, int] = {}
    for p in packages:
        if p["name"] in seen:
            raise fail(p["line"], f"{p['name']} is listed twice (first on line {seen[p['name']]})")
        seen[p["name"]] = p["line"]
        if p["unhashed"] is None and not p["hashes"]:
            raise fail(p["line"], f"{p['name']} has no --hash (an unhashable pin is written '# unhashed: ...')")
        if not p["version"] and p["unhashed"] is None:
            raise fail(p["line"], f"{p['name']} @ url has no '# version:' line")
        out.append(LockedPackage(name=p["name"], version=p["version"], layer=p["layer"], hashes=tuple(p["hashes"]),
                                 url=p["url"], unhashed=p["unhashed"], required_by=p["via"], note=p["note"],
                                 requires=p["requires"]))
    return Lock(stack=one("stack"), stack_sha256=one("stack-sha256"), resolved_at=one("resolved-at"),
                resolver=one("resolver"), python=one("python"), platforms=tuple(one("platforms").split()),
                layers=tuple(one("layers").split()), packages=tuple(out), indexes=tuple(header.get("index", [])),
                unresolved=tuple(unresolved), notes=tuple(header.get("note", [])),
                python_platforms=tuple(" ".join(header.get("resolved-for", [])).split()),
                sglang_commit=_commit(header.get("sglang-git-commit"), file),
                declared_counts=_counts(one("packages"), file),
                declared_written_sha256=_sha256(header.get("written-sha256"), file))


def _sha256(values: list[str] | None, file: str) -> str | None:
    if not values:
        return None
    if len(values) > 1 or not re.fullmatch(r"[0-9a-f]{64}", values[0]):
        raise ConfigError(f"'written-sha256: {values[-1]}' is not one sha256 (64 hex digits)", file=file)
    return values[0]


def _counts(value: str, file: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"(\d+) \((\d+) hashed, (\d+) unhashed\)", value)
    if not m:
        raise ConfigError(f"'packages: {value}' is not 'N (H hashed, U unhashed)'", file=file)
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _commit(values: list[str] | None, file: str) -> str | None:
    if not values:
        return None
    if not re.fullmatch(r"[0-9a-f]{40}", values[0]):
        raise ConfigError(f"'sglang-git-commit: {values[0]}' is not a full commit sha", file=file)
    return values[0]


def _split_spec(spec: str) -> tuple[str, str | None, str]:
    """'torch==2.9.1+cu130' -> ('torch', None, '2.9.1+cu130'); 'x @ https://...' -> ('x', url, '')."""
    if " @ " in spec:
        name, _, url = spec.partition(" @ ")
        return canonicalize_name(name.strip()), url.strip(), ""
    name, _, version = spec.partition("==")
    return canonicalize_name(name.strip()), None, version.strip()


def read_lock(path: Path) -> Lock:
    if path.is_dir():
        raise ConfigError("the lock path is a folder, not a lock file", file=str(path))
    try:
        # a regular file only, bounded: a FIFO named as the lock would hang the task
        text = read_regular(path, limit=MAX_INPUT_BYTES, what="lock file", file=str(path)).decode("utf-8")
    except IsADirectoryError:
        raise ConfigError("the lock path is a folder, not a lock file", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the lock: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the lock is not UTF-8 text (byte {exc.start})", file=str(path)) from None
    return parse_lock(text, file=str(path))


def write_locks(locks: Sequence[tuple[Path, Lock]], *, stacks_file: str | None = None) -> None:
    """Each platform's lock of one stack, together (`replace_together`): all replaced whole or none. One by one,
    a signal or a write refused between two left one platform's new lock beside another's old one."""
    if len(locks) == 1:
        write_lock(*locks[0], stacks_file=stacks_file)
        return
    for path, _ in locks:
        make_folder(path.parent, path.parent)
    replace_together([(path, render_lock(lock, stacks_file=stacks_file).encode("utf-8"), sibling_mode(path, "*.txt"))
                      for path, lock in locks])


def write_lock(path: Path, lock: Lock, *, stacks_file: str | None = None) -> None:
    """Write atomically: an interrupted or failed `invoke lock` (a full disk, a read-only folder: one
    line) leaves the old lock, never half a new one, and no temp file. It keeps its mode; a first lock
    takes its siblings'."""
    write_text(path.parent, path, render_lock(lock, stacks_file=stacks_file), mode=sibling_mode(path, "*.txt"))
