#!/usr/bin/env python3
"""Checks a screenshot of `ctxlog report` as a browser drew it (standard library only).

Usage: report_pixels.py SHOT.png BUDGET_HEX

Passes when the picture is not blank (enough non-white pixels, enough distinct colours) and the
budget line is drawn: a horizontal run of pixels of the budget colour at least as long as half
the chart's plot area, which no other mark of the chart has (the budget colour is used by the
budget line and its legend swatch only).
"""

import struct
import sys
import zlib

PLOT_WIDTH = 1000  # the chart's plot area is 1,000 px wide at scale 1 (chart.rs: 1100 - 78 - 22)


def read_png(path):
    """Width, height and rows of (r, g, b) tuples of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError(f"{path}: depth {depth}, colour type {color}, interlace {interlace}: not handled")
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, previous, i = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = previous[x]
            c = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 0xFF
        rows.append([tuple(line[x : x + 3]) for x in range(0, stride, bpp)])
        previous = line
    return width, height, rows


def near(p, q, tolerance=40):
    return sum((a - b) ** 2 for a, b in zip(p, q)) <= tolerance**2


def main():
    path, budget_hex = sys.argv[1], sys.argv[2].lstrip("#")
    budget = tuple(int(budget_hex[i : i + 2], 16) for i in (0, 2, 4))
    width, height, rows = read_png(path)
    pixels = width * height
    non_white = sum(1 for row in rows for p in row if min(p) < 245)
    colours = len({p for row in rows for p in row})
    longest, at = 0, None
    for y, row in enumerate(rows):
        run = 0
        for p in row:
            run = run + 1 if near(p, budget) else 0
            if run > longest:
                longest, at = run, y
    print(
        f"{path}: {width}x{height}, {100 * non_white / pixels:.1f}% non-white, {colours} colours, "
        f"longest budget-coloured run {longest} px (row {at})"
    )
    failures = []
    if non_white < 0.02 * pixels or colours < 50:
        failures.append("the picture is blank")
    if longest < PLOT_WIDTH // 2:
        failures.append(f"no budget line: the longest run of #{budget_hex} is {longest} px, want >= {PLOT_WIDTH // 2}")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
