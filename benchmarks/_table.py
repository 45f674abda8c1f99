"""Printing benchmark tables: medians side by side and their ratio."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["median_ms", "print_table"]


def median_ms(samples_ns: Sequence[int]) -> float:
    """The median of nanosecond samples, in milliseconds."""
    return statistics.median(samples_ns) / 1e6


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a plain-text table with right-aligned columns."""
    cells = [[str(c) for c in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for index, row in enumerate(cells):
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * width for width in widths))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
