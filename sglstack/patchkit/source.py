"""A Python source file as exact lines: decoding, line endings and hashing that round-trip byte for byte."""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize
from dataclasses import dataclass

# Python's tokenizer ends lines at \r\n, \r or \n only (str.splitlines also splits at \f, \x1c, ...),
# so ast line numbers index into exactly these lines.
_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines with their endings kept; "".join(result) == text."""
    return _LINE_RE.findall(text)


def line_ending(line: str) -> str:
    for end in ("\r\n", "\r", "\n"):
        if line.endswith(end):
            return end
    return ""


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t\f"))]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class SourceFile:
    data: bytes
    encoding: str
    text: str

    @classmethod
    def from_bytes(cls, data: bytes) -> SourceFile:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return cls(data, encoding, data.decode(encoding))

    def with_text(self, text: str) -> SourceFile:
        return SourceFile(text.encode(self.encoding), self.encoding, text)

    @property
    def sha256(self) -> str:
        return sha256_hex(self.data)

    @property
    def sha256_lf(self) -> str:
        """The hash with CRLF/CR line endings read as LF: a CRLF checkout is the same source."""
        return sha256_hex(self.data.replace(b"\r\n", b"\n").replace(b"\r", b"\n"))

    def hash_matches(self, digest: str) -> bool:
        return digest in (self.sha256, self.sha256_lf)

    @property
    def lines(self) -> list[str]:
        return split_lines(self.text)

    def default_line_ending(self) -> str:
        m = re.search(r"\r\n|\r|\n", self.text)
        return m.group(0) if m else "\n"

    def parse(self, filename: str) -> ast.Module:
        """Compile (which catches what `ast.parse` alone lets through) and return the tree.

        Raises SyntaxError, including IndentationError and TabError.
        """
        tree = ast.parse(self.data, filename)
        compile(tree, filename, "exec", dont_inherit=True)  # symbol-table errors; no second parse
        return tree
