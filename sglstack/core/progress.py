"""Progress of slow work, in one home: a rich bar on stderr while a task works, nothing when stderr is not a
terminal (logs and pipes get the task's own lines only; rich honours NO_COLOR and TERM=dumb).

    with progress("coverage: wheels", total=len(wheels)) as steps:
        for wheel in wheels:
            steps.working_on(wheel.name)
            ...
            steps.advance()

The bar is transient: it is gone when the block ends, so what stays on the terminal is the task's output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .console import console, plain


class Steps:
    """Where a slow task is; the silent kind (stderr not a terminal) does nothing."""

    def __init__(self, bar=None, task_id=None, what: str = "") -> None:
        self._bar, self._id, self._what = bar, task_id, what

    def working_on(self, item: object) -> None:
        """Name the item now in hand (an outside value: shown as plain text)."""
        if self._bar is not None:
            self._bar.update(self._id, description=f"{self._what}: {plain(item)}")

    def advance(self, steps: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._id, steps)

    def add_total(self, steps: int) -> None:
        """More work found on the way (a total first unknown)."""
        if self._bar is not None:
            task = self._bar.tasks[self._id]
            self._bar.update(self._id, total=(task.total or 0) + steps)


@contextlib.contextmanager
def progress(what: str, total: int | None = None) -> Iterator[Steps]:
    """A transient progress bar for `what` on stderr (a spinner while `total` is None)."""
    err = console(stderr=True)
    if not err.is_terminal:
        yield Steps()
        return
    from rich.progress import (  # at call time: only a terminal draws a bar
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        yield Steps(bar, bar.add_task(plain(what), total=total), plain(what))
