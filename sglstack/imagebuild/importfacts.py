"""The import closure's fact cache: what each `.py` file of an image imports (its facts), kept by the file's sha256
and the namespace it was derived in (the image's interpreter and `filefacts.py`'s own text), so that a re-verify
derives facts only for files whose bytes are new. Each import is still resolved against the image's current
files on every run (in the image): a module removed or moved fails as a full verify fails.

The store is an append-only JSON-lines file under the verify cache (one line per fact, whole lines under a lock,
as the passes are); a line that is not a fact is skipped, so its file's facts are derived again. Which facts
are sent into the image is decided here (pure); `incremental` reads and appends the store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..adapters.wheels import cache_root
from ..core.records import append_jsonl, read_jsonl_lenient

STORE_VERSION = 1
# Where the facts are put in the container that runs the import closure (`importcheck.py --facts`).
FACTS_IN_IMAGE = "/tmp/sglstack-import-facts.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def facts_path() -> Path:
    return cache_root() / "verify" / f"import-facts-v{STORE_VERSION}.jsonl"


def _fact(raw: Any) -> tuple[str, str, dict[str, Any]]:
    """(namespace, sha256, fact) of one stored line; ValueError for anything else."""
    namespace, digest = raw.get("namespace"), raw.get("sha256")
    mentioned, imports = raw.get("mentioned"), raw.get("imports")
    if not isinstance(namespace, str) or not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValueError("not a fact: namespace and sha256 wanted")
    if not isinstance(mentioned, list) or not all(isinstance(n, str) for n in mentioned):
        raise ValueError("not a fact: mentioned is not a list of names")
    if imports is not None and not (isinstance(imports, list) and all(
            isinstance(i, list) and len(i) == 3 and isinstance(i[0], str) and type(i[1]) is int
            and type(i[2]) is bool for i in imports)):
        raise ValueError("not a fact: imports is not a list of [name, line, conditional]")
    return namespace, digest, {"mentioned": mentioned, "imports": imports}


def for_python(namespace: str, python: str) -> bool:
    """Is `namespace` (`cpython-3.12.3-PROGRAM-FORMAT`) one of Python `python` (`3.12`)? The image's own check
    takes only its exact namespace; this only keeps the others' facts out of the file sent in."""
    parts = namespace.split("-")
    return len(parts) >= 2 and (parts[1] == python or parts[1].startswith(python + "."))


def select(rows: Iterable[tuple[str, str, Mapping[str, Any]]], python: str) -> dict[str, dict[str, dict[str, Any]]]:
    """{namespace: {sha256: fact}} of the namespaces of `python`; of two facts of one file, the parsed one."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for namespace, digest, fact in rows:
        if not for_python(namespace, python):
            continue
        known = out.setdefault(namespace, {})
        if digest not in known or known[digest].get("imports") is None:
            known[digest] = dict(fact)
    return out


def facts_payload(known: Mapping[str, Mapping[str, Any]]) -> bytes:
    """The file `importcheck.py --facts` reads."""
    return json.dumps({"namespaces": known}, sort_keys=True, separators=(",", ":")).encode()


def new_rows(report: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The store lines of the facts an import-closure report derived (none from a report that failed)."""
    if not report or report.get("error"):
        return []
    namespace = (report.get("facts") or {}).get("namespace")
    new = report.get("new_facts") or {}
    if not isinstance(namespace, str) or not isinstance(new, dict):
        return []
    rows = [{"namespace": namespace, "sha256": d, **f} for d, f in sorted(new.items()) if isinstance(f, dict)]
    out = []
    for row in rows:
        try:
            _fact(row)
        except (ValueError, AttributeError):
            continue
        out.append(row)
    return out


def without_new_facts(report: dict[str, Any]) -> dict[str, Any]:
    """The report as judged and kept: the derived facts go to the store, not into the passes or the record."""
    closure = report.get("import_closure")
    if not isinstance(closure, dict) or "new_facts" not in closure:
        return report
    return {**report, "import_closure": {k: v for k, v in closure.items() if k != "new_facts"}}


def facts_note(report: Mapping[str, Any] | None, *, full: bool = False) -> dict[str, Any] | None:
    """What the record says of the facts: how many files' facts were reused, derived and parsed, and why."""
    facts = (report or {}).get("facts")
    if not isinstance(facts, dict):
        return None
    files, reused, derived = facts.get("files", 0), facts.get("reused", 0), facts.get("derived", 0)
    why = (f"facts of {reused} of {files} files reused (by sha256, {facts.get('namespace')}); {derived} derived "
           f"({facts.get('parsed', 0)} parsed)" + (": --full-verify reuses none" if full else
                                                    f": {facts['not_given']}" if facts.get("not_given") else "")
           + "; every import resolved again against this image's files")
    return {"check": "import_closure_facts", "ran": bool(derived), "why": why, "fingerprint": facts.get("namespace"),
            **{k: facts.get(k) for k in ("files", "reused", "derived", "parsed")}}


def load_facts(python: str) -> dict[str, dict[str, dict[str, Any]]]:
    rows, _bad = read_jsonl_lenient(facts_path(), _fact)  # a bad line only loses its file's facts: derived again
    return select(rows, python)


def store_facts(rows: list[dict[str, Any]]) -> None:
    append_jsonl(facts_path(), rows)
