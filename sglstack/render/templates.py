"""The one Jinja environment of every shipped template (the Dockerfile, the compose file and its env example).

Strict (an undefined name is an error, not an empty string), no HTML escaping, the file's last newline kept,
and each value that reaches another language goes through that language's filter (`core.quoting`): `dq`,
`comment`, `label_key`, `shell` and `image` for a Dockerfile, `q` for compose's YAML. YAML templates render
through `yaml_environment()`, the same environment with Jinja's block whitespace trimmed.
"""

from __future__ import annotations

import functools

import jinja2

from ..config.imageref import image_reference_problem
from ..core.quoting import (
    QuotingError,
    compose_string,
    dockerfile_comment,
    dockerfile_label_key,
    dockerfile_string,
    shell_word,
)
from ..core.resources import COMPOSE_DIR, IMAGES_DIR


def from_image(ref: str) -> str:
    """A `FROM` line's image: an image reference, or a one-line refusal."""
    if problem := image_reference_problem(ref):
        raise QuotingError(f"image '{dockerfile_comment(ref)}' {problem}")
    return ref


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(IMAGES_DIR), str(COMPOSE_DIR)]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(comment=dockerfile_comment, dq=dockerfile_string, label_key=dockerfile_label_key,
                       shell=shell_word, image=from_image, q=compose_string)
    return env


@functools.cache
def yaml_environment() -> jinja2.Environment:
    """`environment()` with block lines trimmed: a YAML file's indentation is its structure."""
    return environment().overlay(trim_blocks=True, lstrip_blocks=True)
