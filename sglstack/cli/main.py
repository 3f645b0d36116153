"""The `sglstack` command: every task of `invoke` in a checkout, from any folder, on a project's stacks.yaml.

The project is the folder of its stacks.yaml: `--stacks-file PATH` names it (a task's, or before the tasks for
all of them), else SGLSTACK_STACKS_FILE, else
the nearest `stacks.yaml` in the current folder or a folder above it (as git finds its repository). What the
tasks write and read beside it then resolves there, not in the current folder: `locks/` (next to the stacks
file already) and `build/` (SGLSTACK_BUILD_DIR still wins). A task that reads the matrix with no stacks file
to be found is refused before it starts: one line naming where it looked, exit 2.
Standard library and invoke only at import, like every module here.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

from invoke import Argument, Exit

from ..config.defaults import STACKS_FILE_ENV, STACKS_FILE_NAME, find_stacks_file
from ..core.records import BUILD_DIR_ENV
from .collection import task_collection
from .options import HELP_FLAGS
from .program import SglstackProgram

NAME = "sglstack"


def version() -> str:
    """The installed distribution's version (what pip shows), else the package's own."""
    try:
        return metadata.version(NAME)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        from .. import __version__  # at call time: only then is it the answer

        return __version__


class SglstackCommand(SglstackProgram):
    """`SglstackProgram` that finds the project's stacks.yaml and roots build/ beside it."""

    def core_args(self) -> list[Argument]:
        # `sglstack --stacks-file PATH TASK ...`: the project for every task of the line (a task's own wins)
        return [*super().core_args(), Argument(names=("stacks-file",), help="the project's stacks.yaml "
                                               "(default: the nearest in this folder or one above it)")]

    def parse_tasks(self) -> None:
        super().parse_tasks()
        if core := self.args["stacks-file"].value:
            os.environ[STACKS_FILE_ENV] = str(core)
        given = next((str(c.args["stacks-file"].value) for c in self.tasks
                      if "stacks-file" in c.args and c.args["stacks-file"].value), None)
        stacks_file = Path(given) if given else self._found()
        if stacks_file is None:
            return
        project = stacks_file.absolute().parent
        if not os.environ.get(BUILD_DIR_ENV) and project != Path.cwd().absolute():
            # the project's build/, wherever the command is run from; children (docker, git bisect) inherit it
            os.environ[BUILD_DIR_ENV] = str(project / "build")

    def _found(self) -> Path | None:
        """The stacks file of SGLSTACK_STACKS_FILE or the nearest stacks.yaml, exported for the tasks; None
        where no task asked for one, and a refusal where a task needs one and there is none."""
        if os.environ.get(STACKS_FILE_ENV):
            return Path(os.environ[STACKS_FILE_ENV])
        found, looked = find_stacks_file(Path.cwd())
        if found is not None:
            os.environ[STACKS_FILE_ENV] = str(found)
            return found
        needing = [c.name for c in self.tasks if "stacks-file" in c.args]
        asks_help = self.args.help.value or any(token in HELP_FLAGS for token in self.core.unparsed or [])
        if needing and not asks_help:
            raise Exit(f"error: {needing[0]}: no {STACKS_FILE_NAME} in {looked[0]} or any folder above it "
                       f"(give --stacks-file PATH, or run from the project's folder)", code=self._bad_input_code())
        return None


def program() -> SglstackCommand:
    return SglstackCommand(name=NAME, binary=NAME, binary_names=[NAME], version=version(),
                           namespace=task_collection())


def main() -> None:
    """The console script `sglstack` (and `python -m sglstack.cli`)."""
    program().run()
