"""The one `--json` convention of every task that reports (README, "Tasks"), and its one writer.

`--json` prints the report as JSON on stdout, and nothing else there: while the task works, what it would
print (tables, notes, progress) goes to stderr. `--json-out PATH` writes the same document to PATH (whole,
through `safefiles`), checked writable by the face before any work; `--json-out -` is stdout, as `--json`
(never a file named `-`). Both may be given. Every document is written the same way: two-space indents,
sorted keys, one newline at the end.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .records import write_output

STDOUT = "-"


def dumps(document: Any) -> str:
    """The text of a report document, as every task writes it."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def write_json(path: Path, document: Any) -> Path:
    """A JSON document written as a file in the one encoding (`dumps`), whole (`records.write_output`: a temp
    file beside it, then a rename; no link followed out of its folder): every report, record and bake file."""
    return write_output(path, dumps(document))


@dataclass
class JsonReport:
    """Where a task's report goes as JSON: stdout (`--json`), a file (`--json-out`), both or neither."""

    stdout: bool = False
    path: Path | None = None
    _out: TextIO | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return self.stdout or self.path is not None

    @contextlib.contextmanager
    def only_json_on_stdout(self) -> Iterator[None]:
        """While the task works, with `--json`: all it prints goes to stderr, so stdout is the JSON alone."""
        if not self.stdout:
            yield
            return
        self._out = sys.stdout
        try:
            with contextlib.redirect_stdout(sys.stderr):
                yield
        finally:
            self._out = None

    def emit(self, document: Any) -> None:
        """Write the report where it was asked for (nothing when it was not)."""
        if not self:
            return
        text = dumps(document)
        if self.path is not None:
            write_output(self.path, text)
        if self.stdout:
            out = self._out or sys.stdout
            out.write(text)
            out.flush()


NO_JSON = JsonReport()
