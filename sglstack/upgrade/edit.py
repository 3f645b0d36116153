"""The upgrade's one edit of the stacks file: the text with the edits, and the new stack as the matrix loader
reads it from a temporary file beside the real one; with `--write`, refused if any other stack would load
differently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.matrix import load_matrix
from ..config.schema import Matrix, Stack
from ..core.errors import ConfigError, SglstackError
from ..core.replacing import staged
from .inputs import Inputs, UpgradeInputError, stacks_named
from .stacksfile import edited, read_text


def edit_one_stack(inputs: Inputs, edits: dict[str, Any]) -> tuple[str, tuple[str, ...], Stack]:
    """The stacks file's text with the edits, its notes, and the new stack as the loader reads it; with
    `--write`, refused if any other stack would load differently (whatever the editor did: the last guard)."""
    file, stack = str(inputs.stacks_file), inputs.stack
    edit = edited(read_text(inputs.stacks_file, file), file=file, stack=stack.name, edits=edits,
                  as_name=None if inputs.new_name == stack.name else inputs.new_name)
    new_matrix = upgraded_matrix(inputs.stacks_file, edit.text, inputs.new_name)
    moved = [n for n, s in inputs.matrix.stacks.items()
             if n != inputs.new_name and (n not in new_matrix.stacks or new_matrix.stacks[n] != s)]
    if moved and inputs.write:
        raise UpgradeInputError(f"--write would also change {stacks_named(moved)}: nothing written (write the upgrade "
                                "as a new stack with --as NEW)", file=file, stack=stack.name)
    notes = (f"--write would be refused: the edit also changes {stacks_named(moved)} (write the upgrade as a new stack "
             "with --as NEW)",) if moved else ()
    return edit.text, (*edit.notes, *notes), new_matrix.get(inputs.new_name)


def load_upgraded(stacks_file: Path, text: str, name: str) -> Stack:
    """The upgraded entry as the matrix loader reads it (see `_upgraded_matrix`)."""
    return upgraded_matrix(stacks_file, text, name).get(name)


def upgraded_matrix(stacks_file: Path, text: str, name: str) -> Matrix:
    """The upgraded matrix as the loader reads it, from a temporary file beside the real one (its
    `locks/` and relative paths are the same; a full disk is one line, and leaves no file)."""
    with staged(stacks_file, text.encode("utf-8"), mode=0o600) as tmp:
        try:
            matrix = load_matrix(tmp)
            matrix.get(name)
            return matrix
        except ConfigError as exc:
            raise SglstackError(f"the upgraded entry of stack '{name}' does not validate ({exc.reason}); "
                                f"{stacks_file} is unchanged") from None
