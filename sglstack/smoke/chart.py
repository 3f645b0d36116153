"""A bar chart as PNG bytes, with the standard library only (zlib + struct): no plotting dependency."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
AXIS: Color = (60, 60, 60)
INK: Color = (20, 20, 20)

# A 3x5 pixel font for the labels: digits, the decimal point and the capitals the chart uses.
_GLYPHS = {
    "0": ("111", "101", "101", "101", "111"),
    "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"),
    "3": ("111", "001", "111", "001", "111"),
    "4": ("101", "101", "111", "001", "001"),
    "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"),
    "7": ("111", "001", "010", "010", "010"),
    "8": ("111", "101", "111", "101", "111"),
    "9": ("111", "101", "111", "001", "111"),
    ".": ("000", "000", "000", "000", "010"),
    "-": ("000", "000", "111", "000", "000"),
    "/": ("001", "001", "010", "100", "100"),
    " ": ("000", "000", "000", "000", "000"),
    "A": ("010", "101", "111", "101", "101"),
    "B": ("110", "101", "110", "101", "110"),
    "C": ("011", "100", "100", "100", "011"),
    "E": ("111", "100", "110", "100", "111"),
    "G": ("011", "100", "101", "101", "011"),
    "I": ("111", "010", "010", "010", "111"),
    "K": ("101", "101", "110", "101", "101"),
    "L": ("100", "100", "100", "100", "111"),
    "M": ("101", "111", "111", "101", "101"),
    "N": ("101", "111", "111", "111", "101"),
    "O": ("010", "101", "101", "101", "010"),
    "P": ("110", "101", "110", "100", "100"),
    "R": ("110", "101", "110", "101", "101"),
    "S": ("011", "100", "010", "001", "110"),
    "T": ("111", "010", "010", "010", "010"),
    "U": ("101", "101", "101", "101", "111"),
    "Y": ("101", "101", "010", "010", "010"),
}


def encode_png(pixels: Sequence[Sequence[Color]]) -> bytes:
    """8-bit RGB PNG, filter type 0 on every row."""
    height, width = len(pixels), len(pixels[0])
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def bar_chart(bars: Sequence[tuple[float, Color]], *, labels: Sequence[str] = (), title: str = "",
              width: int = 360, height: int = 240) -> bytes:
    """Vertical bars scaled to the largest value, each with its value (one decimal) and its label below."""
    canvas = [[WHITE] * width for _ in range(height)]
    left, bottom, top = 20, height - 26, 44
    if title:
        _text(canvas, title.upper(), left, 8, scale=2)
    top_value = max((v for v, _ in bars), default=0.0) or 1.0
    slot = (width - 2 * left) // max(len(bars), 1)
    bar_w = max(slot * 3 // 5, 4)
    for i, (value, color) in enumerate(bars):
        x0 = left + i * slot + (slot - bar_w) // 2
        bar_h = int((bottom - top) * max(value, 0.0) / top_value)
        for y in range(bottom - bar_h, bottom):
            for x in range(x0, x0 + bar_w):
                canvas[y][x] = color
        _text(canvas, f"{value:.1f}", x0, bottom - bar_h - 14, scale=2)
        if i < len(labels):
            _text(canvas, labels[i].upper(), x0, bottom + 8, scale=2)
    for x in range(left - 5, width - left + 5):
        canvas[bottom][x] = AXIS
    return encode_png(canvas)


def _text(canvas: list[list[Color]], text: str, x: int, y: int, *, scale: int) -> None:
    for ch in text:
        glyph = _GLYPHS.get(ch)
        if glyph:
            for gy, row in enumerate(glyph):
                for gx, bit in enumerate(row):
                    if bit == "1":
                        for dy in range(scale):
                            for dx in range(scale):
                                px, py = x + gx * scale + dx, y + gy * scale + dy
                                if 0 <= py < len(canvas) and 0 <= px < len(canvas[0]):
                                    canvas[py][px] = INK
        x += 4 * scale
