"""A Python source file as exact lines: decoding, line endings and hashing that round-trip byte for byte.

Files are read with a size limit, `MAX_SOURCE_BYTES`, checked before anything is read whole or parsed:
`ast` needs about 200-300 bytes of memory per byte of source (an apply at the limit peaks at about
600 MiB, benchmarks/bench_patch_limits.py), so a 50 MB target would take over 10 GB inside a build
stage. The largest file in SGLang 0.5.11 is 326 KB (`server_args.py`); the limit is six times that.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

MAX_SOURCE_BYTES = 2 * 1024 * 1024


class SourceError(ValueError):
    """The file cannot be read as Python source: unreadable, too large, or not in its encoding."""

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
        """Decode as Python does: a BOM or a coding cookie, else UTF-8. Raises SourceError."""
        declaration_error = None
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:
            # An unknown codec in the cookie, a cookie that contradicts the BOM, or first lines that
            # are not UTF-8 (detect_encoding says "invalid or missing encoding declaration" for those).
            if "unknown encoding" in exc.msg:
                raise SourceError(f"bad encoding declaration: {exc.msg}") from None
            encoding, declaration_error = "utf-8", exc.msg
        try:
            text = data.decode(encoding)
            if declaration_error:
                raise SourceError(f"bad encoding declaration: {declaration_error}")
            return cls(data, encoding, text)
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise SourceError(f"line {line} is not valid {encoding} (byte 0x{data[exc.start]:02x})") from None

    @classmethod
    def read(cls, path: Path) -> SourceFile:
        """Read and decode `path`, refusing files over MAX_SOURCE_BYTES before reading them whole."""
        try:
            size = path.stat().st_size
            if size > MAX_SOURCE_BYTES:
                raise SourceError(_too_large(size))
            with open(path, "rb") as fh:
                data = fh.read(MAX_SOURCE_BYTES + 1)
        except OSError as exc:
            raise SourceError(f"cannot read: {exc.strerror or exc}") from None
        if len(data) > MAX_SOURCE_BYTES:
            raise SourceError(_too_large(len(data)))
        return cls.from_bytes(data)

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
        try:
            tree = ast.parse(self.data, filename)
            compile(tree, filename, "exec", dont_inherit=True)  # symbol-table errors; no second parse
        except (RecursionError, MemoryError, ValueError) as exc:
            # CPython's parser gives up on very deep nesting with these rather than a SyntaxError.
            raise SyntaxError(f"too deeply nested to compile ({type(exc).__name__})") from None
        return tree


def _too_large(size: int) -> str:
    return (f"is {size / 1024 / 1024:.1f} MiB, over the {MAX_SOURCE_BYTES // 1024 // 1024} MiB limit for "
            "a patched source file")
